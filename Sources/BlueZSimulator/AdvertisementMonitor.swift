import DBus
import Vocabulary

// org.bluez.AdvertisementMonitorManager1 on each adapter: passive scanning.
//
// What bluetoothd does (doc/org.bluez.AdvertisementMonitorManager.rst,
// doc/org.bluez.AdvertisementMonitor.rst, and src/adv_monitor.c for what
// the documents leave open), reproduced here:
//
// - RegisterMonitor(o root): the caller's (unique name, root) is the
//   application. The same pair twice → AlreadyExists. bluetoothd then reads
//   the application's ObjectManager at `root` (GetManagedObjects, following
//   InterfacesAdded/Removed afterwards) and replies once it has read it —
//   also when the application has no ObjectManager (then it has no monitors).
//   InvalidArguments is only for an empty or relative path, which a D-Bus
//   object path never is.
// - A monitor object (AdvertisementMonitor1 below `root`) whose Type,
//   RSSI settings or Patterns are not acceptable does NOT fail the call:
//   bluetoothd calls its Release() and ignores it. A valid one is handed to
//   the kernel, and Activate() is called once the kernel took it. The kernel
//   refuses more than 16 patterns in one monitor (HCI_MAX_ADV_MONITOR_NUM_PATTERNS),
//   which again ends in Release(). bluetoothd 5.66 already fails at 8: it
//   computes the mgmt command's length in a byte (1 + 34 per pattern), which
//   wraps, so the kernel refuses the short command (Release() again) — and
//   bluetoothd, having copied the patterns past its too-small buffer, aborts
//   soon after. The simulator refuses such a monitor (Release) but does not
//   imitate the crash.
// - UnregisterMonitor(o root): DoesNotExist for an unknown pair; otherwise
//   Release() on every monitor. A monitor object the application removes is
//   dropped without Release(); an application leaving the bus loses its
//   monitors; an adapter that goes away releases them.
// - While a monitor is active, advertisements matching one of its patterns
//   reach bluetoothd without discovery: the device's Device1 object appears
//   and updates as during discovery (Adapter1.Discovering stays false).
//   A pattern (start, AD type, content) matches an AD structure of that type
//   whose data (after the type byte) holds `content` at `start`.
// - DeviceFound(o)/DeviceLost(o): the simulator reports like a controller
//   that tracks devices (monitor offloading): DeviceFound once when a
//   device starts matching, DeviceLost when it stops advertising or the
//   adapter powers off. (bluetoothd's software filtering without RSSI
//   thresholds calls DeviceFound on every matching advertisement and never
//   DeviceLost; clients must cope with both.)

/// One pattern of a monitor: AD type, where in the AD data, which bytes.
struct MonitorPattern: Sendable, Equatable {
    var start: Int
    var adType: UInt8
    var content: [UInt8]
}

final class MonitorState {
    let path: ObjectPath
    let patterns: [MonitorPattern]
    /// Activate() was called: advertisements are matched against it.
    var active = false
    /// Devices (by index) reported with DeviceFound and not lost since.
    var found: Set<Int> = []
    init(path: ObjectPath, patterns: [MonitorPattern]) {
        self.path = path
        self.patterns = patterns
    }
}

/// A registered application: one client's root of monitors on one adapter.
final class MonitorApp {
    let sender: String
    let root: ObjectPath
    var monitors: [MonitorState] = []
    /// RegisterMonitor has read the application's objects.
    var ready = false
    /// Follows the application's InterfacesAdded/InterfacesRemoved.
    var follower: Task<Void, Never>?
    init(sender: String, root: ObjectPath) {
        self.sender = sender
        self.root = root
    }
}

/// Why a monitor object was released instead of activated.
struct MonitorRefusal: Error {
    let reason: String
}

extension BlueZSimulator {
    /// The patterns bluetoothd 5.66 can hand to the kernel in one monitor
    /// (its one-byte command length wraps from 8 on; the kernel's own limit
    /// is 16).
    static let maxPatternsPerMonitor = 7
    /// Legacy advertising data is at most 31 bytes (BT_AD_MAX_DATA_LEN).
    static let maxADLength = 31

