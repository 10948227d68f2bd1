import DBus
import Locking

// Passive scanning through advertisement monitors
// (doc/org.bluez.AdvertisementMonitorManager.rst, doc/org.bluez.AdvertisementMonitor.rst).
//
// A client exports an ObjectManager at a root path with
// org.bluez.AdvertisementMonitor1 objects below it and calls
// AdvertisementMonitorManager1.RegisterMonitor(root) on the adapter.
// bluetoothd then scans passively (no scan requests, so no scan responses)
// and reports devices whose advertising data match a pattern: their Device1
// objects appear and update as during discovery, and DeviceFound/DeviceLost
// are called on the monitor.
//
// What bluetoothd does beyond the documents (src/adv_monitor.c): it replies
// to RegisterMonitor once it has read the root's objects; a monitor it
// cannot use (Type, RSSI settings or Patterns refused, or more than 16
// patterns for the kernel) is not an error reply but a Release() call
// instead of Activate(). The manager interface exists only when bluetoothd
// runs with its experimental interfaces (`bluetoothd --experimental`, or
// `Experimental = true` in /etc/bluetooth/main.conf) on a kernel that has
// the advertisement monitor commands.

/// One pattern of an advertisement monitor (AdvertisementMonitor1 Patterns,
/// `a(yyay)`): the advertisement matches when one of its AD structures of
/// type `adType` holds `content` at `startPosition` of its data (the bytes
/// after the type byte).
public struct AdvertisementPattern: Sendable, Hashable, CustomStringConvertible {
    public var startPosition: UInt8
    public var adType: UInt8
    public var content: [UInt8]

    public init(startPosition: UInt8 = 0, adType: UInt8, content: [UInt8]) {
        self.startPosition = startPosition
        self.adType = adType
        self.content = content
    }

    /// AD types (Bluetooth Assigned Numbers, "Common Data Types").
    public enum ADType {
        public static let completeLocalName: UInt8 = 0x09
        /// Service Data - 16-bit UUID: the UUID (little-endian), then the data.
        public static let serviceData16: UInt8 = 0x16
        /// Manufacturer Specific Data: the company id (little-endian), then the data.
        public static let manufacturerData: UInt8 = 0xFF
    }

    /// Service data for a 16-bit UUID, e.g. 0xFCD2 (BTHome): AD type 0x16
    /// with the UUID little-endian at position 0.
    public static func serviceData(uuid16: UInt16) -> AdvertisementPattern {
        AdvertisementPattern(adType: ADType.serviceData16, content: [UInt8(uuid16 & 0xFF), UInt8(uuid16 >> 8)])
    }

    /// Manufacturer data of a company, e.g. 0x0499 (Ruuvi): AD type 0xFF
    /// with the company id little-endian at position 0.
    public static func manufacturerData(companyID: UInt16) -> AdvertisementPattern {
        AdvertisementPattern(adType: ADType.manufacturerData, content: [UInt8(companyID & 0xFF), UInt8(companyID >> 8)])
    }

    /// A Complete Local Name (AD type 0x09) starting with `prefix` (bytes
    /// compared as they are: case matters).
    public static func localName(prefix: String) -> AdvertisementPattern {
        AdvertisementPattern(adType: ADType.completeLocalName, content: Array(prefix.utf8))
    }

    /// One pattern per service-data UUID, company id and local-name prefix,
    /// without duplicates, in a stable order (service data, manufacturer
    /// data, names; each sorted).
    public static func matching(serviceDataUUIDs: some Sequence<UInt16>, companyIDs: some Sequence<UInt16>,
                                localNamePrefixes: [String] = []) -> [AdvertisementPattern] {
        Set(serviceDataUUIDs).sorted().map { serviceData(uuid16: $0) }
            + Set(companyIDs).sorted().map { manufacturerData(companyID: $0) }
            + Set(localNamePrefixes).sorted().map { localName(prefix: $0) }
    }

