import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// The repositories the dashboard's presenters run on.
public struct DashboardEnvironment: Sendable {
    public var devices: any DeviceRepository
    public var control: any DeviceControl
    public var history: (any ReadingHistory)?
    public var watchList: (any WatchList)?
    public var pairing: any PairingService
    public var adapters: any AdapterRepository
    public var log: EventLog
    /// Firmware updates and provisioning (the firmware screen); nil: the screen says it is not available.
    public var firmware: (any FirmwareService)?
    public var now: @Sendable () -> Date
    public var sleeper: any Sleeper

    public init(devices: any DeviceRepository, control: any DeviceControl, history: (any ReadingHistory)?, watchList: (any WatchList)?,
                pairing: any PairingService, adapters: any AdapterRepository, log: EventLog, firmware: (any FirmwareService)? = nil,
                now: @escaping @Sendable () -> Date = { Date() }, sleeper: any Sleeper = TaskSleeper()) {
        self.firmware = firmware
        self.devices = devices
        self.control = control
        self.history = history
        self.watchList = watchList
        self.pairing = pairing
        self.adapters = adapters
        self.log = log
        self.now = now
        self.sleeper = sleeper
    }
}

/// Everything that can change what the dashboard shows.
public enum DashboardEvent: Sendable {
    case terminal(TerminalEvent)
    case list(DeviceListPresenter.State)
    case detail(DeviceID, DeviceDetailPresenter.State)
    case pairing(DeviceID, PairingPresenter.State)
    case firmware(DeviceID, FirmwarePresenter.State)
    case log(EventLogPresenter.State)
    case adapters(AdaptersPresenter.State)
    case navigation([Screen])
    /// Raw log snapshots, for notices about new failures.
    case logEntries(EventLogSnapshot)
    /// Time passed (spinner frames, "last seen" ages, notice expiry).
    case tick
    /// The end of a frame interval during which events were applied but not
    /// drawn (the app loop's own; changes nothing on the screen's state).
    case frame
    /// The D-Bus connection is gone (the bus daemon stopped or restarted):
    /// nothing on screen can come back on it, so the dashboard ends and the
    /// command says why (a new connection needs a new start).
    case connectionLost
}

/// The dashboard's Screen: owns the presenters and the view state that is
/// the front end's own (cursors, open text field, help, notices); turns
/// keys into presenter actions and presenter states into a `DashboardView`.
/// Used from one task only (the app loop); drawing is `DashboardContent`'s.
public final class DashboardScreen {
    public private(set) var view: DashboardView
    public private(set) var quitRequested = false
    /// Ctrl+Z (in raw mode it arrives as a key): the loop hands the terminal
    /// back and stops the process, as a shell would.
    public var suspendRequested = false

    let navigator: Navigator
    let environment: DashboardEnvironment
    let list: DeviceListPresenter
    let eventLog: EventLogPresenter
    let adapters: AdaptersPresenter
    private(set) var detail: DeviceDetailPresenter?
    private(set) var pairing: PairingPresenter?
    private(set) var firmware: FirmwarePresenter?
    private var detailFeed: Task<Void, Never>?
    private var pairingFeed: Task<Void, Never>?
    private var firmwareFeed: Task<Void, Never>?
    private var feeds: [Task<Void, Never>] = []
    private let events: AsyncStream<DashboardEvent>
    private let sink: AsyncStream<DashboardEvent>.Continuation
    private var lastLogID: UInt64
    private var scheduledTick: Task<Void, Never>?
    private var tickDue: Date?

    public init(environment: DashboardEnvironment, expiry: DeviceListPresenter.Expiry = .init()) {
        self.environment = environment
        navigator = Navigator()
        view = DashboardView(now: environment.now())
        list = DeviceListPresenter(repository: environment.devices, navigator: navigator, watchList: environment.watchList,
                                   expiry: expiry, sleeper: environment.sleeper, now: environment.now)
        eventLog = EventLogPresenter(log: environment.log, navigator: navigator)
        adapters = AdaptersPresenter(repository: environment.adapters, navigator: navigator)
        // What was logged before the dashboard opened is not news.
        lastLogID = environment.log.current.entries.last?.id ?? 0
        (events, sink) = AsyncStream<DashboardEvent>.makeStream(bufferingPolicy: .unbounded)
        follow(list.states()) { .list($0) }
        follow(eventLog.states()) { .log($0) }
        follow(adapters.states()) { .adapters($0) }
        follow(navigator.changes()) { .navigation($0) }
        follow(environment.log.entries()) { .logEntries($0) }
    }

