import BLEParsing
import BlueZ
import Domain
import Foundation
import Synchronization
import Vocabulary

/// One device: its properties, GATT tree with decoded values, per
/// characteristic read/write/notify, connect/disconnect/pair/trust/forget,
/// watching, battery, RSSI and reading history. Driven by `send(_:)` only.
public final class DeviceDetailPresenter: Presenter {
    /// A device-level operation the user asked for.
    public enum Command: Sendable, Equatable {
        case connect, disconnect, trust, untrust, forget, watch, unwatch
    }

    public enum CommandState: Sendable, Equatable {
        case idle
        case running(Command)
        /// The last command failed; the text says why (until dismissed or the next command).
        case failed(Command, String)
    }

    /// What is going on with one characteristic.
    public enum AttributeOperation: Sendable, Equatable {
        case reading
        case writing
        case startingNotifications
        case stoppingNotifications
        /// The last operation failed (or its input was invalid); the text says why.
        case failed(String)
    }

    /// Whether the device is watched (kept connected, recorded), and how its
    /// connection is doing when it is.
    public enum Watch: Sendable, Equatable {
        case unknown
        case notWatched
        case watched(ConnectionStatus)
    }

    /// A command of the device's profile (docs/PROFILES.md), the last one asked for.
    public enum ProfileCommand: Sendable, Equatable {
        case idle
        case running(String)
        /// Written: the command's name and the bytes.
        case sent(String, [UInt8])
        /// Refused (a bad argument, not connected) or failed; the text says why.
        case failed(String)
    }

    public struct State: Sendable, Equatable {
        public let id: DeviceID
        public var device: Loadable<DeviceDetails> = .loading
        public var services: Loadable<[GATTServiceNode]> = .loading
        public var rssiHistory: [RSSISample] = []
        public var history: Loadable<[ReadingSeries]> = .loading
        /// How far back the reading history goes.
        public var historyWindow: TimeInterval = 86_400
        public var command: CommandState = .idle
        /// A destructive command waiting for the user's yes.
        public var confirming: Command?
        public var operations: [GATTAttributeID: AttributeOperation] = [:]
        public var watch: Watch = .unknown
        public var profileCommand: ProfileCommand = .idle
        public init(id: DeviceID) { self.id = id }
    }

    public enum Action: Sendable, Equatable {
        case connectRequested
        case disconnectRequested
        case pairRequested
        case trustToggled
        case watchToggled
        case forgetRequested
        case forgetConfirmed
        case confirmationDismissed
        case readRequested(GATTAttributeID)
        /// `hex`: the value as typed ("01ff", "01 ff", "0x01ff").
        case writeRequested(GATTAttributeID, hex: String, withoutResponse: Bool)
        case notifyToggled(GATTAttributeID)
        /// A profile command as typed: its name and `ARG=VALUE` words ("unlock pin=1234").
        case profileCommandRequested(String)
        case historyWindowChanged(TimeInterval)
        case errorDismissed
        case backRequested
        /// The firmware screen (slots, upload, provisioning).
        case firmwareRequested
        // Sent by the presenter itself:
        case detailsChanged(DeviceDetailSnapshot)
        case historyRevisionChanged(UInt64)
        case watchesChanged([BluetoothAddress: ConnectionStatus])
        case commandFinished(Command, DomainError?)
        case operationFinished(GATTAttributeID, DomainError?)
        case profileCommandFinished(String, [UInt8], DomainError?)
    }

    private let store: StateStore<State>
    private let control: any DeviceControl
    private let history: (any ReadingHistory)?
    private let watchList: (any WatchList)?
    private let navigator: Navigator
    private let now: @Sendable () -> Date
    private let latest = LatestDetails()
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.detail")

