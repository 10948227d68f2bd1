import BLEParsing
import BlueZ
import Foundation
import Locking
import Vocabulary

/// Device details and operations over a live BlueZ mirror. One task follows
/// the mirror for every subscriber: it keeps a bounded RSSI history per
/// device and republishes a device's details when something under its
/// object path (or bluetoothd's availability) changes.
public final class BlueZDeviceControl: DeviceControl {
    private let client: BlueZClient
    private let now: @Sendable () -> Date
    private let rssiLimit: Int
    private let unwatchedPause: Duration
    private let bindkeys: @Sendable (BluetoothAddress) -> [UInt8]?

    private struct Subscriber {
        let device: DeviceID
        let continuation: AsyncStream<DeviceDetailSnapshot>.Continuation
        var last: DeviceDetailSnapshot?
    }
    private struct State {
        var rssi: [DeviceID: [RSSISample]] = [:]
        var lastSeen: [DeviceID: Date] = [:]
        var decoded: AdvertisementCache
        var subscribers: [UInt64: Subscriber] = [:]
        var next: UInt64 = 0
    }
    private let state: Lock<State>
    /// Subscriptions whose stream ended (`onTermination` may run while
    /// `state` is held, so it only notes them here).
    private let gone = Lock<[UInt64]>([])
    private let follower = Lock<Task<Void, Never>?>(nil)
    private let feed: BlueZChangeFeed

    /// `rssiHistory`: how many RSSI samples are kept per device (0: none —
    /// the gateway shows no history, and 120 samples are ~2 KB per device).
    /// `profiles`: the device profiles in force (the repository's, so that both decode alike).
    /// `unwatchedPause`: while nobody subscribes, how long advertisements
    /// gather between two batches (so a device unwatched keeps at most about
    /// one RSSI sample per pause).
    public init(client: BlueZClient, rssiHistory: Int = 120, bindkeys: @escaping @Sendable (BluetoothAddress) -> [UInt8]? = { _ in nil },
                profiles: ProfileSource = ProfileSource(), unwatchedPause: Duration = .milliseconds(100),
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.state = Lock(State(decoded: AdvertisementCache(profiles: profiles)))
        self.unwatchedPause = max(.zero, unwatchedPause)
        self.client = client
        self.bindkeys = bindkeys
        self.now = now
        self.rssiLimit = max(0, rssiHistory)
        let feed = client.mirror.feed()
        self.feed = feed
        let task = Task { [weak self] in
            // Advertisements come folded per device: one wake-up for all
            // that arrived while the last batch was handled. While nobody
            // watches, they wait `unwatchedPause` in the feed (events do
            // not), and come with the first change after it, or at its end
            // when nothing more comes (the mirror's connection thread keeps
            // that deadline): no timer.
            var from: ContinuousClock.Instant?
            while let batch = await feed.next(advertisementsFrom: from) {
                guard let pause = self?.handle(batch) else { return }
                from = pause > .zero ? .now + pause : nil
            }
        }
        follower.withLock { $0 = task }
    }

    deinit {
        follower.withLock { $0?.cancel() }
        feed.finish()
        state.withLock { s in for (_, sub) in s.subscribers { sub.continuation.finish() } }
    }

    /// Subscribers now (tests: ended ones do not stay).
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    public func details(of id: DeviceID) -> AsyncStream<DeviceDetailSnapshot> {
        let (stream, continuation) = AsyncStream<DeviceDetailSnapshot>.makeStream(bufferingPolicy: .bufferingNewest(16))
        let ended = gone.withLock { g -> [UInt64] in defer { g.removeAll() }; return g }
        let key = state.withLock { s -> UInt64 in
            // Subscriptions that ended go here too, not only at the mirror's
            // next event: an idle bus would keep every ended one otherwise
            // (a gateway answering commands for thousands of addresses).
            for k in ended { s.subscribers[k] = nil }
            s.next += 1
            let first = snapshot(of: id, client.mirror.snapshot(), &s)
            continuation.yield(first)
            s.subscribers[s.next] = Subscriber(device: id, continuation: continuation, last: first)
            return s.next
        }
        continuation.onTermination = { [weak self] _ in self?.gone.withLock { $0.append(key) } }
        // Someone watches now: what the feed holds back comes at once.
        feed.release()
        return stream
    }