    nonisolated func monitorManagerInterface(_ id: String) -> DBusExportedInterface {
        let description = DBusInterfaceDescription(BlueZ.advertisementMonitorManager, methods: [
            method("RegisterMonitor", [.init("application", .objectPath)]) { sim, call in
                try await sim.registerMonitor(id, sender: call.sender ?? "", try call.argument(0))
            },
            method("UnregisterMonitor", [.init("application", .objectPath)]) { sim, call in
                try await sim.unregisterMonitor(id, sender: call.sender ?? "", try call.argument(0))
            },
        ], properties: [
            DBusPropertyDescription("SupportedMonitorTypes", stringArray),
            DBusPropertyDescription("SupportedFeatures", stringArray),
        ])
        // No "controller-patterns": no controller offloading is claimed.
        return DBusExportedInterface(description, values: [
            "SupportedMonitorTypes": strings(["or_patterns"]),
            "SupportedFeatures": strings([]),
        ])
    }

    // MARK: Registration

    func registerMonitor(_ id: String, sender: String, _ root: ObjectPath) async throws -> [DBusValue] {
        // Not `a.registration`: the actor is free while the adapter is being
        // exported, and a client that saw the manager appear may call in that
        // gap; bluetoothd answers it (its adapter object is there at once).
        guard let a = adapter(id), a.present, isOnBus, let connection else {
            throw bluezError("Failed", "Failed to create Adv Monitor app")
        }
        guard !a.monitorApps.contains(where: { $0.sender == sender && $0.root == root }) else {
            throw bluezError("AlreadyExists", "Already Exists")
        }
        let app = MonitorApp(sender: sender, root: root)
        a.monitorApps.append(app)
        watchClient(sender)
        log("advertisement monitor application \(root) registered by \(sender) on \(id)")
        // Signals first, then the objects: a monitor exported meanwhile is
        // seen in one or the other (adding it twice is ignored).
        let rule = DBusMatchRule(sender: sender, interface: BlueZ.objectManager, path: root)
        let stream = try? await connection.signals(matching: rule)
        let objects = (try? await connection.managedObjects(destination: sender, path: root)) ?? [:]
        guard a.monitorApps.contains(where: { $0 === app }) else {
            throw bluezError("Failed", "Adv Monitor app destroyed")
        }
        for (path, interfaces) in objects.sorted(by: { $0.key < $1.key }) {
            if let properties = interfaces[BlueZ.advertisementMonitor] {
                addMonitor(app, path, properties)
            }
        }
        app.ready = true
        if let stream {
            app.follower = Task { [weak self] in
                do {
                    for try await message in stream {
                        guard let self else { return }
                        await self.applicationSignal(id, sender, root, message)
                    }
                } catch {}
            }
        }
        // bluetoothd activates once the kernel has taken the patterns, which
        // is usually after this reply: do it on a task of its own.
        Task { [weak self] in await self?.activateMonitors(id, sender, root) }
        return []
    }

    func monitorApp(_ id: String, _ sender: String, _ root: ObjectPath) -> (AdapterState, MonitorApp)? {
        guard let a = adapter(id), let app = a.monitorApps.first(where: { $0.sender == sender && $0.root == root }) else { return nil }
        return (a, app)
    }

    func unregisterMonitor(_ id: String, sender: String, _ root: ObjectPath) async throws -> [DBusValue] {
        guard let a = adapter(id), let index = a.monitorApps.firstIndex(where: { $0.sender == sender && $0.root == root }) else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        let app = a.monitorApps.remove(at: index)
        app.follower?.cancel()
        for m in app.monitors { callMonitor(app, m.path, "Release") }
        log("advertisement monitor application \(root) of \(sender) unregistered from \(id)")
        monitorsChanged(a)
        return []
    }

    /// Reads one monitor object; refused ones get Release() at once.
    func addMonitor(_ app: MonitorApp, _ path: ObjectPath, _ properties: [String: DBusValue]) {
        // bluetoothd takes objects whose path starts with the root's text.
        guard path.rawValue.hasPrefix(app.root.rawValue), !app.monitors.contains(where: { $0.path == path }) else { return }
        do {
            let patterns = try Self.monitorPatterns(properties)
            app.monitors.append(MonitorState(path: path, patterns: patterns))
        } catch {
            log("advertisement monitor \(path) of \(app.sender) released: \(error.reason)")
            callMonitor(app, path, "Release")
        }
    }