    deinit {
        for f in feeds { f.cancel() }
        detailFeed?.cancel()
        pairingFeed?.cancel()
        firmwareFeed?.cancel()
        scheduledTick?.cancel()
        sink.finish()
    }

    /// Presenter states, navigation and ticks, in order. Terminal events are
    /// added by the app loop with `post(_:)`.
    public var changes: AsyncStream<DashboardEvent> { events }
    public func post(_ event: DashboardEvent) { sink.yield(event) }
    /// `post` as a value other tasks can hold (terminal input, tests).
    public var poster: @Sendable (DashboardEvent) -> Void {
        let sink = self.sink
        return { sink.yield($0) }
    }

    private func follow<T: Sendable>(_ stream: AsyncStream<T>, _ map: @escaping @Sendable (T) -> DashboardEvent) -> Void {
        let sink = self.sink
        feeds.append(Task {
            for await element in stream { sink.yield(map(element)) }
        })
    }

    // MARK: Applying events

    /// Applies one event to the view state (and sends the actions a key means).
    public func apply(_ event: DashboardEvent) {
        view.now = environment.now()
        let drawPending = needsDraw
        needsDraw = true
        switch event {
        case let .terminal(t): terminal(t)
        case let .list(s):
            if case let .failed(reason) = s.scan, view.list.scan != s.scan { failure("scanning: \(reason)") }
            let (old, cursor) = (view.list, view.listCursor)
            view.list = s
            clampListCursor()
            if view.context == .deviceList, view.notices.isEmpty, cursor == view.listCursor,
               Self.sameOnScreen(old, s, cursor: cursor, visible: layout.visibleDeviceRows) {
                needsDraw = drawPending   // nothing on screen changed: no frame for this state
                return
            }
        case let .detail(id, s):
            guard detail != nil, view.detail?.id == id || view.detail == nil else { return }
            noteDetailFailures(old: view.detail, new: s)
            view.detail = s
        case let .pairing(id, s):
            guard pairing != nil, view.pairing?.device == id || view.pairing == nil else { return }
            view.pairing = s
        case let .firmware(id, s):
            guard firmware != nil, view.firmware?.device == id || view.firmware == nil else { return }
            if s.job != view.firmware?.job {
                switch s.job {
                case let .finished(text): notice(text, level: .info)
                case let .failed(text): failure(text)
                case let .cancelled(at, total): notice("Upload stopped at \(at) of \(total) bytes; the running image is untouched, and uploading again resumes.", level: .info)
                default: break
                }
            }
            view.firmware = s
        case let .log(s):
            view.log = s
            view.logCursor = min(view.logCursor, max(0, (s.entries.value?.count ?? 1) - 1))
        case let .adapters(s):
            if let e = s.error, e != view.adapters.error { failure(e) }
            view.adapters = s
        case let .navigation(stack):
            navigated(stack)
        case let .logEntries(snapshot):
            for entry in snapshot.entries where entry.id > lastLogID {
                switch entry.kind {
                case .bluetoothdNotAnswering: view.bluetoothdAnswering = false
                case .bluetoothdAnswering, .bluetoothdAppeared, .bluetoothdVanished: view.bluetoothdAnswering = true
                default: break
                }
                if entry.severity >= .warning { notice(entry.message, level: .error) }
            }
            lastLogID = max(lastLogID, snapshot.entries.last?.id ?? lastLogID)
        case .tick:
            view.spinner &+= 1
        case .frame:
            break
        case .connectionLost:
            quitRequested = true
        }
        let now = view.now
        view.notices.removeAll { $0.expires <= now }
    }