    /// Legacy advertising data holds at most 31 bytes; bluetoothd refuses
    /// patterns that reach beyond them.
    public static let maxDataLength = 31

    /// Throws ``BlueZError/invalidArgument(_:)`` for what bluetoothd refuses:
    /// empty content, content reaching past 31 bytes, an AD type that is not
    /// assigned (0x01…0x3D and 0xFF are).
    public func validate() throws(BlueZError) {
        guard !content.isEmpty else { throw .invalidArgument("pattern \(self) has no content") }
        guard Int(startPosition) + content.count <= Self.maxDataLength else {
            throw .invalidArgument("pattern \(self) reaches past the \(Self.maxDataLength) bytes of advertising data")
        }
        guard (0x01...0x3D).contains(adType) || adType == 0xFF else {
            throw .invalidArgument("pattern \(self): AD type 0x\(hex(adType)) is not an assigned AD type (0x01…0x3D, 0xFF)")
        }
    }

    var dbusValue: DBusValue { .structure([.byte(startPosition), .byte(adType), .bytes(content)]) }

    /// "type 0x16 at 0: d2fc".
    public var description: String {
        "type 0x\(hex(adType)) at \(startPosition): \(content.map(hex).joined())"
    }
}

private func hex(_ b: UInt8) -> String {
    let s = String(b, radix: 16)
    return s.count == 1 ? "0" + s : s
}

/// The optional RSSI settings of a monitor. Left out (nil), bluetoothd
/// reports every matching advertisement; with thresholds it reports a device
/// found once it stays above `highThreshold` for `highTimeout` seconds and
/// lost after `lowTimeout` seconds below `lowThreshold` (or unheard).
public struct AdvertisementMonitorRSSI: Sendable, Equatable {
    /// dBm, -127…20.
    public var lowThreshold: Int16?
    /// dBm, -127…20, not below `lowThreshold`.
    public var highThreshold: Int16?
    /// Seconds, 1…300.
    public var lowTimeout: UInt16?
    /// Seconds, 1…300.
    public var highTimeout: UInt16?
    /// 0: every advertisement; 255: only the first after being found;
    /// 1…254: one per N × 100 ms.
    public var samplingPeriod: UInt16?

    public init(lowThreshold: Int16? = nil, highThreshold: Int16? = nil, lowTimeout: UInt16? = nil, highTimeout: UInt16? = nil,
                samplingPeriod: UInt16? = nil) {
        self.lowThreshold = lowThreshold
        self.highThreshold = highThreshold
        self.lowTimeout = lowTimeout
        self.highTimeout = highTimeout
        self.samplingPeriod = samplingPeriod
    }

    /// The ranges of doc/org.bluez.AdvertisementMonitor.rst.
    public func validate() throws(BlueZError) {
        for (name, v) in [("low", lowThreshold), ("high", highThreshold)] {
            if let v, !(-127...20).contains(v) { throw .invalidArgument("RSSI \(name) threshold \(v) dBm is outside -127…20") }
        }
        if let low = lowThreshold, let high = highThreshold, high < low {
            throw .invalidArgument("RSSI high threshold \(high) dBm is below the low threshold \(low) dBm")
        }
        for (name, v) in [("low", lowTimeout), ("high", highTimeout)] {
            if let v, !(1...300).contains(v) { throw .invalidArgument("RSSI \(name) timeout \(v) s is outside 1…300") }
        }
        if let samplingPeriod, samplingPeriod > 255 { throw .invalidArgument("RSSI sampling period \(samplingPeriod) is above 255") }
    }

    var properties: [String: DBusValue] {
        var p: [String: DBusValue] = [:]
        if let lowThreshold { p["RSSILowThreshold"] = .int16(lowThreshold) }
        if let highThreshold { p["RSSIHighThreshold"] = .int16(highThreshold) }
        if let lowTimeout { p["RSSILowTimeout"] = .uint16(lowTimeout) }
        if let highTimeout { p["RSSIHighTimeout"] = .uint16(highTimeout) }
        if let samplingPeriod { p["RSSISamplingPeriod"] = .uint16(samplingPeriod) }
        return p
    }
}

