import BlueZ
import Locking

/// One local controller as the product shows it: what `bluetoothctl show`
/// prints about it.
public struct AdapterRecord: Sendable, Equatable, Identifiable {
    public let id: AdapterID
    public var address: String?
    /// "public" or "random".
    public var addressType: String?
    /// The system name (pretty hostname by default).
    public var name: String?
    /// The name other devices see.
    public var alias: String?
    public var deviceClass: UInt32?
    public var powered: Bool
    /// "on", "off", "off-enabling", "on-disabling" or "off-blocked" (rfkill).
    public var powerState: String?
    public var discoverable: Bool
    /// Seconds until discoverable turns off (0: never).
    public var discoverableTimeout: UInt32?
    public var pairable: Bool
    /// bluetoothd is discovering on this adapter, for this program or another client.
    public var discovering: Bool
    /// "central", "peripheral", …
    public var roles: [String]
    public var uuids: [String]
    public var modalias: String?

    public init(id: AdapterID, address: String? = nil, addressType: String? = nil, name: String? = nil, alias: String? = nil,
                deviceClass: UInt32? = nil, powered: Bool = false, powerState: String? = nil, discoverable: Bool = false,
                discoverableTimeout: UInt32? = nil, pairable: Bool = false, discovering: Bool = false,
                roles: [String] = [], uuids: [String] = [], modalias: String? = nil) {
        self.id = id
        self.address = address
        self.addressType = addressType
        self.name = name
        self.alias = alias
        self.deviceClass = deviceClass
        self.powered = powered
        self.powerState = powerState
        self.discoverable = discoverable
        self.discoverableTimeout = discoverableTimeout
        self.pairable = pairable
        self.discovering = discovering
        self.roles = roles
        self.uuids = uuids
        self.modalias = modalias
    }

    /// The record of a BlueZ adapter (absent booleans read as false).
    public init(_ adapter: Adapter) {
        self.init(id: adapter.id, address: adapter.address, addressType: adapter.addressType, name: adapter.name,
                  alias: adapter.alias, deviceClass: adapter.deviceClass, powered: adapter.powered ?? false,
                  powerState: adapter.powerState, discoverable: adapter.discoverable ?? false,
                  discoverableTimeout: adapter.discoverableTimeout, pairable: adapter.pairable ?? false,
                  discovering: adapter.discovering ?? false, roles: adapter.roles, uuids: adapter.uuids,
                  modalias: adapter.modalias)
    }
}

/// A passive scan this repository runs on an adapter: advertisement
/// monitors registered with bluetoothd (no discovery, no scan requests).
public struct PassiveScan: Sendable, Equatable {
    /// What the monitors match (see `PassiveScanPatterns`).
    public var patterns: [AdvertisementPattern]
    /// bluetoothd has activated the monitors. False while bluetoothd
    /// restarts or the adapter is away, until they are registered again
    /// (which the repository does by itself).
    public var active: Bool

    public init(patterns: [AdvertisementPattern], active: Bool) {
        self.patterns = patterns
        self.active = active
    }
}

/// Every adapter, at one moment.
public struct AdapterListSnapshot: Sendable, Equatable {
    public var bluetoothdAvailable: Bool
    /// Sorted by id (hci0, hci1, …); empty while bluetoothd is gone.
    public var adapters: [AdapterRecord]
    /// The filter of each discovery session this repository runs, by
    /// adapter. BlueZ cannot be asked for a filter, so only our own are
    /// known: an adapter missing here runs no scan of ours (its
    /// `discovering` may still be true because of another client). Kept
    /// while bluetoothd restarts: the session starts again by itself.
    public var discoveryFilters: [AdapterID: DiscoveryFilter]
    /// The passive scan this repository runs on each adapter (an adapter
    /// missing here has none of ours). Kept while bluetoothd restarts and
    /// while the adapter is powered off: the monitors stay registered.
    public var passiveScans: [AdapterID: PassiveScan]