    /// Failures become log entries (and notices); finished reads and writes
    /// a short confirmation, since a value read may equal the cached one.
    private func noteDetailFailures(old: DeviceDetailPresenter.State?, new: DeviceDetailPresenter.State) {
        if case let .failed(_, reason) = new.command, old?.command != new.command { failure(reason) }
        if old?.profileCommand != new.profileCommand {
            switch new.profileCommand {
            case let .failed(reason): failure(reason)
            case let .sent(name, bytes): notice("Sent \(name) (\(hexString(bytes: bytes))).", level: .info)
            case .idle, .running: break
            }
        }
        for (id, op) in new.operations {
            if case let .failed(reason) = op, old?.operations[id] != op { failure(reason) }
        }
        guard let old else { return }
        let characteristics = new.services.value?.flatMap(\.characteristics) ?? []
        for (id, op) in old.operations where new.operations[id] == nil {
            guard let c = characteristics.first(where: { $0.id == id }) else { continue }
            let name = c.name ?? Format.shortUUID(c.uuid)
            switch op {
            case .reading:
                let value = c.value.map { hexString(bytes: $0) } ?? "(empty)"
                notice("Read \(name): \(value)\(Format.decoded(c.decoded).map { " → " + $0 } ?? "")", level: .info)
            case .writing:
                notice("Wrote \(name).", level: .info)
            default:
                break
            }
        }
    }

    /// A failure: recorded in the event log (which raises the notice).
    private func failure(_ text: String) {
        environment.log.append(.error(text))
    }

    private func notice(_ text: String, level: Notice.Level) {
        if view.notices.last?.text == text { view.notices.removeLast() }
        view.notices.append(Notice(text, level: level, expires: view.now.addingTimeInterval(6)))
        if view.notices.count > 5 { view.notices.removeFirst(view.notices.count - 5) }
    }

    private func navigated(_ stack: [Screen]) {
        let top = stack.last ?? .deviceList
        view.screen = top
        // The detail screen stays under a pairing dialog.
        let detailID: DeviceID? = stack.reversed().lazy.compactMap { s -> DeviceID? in
            if case let .deviceDetail(id) = s { return id }
            return nil
        }.first
        if let detailID {
            if view.detail?.id != detailID || detail == nil { openDetail(detailID) }
        } else if detail != nil {
            detailFeed?.cancel()
            detail = nil
            view.detail = nil
        }
        if case let .pairing(id) = top {
            if pairing == nil || view.pairing?.device != id { openPairing(id) }
        } else if pairing != nil {
            pairingFeed?.cancel()
            pairing = nil
            view.pairing = nil
        }
        if case let .firmware(id) = top {
            if firmware == nil || view.firmware?.device != id { openFirmware(id) }
        } else if firmware != nil {
            // The presenter goes with the screen; an upload under way stops (the device keeps what it has; uploading again resumes).
            firmwareFeed?.cancel()
            firmware = nil
            view.firmware = nil
        }
        view.help = false
        view.input = nil
    }

    private func openDetail(_ id: DeviceID) {
        detailFeed?.cancel()
        let presenter = DeviceDetailPresenter(device: id, control: environment.control, history: environment.history,
                                              watchList: environment.watchList, navigator: navigator, now: environment.now)
        detail = presenter
        view.detail = presenter.state
        view.detailCursor = 0
        view.historySeries = 0
        let sink = self.sink, states = presenter.states()
        detailFeed = Task { for await s in states { sink.yield(.detail(id, s)) } }
    }

    private func openPairing(_ id: DeviceID) {
        pairingFeed?.cancel()
        let presenter = PairingPresenter(device: id, service: environment.pairing, navigator: navigator)
        pairing = presenter
        view.pairing = presenter.state
        let sink = self.sink, states = presenter.states()
        pairingFeed = Task { for await s in states { sink.yield(.pairing(id, s)) } }
        presenter.send(.pairRequested)
    }

    private func openFirmware(_ id: DeviceID) {
        firmwareFeed?.cancel()
        guard let service = environment.firmware else { return }
        let presenter = FirmwarePresenter(device: id, service: service, navigator: navigator)
        firmware = presenter
        view.firmware = presenter.state
        let sink = self.sink, states = presenter.states()
        firmwareFeed = Task { for await s in states { sink.yield(.firmware(id, s)) } }
        presenter.send(.refreshRequested)
    }

    private func clampListCursor() {
        let rows = view.list.devices.value ?? []
        if let selected = view.listSelection, let index = Self.index(of: selected, in: rows, near: view.listCursor) {
            view.listCursor = index
        } else {
            view.listCursor = min(max(0, view.listCursor), max(0, rows.count - 1))
            view.listSelection = rows.indices.contains(view.listCursor) ? rows[view.listCursor].id : nil
        }
    }