/// What bluetoothd tells a monitor.
public enum AdvertisementMonitorEvent: Sendable, Equatable {
    /// The monitor is in use: matching devices are reported from now on.
    case activated(monitor: ObjectPath)
    /// bluetoothd dropped the monitor: it refused it, the monitor was
    /// unregistered, or the adapter went away.
    case released(monitor: ObjectPath)
    /// A device matching the monitor is in range. Without RSSI settings
    /// bluetoothd may say so on every matching advertisement.
    case deviceFound(DeviceID, monitor: ObjectPath)
    /// A device found before is out of range or silent.
    case deviceLost(DeviceID, monitor: ObjectPath)
}

/// Passive scanning: advertisement monitors exported on the client's
/// connection and registered with bluetoothd on one adapter. The
/// registration is this object: ``unregister()`` or releasing it
/// unregisters. When bluetoothd restarts (or the adapter comes back), the
/// monitors are registered again.
///
/// Patterns are split into monitors of at most
/// ``maxPatternsPerMonitor``: bluetoothd 5.66 corrupts its heap, and soon
/// aborts, on a monitor of 8 or more (see there).
public final class AdvertisementMonitor: Sendable {
    /// Patterns we put in one monitor. The kernel takes 16
    /// (HCI_MAX_ADV_MONITOR_NUM_PATTERNS), but bluetoothd 5.66 computes the
    /// length of its Add Adv Patterns Monitor command in one byte
    /// (`uint8_t cp_len = 1 + 34 × n` in src/adv_monitor.c): from 8 patterns
    /// on the length wraps, the buffer it allocates is too small for the
    /// patterns it copies into it, the kernel refuses the command (0x0d,
    /// Invalid Parameters) and bluetoothd aborts with a corrupted heap soon
    /// after. Seen on the real-BlueZ tier; 7 × 34 + 1 = 239 still fits.
    public static let maxPatternsPerMonitor = 7
    /// Monitors the kernel accepts per adapter (HCI_MAX_ADV_MONITOR_NUM_HANDLES).
    public static let maxMonitors = 32

    public let adapter: AdapterID
    /// The registered root: the ObjectManager of the monitors.
    public let path: ObjectPath
    public let patterns: [AdvertisementPattern]
    public let rssi: AdvertisementMonitorRSSI?
    /// The monitor objects below ``path``.
    public let monitorPaths: [ObjectPath]

    private let client: BlueZClient
    private let hub: MonitorHub
    private let exported: Lock<(manager: DBusObjectManagerRegistration?, monitors: [DBusObjectRegistration])>
    private let watcher: Lock<Task<Void, Never>?> = Lock(nil)
    private let registered = Lock(true)

    private init(client: BlueZClient, adapter: AdapterID, path: ObjectPath, patterns: [AdvertisementPattern],
                 rssi: AdvertisementMonitorRSSI?, monitorPaths: [ObjectPath], hub: MonitorHub,
                 manager: DBusObjectManagerRegistration, monitors: [DBusObjectRegistration]) {
        self.client = client
        self.adapter = adapter
        self.path = path
        self.patterns = patterns
        self.rssi = rssi
        self.monitorPaths = monitorPaths
        self.hub = hub
        self.exported = Lock((manager, monitors))
    }

    /// The root used when none is given: one per adapter.
    public static func defaultPath(for adapter: AdapterID) -> ObjectPath {
        (try? ObjectPath("/com/blecompanion/monitor/" + adapter.name)) ?? "/com/blecompanion/monitor"
    }