    public init(bluetoothdAvailable: Bool, adapters: [AdapterRecord] = [], discoveryFilters: [AdapterID: DiscoveryFilter] = [:],
                passiveScans: [AdapterID: PassiveScan] = [:]) {
        self.bluetoothdAvailable = bluetoothdAvailable
        self.adapters = adapters
        self.discoveryFilters = discoveryFilters
        self.passiveScans = passiveScans
    }
}

/// The single source of truth for local adapters. Every operation returns
/// once the published snapshot shows its effect (or throws), so a caller
/// waiting for that snapshot never waits in vain.
public protocol AdapterRepository: Sendable {
    /// The current snapshot first, then every change.
    func snapshots() -> AsyncStream<AdapterListSnapshot>
    func setPowered(_ on: Bool, adapter: AdapterID) async throws(DomainError)
    func setDiscoverable(_ on: Bool, adapter: AdapterID) async throws(DomainError)
    func setPairable(_ on: Bool, adapter: AdapterID) async throws(DomainError)
    /// Starts a discovery session on `adapter` with `filter`, or stops it
    /// (`filter` is then ignored). Starting while a session runs with another
    /// filter restarts it with the new one; with the same filter it does nothing.
    func setScanning(_ on: Bool, adapter: AdapterID, filter: DiscoveryFilter) async throws(DomainError)
    /// Starts passive scanning on `adapter`: advertisement monitors matching
    /// `patterns` (`PassiveScanPatterns.decodable()` for everything the
    /// parsing module decodes), or stops it (`patterns` is then ignored).
    /// Starting with other patterns replaces the running scan; with the same
    /// patterns it does nothing. Independent of `setScanning`: both may run.
    func setPassiveScanning(_ on: Bool, adapter: AdapterID, patterns: [AdvertisementPattern]) async throws(DomainError)
}

extension AdapterRepository {
    /// For repositories without passive scanning (test fakes): refuses to start, stopping is a no-op.
    public func setPassiveScanning(_ on: Bool, adapter: AdapterID, patterns: [AdvertisementPattern]) async throws(DomainError) {
        if on { throw DomainError("cannot start passive scanning on \(adapter.name): not supported here") }
    }
}

/// The adapter repository over a live BlueZ mirror. Republishes on every
/// Adapter1 change and every change of bluetoothd's presence (device
/// traffic is ignored), and owns one discovery session per adapter.
public final class BlueZAdapterRepository: AdapterRepository {
    private let client: BlueZClient
    private let confirmTimeout: Duration
    private let sessions = Lock<[AdapterID: DiscoverySession]>([:])
    /// Passive scans: the monitors and the task republishing on their events.
    private let passive = Lock<[AdapterID: (monitor: AdvertisementMonitor, follower: Task<Void, Never>)]>([:])
    /// Numbers the monitor roots, so that a replacement never waits for the root of the one it replaces.
    private let passiveGeneration = Lock(0)
    private let store = StateStore(AdapterListSnapshot(bluetoothdAvailable: false), bufferLimit: 64)
    private let follower = Lock<Task<Void, Never>?>(nil)

    /// `confirmTimeout`: how long bluetoothd may take to show a change it
    /// accepted before the operation counts as failed.
    public init(client: BlueZClient, confirmTimeout: Duration = .seconds(5)) {
        self.client = client
        self.confirmTimeout = confirmTimeout
        let events = client.mirror.events(where: BlueZAdapterRepository.concernsAdapters)
        refresh()
        let task = Task { [weak self] in
            for await event in events {
                guard let self else { return }
                if BlueZAdapterRepository.concernsAdapters(event) { self.refresh() }
            }
        }
        follower.withLock { $0 = task }
    }

    deinit {
        follower.withLock { $0?.cancel() }
        passive.withLock { p in for (_, entry) in p { entry.follower.cancel() } }
    }