    private func apply(_ event: BlueZEvent) {
        let time = now()
        var concerned: DeviceID?
        var everyone = false
        switch event {
        case .availability, .resynchronized:
            everyone = true
        case let .interfacesAdded(path, _), let .interfacesRemoved(path, _):
            concerned = DeviceID(path: path) ?? GATTAttributeID(path: path)?.device
            if concerned == nil { everyone = true }   // an adapter came or went
        case .adapterChanged:
            everyone = true
        case let .propertiesChanged(path, _, _, _):
            concerned = DeviceID(path: path) ?? GATTAttributeID(path: path)?.device
        case let .deviceChanged(id, changed):
            concerned = id
            if rssiLimit > 0, changed.contains(.rssi), let rssi = client.mirror.read({ $0.devices[id]?.rssi }) {
                state.withLock { s in sample(rssi, of: id, at: time, &s) }
            }
            if changed.contains(.rssi) || changed.contains(.manufacturerData) || changed.contains(.serviceData) {
                state.withLock { $0.lastSeen[id] = time }
            }
        }
        var removed: DeviceID?
        if case let .interfacesRemoved(path, names) = event, names.contains(BlueZInterface.device) { removed = DeviceID(path: path) }
        republish(everyone: everyone, removed: removed) { $0 == concerned }
    }

    /// Applies one batch of the feed; returns how long the follower lets the
    /// next advertisements gather. While no detail screen subscribes, what
    /// they change (when each device was last heard, RSSI samples) waits for
    /// a subscriber anyway: `unwatchedPause` lets the feed fold them
    /// meanwhile — a gateway hearing a flood otherwise woke this task for
    /// most advertisements only to note the time (a third of its wake-ups at
    /// 200 changes/s, docs/PERFORMANCE.md "Seventh pass"). Other events
    /// (connections, services, objects added or removed) are not held. A
    /// subscriber's first snapshot is sent at once (`details(of:)`), which
    /// also ends the hold; its device's later changes come batch by batch,
    /// with no pause.
    private func handle(_ batch: BlueZChangeFeed.Batch) -> Duration {
        for event in batch.events { apply(event) }
        if !batch.advertised.isEmpty { heard(batch.advertised) }
        if batch.lost { apply(.resynchronized) }
        return state.withLock { $0.subscribers.isEmpty } ? unwatchedPause : .zero
    }

    /// Advertisements of `ids` (each heard at least once since the last batch).
    private func heard(_ ids: [DeviceID]) {
        let time = now()
        var samples: [(DeviceID, Int16)] = []
        if rssiLimit > 0 {
            samples = client.mirror.read { snap in ids.compactMap { id in snap.devices[id]?.rssi.map { (id, $0) } } }
        }
        state.withLock { s in
            for id in ids { s.lastSeen[id] = time }
            // bluetoothd sends RSSI only when it changed: an advertisement
            // with the same RSSI (only its data changed) is no new sample.
            for (id, rssi) in samples where s.rssi[id]?.last?.value != rssi { sample(rssi, of: id, at: time, &s) }
        }
        if ids.count == 1, let only = ids.first {
            republish(everyone: false, removed: nil) { $0 == only }
        } else {
            let set = Set(ids)
            republish(everyone: false, removed: nil) { set.contains($0) }
        }
    }

    /// Adds one sample to `id`'s history, in place (a copy of the history
    /// per advertisement otherwise), keeping the newest `rssiLimit`.
    private func sample(_ rssi: Int16, of id: DeviceID, at time: Date, _ s: inout State) {
        s.rssi[id, default: []].append(RSSISample(at: time, value: rssi))
        if let n = s.rssi[id]?.count, n > rssiLimit { s.rssi[id]?.removeFirst(n - rssiLimit) }
    }

