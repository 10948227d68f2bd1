import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import Vocabulary

/// Which devices a gateway publishes.
public enum DeviceSelection: Sendable, Equatable {
    /// Every device whose advertisements decode (or that has GATT readings).
    case decodable
    /// Only these, decodable or not.
    case allow(Set<BluetoothAddress>)
    /// Every decodable device except these.
    case deny(Set<BluetoothAddress>)

    public func includes(_ address: BluetoothAddress, decodable: Bool) -> Bool {
        switch self {
        case .decodable: return decodable
        case let .allow(set): return set.contains(address)
        case let .deny(set): return decodable && !set.contains(address)
        }
    }
}

/// When a device's state is published.
public struct PublishPolicy: Sendable, Equatable {
    /// A changed state waits until this long after the previous publication (0: at once).
    public var minInterval: TimeInterval
    /// An unchanged state is published again this long after the previous one (nil: never).
    public var heartbeat: TimeInterval?
    public init(minInterval: TimeInterval = 0, heartbeat: TimeInterval? = 300) {
        self.minInterval = max(0, minInterval)
        self.heartbeat = heartbeat.flatMap { $0 > 0 ? $0 : nil }
    }
}

/// The gateway's publishing decisions, pure: device-list states (and GATT
/// readings of watched devices) in, MQTT messages out, in the order they
/// must reach the broker. No clock of its own: every call is given `now`,
/// and ``nextDeadline`` says when the caller must call ``tick(now:)``.
///
/// Rules:
/// - a device comes **online** (retained `online` on its availability
///   topic) when it is listed and not stale; its discovery configs come
///   first, then availability, then its state;
/// - it goes **offline** when it turns stale (not heard for the expiry),
///   leaves the list, or bluetoothd becomes unavailable;
/// - its **state** is published when its content (name, format, readings —
///   not RSSI or last-seen) changed, at most every `minInterval`, and again
///   every `heartbeat` while online;
/// - **discovery** configs are sent again when the set of reading keys changes.
public struct PublishPlanner: Sendable {
    /// Fleet mode: who this gateway is and which room it stands in. Only
    /// devices ``adopt(_:previousState:now:)`` gave it are published; states
    /// say `gateway` and `room`.
    public struct Fleet: Sendable, Equatable {
        public var gateway: String
        public var room: String
        public init(gateway: String, room: String) {
            self.gateway = gateway
            self.room = room
        }
    }

    public struct Options: Sendable, Equatable {
        public var topics: GatewayTopics
        public var selection: DeviceSelection
        public var policy: PublishPolicy
        public var discovery: Bool
        public var fleet: Fleet?
        public init(topics: GatewayTopics, selection: DeviceSelection = .decodable, policy: PublishPolicy = PublishPolicy(),
                    discovery: Bool = true, fleet: Fleet? = nil) {
            self.topics = topics
            self.selection = selection
            self.policy = policy
            self.discovery = discovery
            self.fleet = fleet
        }
    }

    /// What the planner knows of one published device. Kept small (one per
    /// device heard, in a table of them): the record and the content are
    /// derived from the row they came from rather than stored beside it.
    public struct Published: Sendable, Equatable {
        /// The row (and GATT readings) the device's state is built from: an
        /// unchanged row costs a comparison, not a JSON encoding.
        var source: DeviceListPresenter.Row
        var sourceGATT: [Reading] = []
        public var online = false
        /// The content last sent (nil: never).
        var sentContent: Content?
        public var lastPublished: Date?
        var discoveryKeys: [String]?
        /// A change waits for the minimum interval.
        var pending = false
        /// Fleet mode: the hash of the state last published (``PublishPlanner/stateHash(_:)``).
        var sentHash: String?
        /// The member order of the last state message.
        var reused = StatePayload.Reused()

        init(source: DeviceListPresenter.Row, gatt: [Reading]) {
            self.source = source
            self.sourceGATT = gatt
        }

        /// The device as its state message says it.
        public var record: DeviceRecord { PublishPlanner.record(source, extra: sourceGATT) }
        /// What the state says without RSSI and last-seen: what "changed"
        /// compares. The parts themselves (shared arrays), not their JSON:
        /// encoding it per change only to compare was a tenth of the
        /// gateway's CPU (perf, 2026-11-26).
        var content: Content { PublishPlanner.content(record) }
    }

    public let options: Options
    public private(set) var devices: [BluetoothAddress: Published] = [:]
    /// The state messages' layouts, one per shape of device.
    private var layouts = StatePayload.Layouts()
    /// bluetoothd (and the adapter) usable, as the last list state said.
    public private(set) var bluetoothAvailable = false

    /// The profile of this name (commands become Home Assistant entities); none by default.
    let profiles: @Sendable (String) -> DeviceProfile?