    public func snapshots() -> AsyncStream<AdapterListSnapshot> { store.states() }

    public func setPowered(_ on: Bool, adapter: AdapterID) async throws(DomainError) {
        try await set("power \(on ? "on" : "off") \(adapter.name)", adapter, expecting: { $0.powered == on },
                      stillWrong: "\(adapter.name) is still \(on ? "off" : "on")") { [client] () async throws(BlueZError) in
            try await client.setPowered(on, adapter: adapter)
        }
    }

    public func setDiscoverable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {
        try await set("make \(adapter.name) \(on ? "" : "non-")discoverable", adapter, expecting: { $0.discoverable == on },
                      stillWrong: "\(adapter.name) is still \(on ? "hidden" : "discoverable")") { [client] () async throws(BlueZError) in
            try await client.setDiscoverable(on, adapter: adapter)
        }
    }

    public func setPairable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {
        try await set("make \(adapter.name) \(on ? "" : "non-")pairable", adapter, expecting: { $0.pairable == on },
                      stillWrong: "\(adapter.name) is still \(on ? "not pairable" : "pairable")") { [client] () async throws(BlueZError) in
            try await client.setPairable(on, adapter: adapter)
        }
    }

    public func setScanning(_ on: Bool, adapter: AdapterID, filter: DiscoveryFilter) async throws(DomainError) {
        guard on else {
            let session = sessions.withLock { $0.removeValue(forKey: adapter) }
            refresh()
            await session?.stop()
            return
        }
        if let running = sessions.withLock({ $0[adapter] }), running.filter == filter { return }
        let what = "start scanning on \(adapter.name)"
        try check(adapter, what)
        // A new filter: bluetoothd applies a filter per client, and the
        // session keeps its filter for restarts, so start a new session.
        let old = sessions.withLock { $0.removeValue(forKey: adapter) }
        await old?.stop()
        let session: DiscoverySession
        do {
            session = try await client.discover(adapter: adapter, filter: filter)
        } catch {
            refresh()
            throw DomainError("cannot \(what): \(BlueZAdapterRepository.reason(error))", cause: error)
        }
        // Another call may have started one meanwhile: the newest wins.
        let replaced = sessions.withLock { s -> DiscoverySession? in
            defer { s[adapter] = session }
            return s[adapter]
        }
        refresh()
        await replaced?.stop()
    }

    public func setPassiveScanning(_ on: Bool, adapter: AdapterID, patterns: [AdvertisementPattern]) async throws(DomainError) {
        guard on else {
            let entry = passive.withLock { $0.removeValue(forKey: adapter) }
            entry?.follower.cancel()
            refresh()
            await entry?.monitor.unregister()
            return
        }
        var wanted: [AdvertisementPattern] = []
        for p in patterns where !wanted.contains(p) { wanted.append(p) }
        if let running = passive.withLock({ $0[adapter]?.monitor }), running.patterns == wanted { return }
        let what = "start passive scanning on \(adapter.name)"
        try check(adapter, what)
        let generation = passiveGeneration.withLock { n -> Int in
            n += 1
            return n
        }
        let root = try? AdvertisementMonitor.defaultPath(for: adapter).appending("scan\(generation)")
        let monitor: AdvertisementMonitor
        do {
            monitor = try await AdvertisementMonitor.register(client: client, adapter: adapter, patterns: wanted, path: root)
        } catch {
            refresh()
            throw DomainError("cannot \(what): \(BlueZAdapterRepository.reason(error))", cause: error)
        }
        // bluetoothd's Activate/Release (a restart, the adapter leaving) change `active`.
        let events = monitor.events()
        let follower = Task { [weak self] in
            for await _ in events { self?.refresh() }
        }
        // Another call may have started one meanwhile: the newest wins.
        let replaced = passive.withLock { p -> (monitor: AdvertisementMonitor, follower: Task<Void, Never>)? in
            defer { p[adapter] = (monitor, follower) }
            return p[adapter]
        }
        replaced?.follower.cancel()
        refresh()
        await replaced?.monitor.unregister()
    }

