import BLEParsing
import BlueZ
import Domain
import Foundation
import Locking
import Vocabulary

/// The discovery filter as the user edits it: what they typed, kept even
/// when it is wrong, with the problem that stops it from being applied.
public struct DiscoveryFilterDraft: Sendable, Equatable {
    public var transport: DiscoveryFilter.Transport
    /// Only devices at least this strong (dBm); nil: no threshold.
    public var rssiThreshold: Int16?
    /// Service UUIDs as typed ("180d", "0x180D", full form); blank entries are ignored.
    public var uuids: [String]
    /// Report every advertisement (true) or only changes (false). Always sent
    /// explicitly, so the scan does not depend on bluetoothd's default.
    public var duplicateData: Bool
    /// Only devices whose address or name starts with this; empty: any.
    public var pattern: String

    public init(transport: DiscoveryFilter.Transport = .le, rssiThreshold: Int16? = nil, uuids: [String] = [],
                duplicateData: Bool = false, pattern: String = "") {
        self.transport = transport
        self.rssiThreshold = rssiThreshold
        self.uuids = uuids
        self.duplicateData = duplicateData
        self.pattern = pattern
    }

    /// The RSSI values bluetoothd accepts for a threshold.
    public static let rssiRange: ClosedRange<Int16> = -127...20

    /// Why the draft cannot be applied, for the user; nil when it can.
    public var problem: String? {
        if let rssi = rssiThreshold, !DiscoveryFilterDraft.rssiRange.contains(rssi) {
            return "the RSSI threshold must be between -127 and 20 dBm, not \(rssi)"
        }
        for text in typedUUIDs where (try? BluetoothUUID(parsing: text)) == nil {
            return "\"\(text)\" is not a UUID (write it like 180d, 0x180D or 0000180d-0000-1000-8000-00805f9b34fb)"
        }
        return nil
    }

    /// The filter to scan with, or nil while there is a ``problem``. UUIDs
    /// are sent in BlueZ's lower-case 128-bit form.
    public var filter: DiscoveryFilter? {
        guard problem == nil else { return nil }
        let uuids = typedUUIDs.compactMap { try? BluetoothUUID(parsing: $0).string }
        return DiscoveryFilter(uuids: uuids, rssi: rssiThreshold, transport: transport, duplicateData: duplicateData,
                               pattern: pattern.isEmpty ? nil : pattern)
    }