    public init(options: Options, profiles: @escaping @Sendable (String) -> DeviceProfile? = { _ in nil }) {
        self.options = options
        self.profiles = profiles
    }

    /// What a device's Home Assistant configs depend on: its reading keys and
    /// its profile's commands. Cheap, so that a change of readings (every
    /// advertisement) costs no configs unless these differ.
    func discoveryKeys(_ record: DeviceRecord) -> [String] {
        let keys = ReadingKey.published(record.readings).map(\.key)
        guard let name = record.profile, let profile = profiles(name), !profile.commands.isEmpty else { return keys }
        return keys + profile.commands.map { "command:\($0.name)" }
    }

    /// The Home Assistant configs of a record, with its profile's commands.
    func discoveryMessages(_ record: DeviceRecord) -> [OutgoingMessage] {
        HomeAssistantDiscovery.messages(for: record, topics: options.topics, profile: record.profile.flatMap(profiles))
    }

    /// When each online device next has something due (a held-back change,
    /// a heartbeat): kept beside `devices` so ``tick(now:)`` and
    /// ``nextDeadline`` read dates, not every device's record.
    private var dueAt: [BluetoothAddress: Date] = [:]
    /// The last list state was loaded (rows known): a keyed update may follow it.
    private var listLoaded = false
    /// The devices online now (kept with `devices`, so counting or listing
    /// them does not copy every device's record).
    public private(set) var onlineAddresses: Set<BluetoothAddress> = []
    /// Fleet mode: the devices this gateway owns (the others are followed, silently).
    public private(set) var owned: Set<BluetoothAddress> = []

    /// A new device-list state. `gatt`: readings from watched devices'
    /// subscribed characteristics, merged into their state. `changes`: the
    /// rows that differ from the previous state's (the list presenter's
    /// `changes`); only they are looked at, O(changed). nil: every row is.
    ///
    /// `emit`, when given, takes the messages of a whole list in slices of
    /// `emitEvery` as they are made (the caller stores each slice before the
    /// next is made), and the rest is returned: at 10 000 devices a first
    /// list's messages all at once were about 4 MB held only to be copied
    /// into the outbound queue.
    public mutating func update(_ list: Loadable<DeviceListPresenter.Rows>, changes: DeviceListPresenter.RowChanges?,
                                gatt: [BluetoothAddress: [Reading]] = [:], now: Date,
                                emitEvery: Int = 512, emit: (([OutgoingMessage]) -> Void)? = nil) -> [OutgoingMessage] {
        guard let changes, case .loaded = list, listLoaded else {
            return update(list, gatt: gatt, now: now, emitEvery: emitEvery, emit: emit)
        }
        var out: [OutgoingMessage] = []
        for row in changes.rows { consider(row, gatt: gatt, now: now, &out) }
        for address in changes.removed.map(\.address).sorted() where onlineAddresses.contains(address) {
            setOffline(address, &out)
        }
        out.append(contentsOf: tick(now: now))
        return out
    }

    /// ``update(_:changes:gatt:now:)`` for devices named by address (a
    /// watched device's GATT readings changed): their rows are looked up in
    /// `list` (O(rows) hash checks, no copying).
    public mutating func update(_ list: Loadable<DeviceListPresenter.Rows>, changed: Set<BluetoothAddress>?,
                                gatt: [BluetoothAddress: [Reading]] = [:], now: Date) -> [OutgoingMessage] {
        guard let changed, case let .loaded(rows) = list else { return update(list, gatt: gatt, now: now) }
        var changes = DeviceListPresenter.RowChanges()
        var present: Set<BluetoothAddress> = []
        for i in rows.indices where changed.contains(rows[i].id.address) {
            changes.rows.append(rows[i])
            present.insert(rows[i].id.address)
        }
        let adapter = rows.first?.id.adapter
        for address in changed.subtracting(present) {
            if let id = devices[address]?.source.id ?? adapter.map({ DeviceID(adapter: $0, address: address) }) { changes.removed.insert(id) }
        }
        return update(list, changes: changes, gatt: gatt, now: now)
    }