    /// `history` nil: no database (history shows as unavailable);
    /// `watchList` nil: watching is not offered.
    public init(device: DeviceID, control: any DeviceControl, history: (any ReadingHistory)?, watchList: (any WatchList)?,
                navigator: Navigator, now: @escaping @Sendable () -> Date = { Date() }) {
        var initial = State(id: device)
        if history == nil { initial.history = .unavailable(.noHistory) }
        if watchList == nil { initial.watch = .notWatched }
        store = StateStore(initial)
        self.control = control
        self.history = history
        self.watchList = watchList
        self.navigator = navigator
        self.now = now
        runtime.start { [weak self] action in await self?.handle(action) }
        runtime.follow(control.details(of: device)) { .detailsChanged($0) }
        if let history {
            runtime.follow(history.revisions()) { .historyRevisionChanged($0[device] ?? 0) }
        }
        if let watchList {
            runtime.follow(watchList.watches()) { .watchesChanged($0) }
        }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        let id = store.state.id
        switch action {
        case .connectRequested: start(.connect)
        case .disconnectRequested: start(.disconnect)
        case .trustToggled:
            guard let d = store.state.device.value else { return }
            start(d.trusted ? .untrust : .trust)
        case .watchToggled:
            guard watchList != nil else { return }
            switch store.state.watch {
            case .unknown: return
            case .notWatched: start(.watch)
            case .watched: start(.unwatch)
            }
        case .pairRequested:
            guard store.state.device.value != nil else { return }
            navigator.push(.pairing(id))
        case .firmwareRequested:
            navigator.push(.firmware(id))
        case .forgetRequested:
            guard store.state.device.value != nil else { return }
            store.update { $0.confirming = .forget }
        case .forgetConfirmed:
            guard store.state.confirming == .forget else { return }
            start(.forget)
        case .confirmationDismissed:
            store.update { $0.confirming = nil }
        case let .readRequested(c):
            guard let node = characteristic(c), node.canRead else {
                return store.update { $0.operations[c] = .failed("this characteristic cannot be read") }
            }
            let store = self.store
            operate(c, .reading) { (control) async throws(DomainError) in
                let value = try await control.read(c)
                // The control has published the value before returning, but
                // its details reach this presenter on their own path: the
                // read ends once the state shows it (or a newer value has
                // replaced it, then after a short wait), so whoever waits for
                // the operation to end finds the value read in the state.
                _ = await store.wait(atMost: .seconds(2)) { s in
                    s.services.value?.lazy.flatMap(\.characteristics).first { $0.id == c }?.value == value
                }
            }
        case let .writeRequested(c, hex, withoutResponse):
            guard let node = characteristic(c), withoutResponse ? node.canWriteWithoutResponse : node.canWrite else {
                return store.update { $0.operations[c] = .failed("this characteristic cannot be written\(withoutResponse ? " without response" : "")") }
            }
            let bytes: [UInt8]
            do throws(DecodeError) {
                bytes = try parseHex(hex, context: "value")
            } catch {
                return store.update { $0.operations[c] = .failed(error.description) }
            }
            if bytes.isEmpty { return store.update { $0.operations[c] = .failed("value: nothing to write") } }
            operate(c, .writing) { (control) async throws(DomainError) in try await control.write(c, bytes, withoutResponse: withoutResponse) }
        case let .notifyToggled(c):
            guard let node = characteristic(c), node.canNotify else {
                return store.update { $0.operations[c] = .failed("this characteristic does not notify") }
            }
            let on = !node.notifying
            operate(c, on ? .startingNotifications : .stoppingNotifications) { (control) async throws(DomainError) in try await control.setNotifying(on, c) }
        case let .profileCommandRequested(line):
            profileCommand(line)
        case let .profileCommandFinished(name, bytes, error):
            store.update { $0.profileCommand = error.map { .failed("\(name): \($0.description)") } ?? .sent(name, bytes) }
        case let .historyWindowChanged(window):
            guard window > 0 else { return }
            let loaded = loadHistory(window: window)
            store.update { s in
                s.historyWindow = window
                if let loaded { s.history = loaded }
            }
        case .errorDismissed:
            store.update { s in
                if case .failed = s.command { s.command = .idle }
                s.operations = s.operations.filter { if case .failed = $0.value { return false } else { return true } }
                if case .failed = s.profileCommand { s.profileCommand = .idle }
            }
        case .backRequested:
            navigator.pop()
        case let .detailsChanged(snapshot):
            latest.value = snapshot
            store.update { DeviceDetailPresenter.apply(snapshot, to: &$0) }
        case let .historyRevisionChanged(revision):
            guard latest.historyRevision != revision else { return }
            latest.historyRevision = revision
            if let loaded = loadHistory(window: store.state.historyWindow) { store.update { $0.history = loaded } }
        case let .watchesChanged(watches):
            store.update { $0.watch = watches[id.address].map { .watched($0) } ?? .notWatched }
        case let .commandFinished(command, error):
            // A forgotten device's screen leaves first, so whoever sees the
            // command finished sees the navigator already back.
            if command == .forget && error == nil { navigator.pop() }
            store.update { s in s.command = error.map { .failed(command, $0.description) } ?? .idle }
        case let .operationFinished(c, error):
            store.update { $0.operations[c] = error.map { .failed($0.description) } }
        }
    }