    /// Exports monitors for `patterns` below `path`, registers them on
    /// `adapter` and returns once bluetoothd has activated every one.
    ///
    /// - Throws: ``BlueZError/invalidArgument(_:)`` for patterns or RSSI
    ///   settings bluetoothd would refuse (nothing is sent);
    ///   ``BlueZError/notFound(_:)`` when the adapter has no
    ///   AdvertisementMonitorManager1 (bluetoothd without experimental
    ///   interfaces, or a kernel without advertisement monitors);
    ///   `.bluez(.invalidArguments, …)` when bluetoothd released a monitor
    ///   instead of activating it; ``BlueZError/timedOut(_:)`` when it
    ///   activated none within `activationTimeout`; bluetoothd's own errors
    ///   (e.g. `.bluez(.alreadyExists, …)`).
    public static func register(
        client: BlueZClient, adapter: AdapterID, patterns: [AdvertisementPattern], path: ObjectPath? = nil,
        rssi: AdvertisementMonitorRSSI? = nil, activationTimeout: Duration = .seconds(10)
    ) async throws(BlueZError) -> AdvertisementMonitor {
        try await register(client: client, adapter: adapter, patterns: patterns, path: path, rssi: rssi,
                           activationTimeout: activationTimeout, checkLocally: true)
    }

    /// `checkLocally: false` sends patterns and RSSI settings unchecked, so
    /// that tests can see what bluetoothd makes of bad ones.
    static func register(
        client: BlueZClient, adapter: AdapterID, patterns: [AdvertisementPattern], path: ObjectPath?,
        rssi: AdvertisementMonitorRSSI?, activationTimeout: Duration, checkLocally: Bool
    ) async throws(BlueZError) -> AdvertisementMonitor {
        var unique: [AdvertisementPattern] = []
        for p in patterns where !unique.contains(p) { unique.append(p) }
        guard !unique.isEmpty else { throw .invalidArgument("an advertisement monitor needs at least one pattern") }
        if checkLocally {
            for p in unique { try p.validate() }
            try rssi?.validate()
        }
        let groups = stride(from: 0, to: unique.count, by: maxPatternsPerMonitor).map {
            Array(unique[$0..<min($0 + maxPatternsPerMonitor, unique.count)])
        }
        guard groups.count <= maxMonitors else {
            throw .invalidArgument("\(unique.count) patterns need \(groups.count) monitors; the kernel takes at most \(maxMonitors)")
        }
        try checkManager(client, adapter)

        let root = path ?? defaultPath(for: adapter)
        let hub = MonitorHub(mirror: client.mirror)
        let manager: DBusObjectManagerRegistration
        var monitors: [DBusObjectRegistration] = []
        var paths: [ObjectPath] = []
        do {
            // The monitors first: exporting fails if the paths are taken
            // (another registration with this root on this connection),
            // before an ObjectManager would replace that one's.
            for (i, group) in groups.enumerated() {
                let p = try root.appending("monitor\(i)")
                var values = rssi?.properties ?? [:]
                values["Type"] = .string("or_patterns")
                values["Patterns"] = .array(patternType, group.map(\.dbusValue))
                monitors.append(try await client.connection.export(p, interfaces: [
                    DBusExportedInterface(monitorInterface(hub, path: p, rssi: rssi), values: values),
                ]))
                paths.append(p)
            }
            manager = try await client.connection.exportObjectManager(at: root)
        } catch {
            for m in monitors { m.unexport() }
            throw .from(error)
        }
        let monitor = AdvertisementMonitor(client: client, adapter: adapter, path: root, patterns: unique, rssi: rssi,
                                           monitorPaths: paths, hub: hub, manager: manager, monitors: monitors)
        // Listen before registering: bluetoothd may call Activate or
        // Release before its reply arrives.
        let outcome = hub.waiter(for: paths)
        do throws(BlueZError) {
            try await monitor.registerWithBlueZ()
        } catch {
            monitor.unexport()
            monitor.registered.withLock { $0 = false }
            throw error
        }
        switch await outcome.wait(timeout: activationTimeout) {
        case .activated:
            break
        case let .released(p):
            await monitor.unregister()
            throw .bluez(.invalidArguments, message: "bluetoothd released the advertisement monitor \(p) instead of activating it "
                         + "(it refused its patterns or RSSI settings, or the kernel did; see bluetoothd's log)")
        case .timedOut:
            await monitor.unregister()
            throw .timedOut("bluetoothd did not activate the advertisement monitors on \(adapter.name) within \(activationTimeout)")
        }
        monitor.startWatching()
        return monitor
    }

