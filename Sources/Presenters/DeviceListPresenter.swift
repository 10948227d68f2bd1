import Bounds
import BLEParsing
import BlueZ
import Domain
import Foundation
import Synchronization

/// The device list: what the scan finds, filtered and sorted the way the
/// user asked, with the scan toggle. Driven by `send(_:)` only.
public final class DeviceListPresenter: Presenter {
    public enum Sort: String, Sendable, Equatable, CaseIterable { case rssi, name, lastSeen }

    public struct Filter: Sendable, Equatable {
        /// Matches name, address or decoded format, case-insensitively.
        public var text: String = ""
        public var minimumRSSI: Int16?
        public var namedOnly = false
        /// Only devices whose advertisements decode as this format ("bthome", "ruuvi", …).
        public var format: String?
        public var watchedOnly = false
        public init(text: String = "", minimumRSSI: Int16? = nil, namedOnly: Bool = false, format: String? = nil, watchedOnly: Bool = false) {
            self.text = text
            self.minimumRSSI = minimumRSSI
            self.namedOnly = namedOnly
            self.format = format
            self.watchedOnly = watchedOnly
        }
    }

    /// When a device counts as stale (greyed) and when it leaves the list.
    public struct Expiry: Sendable, Equatable {
        /// Not heard from for this long: marked stale.
        public var staleAfter: TimeInterval
        /// Not heard from for this long: hidden, unless paired, connected or
        /// watched (nil: never hidden).
        public var removeAfter: TimeInterval?
        public init(staleAfter: TimeInterval = 120, removeAfter: TimeInterval? = 900) {
            self.staleAfter = staleAfter
            self.removeAfter = removeAfter
        }
    }

    /// One row as every front end shows it.
    public struct Row: Sendable, Equatable, Identifiable {
        public let id: DeviceID
        /// Name or alias, else the address.
        public var title: String
        public var rssi: Int16?
        public var format: String?
        /// Decoded readings (front ends format them).
        public var readings: [Reading]
        public var paired: Bool
        public var trusted: Bool
        public var connected: Bool
        public var lastSeen: Date?
        /// Not heard from for longer than the stale threshold.
        public var stale: Bool
        /// The connection manager's status when the device is watched, nil when not.
        public var watch: ConnectionStatus?
        public init(id: DeviceID, title: String, rssi: Int16? = nil, format: String? = nil, readings: [Reading] = [],
                    paired: Bool = false, trusted: Bool = false, connected: Bool = false, lastSeen: Date? = nil,
                    stale: Bool = false, watch: ConnectionStatus? = nil) {
            self.id = id
            self.title = title
            self.rssi = rssi
            self.format = format
            self.readings = readings
            self.paired = paired
            self.trusted = trusted
            self.connected = connected
            self.lastSeen = lastSeen
            self.stale = stale
            self.watch = watch
        }
    }

    public enum Scan: Sendable, Equatable {
        case off
        case starting
        case on
        case stopping
        /// The last toggle failed; the text says why.
        case failed(String)
    }

    public struct State: Sendable, Equatable {
        public var devices: Loadable<[Row]> = .loading
        public var scan: Scan = .off
        public var filter = Filter()
        public var sort: Sort = .rssi
        /// The formats present in the list, for the format filter.
        public var formats: [String] = []
        public init() {}
    }

    public enum Action: Sendable, Equatable {
        case scanToggled
        case filterTextChanged(String)
        case minimumRSSIChanged(Int16?)
        case namedOnlyToggled
        case formatFilterChanged(String?)
        case watchedOnlyToggled
        case sortChanged(Sort)
        case deviceSelected(DeviceID)
        case eventLogRequested
        case adaptersRequested
        // Sent by the presenter itself:
        /// A snapshot arrived from the repository.
        case repositoryChanged(DeviceListSnapshot)
        case watchesChanged([BluetoothAddress: ConnectionStatus])
        /// A device's stale or expiry time came.
        case clockTicked
    }

    private let store = StateStore(State())
    private let repository: any DeviceRepository
    private let navigator: Navigator
    private let now: @Sendable () -> Date
    private let expiry: Expiry
    private let sleeper: any Sleeper
    private let latest = LatestSnapshot()
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.devices")

    /// `sleeper` waits for the next stale/expiry time (a test moves it by hand
    /// together with `now`); `watchList` nil: no watching shown.
    public init(repository: any DeviceRepository, navigator: Navigator, watchList: (any WatchList)? = nil,
                expiry: Expiry = Expiry(), sleeper: any Sleeper = TaskSleeper(),
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.repository = repository
        self.navigator = navigator
        self.expiry = expiry
        self.sleeper = sleeper
        self.now = now
        runtime.start { [weak self] action in await self?.handle(action) }
        runtime.follow(repository.snapshots()) { .repositoryChanged($0) }
        if let watchList { runtime.follow(watchList.watches()) { .watchesChanged($0) } }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        switch action {
        case .scanToggled:
            let wasOn: Bool
            switch store.state.scan {
            case .on: wasOn = true
            case .starting, .stopping: return
            case .off, .failed: wasOn = false
            }
            store.update { $0.scan = wasOn ? .stopping : .starting }
            do {
                try await repository.setScanning(!wasOn)
                // What was asked for; later snapshots reconcile (e.g. another
                // client stopping discovery).
                store.update { $0.scan = wasOn ? .off : .on }
            } catch {
                store.update { $0.scan = .failed(error.description) }
            }
        case let .filterTextChanged(text):
            update { $0.filter.text = text }
        case let .minimumRSSIChanged(value):
            update { $0.filter.minimumRSSI = value }
        case .namedOnlyToggled:
            update { $0.filter.namedOnly.toggle() }
        case let .formatFilterChanged(format):
            update { $0.filter.format = format }
        case .watchedOnlyToggled:
            update { $0.filter.watchedOnly.toggle() }
        case .eventLogRequested:
            navigator.push(.eventLog)
        case .adaptersRequested:
            navigator.push(.adapters)
        case let .watchesChanged(watches):
            latest.watches = watches
            update { _ in }
        case .clockTicked:
            latest.timerDeadline = nil
            update { _ in }
        case let .sortChanged(sort):
            update { $0.sort = sort }
        case let .deviceSelected(id):
            navigator.push(.deviceDetail(id))
        case let .repositoryChanged(snapshot):
            latest.value = snapshot
            update { s in
                switch s.scan {
                case .starting, .stopping: break
                // A failure stays on screen until scanning actually starts
                // (another client) or the user toggles again.
                case .failed: if snapshot.scanning { s.scan = .on }
                case .on, .off: s.scan = snapshot.scanning ? .on : .off
                }
            }
        }
    }