    /// A new device-list state, every row looked at.
    /// `emit`: see ``update(_:changes:gatt:now:emitEvery:emit:)``.
    public mutating func update(_ list: Loadable<DeviceListPresenter.Rows>,
                                gatt: [BluetoothAddress: [Reading]] = [:], now: Date,
                                emitEvery: Int = 512, emit: (([OutgoingMessage]) -> Void)? = nil) -> [OutgoingMessage] {
        var out: [OutgoingMessage] = []
        guard case let .loaded(rows) = list else {
            if case .loading = list { return [] }
            // bluetoothd gone, no adapter, adapter off: nothing is heard.
            bluetoothAvailable = false
            listLoaded = false
            for address in onlineAddresses.sorted() { setOffline(address, &out) }
            return out
        }
        bluetoothAvailable = true
        // A first list of thousands of devices: the tables are made at
        // their size once, not grown by doubling (each doubling holds the
        // old table and the new at once, during the start-up peak).
        devices.reserveCapacity(rows.count)
        dueAt.reserveCapacity(rows.count)
        onlineAddresses.reserveCapacity(rows.count)
        var listed: Set<BluetoothAddress> = []
        listed.reserveCapacity(rows.count)
        let slice = max(1, emitEvery)
        for row in rows {
            if consider(row, gatt: gatt, now: now, &out) { listed.insert(row.id.address) }
            if let emit, out.count >= slice {
                emit(out)
                out.removeAll(keepingCapacity: true)
            }
        }
        for address in onlineAddresses.subtracting(listed).sorted() { setOffline(address, &out) }
        listLoaded = true
        out.append(contentsOf: tick(now: now))
        return out
    }

    /// One row: the device's record, online/offline, its discovery configs and
    /// state as the rules say. True when the selection includes it (listed).
    @discardableResult
    private mutating func consider(_ row: DeviceListPresenter.Row, gatt: [BluetoothAddress: [Reading]], now: Date,
                                   _ out: inout [OutgoingMessage]) -> Bool {
        let address = row.id.address
        let extra = gatt[address] ?? []
        guard options.selection.includes(address, decodable: row.format != nil || !extra.isEmpty) else {
            if onlineAddresses.contains(address) { setOffline(address, &out) }
            return false
        }
        var device: Published
        /// Name, format or readings changed (or the device is new).
        var contentChanged = true
        if var known = devices[address] {
            contentChanged = !Self.sameContent(known.source, row) || known.sourceGATT != extra
            known.source = row
            known.sourceGATT = extra
            device = known
        } else {
            device = Published(source: row, gatt: extra)
        }
        if options.fleet != nil, !owned.contains(address) {
            // Another gateway speaks for it: kept current for a takeover, not published.
            devices[address] = device
            return true
        }
        if row.stale {
            if device.online {
                device.online = false
                out.append(options.topics.deviceAvailabilityMessage(address, online: false))
            }
            store(device, at: address)
            return true
        }
        if options.discovery, contentChanged || device.discoveryKeys == nil {
            let record = device.record
            let keys = discoveryKeys(record)
            if device.discoveryKeys != keys {
                out.append(contentsOf: discoveryMessages(record))
                device.discoveryKeys = keys
            }
        }
        if !device.online {
            device.online = true
            out.append(options.topics.deviceAvailabilityMessage(address, online: true))
            out.append(publish(&device, now: now))
        } else {
            let content = device.content
            if device.sentContent == content {
                device.pending = false
            } else if let last = device.lastPublished, now.timeIntervalSince(last) < options.policy.minInterval {
                device.pending = true
            } else {
                out.append(publish(&device, now: now, content: content))
            }
        }
        store(device, at: address)
        return true
    }

    /// Keeps `device` and its due time.
    private mutating func store(_ device: Published, at address: BluetoothAddress) {
        devices[address] = device
        dueAt[address] = device.online ? Self.due(device, policy: options.policy) : nil
        if device.online { onlineAddresses.insert(address) } else { onlineAddresses.remove(address) }
    }

    private mutating func setOffline(_ address: BluetoothAddress, _ out: inout [OutgoingMessage]) {
        devices[address]?.online = false
        dueAt[address] = nil
        onlineAddresses.remove(address)
        out.append(options.topics.deviceAvailabilityMessage(address, online: false))
    }

    /// Publications that became due by `now`: changes held back by the
    /// minimum interval, and heartbeats.
    public mutating func tick(now: Date) -> [OutgoingMessage] {
        var out: [OutgoingMessage] = []
        // Only the due ones are sorted (this runs after every list state).
        let due = dueAt.compactMap { $0.value <= now ? $0.key : nil }
        for address in due.sorted() {
            guard var device = devices[address], device.online else { continue }
            out.append(publish(&device, now: now))
            store(device, at: address)
        }
        return out
    }

    /// When ``tick(now:)`` next has something to do (nil: only a new list state can change anything).
    public var nextDeadline: Date? { dueAt.values.min() }

    /// The state messages of every online device, now (a reconnecting
    /// broker that lost nothing does not need them; a client asking for a
    /// snapshot does).
    public func currentStates(now: Date) -> [OutgoingMessage] {
        devices.keys.sorted().compactMap { address in
            guard let d = devices[address], d.online else { return nil }
            return StatePayload.message(for: d.record, at: now, topics: options.topics, extra: fleetMembers)
        }
    }

    // MARK: - Fleet mode