    /// Encodes a profile command (its layout) and writes it to its characteristic.
    private func profileCommand(_ line: String) {
        if case .running = store.state.profileCommand { return }
        let words = line.split(separator: " ").map(String.init)
        guard let name = words.first else { return }
        let commands = store.state.device.value?.commands ?? []
        guard let command = commands.first(where: { $0.name == name }) else {
            let known = commands.map(\.name).joined(separator: ", ")
            return store.update { $0.profileCommand = .failed(commands.isEmpty ? "no profile with commands describes this device"
                                                                               : "no command \"\(name)\" (commands: \(known))") }
        }
        let bytes: [UInt8]
        do throws(FieldLayout.Problem) { bytes = try command.encode(arguments: Array(words.dropFirst())) } catch {
            return store.update { $0.profileCommand = .failed("\(name): \(error.description)") }
        }
        let target = store.state.services.value?.first { (try? BluetoothUUID(parsing: $0.uuid)) == command.service }?
            .characteristics.first { (try? BluetoothUUID(parsing: $0.uuid)) == command.characteristic }
        guard let target else {
            let connected = store.state.device.value?.connected == true
            return store.update { $0.profileCommand = .failed(connected ? "\(name): the device has no characteristic \(command.characteristic.string)"
                                                                        : "\(name): connect first (c)") }
        }
        store.update { $0.profileCommand = .running(name) }
        let control = self.control, runtime = self.runtime, withoutResponse = !command.withResponse
        runtime.run {
            do throws(DomainError) {
                try await control.write(target.id, bytes, withoutResponse: withoutResponse)
                runtime.send(.profileCommandFinished(name, bytes, nil))
            } catch {
                runtime.send(.profileCommandFinished(name, bytes, error))
            }
        }
    }

    private func characteristic(_ id: GATTAttributeID) -> GATTCharacteristicNode? {
        store.state.services.value?.lazy.flatMap(\.characteristics).first { $0.id == id }
    }

    /// Runs `command` beside the action queue (a connection can take a
    /// minute; the screen keeps updating meanwhile) and reports back through it.
    private func start(_ command: Command) {
        if case .running = store.state.command { return }
        store.update { s in
            s.command = .running(command)
            s.confirming = nil
        }
        let control = self.control, watchList = self.watchList, runtime = self.runtime, id = store.state.id
        runtime.run {
            do throws(DomainError) {
                switch command {
                case .connect: try await control.connect(id)
                case .disconnect: try await control.disconnect(id)
                case .trust: try await control.setTrusted(true, id)
                case .untrust: try await control.setTrusted(false, id)
                case .forget: try await control.forget(id)
                case .watch: try watchList?.setWatched(true, id.address)
                case .unwatch: try watchList?.setWatched(false, id.address)
                }
                runtime.send(.commandFinished(command, nil))
            } catch {
                runtime.send(.commandFinished(command, error))
            }
        }
    }

    private func operate(_ c: GATTAttributeID, _ operation: AttributeOperation,
                         _ body: @escaping @Sendable (any DeviceControl) async throws(DomainError) -> Void) {
        // One operation per characteristic at a time.
        if let current = store.state.operations[c], !isFailure(current) { return }
        store.update { $0.operations[c] = operation }
        let control = self.control, runtime = self.runtime
        runtime.run {
            do throws(DomainError) {
                try await body(control)
                runtime.send(.operationFinished(c, nil))
            } catch {
                runtime.send(.operationFinished(c, error))
            }
        }
    }

    private func isFailure(_ op: AttributeOperation) -> Bool {
        if case .failed = op { return true }
        return false
    }

    /// The history over `window` (nil without a database).
    private func loadHistory(window: TimeInterval) -> Loadable<[ReadingSeries]>? {
        guard let history else { return nil }
        let since = now().addingTimeInterval(-window)
        do throws(DomainError) {
            return .loaded(try history.series(of: store.state.id, since: since))
        } catch {
            return .failed(error.description)
        }
    }

    /// Pure: what a repository snapshot means for the screen.
    static func apply(_ snapshot: DeviceDetailSnapshot, to s: inout State) {
        s.rssiHistory = snapshot.rssiHistory
        if snapshot.availability != .available {
            s.device = .unavailable(.bluetooth(snapshot.availability))
            s.services = .unavailable(.bluetooth(snapshot.availability))
            return
        }
        guard let d = snapshot.device else {
            let reason = "bluetoothd does not know \(s.id.address) (removed, or not seen since it started)"
            s.device = .failed(reason)
            s.services = .failed(reason)
            return
        }
        s.device = .loaded(d)
        if d.connected && !d.servicesResolved {
            s.services = .loading
        } else if !snapshot.services.isEmpty {
            // Resolved, or bluetoothd's cache of a bonded device's services.
            s.services = .loaded(snapshot.services)
        } else if d.connected {
            s.services = .loaded([])
        } else {
            s.services = .unavailable(.notConnected)
        }
    }
}

/// The last details and history revision, touched only by the action queue's task.
private final class LatestDetails: @unchecked Sendable {
    var value: DeviceDetailSnapshot?
    var historyRevision: UInt64?
}