    /// Checks a monitor's properties as bluetoothd and the kernel do.
    static func monitorPatterns(_ p: [String: DBusValue]) throws(MonitorRefusal) -> [MonitorPattern] {
        guard case let .string(type)? = p["Type"]?.unwrapped else { throw MonitorRefusal(reason: "no Type string") }
        guard type == "or_patterns" else { throw MonitorRefusal(reason: "Type \"\(type)\" is not one of SupportedMonitorTypes (or_patterns)") }
        try checkRSSI(p)
        guard let value = p["Patterns"]?.unwrapped else { throw MonitorRefusal(reason: "no Patterns (or_patterns needs at least one)") }
        guard case let .array(element, items) = value, element == .structure([.byte, .byte, .array(.byte)]) else {
            throw MonitorRefusal(reason: "Patterns has type \(value.type.signature), not a(yyay)")
        }
        guard !items.isEmpty else { throw MonitorRefusal(reason: "Patterns is empty (or_patterns needs at least one)") }
        var patterns: [MonitorPattern] = []
        for (i, item) in items.enumerated() {
            guard case let .structure(fields) = item, fields.count == 3, case let .byte(start) = fields[0], case let .byte(adType) = fields[1],
                  case let .bytes(content) = fields[2] else {
                throw MonitorRefusal(reason: "pattern \(i) is not (yyay)")
            }
            guard !content.isEmpty else { throw MonitorRefusal(reason: "pattern \(i) has no content") }
            guard Int(start) < maxADLength, content.count <= maxADLength, Int(start) + content.count <= maxADLength else {
                throw MonitorRefusal(reason: "pattern \(i) reaches past the \(maxADLength) bytes of advertising data (start \(start), \(content.count) bytes)")
            }
            // Assigned AD types run from Flags (0x01) to 3D Information Data (0x3D), plus Manufacturer Specific Data (0xFF).
            guard (0x01...0x3D).contains(adType) || adType == 0xFF else {
                throw MonitorRefusal(reason: "pattern \(i) has AD type 0x\(Hex.string([adType])), which is not an assigned AD type")
            }
            patterns.append(MonitorPattern(start: Int(start), adType: adType, content: content))
        }
        guard patterns.count <= maxPatternsPerMonitor else {
            throw MonitorRefusal(reason: "\(patterns.count) patterns; bluetoothd 5.66 hands at most \(maxPatternsPerMonitor) per monitor to the kernel "
                                    + "(its command length is one byte)")
        }
        return patterns
    }

    /// The optional RSSI settings: types, then ranges (127 dBm and 0 s mean unset).
    static func checkRSSI(_ p: [String: DBusValue]) throws(MonitorRefusal) {
        func int16(_ key: String) throws(MonitorRefusal) -> Int16? {
            guard let v = p[key]?.unwrapped else { return nil }
            guard case let .int16(x) = v else { throw MonitorRefusal(reason: "\(key) has type \(v.type.signature), not n") }
            return x == 127 ? nil : x
        }
        func uint16(_ key: String) throws(MonitorRefusal) -> UInt16? {
            guard let v = p[key]?.unwrapped else { return nil }
            guard case let .uint16(x) = v else { throw MonitorRefusal(reason: "\(key) has type \(v.type.signature), not q") }
            return x
        }
        let high = try int16("RSSIHighThreshold"), low = try int16("RSSILowThreshold")
        let highTimeout = try uint16("RSSIHighTimeout"), lowTimeout = try uint16("RSSILowTimeout")
        let sampling = try uint16("RSSISamplingPeriod")
        for (name, v) in [("RSSIHighThreshold", high), ("RSSILowThreshold", low)] {
            if let v, !(-127...20).contains(v) { throw MonitorRefusal(reason: "\(name) \(v) is outside -127…20 dBm") }
        }
        // An unset high threshold takes the low one; an unset low one is -127.
        if (high ?? low ?? -127) < (low ?? -127) {
            throw MonitorRefusal(reason: "RSSIHighThreshold is below RSSILowThreshold")
        }
        for (name, v) in [("RSSIHighTimeout", highTimeout), ("RSSILowTimeout", lowTimeout)] {
            if let v, v != 0, !(1...300).contains(v) { throw MonitorRefusal(reason: "\(name) \(v) is outside 1…300 s") }
        }
        if let sampling, sampling > 255 { throw MonitorRefusal(reason: "RSSISamplingPeriod \(sampling) is above 255") }
    }