    private func selectListRow(_ index: Int) {
        let rows = view.list.devices.value ?? []
        view.listCursor = index
        view.listSelection = rows.indices.contains(index) ? rows[index].id : nil
    }

    // MARK: Keys

    private func terminal(_ event: TerminalEvent) {
        switch event {
        case let .key(key): self.key(key)
        case let .mouse(m): mouse(m)
        case let .paste(text):
            if view.input != nil { typed(text) }
        case .resize, .resumed: break
        case .terminate: quitRequested = true
        }
    }

    func key(_ key: Key) {
        if key == .ctrl("z") {
            suspendRequested = true
            return
        }
        let context = view.context
        if context == .input { return inputKey(key) }
        if context == .pairing, let p = view.pairing, case let .pairing(q?) = p.phase, q == .enterPasskey || q == .enterPIN {
            return codeKey(key, p)
        }
        guard let command = KeyMap.command(for: key, in: context) else { return }
        run(command, in: context)
    }

    func run(_ command: Command, in context: KeyContext) {
        switch command {
        case .quit: quitRequested = true; return
        case .help:
            view.help = true
            return
        default: break
        }
        switch context {
        case .help: view.help = false
        case .input, .pairing: pairingCommand(command)
        case .confirm:
            detail?.send(command == .accept ? .forgetConfirmed : .confirmationDismissed)
        case .deviceList: listCommand(command)
        case .deviceDetail: detailCommand(command)
        case .eventLog: logCommand(command)
        case .adapters: adaptersCommand(command)
        case .firmware: firmwareCommand(command)
        }
    }

    private func move(_ cursor: inout Int, _ command: Command, count: Int, page: Int = 10) {
        guard count > 0 else { return }
        switch command {
        case .up: cursor -= 1
        case .down: cursor += 1
        case .pageUp: cursor -= page
        case .pageDown: cursor += page
        case .top: cursor = 0
        case .bottom: cursor = count - 1
        default: return
        }
        cursor = min(max(0, cursor), count - 1)
    }

    private func listCommand(_ command: Command) {
        let rows = view.list.devices.value ?? []
        switch command {
        case .up, .down, .pageUp, .pageDown, .top, .bottom:
            var cursor = view.listCursor
            move(&cursor, command, count: rows.count)
            selectListRow(cursor)
        case .open:
            if rows.indices.contains(view.listCursor) { list.send(.deviceSelected(rows[view.listCursor].id)) }
        case .toggleScan: list.send(.scanToggled)
        case .search: view.input = InputLine(purpose: .searchDevices, text: view.list.filter.text)
        case .cycleSort:
            let all = DeviceListPresenter.Sort.allCases
            let next = all[((all.firstIndex(of: view.list.sort) ?? 0) + 1) % all.count]
            list.send(.sortChanged(next))
        case .toggleNamedOnly: list.send(.namedOnlyToggled)
        case .toggleWatchedOnly: list.send(.watchedOnlyToggled)
        case .cycleFormat:
            let formats = view.list.formats
            let next: String?
            if let current = view.list.filter.format, let i = formats.firstIndex(of: current) {
                next = i + 1 < formats.count ? formats[i + 1] : nil
            } else {
                next = formats.first
            }
            list.send(.formatFilterChanged(next))
        case .raiseRSSIThreshold:
            list.send(.minimumRSSIChanged(min(-20, (view.list.filter.minimumRSSI ?? -105) + 5)))
        case .lowerRSSIThreshold:
            let lowered = (view.list.filter.minimumRSSI ?? -100) - 5
            list.send(.minimumRSSIChanged(lowered < -100 ? nil : lowered))
        case .showEventLog: list.send(.eventLogRequested)
        case .showAdapters: list.send(.adaptersRequested)
        default: break
        }
    }