    /// Whether the current bluetoothd has activated every monitor (false
    /// while bluetoothd restarts, until they are registered again).
    public var isActive: Bool { hub.allActive(monitorPaths) }

    /// The devices bluetoothd reported found (and not lost) to these
    /// monitors since it activated them. DeviceFound often comes right
    /// after activation, before ``register(client:adapter:patterns:path:rssi:activationTimeout:)``
    /// returns: read this, then follow ``events(bufferCapacity:)``.
    public var foundDevices: Set<DeviceID> { hub.foundDevices() }

    /// Every event from now on; a consumer more than `bufferCapacity` events
    /// behind loses the oldest. Ends at ``unregister()``.
    public func events(bufferCapacity: Int = 256) -> AsyncStream<AdvertisementMonitorEvent> {
        hub.events(bufferCapacity: bufferCapacity)
    }

    /// Unregisters from bluetoothd (which releases the monitors) and
    /// removes the exported objects.
    public func unregister() async {
        guard registered.withLock({ was in defer { was = false }; return was }) else { return }
        watcher.withLock { $0?.cancel() }
        _ = try? await client.call(adapter.path, BlueZInterface.advertisementMonitorManager, "UnregisterMonitor", [.objectPath(path)])
        unexport()
        hub.finish()
    }

    deinit {
        watcher.withLock { $0?.cancel() }
        if registered.withLock({ $0 }) {
            let client = self.client, adapter = self.adapter, path = self.path
            Task {
                _ = try? await client.call(adapter.path, BlueZInterface.advertisementMonitorManager, "UnregisterMonitor", [.objectPath(path)])
            }
        }
        unexport()
        hub.finish()
    }

    // MARK: Internals

    private static let patternType = DBusType.structure([.byte, .byte, .array(.byte)])

    /// Fails unless `adapter` has a manager that takes "or_patterns" monitors.
    private static func checkManager(_ client: BlueZClient, _ adapter: AdapterID) throws(BlueZError) {
        let snapshot = client.mirror.snapshot()
        guard snapshot.available else { throw .unavailable }
        guard let interfaces = snapshot.objects[adapter.path], interfaces[BlueZInterface.adapter] != nil else {
            throw .notFound("adapter \(adapter.name)")
        }
        guard let manager = interfaces[BlueZInterface.advertisementMonitorManager] else {
            throw .notFound("passive scanning on \(adapter.name): bluetoothd offers no \(BlueZInterface.advertisementMonitorManager) "
                            + "(run bluetoothd with --experimental, or set Experimental = true in /etc/bluetooth/main.conf; "
                            + "the kernel must support advertisement monitors)")
        }
        if case let .array(_, types)? = manager["SupportedMonitorTypes"], !types.contains(.string("or_patterns")) {
            throw .notFound("passive scanning on \(adapter.name): bluetoothd supports no \"or_patterns\" monitors "
                            + "(SupportedMonitorTypes: \(types.compactMap(\.stringValue).joined(separator: ", ")))")
        }
    }

    private func registerWithBlueZ() async throws(BlueZError) {
        _ = try await client.call(adapter.path, BlueZInterface.advertisementMonitorManager, "RegisterMonitor", [.objectPath(path)])
    }