    /// Activates the application's monitors that are not active yet and
    /// reports the devices they match.
    func activateMonitors(_ id: String, _ sender: String, _ root: ObjectPath) async {
        guard let (a, app) = monitorApp(id, sender, root) else { return }
        var activated = false
        for m in app.monitors where !m.active {
            m.active = true
            activated = true
            log("advertisement monitor \(m.path) of \(app.sender) activated")
            callMonitor(app, m.path, "Activate")
        }
        if activated { await monitorScan(a) }
    }

    /// InterfacesAdded/InterfacesRemoved of a registered application.
    func applicationSignal(_ id: String, _ sender: String, _ root: ObjectPath, _ message: DBusMessage) async {
        guard let (a, app) = monitorApp(id, sender, root), app.ready else { return }
        switch message.member {
        case "InterfacesAdded":
            guard let path = try? message.argument(0, as: ObjectPath.self),
                  let interfaces = try? message.argument(1, as: [String: [String: DBusValue]].self),
                  let properties = interfaces[BlueZ.advertisementMonitor] else { return }
            addMonitor(app, path, properties)
            await activateMonitors(id, sender, root)
        case "InterfacesRemoved":
            guard let path = try? message.argument(0, as: ObjectPath.self),
                  let names = try? message.argument(1, as: [String].self), names.contains(BlueZ.advertisementMonitor) else { return }
            // The object is gone: nothing to call Release on.
            app.monitors.removeAll { $0.path == path }
            monitorsChanged(a)
        default:
            break
        }
    }

    /// A method call to a monitor object; bluetoothd expects no reply.
    func callMonitor(_ app: MonitorApp, _ path: ObjectPath, _ member: String, _ arguments: [DBusValue] = []) {
        guard let connection else { return }
        let message = DBusMessage(kind: .methodCall, flags: [.noReplyExpected], path: path, interface: BlueZ.advertisementMonitor,
                                  member: member, destination: app.sender, body: arguments)
        try? connection.send(message)
    }

    // MARK: Matching and reporting

    /// Whether an active monitor on the adapter matches what `d` advertises
    /// (passive scanning needs the adapter powered, not discovery).
    func monitored(_ d: DeviceState, by a: AdapterState) -> Bool {
        guard a.powered, !a.monitorApps.isEmpty else { return false }
        let structures = advertisingStructures(d)
        return a.monitorApps.contains { app in app.monitors.contains { $0.active && Self.matches($0.patterns, structures) } }
    }

    static func matches(_ patterns: [MonitorPattern], _ structures: [(type: UInt8, data: [UInt8])]) -> Bool {
        patterns.contains { p in
            structures.contains { s in
                s.type == p.adType && s.data.count >= p.start + p.content.count
                    && s.data[p.start..<(p.start + p.content.count)].elementsEqual(p.content)
            }
        }
    }

    func monitorScan(adapterID id: String) async {
        if let a = adapter(id) { await monitorScan(a) }
    }

    /// Reports every advertising device an active monitor of `a` matches.
    func monitorScan(_ a: AdapterState) async {
        guard a.powered else { return }
        for d in devices where d.adapterID == a.spec.id && d.advertising && !d.blocked && monitored(d, by: a) {
            await deviceSeen(d, duplicate: false)
            notifyMonitors(d, a)
        }
    }

    /// DeviceFound on each active monitor that matches `d` and has not
    /// reported it yet.
    func notifyMonitors(_ d: DeviceState, _ a: AdapterState) {
        guard d.registration != nil, d.advertising, !d.blocked, a.powered, !a.monitorApps.isEmpty else { return }
        let structures = advertisingStructures(d)
        for app in a.monitorApps {
            for m in app.monitors where m.active && !m.found.contains(d.index) && Self.matches(m.patterns, structures) {
                m.found.insert(d.index)
                log("advertisement monitor \(m.path): device \(d.spec.address) found")
                callMonitor(app, m.path, "DeviceFound", [.objectPath(d.path)])
            }
        }
    }