    private func detailCommand(_ command: Command) {
        guard let detail, let state = view.detail else { return }
        let characteristics = view.detailCharacteristics
        let selected = characteristics.indices.contains(view.detailCursor) ? characteristics[view.detailCursor] : nil
        switch command {
        case .up, .down, .pageUp, .pageDown, .top, .bottom: move(&view.detailCursor, command, count: characteristics.count)
        case .back: detail.send(.backRequested)
        case .toggleConnection:
            detail.send(state.device.value?.connected == true ? .disconnectRequested : .connectRequested)
        case .pair: detail.send(.pairRequested)
        case .toggleTrust: detail.send(.trustToggled)
        case .forget: detail.send(.forgetRequested)
        case .toggleWatch: detail.send(.watchToggled)
        case .read:
            if let c = selected { detail.send(.readRequested(c.id)) }
        case .write:
            if let c = selected {
                view.input = InputLine(purpose: .write(c.id, withoutResponse: !c.canWrite && c.canWriteWithoutResponse))
            }
        case .toggleNotify:
            if let c = selected { detail.send(.notifyToggled(c.id)) }
        case .profileCommand:
            let commands = state.device.value?.commands ?? []
            if commands.isEmpty {
                notice("No profile with commands describes this device (docs/PROFILES.md).", level: .info)
            } else {
                view.input = InputLine(purpose: .profileCommand)
            }
        case .firmware:
            if environment.firmware == nil {
                notice("Firmware updates are not available here.", level: .info)
            } else {
                detail.send(.firmwareRequested)
            }
        case .nextHistorySeries:
            let count = state.history.value?.count ?? 0
            view.historySeries = count > 0 ? (view.historySeries + 1) % count : 0
        case .nextHistoryWindow:
            let windows: [TimeInterval] = [3_600, 86_400, 7 * 86_400]
            let next = windows[((windows.firstIndex(of: state.historyWindow) ?? 1) + 1) % windows.count]
            detail.send(.historyWindowChanged(next))
        default: break
        }
    }

    private func firmwareCommand(_ command: Command) {
        guard let firmware else {
            if command == .back { navigator.pop() }
            return
        }
        switch command {
        case .back: firmware.send(.closed)
        case .chooseImage: view.input = InputLine(purpose: .firmwareImage, text: view.firmware?.image.map { _ in "" } ?? "")
        case .upload: firmware.send(.uploadRequested(mark: .none, reset: false))
        case .uploadTestReset: firmware.send(.uploadRequested(mark: .test, reset: true))
        case .testImage: firmware.send(.testRequested(hash: nil))
        case .confirmImage: firmware.send(.confirmRequested(hash: nil))
        case .resetDevice: firmware.send(.resetRequested)
        case .cancelUpload: firmware.send(.cancelRequested)
        case .refresh: firmware.send(.refreshRequested)
        case .provisionWiFi: view.input = InputLine(purpose: .wifiSSID)
        default: break
        }
    }