    private func unexport() {
        let (manager, monitors) = exported.withLock { e in
            defer { e = (nil, []) }
            return e
        }
        // Monitors first: InterfacesRemoved still has an ObjectManager to come from.
        for m in monitors { m.unexport() }
        _ = manager
    }

    /// Registers again whenever bluetoothd (re)appears with the manager on
    /// our adapter: after a restart, or when the adapter is plugged back in.
    private func startWatching() {
        let events = client.mirror.events(bufferCapacity: 64, where: BlueZEvent.isAvailabilityOrAddition)
        let client = self.client, adapter = self.adapter
        let task = Task { [weak self] in
            for await event in events {
                let managerReturned: Bool
                switch event {
                case .availability(true):
                    managerReturned = false
                case let .interfacesAdded(p, names) where p == adapter.path && names.contains(BlueZInterface.advertisementMonitorManager):
                    managerReturned = true
                default:
                    continue
                }
                guard let self, self.registered.withLock({ $0 }) else { return }
                guard client.mirror.snapshot().objects[adapter.path]?[BlueZInterface.advertisementMonitorManager] != nil else { continue }
                // The manager reappearing on our adapter means no registration
                // of ours survived, even while the Release that said so is still
                // on its way (a method call, handled apart from this event: seen
                // under load, the monitor then stayed unregistered). A resync
                // (availability) of a bluetoothd that still has it is no reason.
                guard managerReturned || !self.isActive else { continue }
                // A second trigger for the same bluetoothd answers AlreadyExists: nothing to do.
                try? await self.registerWithBlueZ()
            }
        }
        watcher.withLock { $0 = task }
    }

    private static func monitorInterface(_ hub: MonitorHub, path: ObjectPath, rssi: AdvertisementMonitorRSSI?) -> DBusInterfaceDescription {
        @Sendable func device(_ call: DBusMethodCall) throws -> DeviceID {
            let p: ObjectPath = try call.argument(0)
            guard let id = DeviceID(path: p) else {
                throw DBusError.remote(name: BlueZError.Name.invalidArguments.rawValue, message: "\(p) is not a device path")
            }
            return id
        }
        let dev = DBusArgument("device", .objectPath)
        var properties = [
            DBusPropertyDescription("Type", .string),
            DBusPropertyDescription("Patterns", .array(patternType)),
        ]
        for (name, value) in (rssi?.properties ?? [:]).sorted(by: { $0.key < $1.key }) {
            properties.append(DBusPropertyDescription(name, value.type))
        }
        return DBusInterfaceDescription(BlueZInterface.advertisementMonitor, methods: [
            DBusMethodDescription("Release") { call in
                try hub.receive(.released(monitor: path), from: call.sender)
                return []
            },
            DBusMethodDescription("Activate") { call in
                try hub.receive(.activated(monitor: path), from: call.sender)
                return []
            },
            DBusMethodDescription("DeviceFound", inputs: [dev]) { call in
                try hub.receive(.deviceFound(try device(call), monitor: path), from: call.sender)
                return []
            },
            DBusMethodDescription("DeviceLost", inputs: [dev]) { call in
                try hub.receive(.deviceLost(try device(call), monitor: path), from: call.sender)
                return []
            },
        ], properties: properties)
    }
}

/// The monitors' shared state: which bluetoothd activated which monitor,
/// subscribers, and registration waiters. Fed by the exported methods.
final class MonitorHub: Sendable {
    private struct State {
        /// Monitor → the bluetoothd (unique name) that activated it.
        var activatedBy: [ObjectPath: String] = [:]
        /// Monitor → devices reported found and not lost since its activation.
        var found: [ObjectPath: Set<DeviceID>] = [:]
        var subscribers: [UInt64: AsyncStream<AdvertisementMonitorEvent>.Continuation] = [:]
        var nextID: UInt64 = 0
        var finished = false
    }
    private let state = Lock(State())
    private let mirror: BlueZMirror

    init(mirror: BlueZMirror) { self.mirror = mirror }

