import BLEParsing
import BlueZ
import Foundation
import Locking
import Vocabulary

/// What the parsing module makes of a device's advertised data
/// (ManufacturerData and ServiceData properties).
public enum AdvertisementReadings {
    /// `bindkey`: the device's key for encrypted formats (BTHome, MiBeacon).
    /// `profiles`: a matching profile decodes the device instead of the built-in decoders.
    public static func decode(_ device: Device, bindkey: [UInt8]? = nil, profiles: ProfileSet = ProfileSet()) -> [AdvertisementModel] {
        return decodeCounting(device, bindkey: bindkey, profiles: profiles).models
    }

    /// What the parsing module sees of a device's advertisements: name,
    /// address, manufacturer and service data, and (`withUUIDs`) its service UUIDs.
    public static func advertisement(of device: Device, withUUIDs: Bool = true) -> Advertisement {
        var adv = Advertisement(localName: device.name)
        adv.address = device.address
        for (company, data) in device.manufacturerData.sorted(by: { $0.key < $1.key }) {
            adv.manufacturerData.append(ManufacturerData(companyID: company, data: data))
        }
        for (uuid, data) in device.serviceData.sorted(by: { $0.key < $1.key }) {
            if let u = try? BluetoothUUID(parsing: uuid) { adv.serviceData.append(ServiceData(uuid: u, data: data)) }
        }
        if withUUIDs { adv.serviceUUIDs = device.uuids.compactMap { try? BluetoothUUID(parsing: $0) } }
        return adv
    }

    /// The models, the decoders that recognised the data but failed on it
    /// (their `DecodeError.context`, for metrics), and the profile that decoded
    /// the device (a profile the user wrote for it wins over a built-in decoder).
    static func decodeCounting(_ device: Device, bindkey: [UInt8]?, profiles: ProfileSet)
        -> (models: [AdvertisementModel], failures: [DecodeError], profile: DeviceProfile?)
    {
        // The UUID list only when a profile may match on it (parsing it costs).
        let adv = advertisement(of: device, withUUIDs: profiles.matchesServices)
        var models: [AdvertisementModel] = []
        var failures: [DecodeError] = []
        var results: [Result<AdvertisementModel, DecodeError>]
        let profile = profiles.isEmpty ? nil : profiles.profile(for: adv)
        if let profile {
            results = []
            ProfileSet([profile]).decode(adv, into: &results)
        } else {
            results = AdvertisementDecoder.decode(adv, bindkey: bindkey)
        }
        for result in results {
            switch result {
            case let .success(model): models.append(model)
            case let .failure(error): failures.append(error)
            }
        }
        return (models, failures, profile)
    }
}

/// Counters a device repository keeps for monitoring (the gateway's `/metrics`).
public struct DeviceRepositoryStatistics: Sendable, Equatable {
    /// Advertisement events seen (RSSI, manufacturer or service data changed, or a device appeared).
    public var advertisements: UInt64 = 0
    /// Advertisement payloads a decoder recognised but could not decode, by decoder.
    public var decodeErrors: [String: UInt64] = [:]
    /// The last of them, by decoder: the device and what was wrong.
    public var lastDecodeErrors: [String: String] = [:]
    /// Advertisements folded into a later one of the same device before a
    /// snapshot was published (under a flood the latest of each device wins).
    public var coalesced: UInt64 = 0
    /// Times bluetoothd's events came faster than the repository took them,
    /// events were dropped, and the device list was read again whole.
    public var resynchronizations: UInt64 = 0
    public init() {}
}

/// What a device's advertisements decode to, as records carry it: the first
/// decoder's format name and the readings of every decoder, in one array.
struct DecodedAdvertisement: Sendable {
    var format: String?
    var readings: [Reading] = []
    /// The profile that describes the device (its format even when it advertises no readings).
    var profile: String?

    init(_ models: [AdvertisementModel], profile: DeviceProfile? = nil) {
        self.profile = profile?.name
        format = models.first?.formatName ?? profile?.formatName
        // One model (the usual case): its own array, not a copy, so the
        // cache and every record built from it share one buffer.
        readings = models.count == 1 ? models[0].readings : models.flatMap(\.readings)
    }
}