    /// DeviceLost on every monitor that reported `d` (it stopped advertising).
    func monitorsLose(_ d: DeviceState) {
        guard let a = adapter(d.adapterID) else { return }
        for app in a.monitorApps {
            for m in app.monitors where m.found.remove(d.index) != nil {
                log("advertisement monitor \(m.path): device \(d.spec.address) lost")
                callMonitor(app, m.path, "DeviceLost", [.objectPath(d.path)])
            }
        }
    }

    /// Monitors went away: devices nobody reports any more age out.
    func monitorsChanged(_ a: AdapterState) {
        for d in devices where d.adapterID == a.spec.id && d.registration != nil && !d.isKept && d.removalTask == nil && !wanted(d, by: a) {
            scheduleRemoval(d)
        }
    }

    /// The adapter powered off: tracked devices are lost.
    func monitorsPoweredOff(_ a: AdapterState) {
        for d in devices where d.adapterID == a.spec.id { monitorsLose(d) }
    }

    /// The adapter is going away: bluetoothd destroys its monitor manager
    /// and releases every monitor.
    func releaseMonitors(_ a: AdapterState) {
        for app in a.monitorApps {
            app.follower?.cancel()
            for m in app.monitors { callMonitor(app, m.path, "Release") }
        }
        a.monitorApps = []
    }

    /// bluetoothd left the bus or the client did: monitors are forgotten
    /// without any call (there is nobody to call, or nobody to call from).
    func dropMonitors(_ a: AdapterState, sender: String? = nil) {
        for app in a.monitorApps where sender == nil || app.sender == sender {
            app.follower?.cancel()
        }
        a.monitorApps.removeAll { sender == nil || $0.sender == sender }
    }

    // MARK: Advertising data

    /// What `d` advertises, as the AD structures (type, data after the
    /// type byte) its scenario fields stand for: Flags, Complete Local
    /// Name, TX Power Level, Appearance, complete service UUID lists,
    /// Service Data (16-, 32-, 128-bit UUIDs) and Manufacturer Specific
    /// Data (company id little-endian, then the data). Multi-byte values are
    /// little-endian, as on the air.
    func advertisingStructures(_ d: DeviceState) -> [(type: UInt8, data: [UInt8])] {
        var out: [(type: UInt8, data: [UInt8])] = [(0x01, [d.spec.connectable ? 0x06 : 0x04])]
        if let name = d.name { out.append((0x09, Array(name.utf8))) }
        if let tx = d.txPower { out.append((0x0A, [UInt8(bitPattern: Int8(clamping: tx))])) }
        if let appearance = d.spec.appearance { out.append((0x19, le16(appearance))) }
        var lists: [UInt8: [UInt8]] = [:]
        for uuid in d.uuids.sorted() {
            guard let bytes = uuidLittleEndian(uuid) else { continue }
            let type: UInt8 = bytes.count == 2 ? 0x03 : bytes.count == 4 ? 0x05 : 0x07
            lists[type, default: []] += bytes
        }
        for (type, bytes) in lists.sorted(by: { $0.key < $1.key }) { out.append((type, bytes)) }
        for (uuid, data) in d.serviceData.sorted(by: { $0.key < $1.key }) {
            guard let bytes = uuidLittleEndian(uuid) else { continue }
            let type: UInt8 = bytes.count == 2 ? 0x16 : bytes.count == 4 ? 0x20 : 0x21
            out.append((type, bytes + data))
        }
        for (company, data) in d.manufacturerData.sorted(by: { $0.key < $1.key }) {
            out.append((0xFF, le16(company) + data))
        }
        return out
    }
}

func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }


/// A UUID in its shortest over-the-air form, little-endian: 2 bytes for a
/// 16-bit UUID of the Bluetooth base, 4 for a 32-bit one, else all 16.
func uuidLittleEndian(_ uuid: String) -> [UInt8]? {
    (try? BluetoothUUID(parsing: uuid))?.littleEndianBytes
}