    /// Sends a fresh snapshot to every subscriber whose device `concerns`
    /// accepts (all with `everyone`) and whose snapshot changed.
    private func republish(everyone: Bool, removed: DeviceID?, concerns: (DeviceID) -> Bool) {
        // A copy of the mirror's tree only while a detail screen listens: held
        // during the mirror's next change, it would make that change copy
        // the whole tree (every device), once per advertisement.
        let listening = state.withLock { s in s.subscribers.values.contains { everyone || concerns($0.device) } }
        let mirror = listening ? client.mirror.snapshot() : BlueZSnapshot()
        state.withLock { s in
            for key in gone.withLock({ g -> [UInt64] in defer { g.removeAll() }; return g }) { s.subscribers[key] = nil }
            if let id = removed {
                s.rssi[id] = nil
                s.lastSeen[id] = nil
                s.decoded.forget(id)
            }
            for key in s.subscribers.keys where listening {
                guard let sub = s.subscribers[key], everyone || concerns(sub.device) else { continue }
                let fresh = snapshot(of: sub.device, mirror, &s)
                guard fresh != sub.last else { continue }
                s.subscribers[key]?.last = fresh
                sub.continuation.yield(fresh)
            }
        }
    }

    private func snapshot(of id: DeviceID, _ snap: BlueZSnapshot, _ s: inout State) -> DeviceDetailSnapshot {
        let availability: Availability
        if !snap.available {
            availability = .bluetoothdGone
        } else if let adapter = snap.adapters[id.adapter] {
            availability = adapter.powered == false ? .adapterOff(adapter.id) : .available
        } else {
            availability = .noAdapter
        }
        guard let d = snap.devices[id] else {
            return DeviceDetailSnapshot(availability: availability)
        }
        var details = DeviceDetails(id: id)
        details.name = d.alias ?? d.name
        details.advertisedName = d.name
        details.addressType = d.addressType
        details.icon = d.icon
        details.appearance = d.appearance
        details.rssi = d.rssi
        details.txPower = d.txPower
        details.paired = d.paired
        details.bonded = d.bonded
        details.trusted = d.trusted
        details.blocked = d.blocked
        details.connected = d.connected
        details.servicesResolved = d.servicesResolved
        details.battery = snap.batteries[id]
        details.uuids = d.uuids
        let decoded = s.decoded.decoded(for: d, bindkey: bindkeys(id.address))
        details.format = decoded.format
        details.readings = decoded.readings
        details.lastSeen = s.lastSeen[id]
        // A profile's characteristics decode with its layouts (docs/PROFILES.md).
        let profile = s.decoded.profiles.profiles.isEmpty ? nil
            : s.decoded.profiles.profiles.profile(for: AdvertisementReadings.advertisement(of: d))
        details.profile = profile?.name
        details.commands = profile?.commands ?? []
        func decode(service: String, characteristic uuid: String, value: [UInt8]?, format: [UInt8]?) -> DecodedValue? {
            if let profile, !profile.gatt.isEmpty, let value, let field = profile.gattField(service: service, characteristic: uuid) {
                do throws(DecodeError) {
                    let model = try profile.decodeCharacteristic(field, value)
                    if !model.readings.isEmpty { return .readings(model.readings) }
                    var dict: [String: String] = [:]
                    for (k, v) in model.fields {
                        if case let .string(text) = v { dict[k] = text } else { dict[k] = v.description }
                    }
                    return .fields(dict, order: model.fields.map(\.0))
                } catch {
                    return .undecodable(error.description)
                }
            }
            return AttributeDecoding.decode(uuid: uuid, value: value, presentationFormat: format)
        }
        let services = snap.gattTree(of: id).map { entry in
            GATTServiceNode(
                id: entry.service.id, uuid: entry.service.uuid, name: AttributeDecoding.name(of: entry.service.uuid),
                primary: entry.service.primary,
                characteristics: entry.characteristics.map { c, descriptors in
                    let format = descriptors.first { BlueZSnapshot.normalizeUUID($0.uuid) == BlueZSnapshot.normalizeUUID("2904") }?.value
                    return GATTCharacteristicNode(
                        id: c.id, uuid: c.uuid, name: AttributeDecoding.name(of: c.uuid), flags: c.flags.sorted(),
                        canRead: c.canRead, canWrite: c.canWrite, canWriteWithoutResponse: c.canWriteWithoutResponse,
                        canNotify: c.canNotify, notifying: c.notifying, value: c.value,
                        decoded: decode(service: entry.service.uuid, characteristic: c.uuid, value: c.value, format: format),
                        descriptors: descriptors.map { d in
                            GATTDescriptorNode(id: d.id, uuid: d.uuid, name: AttributeDecoding.name(of: d.uuid), value: d.value,
                                               decoded: AttributeDecoding.decode(uuid: d.uuid, value: d.value, descriptor: true))
                        })
                })
        }
        return DeviceDetailSnapshot(availability: availability, device: details, services: services, rssiHistory: s.rssi[id] ?? [])
    }