/// Decoded advertisements per device, with the data and key they came from:
/// a flood of RSSI changes must not decode the same bytes again, and a
/// record rebuilt from unchanged data (an RSSI change, a whole refresh)
/// shares the cached readings instead of holding a copy of its own. Only
/// the format and readings are kept, not the decoders' models: records
/// need nothing else, and a model per device was a second copy of them.
struct AdvertisementCache {
    private var entries: [DeviceID: (manufacturer: [UInt16: [UInt8]], service: [String: [UInt8]], key: [UInt8]?, profiles: UInt64,
                                     decoded: DecodedAdvertisement)] = [:]
    /// The profiles in force (every entry decoded with another generation is stale).
    let profiles: ProfileSource

    init(profiles: ProfileSource = ProfileSource()) { self.profiles = profiles }

    var count: Int { entries.count }
    /// Decode failures by decoder, counted once per distinct payload.
    private(set) var failures: [String: UInt64] = [:]
    /// The last failure of each decoder, as a sentence (for the log; one per
    /// decoder or profile, so bounded like `failures`).
    private(set) var lastFailure: [String: String] = [:]

    /// `device`'s decoded advertisements, decoding only when its data or key changed.
    mutating func decoded(for device: Device, bindkey: [UInt8]?) -> DecodedAdvertisement {
        let (generation, set) = profiles.current
        if let cached = entries[device.id], cached.manufacturer == device.manufacturerData,
           cached.service == device.serviceData, cached.key == bindkey, cached.profiles == generation {
            return cached.decoded
        }
        let (models, failed, profile) = AdvertisementReadings.decodeCounting(device, bindkey: bindkey, profiles: set)
        for error in failed {
            failures[error.context, default: 0] += 1
            lastFailure[error.context] = "\(device.address): \(error.description)"
        }
        let fresh = DecodedAdvertisement(models, profile: profile)
        entries[device.id] = (device.manufacturerData, device.serviceData, bindkey, generation, fresh)
        return fresh
    }

    mutating func forget(_ id: DeviceID) { entries[id] = nil }

    /// Makes room for `count` devices at once (a whole list), instead of
    /// growing the table by doubling while it is decoded.
    mutating func reserve(_ count: Int) { entries.reserveCapacity(count) }

    /// Forgets every device not in `present` (bluetoothd removed them).
    mutating func keep(only present: Set<DeviceID>) { entries = entries.filter { present.contains($0.key) } }
}

/// When a device was last heard: on the wall clock (shown, published) and on
/// the boot-time clock (stale and expiry times).
private struct Heard {
    var date: Date
    var uptime: TimeInterval
}

/// The device repository over a live BlueZ mirror: bluetoothd's tree plus
/// decoded advertisements.
///
/// Cost per advertisement: O(1). An advertisement (RSSI, manufacturer or
/// service data of a listed device) rebuilds that device's record in place
/// and marks it changed; snapshots are published at most once per
/// `publishInterval` (the first change after a quiet spell at once, the rest
/// together at the end of the interval), each naming the devices that
/// changed. So a flood of advertisements costs each consumer one snapshot per
/// interval, with the latest record of every device (coalescing, counted in
/// ``DeviceRepositoryStatistics/coalesced``), whatever the rate; anything else
/// (a device added or removed, availability, scanning) is published at once
/// as a whole.
public final class BlueZDeviceRepository: DeviceRepository {
    private let client: BlueZClient
    private let adapterName: String?
    /// `adapterName` as an id, once (``availability(_:)`` runs for every
    /// advertisement); nil when none is named or the name is not one.
    private let adapterID: AdapterID?
    private let now: @Sendable () -> Date
    /// At most one snapshot per this interval for advertisement changes.
    public let publishInterval: Duration