    /// One state change: `change`, then the rows it implies — never an
    /// intermediate state whose filter and rows disagree. Then the timer for
    /// the next device to turn stale or expire.
    private func update(_ change: (inout State) -> Void) {
        let snapshot = latest.value
        let time = now()
        let expiry = self.expiry
        let watches = latest.watches
        store.update { s in
            change(&s)
            guard let snapshot else { return }
            if let reason = snapshot.availability.reason {
                s.devices = .unavailable(reason)
                s.formats = []
            } else {
                s.devices = .loaded(DeviceListPresenter.rows(snapshot.devices, filter: s.filter, sort: s.sort, now: time,
                                                            expiry: expiry, watches: watches))
                s.formats = Array(Set(snapshot.devices.compactMap(\.format))).sorted()
            }
        }
        if let snapshot, snapshot.availability == .available {
            schedule(DeviceListPresenter.nextTransition(snapshot.devices, after: time, expiry: expiry), now: time)
        }
    }

    /// Sleeps until `deadline` and sends `.clockTicked`. Only an earlier
    /// deadline replaces a pending timer (devices that keep advertising move
    /// their deadlines later all the time; a timer that fires early just
    /// recomputes and schedules the next).
    private func schedule(_ deadline: Date?, now: Date) {
        guard let deadline else { return }
        if let pending = latest.timerDeadline, pending <= deadline { return }
        latest.timer?.cancel()
        latest.timerDeadline = deadline
        let delay = Bounds.duration(seconds: deadline.timeIntervalSince(now)) + .milliseconds(1)
        let sleeper = self.sleeper, runtime = self.runtime
        let task = Task {
            do { try await sleeper.sleep(for: delay) } catch { return }
            if Task.isCancelled { return }
            runtime.send(.clockTicked)
        }
        latest.timer = task   // cancelled when replaced or with the presenter
    }

    /// The first moment after `now` at which a device turns stale or expires.
    static func nextTransition(_ devices: [DeviceRecord], after now: Date, expiry: Expiry) -> Date? {
        var next: Date?
        for d in devices {
            guard let seen = d.lastSeen else { continue }
            for limit in [expiry.staleAfter, expiry.removeAfter].compactMap({ $0 }) {
                let t = seen.addingTimeInterval(limit)
                if t > now, next.map({ t < $0 }) ?? true { next = t }
            }
        }
        return next
    }

    /// Pure: the rows for a list of devices (exposed for front ends' previews).
    public static func rows(_ devices: [DeviceRecord], filter: Filter, sort: Sort, now: Date, expiry: Expiry = Expiry(),
                            watches: [BluetoothAddress: ConnectionStatus] = [:]) -> [Row] {
        let needle = filter.text.lowercased()
        let kept = devices.filter { d in
            let watch = watches[d.id.address]
            if let removeAfter = expiry.removeAfter, let seen = d.lastSeen, now.timeIntervalSince(seen) > removeAfter,
               !d.paired, !d.connected, watch == nil {
                return false
            }
            if filter.namedOnly && d.name == nil { return false }
            if filter.watchedOnly && watch == nil { return false }
            if let format = filter.format, d.format != format { return false }
            if let min = filter.minimumRSSI, (d.rssi ?? Int16.min) < min { return false }
            if !needle.isEmpty {
                let hay = [d.name ?? "", d.id.address.description, d.format ?? ""].joined(separator: " ").lowercased()
                if !hay.contains(needle) { return false }
            }
            return true
        }
        let sorted: [DeviceRecord]
        switch sort {
        case .rssi: sorted = kept.sorted { ($0.rssi ?? Int16.min, $1.id.address) > ($1.rssi ?? Int16.min, $0.id.address) }
        case .name: sorted = kept.sorted { (($0.name ?? "~").lowercased(), $0.id.address) < (($1.name ?? "~").lowercased(), $1.id.address) }
        case .lastSeen: sorted = kept.sorted { ($0.lastSeen ?? .distantPast, $1.id.address) > ($1.lastSeen ?? .distantPast, $0.id.address) }
        }
        return sorted.map { d in
            Row(id: d.id, title: d.name ?? d.id.address.description, rssi: d.rssi, format: d.format, readings: d.readings,
                paired: d.paired, trusted: d.trusted, connected: d.connected, lastSeen: d.lastSeen,
                stale: d.lastSeen.map { now.timeIntervalSince($0) > expiry.staleAfter } ?? false,
                watch: watches[d.id.address])
        }
    }
}

/// The last repository snapshot, touched only by the action queue's task.
private final class LatestSnapshot: @unchecked Sendable {
    var value: DeviceListSnapshot?
    var watches: [BluetoothAddress: ConnectionStatus] = [:]
    var timer: Task<Void, Never>?
    var timerDeadline: Date?
    deinit { timer?.cancel() }
}