    /// The image file the user typed: read here (the front end's I/O), judged by the presenter.
    static func readImage(_ path: String) -> (name: String, bytes: [UInt8])? {
        let expanded = path.hasPrefix("~/") ? NSString(string: path).expandingTildeInPath : path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: expanded),
              let size = attributes[.size] as? NSNumber, size.intValue <= 16 << 20,
              let data = FileManager.default.contents(atPath: expanded) else { return nil }
        return (URL(fileURLWithPath: expanded).lastPathComponent, [UInt8](data))
    }

    private func pairingCommand(_ command: Command) {
        guard let pairing else { return }
        switch command {
        case .accept: pairing.send(.accepted)
        case .reject: pairing.send(.rejected)
        case .back: pairing.send(.cancelled)
        default: break
        }
    }

    /// Typing a passkey or PIN: the presenter owns the text.
    private func codeKey(_ key: Key, _ p: PairingPresenter.State) {
        guard let pairing else { return }
        switch key {
        case let .character(c): pairing.send(.inputCharacterTyped(c))
        case .backspace: pairing.send(.inputCharacterDeleted)
        case .enter: pairing.send(.inputSubmitted)
        case .escape: pairing.send(.cancelled)
        case .ctrl("c"): quitRequested = true
        default: break
        }
    }

    private func logCommand(_ command: Command) {
        let rows = view.logRows
        switch command {
        case .up, .down, .pageUp, .pageDown, .top, .bottom: move(&view.logCursor, command, count: rows.count)
        case .back: eventLog.send(.backRequested)
        case .open:
            if rows.indices.contains(view.logCursor) { eventLog.send(.entrySelected(rows[view.logCursor].id)) }
        case .search: view.input = InputLine(purpose: .searchLog, text: view.log.filter.text)
        case .cycleSeverity:
            let all = LogEvent.Severity.allCases
            let next = all[((all.firstIndex(of: view.log.filter.minimumSeverity) ?? 0) + 1) % all.count]
            eventLog.send(.severityFilterChanged(next))
        case .toggleFollow: eventLog.send(.followToggled)
        case .clearLog: eventLog.send(.clearRequested)
        default: break
        }
    }

    private func adaptersCommand(_ command: Command) {
        let rows = view.adapters.adapters.value ?? []
        switch command {
        case .up, .down, .pageUp, .pageDown, .top, .bottom: move(&view.adapterCursor, command, count: rows.count)
        case .back: adapters.send(.backRequested)
        case .open:
            if rows.indices.contains(view.adapterCursor) { adapters.send(.adapterSelected(rows[view.adapterCursor].id)) }
        case .togglePower: adapters.send(.powerToggled)
        case .toggleDiscoverable: adapters.send(.discoverableToggled)
        case .togglePairable: adapters.send(.pairableToggled)
        case .toggleScan: adapters.send(.scanToggled)
        case .cycleTransport:
            let order: [DiscoveryFilter.Transport] = [.le, .bredr, .auto]
            let current = view.adapters.appliedFilter.transport
            adapters.send(.filterTransportChanged(order[((order.firstIndex(of: current) ?? 0) + 1) % order.count]))
            adapters.send(.filterApplied)
        case .raiseRSSIThreshold, .lowerRSSIThreshold:
            let step: Int16 = command == .raiseRSSIThreshold ? 5 : -5
            let current = view.adapters.appliedFilter.rssiThreshold ?? -100
            let next = current + step
            adapters.send(.filterRSSIChanged(next <= -100 ? nil : min(0, next)))
            adapters.send(.filterApplied)
        default: break
        }
    }

    // MARK: Text fields

    private func inputKey(_ key: Key) {
        guard var input = view.input else { return }
        switch key {
        case let .character(c): input.text.append(c)
        case .backspace: if !input.text.isEmpty { input.text.removeLast() }
        case .ctrl("u"): input.text = ""
        case .enter:
            submit(input)
            view.input = pendingInput
            pendingInput = nil
            return
        case .escape:
            // Cancelling a search clears it; cancelling a write writes nothing.
            switch input.purpose {
            case .searchDevices: list.send(.filterTextChanged(""))
            case .searchLog: eventLog.send(.textFilterChanged(""))
            case .write, .profileCommand, .firmwareImage, .wifiSSID, .wifiPassword: break
            }
            view.input = nil
            return
        case .ctrl("c"):
            quitRequested = true
            return
        default: return
        }
        view.input = input
        live(input)
    }

    private func typed(_ text: String) {
        guard var input = view.input else { return }
        input.text += text.filter { $0 != "\n" && $0 != "\r" }
        view.input = input
        live(input)
    }

    /// Searches filter as the user types.
    private func live(_ input: InputLine) {
        switch input.purpose {
        case .searchDevices: list.send(.filterTextChanged(input.text))
        case .searchLog: eventLog.send(.textFilterChanged(input.text))
        case .write, .profileCommand, .firmwareImage, .wifiSSID, .wifiPassword: break
        }
    }

    private func submit(_ input: InputLine) {
        switch input.purpose {
        case .searchDevices, .searchLog: break
        case let .write(id, withoutResponse): detail?.send(.writeRequested(id, hex: input.text, withoutResponse: withoutResponse))
        case .profileCommand: detail?.send(.profileCommandRequested(input.text))
        case .firmwareImage:
            let path = input.text.trimmingCharacters(in: .whitespaces)
            guard !path.isEmpty else { return }
            if let (name, bytes) = Self.readImage(path) {
                firmware?.send(.imageChosen(name: name, bytes: bytes))
            } else {
                failure("cannot read \(path) (a file of at most 16 MiB)")
            }
        case .wifiSSID:
            let ssid = input.text
            guard !ssid.isEmpty else { return }
            // The password next, in a field of its own (shown as bullets).
            pendingInput = InputLine(purpose: .wifiPassword(ssid: ssid))
        case let .wifiPassword(ssid):
            firmware?.send(.provisionRequested(ssid: ssid, password: Array(input.text.utf8)))
        }
    }

    // MARK: Mouse

    private func mouse(_ m: MouseEvent) {
        switch m.kind {
        case .scrollUp: key(.up)
        case .scrollDown: key(.down)
        case .press(button: 0):
            guard view.context == .deviceList, let rows = view.list.devices.value, !rows.isEmpty else { return }
            guard let index = layout.deviceListIndex(atRow: m.y, cursor: view.listCursor, count: rows.count) else { return }
            if index == view.listCursor { list.send(.deviceSelected(rows[index].id)) } else { selectListRow(index) }
        default: break
        }
    }

    /// The layout of the last frame drawn: where the mouse's rows are, and
    /// which rows a new list state must change to need a frame.
    public var layout = DashboardLayout(width: 80, height: 24)

    /// Whether anything on screen may differ from the last frame: the app
    /// loop draws only then. Every event sets it, except a device-list state
    /// that changes nothing in the rows shown, their count or the list's
    /// settings (a flood of advertisements mostly moves rows off screen).
    public var needsDraw = true

    /// A text field that opens when the one being submitted closes (the Wi-Fi password after the SSID).
    private var pendingInput: InputLine?

    /// Where the row of `id` is: it usually moved only a little, so the
    /// search starts at `near` and goes outwards (O(distance), not O(rows)).
    static func index(of id: DeviceID, in rows: DeviceListPresenter.Rows, near: Int) -> Int? {
        let count = rows.count
        guard count > 0 else { return nil }
        let start = min(max(0, near), count - 1)
        var step = 0
        while start - step >= 0 || start + step < count {
            if start + step < count, rows[start + step].id == id { return start + step }
            if step > 0, start - step >= 0, rows[start - step].id == id { return start - step }
            step += 1
        }
        return nil
    }

    /// Whether `new` shows the same as `old` on the device list: the same
    /// settings and count, and equal rows in the window the cursor shows.
    static func sameOnScreen(_ old: DeviceListPresenter.State, _ new: DeviceListPresenter.State, cursor: Int, visible: Int) -> Bool {
        guard old.scan == new.scan, old.filter == new.filter, old.sort == new.sort, old.formats == new.formats,
              case let .loaded(a) = old.devices, case let .loaded(b) = new.devices, a.count == b.count else { return false }
        let first = scrollOffset(cursor: cursor, count: b.count, visible: visible)
        for i in first..<min(b.count, first + visible) where a[i] != b[i] { return false }
        return true
    }

    // MARK: Ticks

    /// When the next tick is due, if anything on screen moves with time.
    public func nextTickInterval() -> Duration? {
        var wanted: Duration?
        func want(_ d: Duration) { wanted = min(wanted ?? d, d) }
        let busy = view.list.scan == .on || view.list.scan == .starting || view.list.scan == .stopping
            || { if case .running = view.detail?.command { return true } else { return false } }()
            || view.detail?.services == .loading
            || view.pairing.map { if case .pairing(nil) = $0.phase { return true } else { return false } } == true
        if busy { want(.milliseconds(125)) }
        if view.screen == .deviceList, view.list.devices.value?.contains(where: { $0.lastSeen != nil }) == true { want(.seconds(1)) }
        if case .deviceDetail = view.screen, view.detail?.device.value?.lastSeen != nil { want(.seconds(1)) }
        if let soonest = view.notices.map(\.expires).min() {
            let ms = max(50, Int(soonest.timeIntervalSince(environment.now()) * 1000) + 10)
            want(.milliseconds(ms))
        }
        return wanted
    }

    /// Schedules one tick after `interval` (replacing a later one); nothing
    /// is scheduled when nothing moves, so an idle dashboard sleeps.
    public func scheduleTick() {
        guard let interval = nextTickInterval() else {
            scheduledTick?.cancel()
            scheduledTick = nil
            tickDue = nil
            return
        }
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        let due = Date().addingTimeInterval(seconds)
        if let tickDue, tickDue <= due, scheduledTick != nil { return }
        scheduledTick?.cancel()
        tickDue = due
        let sink = self.sink, sleeper = environment.sleeper
        scheduledTick = Task {
            do { try await sleeper.sleep(for: interval) } catch { return }
            sink.yield(.tick)
        }
    }

    /// A tick arrived: the next one may be scheduled.
    public func tickFired() {
        tickDue = nil
        scheduledTick = nil
    }
}