    // MARK: Internals

    /// Sets one property, then waits (on the mirror's signals) until
    /// bluetoothd shows it, and publishes before returning.
    private func set(_ what: String, _ adapter: AdapterID, expecting: @escaping @Sendable (AdapterRecord) -> Bool, stillWrong: String,
                     _ operation: () async throws(BlueZError) -> Void) async throws(DomainError) {
        try check(adapter, what)
        do {
            try await operation()
        } catch {
            throw DomainError("cannot \(what): \(BlueZAdapterRepository.reason(error))", cause: error)
        }
        do {
            try await client.mirror.wait(for: what, timeout: confirmTimeout) { snap in
                guard snap.available, let a = snap.adapters[adapter] else { return true }
                return expecting(AdapterRecord(a))
            }
        } catch {
            refresh()
            throw DomainError("cannot \(what): bluetoothd accepted the request but \(stillWrong)")
        }
        refresh()
        // Gone while we waited: say so rather than pretend it worked.
        try check(adapter, what)
    }

    /// Throws why `adapter` cannot be used right now, phrased for `what`.
    private func check(_ adapter: AdapterID, _ what: String) throws(DomainError) {
        let snap = client.mirror.snapshot()
        guard snap.available else { throw DomainError("cannot \(what): bluetoothd is not running") }
        guard snap.adapters[adapter] != nil else {
            let known = snap.sortedAdapters.map(\.id.name).joined(separator: ", ")
            throw DomainError("cannot \(what): there is no adapter \(adapter.name) (bluetoothd has \(known.isEmpty ? "none" : known))")
        }
    }

    static func reason(_ error: BlueZError) -> String {
        if case .unavailable = error { return "bluetoothd is not running" }
        return error.description
    }

    static func concernsAdapters(_ event: BlueZEvent) -> Bool {
        switch event {
        case .availability, .resynchronized: return true
        case let .interfacesAdded(_, names), let .interfacesRemoved(_, names): return names.contains(BlueZInterface.adapter)
        case .adapterChanged: return true
        case .deviceChanged, .propertiesChanged: return false
        }
    }

    /// Publishes the mirror's adapters. The mirror is read under the store's
    /// lock so that concurrent refreshes publish in order, never an older
    /// snapshot after a newer one.
    private func refresh() {
        var released: [DiscoverySession] = []
        store.update { published in
            let snap = client.mirror.snapshot()
            // Adapters that were on in the last snapshot (present, powered).
            let wereOn = Set(published.bluetoothdAvailable ? published.adapters.filter(\.powered).map(\.id) : [])
            let filters = sessions.withLock { s -> [AdapterID: DiscoveryFilter] in
                // bluetoothd ends every discovery of an adapter that powers
                // off; powering on again does not restart it. Only a power-off:
                // an adapter coming back (bluetoothd restarted, plugged in
                // again) shows up unpowered and is powered a moment later, and
                // its session then starts discovery again by itself.
                for (id, session) in s where snap.adapters[id]?.powered == false && wereOn.contains(id) {
                    released.append(session)
                    s[id] = nil
                }
                return s.mapValues { $0.filter ?? DiscoveryFilter() }
            }
            // Unlike discovery, monitors outlive a power cycle: nothing to release.
            let passiveScans = passive.withLock { p in
                p.mapValues { PassiveScan(patterns: $0.monitor.patterns, active: $0.monitor.isActive) }
            }
            published = AdapterListSnapshot(bluetoothdAvailable: snap.available,
                                            adapters: snap.sortedAdapters.map(AdapterRecord.init),
                                            discoveryFilters: filters, passiveScans: passiveScans)
        }
        for session in released { Task { await session.stop() } }
    }
}
