import Bounds
import BLEParsing
import BlueZ
import Domain
import Foundation
import Synchronization
import Vocabulary

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
    ///
    /// Its values live in one immutable object, so copying a row is one
    /// retain: the list keeps its rows in chunks that the screen shares
    /// (the last state it drew), and the first change to a chunk after a
    /// state went out copies the chunk — with a row of eleven values that
    /// was a retain of each string and array in every row of it, the
    /// presenter's largest cost in a flood (perf, 2026-11-28). Setting a
    /// value makes a new object.
    public struct Row: Sendable, Equatable, Identifiable {
        struct Fields: Sendable, Equatable {
            let id: DeviceID
            var title: String
            var rssi: Int16?
            var format: String?
            var readings: [Reading]
            var paired: Bool
            var trusted: Bool
            var connected: Bool
            var lastSeen: Date?
            var stale: Bool
            var watch: ConnectionStatus?
            var profile: String?
        }
        final class Storage: Sendable {
            let fields: Fields
            init(_ fields: Fields) { self.fields = fields }
        }
        private var storage: Storage

        public var id: DeviceID { storage.fields.id }
        /// Name or alias, else the address.
        public var title: String {
            get { storage.fields.title }
            set { change { $0.title = newValue } }
        }
        public var rssi: Int16? {
            get { storage.fields.rssi }
            set { change { $0.rssi = newValue } }
        }
        public var format: String? {
            get { storage.fields.format }
            set { change { $0.format = newValue } }
        }
        /// Decoded readings (front ends format them).
        public var readings: [Reading] {
            get { storage.fields.readings }
            set { change { $0.readings = newValue } }
        }
        public var paired: Bool {
            get { storage.fields.paired }
            set { change { $0.paired = newValue } }
        }
        public var trusted: Bool {
            get { storage.fields.trusted }
            set { change { $0.trusted = newValue } }
        }
        public var connected: Bool {
            get { storage.fields.connected }
            set { change { $0.connected = newValue } }
        }
        public var lastSeen: Date? {
            get { storage.fields.lastSeen }
            set { change { $0.lastSeen = newValue } }
        }
        /// Not heard from for longer than the stale threshold.
        public var stale: Bool {
            get { storage.fields.stale }
            set { change { $0.stale = newValue } }
        }
        /// The connection manager's status when the device is watched, nil when not.
        public var watch: ConnectionStatus? {
            get { storage.fields.watch }
            set { change { $0.watch = newValue } }
        }
        /// The device profile that describes it, by name (docs/PROFILES.md).
        public var profile: String? {
            get { storage.fields.profile }
            set { change { $0.profile = newValue } }
        }

        public init(id: DeviceID, title: String, rssi: Int16? = nil, format: String? = nil, readings: [Reading] = [],
                    paired: Bool = false, trusted: Bool = false, connected: Bool = false, lastSeen: Date? = nil,
                    stale: Bool = false, watch: ConnectionStatus? = nil, profile: String? = nil) {
            storage = Storage(Fields(id: id, title: title, rssi: rssi, format: format, readings: readings, paired: paired,
                                     trusted: trusted, connected: connected, lastSeen: lastSeen, stale: stale, watch: watch,
                                     profile: profile))
        }

        private mutating func change(_ body: (inout Fields) -> Void) {
            var fields = storage.fields
            body(&fields)
            storage = Storage(fields)
        }

        public static func == (a: Row, b: Row) -> Bool {
            a.storage === b.storage || a.storage.fields == b.storage.fields
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
        /// The rows added, changed or removed since the previous state (nil:
        /// any may have; a front end then looks at all). Lets the gateway's
        /// planner and a renderer do O(changed) work per state. First, so
        /// that comparing two states after a keyed update stops here instead
        /// of walking every row.
        public var changes: RowChanges?
        public var devices: Loadable<Rows> = .loading
        public var scan: Scan = .off
        public var filter = Filter()
        public var sort: Sort = .rssi
        /// The formats present in the list, for the format filter.
        public var formats: [String] = []
        public init() {}
    }

    /// The list's rows, in order. Chunked: the presenter moves a changed
    /// row without moving every row after it, and without copying the whole
    /// list when a consumer still holds the last state.
    public typealias Rows = ChunkedArray<Row>

    /// What one state changed in the list, by device.
    public struct RowChanges: Sendable, Equatable {
        /// Rows added or changed, as they are now.
        public var rows: [Row]
        /// Devices whose rows left the list.
        public var removed: Set<DeviceID>
        public init(rows: [Row] = [], removed: Set<DeviceID> = []) {
            self.rows = rows
            self.removed = removed
        }
        /// Every device the change touched.
        public var ids: Set<DeviceID> { removed.union(rows.map(\.id)) }

        /// What `older` then `newer` changed together, as of `newer`: each
        /// device's latest row, or its removal if that came last. Nil (anything
        /// may have changed) when either is nil.
        public static func merged(_ older: RowChanges?, _ newer: RowChanges?) -> RowChanges? {
            guard let older, let newer else { return nil }
            let touched = newer.ids
            var result = newer
            result.rows = older.rows.filter { !touched.contains($0.id) } + newer.rows
            result.removed.formUnion(older.removed.filter { !touched.contains($0) })
            return result
        }
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
    private let uptime: @Sendable () -> TimeInterval
    private let expiry: Expiry
    private let sleeper: any Sleeper
    private let latest = LatestSnapshot()
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.devices")

    /// `sleeper` waits for the next stale/expiry time (a test moves it by hand
    /// together with `now` and `uptime`); `uptime` is the clock records'
    /// `heard` times are on (``BootClock``); `watchList` nil: no watching shown.
    public init(repository: any DeviceRepository, navigator: Navigator, watchList: (any WatchList)? = nil,
                expiry: Expiry = Expiry(), sleeper: any Sleeper = TaskSleeper(),
                now: @escaping @Sendable () -> Date = { Date() },
                uptime: @escaping @Sendable () -> TimeInterval = BootClock.seconds) {
        self.uptime = uptime
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

    /// The states for a consumer that may fall behind (the gateway's
    /// planner under a flood): at most one waits; a newer one replaces it
    /// and carries the changes of both (``RowChanges/merged(_:_:)``), so a
    /// consumer that looks only at `changes` still sees every changed row,
    /// and memory stays bounded. `coalesced` counts each replacement.
    public func coalescedStates(coalesced: @escaping @Sendable () -> Void = {}) -> AsyncStream<State> {
        store.states(coalescing: { waiting, newer in
            var merged = newer
            merged.changes = RowChanges.merged(waiting.changes, newer.changes)
            return merged
        }, coalesced: coalesced)
    }

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
            let previous = latest.value
            latest.value = snapshot
            if let previous, updateIncrementally(from: previous, to: snapshot) { return }
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
        let time = Moment(date: now(), uptime: uptime())
        let expiry = self.expiry
        let watches = latest.watches
        let latest = self.latest
        store.update { s in
            change(&s)
            s.changes = nil
            latest.sorted = nil
            guard let snapshot else { return }
            if snapshot.availability != .available {
                s.devices = .unavailable(.bluetooth(snapshot.availability))
                s.formats = []
            } else {
                // The sorted array goes before the rows are built (at 10,000
                // devices each copy of the list is megabytes).
                let sorted = DeviceListPresenter.kept(snapshot.devices, filter: s.filter, sort: s.sort, now: time,
                                                      expiry: expiry, watches: watches)
                s.devices = .loaded(ChunkedArray(sorted.lazy.map { DeviceListPresenter.row($0, now: time, expiry: expiry, watches: watches) }))
                latest.sorted = ChunkedArray(sorted.lazy.map(SortKey.init))
                latest.formatCounts = snapshot.devices.reduce(into: [:]) { counts, d in if let f = d.format { counts[f, default: 0] += 1 } }
                s.formats = latest.formatCounts.keys.sorted()
            }
        }
        if let snapshot, snapshot.availability == .available {
            schedule(DeviceListPresenter.nextTransition(snapshot.devices, after: time, expiry: expiry), now: time)
        }
    }

    /// The rows for a snapshot that differs from the one before it only in
    /// the records it names: each changed device leaves its place (found by
    /// binary search on its previous record) and, if the filter keeps it,
    /// goes to its new one — O(changed × log devices), not a filter and sort
    /// of every device. False when that does not apply (a snapshot missed,
    /// availability or scanning changed, no rows yet): the caller then
    /// rebuilds everything.
    private func updateIncrementally(from previous: DeviceListSnapshot, to snapshot: DeviceListSnapshot) -> Bool {
        guard let ids = snapshot.changes(since: previous.version), snapshot.positions != nil,
              snapshot.availability == .available, previous.availability == .available,
              snapshot.scanning == previous.scanning, var sorted = latest.sorted else { return false }
        // Taken out of `latest` (and the rows out of the state, below) so that
        // they change without a copy; a `false` below leads to a rebuild,
        // which sets `latest.sorted` again.
        latest.sorted = nil
        let time = Moment(date: now(), uptime: uptime())
        let expiry = self.expiry
        let watches = latest.watches
        // The list's settings, without a copy of the rows.
        let (sort, filter, shown, formats) = store.read { s -> (Sort, Filter, Int?, [String]) in
            guard case let .loaded(rows) = s.devices else { return (s.sort, s.filter, nil, s.formats) }
            return (s.sort, s.filter, rows.count, s.formats)
        }
        guard shown == sorted.count else { return false }
        let needle = filter.text.lowercased()
        // First every check that can send us to a rebuild, on the list as it is
        // (whether a device is in it does not depend on the others' moves).
        // The ids only: both records are read again below (O(1) each), so
        // that a snapshot changing every device (the first advertisements
        // of a crowd) does not hold two copies of each record here.
        var moves: [DeviceID] = []
        moves.reserveCapacity(ids.count)
        for id in ids {
            guard snapshot.record(id) != nil, let old = previous.record(id) else { return false }
            let at = Self.insertionIndex(of: old, in: sorted, sort: sort)
            let there = at < sorted.count && sorted[at].id == id
            if !there, Self.keeps(old, filter: filter, needle: needle, now: time, expiry: expiry, watches: watches) {
                return false   // it should have been there: rebuild
            }
            moves.append(id)
        }
        // Then the moves.
        var formatsChanged = false
        var changes = RowChanges()
        changes.rows.reserveCapacity(moves.count)
        let latest = self.latest
        store.modify { s in
            guard case var .loaded(rows) = s.devices else { return }
            s.devices = .loading
            for id in moves {
                guard let old = previous.record(id), let record = snapshot.record(id) else { continue }
                if old.format != record.format {
                    formatsChanged = true
                    if let f = old.format { latest.formatCounts[f, default: 1] -= 1; if latest.formatCounts[f] == 0 { latest.formatCounts[f] = nil } }
                    if let f = record.format { latest.formatCounts[f, default: 0] += 1 }
                }
                // Out of its old place, if it had one.
                let at = Self.insertionIndex(of: old, in: sorted, sort: sort)
                if at < sorted.count, sorted[at].id == id {
                    sorted.remove(at: at)
                    rows.remove(at: at)
                }
                // Into its new place, if the filter keeps it.
                if Self.keeps(record, filter: filter, needle: needle, now: time, expiry: expiry, watches: watches) {
                    let to = Self.insertionIndex(of: record, in: sorted, sort: sort)
                    let row = Self.row(record, now: time, expiry: expiry, watches: watches)
                    sorted.insert(SortKey(record), at: to)
                    rows.insert(row, at: to)
                    changes.rows.append(row)
                } else {
                    changes.removed.insert(id)
                }
            }
            s.devices = .loaded(rows)
            s.formats = formatsChanged ? latest.formatCounts.keys.sorted() : formats
            s.changes = changes
        }
        latest.sorted = sorted
        // The changed devices' next stale or expiry time (the pending timer keeps an earlier one).
        schedule(Self.nextTransition(moves.lazy.compactMap { snapshot.record($0) }, after: time, expiry: expiry), now: time)
        return true
    }

    /// Where `record` goes in `sorted` (the first place whose record does
    /// not come before it): a binary search with the list's order, over the
    /// chunks and then in one (``ChunkedArray/partitioningIndex(where:)``).
    static func insertionIndex(of record: DeviceRecord, in sorted: ChunkedArray<SortKey>, sort: Sort) -> Int {
        // Each probe reads only the fields the order compares (a whole
        // record passed to `comesBefore` was copied, retains and all, per
        // probe: 3 % of the dashboard's CPU in a flood), and `record`'s side
        // of the comparison is worked out once.
        let address = record.id.address
        switch sort {
        case .rssi:
            let rssi = record.rssi
            return sorted.partitioningIndex { !Self.strongerFirst($0.rssi, $0.id.address, rssi, address) }
        case .name:
            let name = Self.nameKey(record.name)
            return sorted.partitioningIndex { !Self.alphabetical(Self.nameKey($0.name), $0.id.address, name, address) }
        case .lastSeen:
            let lastSeen = record.lastSeen
            return sorted.partitioningIndex { !Self.recentFirst($0.lastSeen, $0.id.address, lastSeen, address) }
        }
    }

    /// The list's order: strongest signal, name or most recent first, the
    /// address breaking ties (so every device has one place).
    static func comesBefore(_ a: DeviceRecord, _ b: DeviceRecord, sort: Sort) -> Bool {
        switch sort {
        case .rssi: return strongerFirst(a.rssi, a.id.address, b.rssi, b.id.address)
        case .name: return alphabetical(nameKey(a.name), a.id.address, nameKey(b.name), b.id.address)
        case .lastSeen: return recentFirst(a.lastSeen, a.id.address, b.lastSeen, b.id.address)
        }
    }

    // Each order once, on the fields it reads: whether a device (first two
    // arguments) comes before another (last two).
    @inline(__always) private static func strongerFirst(_ a: Int16?, _ aAddress: BluetoothAddress, _ b: Int16?, _ bAddress: BluetoothAddress) -> Bool {
        (a ?? Int16.min, bAddress) > (b ?? Int16.min, aAddress)
    }
    @inline(__always) private static func alphabetical(_ a: String, _ aAddress: BluetoothAddress, _ b: String, _ bAddress: BluetoothAddress) -> Bool {
        (a, aAddress) < (b, bAddress)
    }
    @inline(__always) private static func recentFirst(_ a: Date?, _ aAddress: BluetoothAddress, _ b: Date?, _ bAddress: BluetoothAddress) -> Bool {
        (a ?? .distantPast, bAddress) > (b ?? .distantPast, aAddress)
    }
    /// Unnamed devices sort after named ones.
    @inline(__always) private static func nameKey(_ name: String?) -> String { (name ?? "~").lowercased() }

    /// Sleeps until `deadline` and sends `.clockTicked`. Only an earlier
    /// deadline replaces a pending timer (devices that keep advertising move
    /// their deadlines later all the time; a timer that fires early just
    /// recomputes and schedules the next).
    /// `deadline` and `now` are on the boot-time clock when there is one, so
    /// a wall-clock jump between two calls does not confuse which timer is
    /// earlier.
    private func schedule(_ deadline: TimeInterval?, now: Moment) {
        guard let deadline else { return }
        if let pending = latest.timerDeadline, pending <= deadline { return }
        latest.timer?.cancel()
        latest.timerDeadline = deadline
        // To the microsecond: the difference of two times in seconds since
        // 1970 (no boot-time clock) carries ~10⁻⁷ s of rounding, and rounded
        // up to the nanosecond 479 s became 479.000000001 s.
        let delay = Bounds.duration(seconds: ((deadline - now.clock) * 1e6).rounded() / 1e6) + .milliseconds(1)
        let sleeper = self.sleeper, runtime = self.runtime
        let task = Task {
            do { try await sleeper.sleep(for: delay) } catch { return }
            if Task.isCancelled { return }
            runtime.send(.clockTicked)
        }
        latest.timer = task   // cancelled when replaced or with the presenter
    }

    /// The first moment after `now` at which a device turns stale or
    /// expires, on `now`'s clock (``Moment/clock``).
    static func nextTransition(_ devices: some Sequence<DeviceRecord>, after now: Moment, expiry: Expiry) -> TimeInterval? {
        var next: TimeInterval?
        // The two limits one by one: an array of them per device was two
        // allocations per advertisement (check-allocations).
        func consider(_ limit: TimeInterval?, age: TimeInterval) {
            guard let limit else { return }
            let t = now.clock + (limit - age)
            if t > now.clock, next.map({ t < $0 }) ?? true { next = t }
        }
        for d in devices {
            guard let age = now.age(d) else { continue }
            consider(expiry.staleAfter, age: age)
            consider(expiry.removeAfter, age: age)
        }
        return next
    }

    /// Pure: the rows for a list of devices (exposed for front ends' previews).
    public static func rows(_ devices: some Sequence<DeviceRecord>, filter: Filter, sort: Sort, now: Date, expiry: Expiry = Expiry(),
                            watches: [BluetoothAddress: ConnectionStatus] = [:]) -> [Row] {
        let moment = Moment(date: now, uptime: nil)
        return kept(devices, filter: filter, sort: sort, now: moment, expiry: expiry, watches: watches)
            .map { row($0, now: moment, expiry: expiry, watches: watches) }
    }

    /// The records the filter keeps, in the list's order.
    static func kept(_ devices: some Sequence<DeviceRecord>, filter: Filter, sort: Sort, now: Moment, expiry: Expiry,
                     watches: [BluetoothAddress: ConnectionStatus]) -> [DeviceRecord] {
        let needle = filter.text.lowercased()
        // One array, sorted in place (`filter` then `sorted` made two).
        var kept = devices.filter { keeps($0, filter: filter, needle: needle, now: now, expiry: expiry, watches: watches) }
        kept.sort { comesBefore($0, $1, sort: sort) }
        return kept
    }

    /// Whether the list shows `d` (`needle`: the filter text, lowercased).
    static func keeps(_ d: DeviceRecord, filter: Filter, needle: String, now: Moment, expiry: Expiry,
                      watches: [BluetoothAddress: ConnectionStatus]) -> Bool {
        let watch = watches[d.id.address]
        if let removeAfter = expiry.removeAfter, let age = now.age(d), age > removeAfter,
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

    static func row(_ d: DeviceRecord, now: Moment, expiry: Expiry, watches: [BluetoothAddress: ConnectionStatus]) -> Row {
        let age = now.age(d)
        return Row(id: d.id, title: d.name ?? d.id.address.description, rssi: d.rssi, format: d.format, readings: d.readings,
                   paired: d.paired, trusted: d.trusted, connected: d.connected, lastSeen: now.seen(d, age: age),
                   stale: age.map { $0 > expiry.staleAfter } ?? false,
                   watch: watches[d.id.address], profile: d.profile)
    }
}

/// Now on both clocks: the wall clock, which rows show and the gateway
/// publishes, and the boot-time clock (``BootClock``; nil in previews),
/// which a wall-clock jump (NTP correcting a Raspberry Pi that booted with
/// `fake-hwclock`'s time) does not move. How long ago a device was heard is
/// measured on the boot-time clock whenever its record has a `heard` time;
/// its wall-clock `lastSeen` is then what that age makes of now, so after a
/// jump a device heard a second ago still reads "now", stays online, and is
/// published with a `last_seen` on the corrected clock.
struct Moment {
    var date: Date
    var uptime: TimeInterval?

    /// The clock deadlines are kept on: boot time, else the wall clock.
    var clock: TimeInterval { uptime ?? date.timeIntervalSinceReferenceDate }

    /// Seconds since `d` was heard (nil: never heard, nothing remembered).
    func age(_ d: DeviceRecord) -> TimeInterval? {
        if let uptime, let heard = d.heard { return uptime - heard }
        return d.lastSeen.map { date.timeIntervalSince($0) }
    }

    /// When `d` was heard, on the wall clock as it is now.
    func seen(_ d: DeviceRecord, age: TimeInterval?) -> Date? {
        if uptime != nil, d.heard != nil, let age { return date.addingTimeInterval(-age) }
        return d.lastSeen
    }
}

/// What the list's order compares of a record (``DeviceListPresenter/insertionIndex(of:in:sort:)``):
/// a third of a whole record, so the presenter's copy of the order is not a
/// second copy of every record next to the repository's.
struct SortKey: Sendable {
    let id: DeviceID
    let name: String?
    let lastSeen: Date?
    let rssi: Int16?

    init(_ record: DeviceRecord) {
        id = record.id
        name = record.name
        lastSeen = record.lastSeen
        rssi = record.rssi
    }
}

/// The last repository snapshot, touched only by the action queue's task.
private final class LatestSnapshot: @unchecked Sendable {
    var value: DeviceListSnapshot?
    /// The order of the rows now shown: each row's sort key (nil: to be rebuilt).
    var sorted: ChunkedArray<SortKey>?
    /// How many records of each format the snapshot has (the format filter's choices).
    var formatCounts: [String: Int] = [:]
    var watches: [BluetoothAddress: ConnectionStatus] = [:]
    var timer: Task<Void, Never>?
    var timerDeadline: TimeInterval?
    deinit { timer?.cancel() }
}

/// A row prints (in test failures, `dump`) as its values, not its storage.
extension DeviceListPresenter.Row: CustomReflectable {
    public var customMirror: Mirror { Mirror(reflecting: storage.fields) }
}