    private struct State {
        /// When each device was last heard, on the wall clock and on the
        /// boot-time clock (`DeviceRecord.lastSeen` and `.heard`): set
        /// together, so one table (one key per device, not two).
        var heard: [DeviceID: Heard] = [:]
        var session: DiscoverySession?
        var decoded: AdvertisementCache
        var advertisements: UInt64 = 0
        /// The records as they are now (published or pending), and where each device is among them.
        var records = ChunkedArray<DeviceRecord>()
        var index: [DeviceID: Int] = [:]
        var scanning = false
        var availability: Availability = .bluetoothdGone
        /// The version of the last snapshot published.
        var version: UInt64 = 0
        /// Devices changed since that snapshot, waiting for the next one.
        var dirty: Set<DeviceID> = []
        /// Changes folded into a later one of the same device before it was published.
        var coalesced: UInt64 = 0
        /// Times the mirror dropped events for a full buffer and the list was read again whole.
        var eventsLost: UInt64 = 0
        /// The next snapshot is read whole from the mirror (events were lost).
        var resyncPending = false
        var flushScheduled = false
        var lastFlush: ContinuousClock.Instant?
    }
    private let state: Lock<State>
    private let clock = ContinuousClock()
    private let store = StateStore(DeviceListSnapshot(availability: .bluetoothdGone), bufferLimit: 64)
    /// The version of the snapshot in `store` (``versions()``).
    private let version = StateStore(UInt64(0), bufferLimit: 1)
    private let follower = Lock<Task<Void, Never>?>(nil)
    private let feed: BlueZChangeFeed

    private let memory: [DeviceID: RememberedDevice]
    private let bindkeys: @Sendable (BluetoothAddress) -> [UInt8]?
    private let scanner: (any AdapterRepository)?
    /// Only devices offering one of these services (lower-case 128-bit
    /// UUIDs), in their UUID lists or as service data; empty: every device.
    private let services: Set<String>