    // MARK: Operations

    private func run<T>(_ what: String, _ id: DeviceID, _ body: () async throws(BlueZError) -> T) async throws(DomainError) -> T {
        do {
            return try await body()
        } catch {
            throw DomainError("\(what) \(id.address) failed: \(error.description)", cause: error)
        }
    }

    /// "char0011": the last path component, as bluetoothctl shows it.
    private func attributeName(_ id: GATTAttributeID) -> Substring {
        id.path.rawValue.split(separator: "/").last ?? ""
    }

    public func connect(_ id: DeviceID) async throws(DomainError) {
        try await run("connecting to", id) { () async throws(BlueZError) in
            try await client.connectResolvingServices(id)
        }
    }

    public func disconnect(_ id: DeviceID) async throws(DomainError) {
        try await run("disconnecting from", id) { () async throws(BlueZError) in try await client.disconnect(id) }
    }

    public func setTrusted(_ on: Bool, _ id: DeviceID) async throws(DomainError) {
        try await run(on ? "trusting" : "untrusting", id) { () async throws(BlueZError) in try await client.setTrusted(on, device: id) }
    }

    public func forget(_ id: DeviceID) async throws(DomainError) {
        try await run("removing", id) { () async throws(BlueZError) in try await client.removeDevice(id) }
    }

    public func read(_ characteristic: GATTAttributeID) async throws(DomainError) -> [UInt8] {
        let value = try await run("reading \(attributeName(characteristic)) of", characteristic.device) { () async throws(BlueZError) in
            try await client.readValue(characteristic)
        }
        // bluetoothd updates the cached Value (PropertiesChanged) before it
        // replies, but the mirror applies signals on its own task: wait for it
        // so the details show what was read. A notification may replace the
        // value meanwhile; then this gives up after a moment.
        try? await client.mirror.wait(for: "the value read", timeout: .seconds(1)) { snapshot in
            snapshot.characteristics[characteristic.path]?.value == value
        }
        return value
    }

    public func write(_ characteristic: GATTAttributeID, _ value: [UInt8], withoutResponse: Bool) async throws(DomainError) {
        try await run("writing \(attributeName(characteristic)) of", characteristic.device) { () async throws(BlueZError) in
            try await client.writeValue(characteristic, value, type: withoutResponse ? .command : .request)
        }
    }

    public func setNotifying(_ on: Bool, _ characteristic: GATTAttributeID) async throws(DomainError) {
        try await run("\(on ? "starting" : "stopping") notifications of \(attributeName(characteristic)) on",
                      characteristic.device) { () async throws(BlueZError) in
            if on { try await client.startNotify(characteristic) } else { try await client.stopNotify(characteristic) }
        }
    }
}