    private var typedUUIDs: [String] {
        uuids.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

/// The adapters screen: every local controller with its power, visibility,
/// pairing and scan switches, and the discovery filter scans use. Driven by
/// `send(_:)` only; switches act on the selected adapter.
public final class AdaptersPresenter: Presenter {
    /// One switch as shown: the transitions last from the request until
    /// bluetoothd shows the result (or the request fails).
    public enum Toggle: Sendable, Equatable {
        case off
        case turningOn
        case on
        case turningOff
    }

    /// A change asked of the repository, with the value asked for.
    public enum Operation: Sendable, Equatable {
        case power(Bool)
        case discoverable(Bool)
        case pairable(Bool)
        /// Our scan with this filter, or (nil) no scan of ours.
        case scan(DiscoveryFilter?)
    }

    /// The one operation in progress; other switches wait for it.
    public struct Pending: Sendable, Equatable {
        public var adapter: AdapterID
        public var operation: Operation
        public init(adapter: AdapterID, operation: Operation) {
            self.adapter = adapter
            self.operation = operation
        }
    }

    /// One adapter as every front end shows it.
    public struct Row: Sendable, Equatable, Identifiable {
        public let id: AdapterID
        /// Alias, else system name, else "hci0".
        public var title: String
        public var address: String?
        /// bluetoothd's PowerState ("off-blocked": rfkill), when it reports one.
        public var powerState: String?
        public var roles: [String]
        public var power: Toggle
        public var discoverable: Toggle
        public var pairable: Toggle
        /// Our scan on this adapter.
        public var scan: Toggle
        /// The filter our scan runs with; nil when we run none.
        public var scanFilter: DiscoveryFilter?
        /// bluetoothd discovers on this adapter, for us or another client.
        public var discovering: Bool

        public init(id: AdapterID, title: String, address: String? = nil, powerState: String? = nil, roles: [String] = [],
                    power: Toggle = .off, discoverable: Toggle = .off, pairable: Toggle = .off, scan: Toggle = .off,
                    scanFilter: DiscoveryFilter? = nil, discovering: Bool = false) {
            self.id = id
            self.title = title
            self.address = address
            self.powerState = powerState
            self.roles = roles
            self.power = power
            self.discoverable = discoverable
            self.pairable = pairable
            self.scan = scan
            self.scanFilter = scanFilter
            self.discovering = discovering
        }
    }

    public struct State: Sendable, Equatable {
        public var adapters: Loadable<[Row]> = .loading
        /// The adapter the switches act on: the first one until the user picks
        /// another; kept while bluetoothd is away so it comes back selected.
        public var selected: AdapterID?
        public var pending: Pending?
        /// The filter being edited.
        public var filter = DiscoveryFilterDraft()
        /// The filter the next scan starts with (and a running one restarts with).
        public var appliedFilter = DiscoveryFilterDraft()
        /// The last failure, for the user, until dismissed or the next operation.
        public var error: String?
        public init() {}

        /// The edited filter differs from the applied one.
        public var filterEdited: Bool { filter != appliedFilter }
    }

    public enum Action: Sendable, Equatable {
        case adapterSelected(AdapterID)
        case powerToggled
        case discoverableToggled
        case pairableToggled
        case scanToggled
        case filterTransportChanged(DiscoveryFilter.Transport)
        case filterRSSIChanged(Int16?)
        case filterUUIDsChanged([String])
        case filterDuplicateDataToggled
        case filterPatternChanged(String)
        case filterApplied
        /// Back to the default filter (edits only; apply to use it).
        case filterReset
        case errorDismissed
        case backRequested
        /// A snapshot arrived from the repository (sent by the presenter itself).
        case repositoryChanged(AdapterListSnapshot)
    }

    private let store = StateStore(State())
    private let repository: any AdapterRepository
    /// The last repository snapshot, touched only by the action queue's task.
    private let latest = Lock<AdapterListSnapshot?>(nil)
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.adapters")

    private let navigator: Navigator?

    public init(repository: any AdapterRepository, navigator: Navigator? = nil) {
        self.repository = repository
        self.navigator = navigator
        runtime.start { [weak self] action in await self?.handle(action) }
        runtime.follow(repository.snapshots()) { .repositoryChanged($0) }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        switch action {
        case .backRequested:
            navigator?.pop()
        case let .adapterSelected(id):
            guard latest.withLock({ $0 })?.adapters.contains(where: { $0.id == id }) == true else { return }
            update { $0.selected = id }
        case .powerToggled:
            guard let (record, _) = idleSelection() else { return }
            await perform(Pending(adapter: record.id, operation: .power(!record.powered)))
        case .discoverableToggled:
            guard let (record, _) = idleSelection() else { return }
            await perform(Pending(adapter: record.id, operation: .discoverable(!record.discoverable)))
        case .pairableToggled:
            guard let (record, _) = idleSelection() else { return }
            await perform(Pending(adapter: record.id, operation: .pairable(!record.pairable)))
        case .scanToggled:
            guard let (record, snapshot) = idleSelection() else { return }
            if snapshot.discoveryFilters[record.id] != nil {
                await perform(Pending(adapter: record.id, operation: .scan(nil)))
            } else if let filter = store.state.appliedFilter.filter {
                await perform(Pending(adapter: record.id, operation: .scan(filter)))
            }
        case let .filterTransportChanged(transport):
            update { $0.filter.transport = transport }
        case let .filterRSSIChanged(rssi):
            update { $0.filter.rssiThreshold = rssi }
        case let .filterUUIDsChanged(uuids):
            update { $0.filter.uuids = uuids }
        case .filterDuplicateDataToggled:
            update { $0.filter.duplicateData.toggle() }
        case let .filterPatternChanged(pattern):
            update { $0.filter.pattern = pattern }
        case .filterApplied:
            // A draft with a problem already says why it cannot be applied.
            guard let filter = store.state.filter.filter else { return }
            update { $0.appliedFilter = $0.filter }
            if let (record, snapshot) = idleSelection(), let running = snapshot.discoveryFilters[record.id], running != filter {
                await perform(Pending(adapter: record.id, operation: .scan(filter)))
            }
        case .filterReset:
            update { $0.filter = DiscoveryFilterDraft() }
        case .errorDismissed:
            update { $0.error = nil }
        case let .repositoryChanged(snapshot):
            latest.withLock { $0 = snapshot }
            update { _ in }
        }
    }

    /// The selected adapter and the snapshot it is in, when a switch may
    /// act on it now: bluetoothd has it and no other operation is pending.
    private func idleSelection() -> (AdapterRecord, AdapterListSnapshot)? {
        let state = store.state
        guard state.pending == nil, let id = state.selected, let snapshot = latest.withLock({ $0 }),
              let record = snapshot.adapters.first(where: { $0.id == id }) else { return nil }
        return (record, snapshot)
    }

    /// Runs one operation. It stays pending after success until a snapshot
    /// shows its result (the repository publishes that snapshot before it
    /// returns, so it is on its way), which keeps the switch from flickering
    /// back to the old value in between.
    private func perform(_ pending: Pending) async {
        update { s in
            s.pending = pending
            s.error = nil
        }
        let repository = self.repository, adapter = pending.adapter
        do throws(DomainError) {
            switch pending.operation {
            case let .power(on): try await repository.setPowered(on, adapter: adapter)
            case let .discoverable(on): try await repository.setDiscoverable(on, adapter: adapter)
            case let .pairable(on): try await repository.setPairable(on, adapter: adapter)
            case let .scan(filter?): try await repository.setScanning(true, adapter: adapter, filter: filter)
            case .scan(nil): try await repository.setScanning(false, adapter: adapter, filter: DiscoveryFilter())
            }
            update { _ in }
        } catch {
            update { s in
                s.pending = nil
                s.error = error.description
            }
        }
    }

    /// One state change: `change`, then what the latest snapshot implies
    /// (rows, default selection, a pending operation it confirms) — never an
    /// intermediate state whose rows and pending operation disagree.
    private func update(_ change: (inout State) -> Void) {
        let snapshot = latest.withLock { $0 }
        store.update { s in
            change(&s)
            guard let snapshot else { return }
            if let p = s.pending, AdaptersPresenter.isDone(p, in: snapshot) { s.pending = nil }
            if s.selected == nil { s.selected = snapshot.adapters.first?.id }
            s.adapters = AdaptersPresenter.adapters(snapshot, pending: s.pending)
        }
    }

    /// Whether `snapshot` shows the result of `pending` (or its adapter is gone).
    static func isDone(_ pending: Pending, in snapshot: AdapterListSnapshot) -> Bool {
        guard let record = snapshot.adapters.first(where: { $0.id == pending.adapter }) else { return true }
        switch pending.operation {
        case let .power(on): return record.powered == on
        case let .discoverable(on): return record.discoverable == on
        case let .pairable(on): return record.pairable == on
        case let .scan(filter): return snapshot.discoveryFilters[pending.adapter] == filter
        }
    }

    /// Pure: the rows for a snapshot, or why there are none (exposed for
    /// front ends' previews).
    public static func adapters(_ snapshot: AdapterListSnapshot, pending: Pending?) -> Loadable<[Row]> {
        guard snapshot.bluetoothdAvailable else { return .unavailable(.bluetooth(.bluetoothdGone)) }
        guard !snapshot.adapters.isEmpty else { return .unavailable(.bluetooth(.noAdapter)) }
        return .loaded(snapshot.adapters.map { r in
            let asked = pending?.adapter == r.id ? pending?.operation : nil
            var power: Bool?, discoverable: Bool?, pairable: Bool?, scan: Bool?
            switch asked {
            case let .power(on)?: power = on
            case let .discoverable(on)?: discoverable = on
            case let .pairable(on)?: pairable = on
            case let .scan(filter)?: scan = filter != nil
            case nil: break
            }
            let scanFilter = snapshot.discoveryFilters[r.id]
            return Row(id: r.id, title: r.alias ?? r.name ?? r.id.name, address: r.address, powerState: r.powerState, roles: r.roles,
                       power: toggle(r.powered, asked: power), discoverable: toggle(r.discoverable, asked: discoverable),
                       pairable: toggle(r.pairable, asked: pairable), scan: toggle(scanFilter != nil, asked: scan),
                       scanFilter: scanFilter, discovering: r.discovering)
        })
    }

    static func toggle(_ value: Bool, asked: Bool?) -> Toggle {
        guard let asked else { return value ? .on : .off }
        return asked ? .turningOn : .turningOff
    }
}