    /// The fleet gave this gateway `address`: from now on it publishes it
    /// (discovery, `online`, state). `previousState` is the state hash the
    /// previous owner last reported: when it is this gateway's own, the state
    /// Home Assistant holds is current and is not published again.
    public mutating func adopt(_ address: BluetoothAddress, previousState: String?, now: Date) -> [OutgoingMessage] {
        guard options.fleet != nil, !owned.contains(address) else { return [] }
        owned.insert(address)
        guard var device = devices[address], !device.source.stale else { return [] }
        var out: [OutgoingMessage] = []
        if options.discovery {
            let record = device.record
            out.append(contentsOf: discoveryMessages(record))
            device.discoveryKeys = discoveryKeys(record)
        }
        device.online = true
        out.append(options.topics.deviceAvailabilityMessage(address, online: true))
        if let previousState, previousState == stateHash(device) {
            device.sentContent = device.content
            device.sentHash = previousState
            device.lastPublished = now
            device.pending = false
        } else {
            out.append(publish(&device, now: now))
        }
        store(device, at: address)
        return out
    }

    /// Another gateway took `address` over: publish nothing more for it (its
    /// new owner says whether it is online).
    public mutating func release(_ address: BluetoothAddress) {
        guard owned.remove(address) != nil else { return }
        devices[address]?.online = false
        devices[address]?.pending = false
        dueAt[address] = nil
        onlineAddresses.remove(address)
    }

    /// The hash of the state last published for `address` (fleet mode, owned devices).
    public func sentStateHash(_ address: BluetoothAddress) -> String? { devices[address]?.sentHash }

    /// What a fleet state says apart from RSSI, last-seen and the gateway:
    /// name, format, room and readings, hashed (FNV-1a, 64 bits, hex). Two
    /// gateways in the same room hearing the same readings get the same hash.
    func stateHash(_ device: Published) -> String {
        var record = device.record
        record.rssi = nil
        record.lastSeen = nil
        let room = options.fleet.map { [("room", FieldValue.string($0.room))] } ?? []
        let bytes = StatePayload.json(for: record, at: Date(timeIntervalSince1970: 0), extra: room)
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01B3 }
        return String(h, radix: 16)
    }

    // MARK: - Helpers

    /// Fleet mode's members of every state: who published it, and its room.
    private var fleetMembers: [(String, FieldValue)] {
        guard let fleet = options.fleet else { return [] }
        return [("gateway", .string(fleet.gateway)), ("room", .string(fleet.room))]
    }

    /// `content`: the device's content when the caller has it already (the
    /// record and the content are derived from the row each time they are
    /// asked for, so they are asked for once here).
    private mutating func publish(_ device: inout Published, now: Date, content: Content? = nil) -> OutgoingMessage {
        let record = device.record
        device.sentContent = content ?? Self.content(record)
        device.lastPublished = now
        device.pending = false
        if options.fleet != nil { device.sentHash = stateHash(device) }
        var message = StatePayload.message(for: record, at: now, topics: options.topics, extra: fleetMembers,
                                           reusing: &device.reused, shared: &layouts)
        message.qos = 1
        return message
    }

    private static func due(_ device: Published, policy: PublishPolicy) -> Date? {
        guard let last = device.lastPublished else { return nil }
        var due: Date?
        if device.pending { due = last.addingTimeInterval(policy.minInterval) }
        if let heartbeat = policy.heartbeat {
            let beat = last.addingTimeInterval(heartbeat)
            due = due.map { min($0, beat) } ?? beat
        }
        return due
    }

    /// The row as a record (the list's title is the name when there is one),
    /// with GATT readings after the advertised ones.
    static func record(_ row: DeviceListPresenter.Row, extra: [Reading]) -> DeviceRecord {
        let name = row.id.address.isWritten(as: row.title) ? nil : row.title
        var r = DeviceRecord(id: row.id, name: name, rssi: row.rssi, paired: row.paired, connected: row.connected,
                            trusted: row.trusted, format: row.format,
                            // Without GATT readings the row's array itself (shared, not a copy per device).
                            readings: extra.isEmpty ? row.readings : row.readings + extra, lastSeen: row.lastSeen)
        r.profile = row.profile
        return r
    }

    /// Whether two rows give the same content (RSSI, last seen and flags aside).
    static func sameContent(_ a: DeviceListPresenter.Row, _ b: DeviceListPresenter.Row) -> Bool {
        a.title == b.title && a.format == b.format && a.readings == b.readings && a.profile == b.profile
    }

    /// The parts of a state that make it worth publishing again.
    struct Content: Sendable, Equatable {
        var name: String?
        var format: String?
        var readings: [Reading] = []
    }

    /// Non-finite numbers are not published (nor compared: NaN is never
    /// equal to itself, which would make every advertisement a change).
    static func content(_ record: DeviceRecord) -> Content {
        let written = StatePayload.Layout.writable
        let readings = record.readings.allSatisfy(written) ? record.readings : record.readings.filter(written)
        return Content(name: record.name, format: record.format, readings: readings)
    }
}