    /// `remembered`: what the database knows (ReadingStore.rememberedDevices),
    /// shown for a device bluetoothd knows until it is heard again.
    /// `bindkeys`: each device's key for encrypted advertisements (read at
    /// every decode, so a key added in the settings applies at once).
    public init(client: BlueZClient, adapter: String? = nil, remembered: [RememberedDevice] = [],
                bindkeys: @escaping @Sendable (BluetoothAddress) -> [UInt8]? = { _ in nil },
                scanner: (any AdapterRepository)? = nil, services: Set<String> = [],
                publishInterval: Duration = .milliseconds(25), profiles: ProfileSource = ProfileSource(),
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.state = Lock(State(decoded: AdvertisementCache(profiles: profiles)))
        self.publishInterval = publishInterval
        self.services = Set(services.map(BlueZSnapshot.normalizeUUID))
        self.client = client
        self.bindkeys = bindkeys
        self.scanner = scanner
        self.memory = Dictionary(remembered.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        self.adapterName = adapter
        self.adapterID = adapter.flatMap { try? AdapterID(name: $0) }
        self.now = now
        let feed = client.mirror.feed()
        self.feed = feed
        refresh(changed: [])
        let task = Task { [weak self] in
            // One wake-up per batch of changes, not per advertisement: while
            // a snapshot is due later, the feed holds the advertisements that
            // arrive meanwhile (one entry per device) and hands them over
            // with the first change after it is due — or, when none comes,
            // half an interval later (the mirror's connection thread keeps
            // that deadline: no timer per batch, and during a flood no
            // wake-up of its own either). Events still come at once.
            while let first = await feed.next() {
                guard let self else { return }
                self.apply(first)
                while let due = self.scheduledFlush() {
                    if ContinuousClock.now >= due {
                        self.flush()
                        continue
                    }
                    guard let batch = await feed.next(advertisementsFrom: due, wakeAtEnd: true,
                                                      atTheLatest: due + self.publishInterval / 2) else { return }
                    self.apply(batch)
                }
            }
        }
        follower.withLock { $0 = task }
    }

    deinit {
        follower.withLock { $0?.cancel() }
        feed.finish()
    }

    /// One batch of the mirror's changes: an advertisement rebuilds only its
    /// device's record; anything else (a connection, a device added or
    /// removed, the adapter) reads the list whole, once per batch; lost
    /// events, with the next snapshot.
    private func apply(_ batch: BlueZChangeFeed.Batch) {
        var touched: [DeviceID] = []
        var whole = false
        if batch.lost {
            // Events lost to a full list: what they said is in the mirror's tree.
            state.withLock { $0.eventsLost &+= 1 }
            whole = true
        }
        if batch.folded > 0 {
            // Heard, but a later advertisement of the same device came before we looked.
            state.withLock { s in
                s.coalesced &+= UInt64(batch.folded)
                s.advertisements &+= UInt64(batch.folded)
            }
        }
        for event in batch.events {
            whole = true
            if case let .deviceChanged(id, changed) = event,
               changed.values.keys.contains(where: Self.advertisedContent.contains) {
                touched.append(id)   // heard, and something else changed too
            } else if case let .interfacesAdded(path, names) = event, names.contains(BlueZInterface.device),
                      let id = DeviceID(path: path) {
                touched.append(id)
            }
        }
        for id in batch.advertised {
            if whole || !refreshOne(id) {
                whole = true
                touched.append(id)
            }
        }
        guard whole else { return }
        if batch.lost {
            // Heard now; the list is read whole with the next snapshot (at
            // most one per interval: under a flood that outruns us, not a
            // whole rebuild per batch).
            let time = now(), uptime = BootClock.seconds()
            state.withLock { s in
                for id in touched {
                    s.heard[id] = Heard(date: time, uptime: uptime)
                }
                s.advertisements &+= UInt64(touched.count)
                s.resyncPending = true
            }
            requestFlush()
        } else {
            // At once, as a device that appears shows its first advertisement.
            refresh(changed: touched)
        }
    }

    public func snapshots() -> AsyncStream<DeviceListSnapshot> { store.states() }

    /// The current snapshot's version, then the newest one each time the
    /// consumer asks again (the ones in between are skipped). For consumers
    /// that sample, such as metrics: none wakes them while they are not
    /// waiting, and what waits for them is a number — a snapshot held that
    /// long would keep the records it shares alive, and make the next
    /// changes copy them.
    public func versions() -> AsyncStream<UInt64> { version.states(coalescing: { _, newer in newer }) }

    /// The snapshot published last.
    public var current: DeviceListSnapshot { store.state }

    /// Advertisement and decode-failure counts since this repository started.
    public var statistics: DeviceRepositoryStatistics {
        state.withLock { s in
            var out = DeviceRepositoryStatistics()
            out.advertisements = s.advertisements
            out.decodeErrors = s.decoded.failures
            out.lastDecodeErrors = s.decoded.lastFailure
            out.coalesced = s.coalesced
            out.resynchronizations = s.eventsLost
            return out
        }
    }

    /// With a `scanner` (the adapter repository), scanning is its one
    /// discovery session per adapter: bluetoothd keeps one discovery and one
    /// filter per client connection, so two owners on one connection would
    /// replace each other's filter and stop each other's scan. The list's
    /// toggle then keeps whatever filter the adapters screen applied.
    public func setScanning(_ on: Bool) async throws(DomainError) {
        if let scanner {
            let adapter: Adapter
            do { adapter = try client.adapter(adapterName) } catch { throw DomainError(error.description, cause: error) }
            var filter = DiscoveryFilter(transport: .le)
            for await current in scanner.snapshots() {
                if let running = current.discoveryFilters[adapter.id] { filter = running }
                break
            }
            try await scanner.setScanning(on, adapter: adapter.id, filter: filter)
            return
        }
        if on {
            guard state.withLock({ $0.session == nil }) else { return }
            let adapter: Adapter
            do { adapter = try client.adapter(adapterName) } catch { throw DomainError(error.description, cause: error) }
            do {
                let session = try await client.discover(adapter: adapter.id, filter: DiscoveryFilter(transport: .le))
                state.withLock { $0.session = session }
            } catch {
                throw DomainError("cannot start scanning: \(error.description)", cause: error)
            }
        } else {
            let session = state.withLock { s -> DiscoverySession? in
                defer { s.session = nil }
                return s.session
            }
            await session?.stop()
        }
    }

    private func availability(_ snap: BlueZSnapshot) -> (Availability, Adapter?) {
        guard snap.available else { return (.bluetoothdGone, nil) }
        let adapter: Adapter?
        if let adapterID { adapter = snap.adapters[adapterID] } else { adapter = snap.sortedAdapters.first }
        guard let adapter else { return (.noAdapter, nil) }
        if adapter.powered == false { return (.adapterOff(adapter.id), adapter) }
        return (.available, adapter)
    }

    /// What makes a change carry an advertisement (TxPower alone does not);
    /// one of only advertisement properties comes folded from the feed.
    static let advertisedContent = DeviceProperty.names([.rssi, .manufacturerData, .serviceData])

    /// Rebuilds only `id`'s record and marks it changed for the next
    /// snapshot. False when that is not enough (availability or scanning
    /// changed, the device is not in the list): the caller then refreshes
    /// everything. Reads the mirror under its lock without keeping its tree,
    /// so the mirror's next change does not copy it.
    private func refreshOne(_ id: DeviceID) -> Bool {
        let found = client.mirror.read { snap -> (Device, Bool)? in
            let (availability, adapter) = availability(snap)
            guard availability == .available, let adapter, let device = snap.devices[id], device.id.adapter == adapter.id else { return nil }
            return (device, adapter.discovering == true)
        }
        guard let (device, discovering) = found else { return false }
        if !offersService(device) {
            // Filtered out and not listed: nothing to do. Listed: it stopped
            // offering the service, so the whole refresh takes it out.
            return state.withLock { $0.index[id] == nil }
        }
        let time = now(), uptime = BootClock.seconds()
        let publishNow: Bool? = state.withLock { s in
            guard let index = s.index[id], index < s.records.count, s.records[index].id == id,
                  s.availability == .available, s.scanning == discovering else { return nil }
            s.heard[id] = Heard(date: time, uptime: uptime)
            s.advertisements &+= 1
            let decoded = s.decoded.decoded(for: device, bindkey: bindkeys(device.address))
            // In place: the list is shared with the last snapshot until its
            // first change after a publication, which then copies one chunk.
            s.records[index] = makeRecord(device, decoded, lastSeen: time, heard: uptime)
            if !s.dirty.insert(id).inserted { s.coalesced &+= 1 }
            return flushesNow(&s)
        }
        guard let publishNow else { return false }
        if publishNow { flush() }
        return true
    }

    /// The service filter (`services`), applied here rather than in
    /// bluetoothd: its discovery filter matches UUIDs only against the
    /// advertised service lists (src/adapter.c), so a device that carries a
    /// service only as service data, as BTHome (fcd2) does, would never be
    /// reported.
    private func offersService(_ device: Device) -> Bool {
        if services.isEmpty { return true }
        if device.uuids.contains(where: { services.contains($0.lowercased()) }) { return true }
        return device.serviceData.keys.contains(where: { services.contains($0.lowercased()) })
    }

    /// Whether a change just made is published now (true) or with the
    /// snapshot the follower's loop publishes when due, which this schedules
    /// unless one is scheduled already (under the state's lock).
    private func flushesNow(_ s: inout State) -> Bool {
        if s.flushScheduled { return false }
        if let last = s.lastFlush, clock.now < last + publishInterval {
            s.flushScheduled = true
            return false
        }
        return true
    }

    /// Asks for the next snapshot (a resynchronisation is pending).
    private func requestFlush() { if state.withLock({ flushesNow(&$0) }) { flush() } }

    /// When the snapshot the last change scheduled is due (nil: none is):
    /// the follower's loop sleeps until then and publishes it.
    private func scheduledFlush() -> ContinuousClock.Instant? {
        state.withLock { s in
            guard s.flushScheduled || s.resyncPending else { return nil }
            return (s.lastFlush ?? clock.now) + publishInterval
        }
    }

    /// Publishes the pending changes as one snapshot (nothing when none is pending).
    private func flush() {
        let resync = state.withLock { s -> Bool in
            guard s.resyncPending else { return false }
            s.resyncPending = false
            s.flushScheduled = false
            return true
        }
        if resync {
            refresh(changed: [])
            return
        }
        state.withLock { s in
            s.flushScheduled = false
            guard !s.dirty.isEmpty else { return }
            publish(&s, changed: s.dirty)
        }
    }

    /// The next snapshot from the state's records (under the state's lock, so
    /// snapshots reach the store in version order); `changed` nil: a whole one.
    private func publish(_ s: inout State, changed: Set<DeviceID>?) {
        s.version &+= 1
        s.lastFlush = clock.now
        s.dirty = []
        let snapshot = DeviceListSnapshot(availability: s.availability, scanning: s.scanning, records: s.records,
                                          version: s.version, changed: changed, positions: s.index)
        store.update { $0 = snapshot }
        version.update { $0 = snapshot.version }
    }

    private func makeRecord(_ d: Device, _ decoded: DecodedAdvertisement, lastSeen: Date?, heard: TimeInterval?) -> DeviceRecord {
        var r = DeviceRecord(id: d.id, name: d.alias ?? d.name, rssi: d.rssi, paired: d.paired, connected: d.connected,
                             trusted: d.trusted, format: decoded.format,
                             readings: decoded.readings, lastSeen: lastSeen, heard: heard)
        r.profile = decoded.profile
        if let m = memory[d.id] {
            r.firstSeen = m.firstSeen
            if r.lastSeen == nil {
                // Not heard this session: what we remember, marked as such.
                r.lastSeen = m.lastSeen
                r.name = r.name ?? m.name
                if r.readings.isEmpty {
                    r.format = r.format ?? m.format
                    r.readings = m.latest
                    r.remembered = true
                }
            }
        }
        return r
    }

    /// Decodes every device again (the profiles in force changed): the next
    /// snapshot names the devices whose readings differ.
    public func redecode() { refresh(changed: []) }

    private func refresh(changed: [DeviceID]) {
        // What it needs, read under the mirror's lock; the tree itself is not
        // kept: while a caller holds it, the mirror's next change copies the
        // whole device table (at 10 000 devices, 3 MB per copy).
        let (availability, adapter, devices) = client.mirror.read { snap -> (Availability, Adapter?, [Device]) in
            let (usable, adapter) = self.availability(snap)
            var devices = adapter.map { snap.devices(on: $0.id) } ?? []
            if !services.isEmpty { devices.removeAll { !offersService($0) } }
            return (usable, adapter, devices)
        }
        if case .adapterOff = availability {
            // Powered off while it was on (the user, another client):
            // bluetoothd ended discovery with the power and does not resume
            // it, so our session is over (the next scan toggle starts a new
            // one). Not when the adapter is only coming back: a returning
            // bluetoothd or a plugged-in adapter shows up unpowered and is
            // powered a moment later, and the session starts discovery again
            // then (DiscoverySession), as `scan` does.
            let ended = state.withLock { s -> DiscoverySession? in
                guard s.availability == .available else { return nil }
                defer { s.session = nil }
                return s.session
            }
            if let ended { Task { await ended.stop() } }
        }
        let time = now(), uptime = BootClock.seconds()
        let heard = state.withLock { s -> [DeviceID: Heard] in
            // Room for every listed device now (each is heard soon), while
            // the table is not shared (the copy returned below shares it).
            if s.heard.capacity < devices.count { s.heard.reserveCapacity(devices.count) }
            for id in changed { s.heard[id] = Heard(date: time, uptime: uptime) }
            s.advertisements &+= UInt64(changed.count)
            return s.heard
        }
        let decoded: [DecodedAdvertisement] = state.withLock { s in
            if s.decoded.count > devices.count || s.heard.count > devices.count {
                // Devices bluetoothd removed (a phone's rotated random
                // address, a temporary device timed out): forget their
                // decoded data and when they were heard, or these tables
                // grow with every address ever heard.
                let present = Set(devices.map(\.id))
                s.decoded.keep(only: present)
                s.heard = s.heard.filter { present.contains($0.key) }
            }
            s.decoded.reserve(devices.count)
            return devices.map { d in s.decoded.decoded(for: d, bindkey: bindkeys(d.address)) }
        }
        // Straight into the chunked list (no array of them first).
        let records = ChunkedArray(zip(devices, decoded).lazy.map { d, decoded in
            let h = heard[d.id]
            return self.makeRecord(d, decoded, lastSeen: h?.date, heard: h?.uptime)
        })
        state.withLock { s in
            let scanning = adapter?.discovering == true
            // The same devices in the same order as the last snapshot (a
            // resynchronisation under a flood, usually): name the ones whose
            // records differ, so that consumers stay incremental instead of
            // rebuilding every row. Anything else: a whole snapshot.
            var changed: Set<DeviceID>? = nil
            if s.availability == availability, s.scanning == scanning, s.records.count == records.count {
                var ids: Set<DeviceID> = []
                var sameDevices = true
                for (i, r) in records.enumerated() {
                    let old = s.records[i]
                    guard old.id == r.id else { sameDevices = false; break }
                    if old != r { ids.insert(r.id) }
                }
                // `dirty`: changed since the last snapshot but not published yet.
                if sameDevices { changed = ids.union(s.dirty) }
            }
            s.records = records
            var index: [DeviceID: Int] = [:]
            index.reserveCapacity(records.count)
            for (i, r) in records.enumerated() where index[r.id] == nil { index[r.id] = i }
            s.index = index
            s.scanning = scanning
            s.availability = availability
            // At once: it carries every pending change too.
            s.resyncPending = false
            publish(&s, changed: changed)
        }
    }
}