    /// Records a call from bluetoothd and passes it on; calls from anyone
    /// else on the bus are refused.
    func receive(_ event: AdvertisementMonitorEvent, from sender: String?) throws {
        guard let sender, sender == mirror.serviceOwner else {
            throw DBusError.remote(name: BlueZError.Name.notAuthorized.rawValue, message: "only bluetoothd may call an advertisement monitor")
        }
        let subscribers = state.withLock { s -> [AsyncStream<AdvertisementMonitorEvent>.Continuation] in
            switch event {
            case let .activated(p):
                s.activatedBy[p] = sender
                s.found[p] = []
            case let .released(p):
                s.activatedBy[p] = nil
                s.found[p] = nil
            case let .deviceFound(d, p):
                s.found[p, default: []].insert(d)
            case let .deviceLost(d, p):
                s.found[p]?.remove(d)
            }
            return Array(s.subscribers.values)
        }
        for c in subscribers { c.yield(event) }
    }

    func allActive(_ paths: [ObjectPath]) -> Bool {
        guard let owner = mirror.serviceOwner, mirror.snapshot().available else { return false }
        return state.withLock { s in paths.allSatisfy { s.activatedBy[$0] == owner } }
    }

    /// Devices found by monitors the current bluetoothd activated.
    func foundDevices() -> Set<DeviceID> {
        guard let owner = mirror.serviceOwner, mirror.snapshot().available else { return [] }
        return state.withLock { s in
            s.found.reduce(into: Set<DeviceID>()) { all, entry in
                if s.activatedBy[entry.key] == owner { all.formUnion(entry.value) }
            }
        }
    }

    func events(bufferCapacity: Int) -> AsyncStream<AdvertisementMonitorEvent> {
        let (stream, continuation) = AsyncStream<AdvertisementMonitorEvent>.makeStream(bufferingPolicy: .bufferingNewest(max(1, bufferCapacity)))
        let id = state.withLock { s -> UInt64? in
            guard !s.finished else { return nil }
            s.nextID += 1
            s.subscribers[s.nextID] = continuation
            return s.nextID
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// The monitors are unregistered: none is active and none has found
    /// anything from now on, whether or not bluetoothd's `Release` came
    /// before (it may come after `UnregisterMonitor` returned, when the
    /// objects are no longer exported, and then never arrive).
    func finish() {
        let subscribers = state.withLock { s -> [AsyncStream<AdvertisementMonitorEvent>.Continuation] in
            s.finished = true
            s.activatedBy = [:]
            s.found = [:]
            defer { s.subscribers = [:] }
            return Array(s.subscribers.values)
        }
        for c in subscribers { c.finish() }
    }

    enum Outcome: Sendable, Equatable {
        case activated
        case released(ObjectPath)
        case timedOut
    }

    /// Follows the events from now on until every path is activated or one
    /// is released.
    func waiter(for paths: [ObjectPath]) -> RegistrationWaiter {
        RegistrationWaiter(events: events(bufferCapacity: 1024), paths: paths)
    }

    struct RegistrationWaiter: Sendable {
        let events: AsyncStream<AdvertisementMonitorEvent>
        let paths: [ObjectPath]

        func wait(timeout: Duration) async -> Outcome {
            let events = self.events, paths = Set(self.paths)
            return await withTaskGroup(of: Outcome?.self) { group in
                group.addTask {
                    var pending = paths
                    for await event in events {
                        switch event {
                        case let .activated(p):
                            pending.remove(p)
                            if pending.isEmpty { return .activated }
                        case let .released(p) where paths.contains(p):
                            return .released(p)
                        default:
                            continue
                        }
                    }
                    return nil
                }
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    return .timedOut
                }
                var result = Outcome.timedOut
                for await outcome in group {
                    if let outcome {
                        result = outcome
                        break
                    }
                }
                group.cancelAll()
                return result
            }
        }

    }
}
