#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Vocabulary

extension Scenario {
    /// The largest scenario file `load(path:)` reads (a bound on what a
    /// file can make the simulator hold).
    public static let maximumFileBytes = 16 << 20

    /// Reads a scenario file. Errors name the file, line and JSON path.
    public static func load(path: String) throws(ScenarioError) -> Scenario {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        guard let f = fopen(path, "r") else {
            throw ScenarioError(file: name, line: 0, path: "", message: "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { fclose(f) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&chunk, 1, chunk.count, f)
            if n > 0 { bytes += chunk[0..<n] }
            if n < chunk.count { break }
            if bytes.count > maximumFileBytes { throw ScenarioError(file: name, line: 0, path: "", message: "file is larger than 16 MiB") }
        }
        return try parse(String(decoding: bytes, as: UTF8.self), fileName: name)
    }

    /// Parses scenario JSON text; `fileName` is used in error messages.
    public static func parse(_ text: String, fileName: String = "scenario.json") throws(ScenarioError) -> Scenario {
        let root: JSONNode
        do {
            root = try JSONReader.parse(text)
        } catch {
            throw ScenarioError(file: fileName, line: error.line, path: "", message: "invalid JSON (column \(error.column)): \(error.message)")
        }
        let d = ScenarioDecoder(file: fileName)
        return try d.scenario(root)
    }
}

/// Known error names a scenario may ask for (org.bluez.Error.*).
let knownBlueZErrors = [
    "Failed", "InProgress", "NotReady", "NotSupported", "NotPermitted", "NotAuthorized", "InvalidArguments",
    "AlreadyExists", "DoesNotExist", "NotConnected", "AlreadyConnected", "AuthenticationFailed",
    "AuthenticationRejected", "AuthenticationCanceled", "AuthenticationTimeout", "ConnectionAttemptFailed",
    "InvalidOffset", "InvalidValueLength", "NotAvailable",
]

let characteristicFlags = [
    "broadcast", "read", "write-without-response", "write", "notify", "indicate",
    "authenticated-signed-writes", "extended-properties", "reliable-write", "writable-auxiliaries",
    "encrypt-read", "encrypt-write", "encrypt-notify", "encrypt-indicate",
    "encrypt-authenticated-read", "encrypt-authenticated-write", "encrypt-authenticated-notify",
    "encrypt-authenticated-indicate", "secure-read", "secure-write", "secure-notify", "secure-indicate",
    "authorize",
]

let descriptorFlags = [
    "read", "write", "encrypt-read", "encrypt-write", "encrypt-authenticated-read",
    "encrypt-authenticated-write", "secure-read", "secure-write", "authorize",
]


struct ScenarioDecoder {
    let file: String

    func fail(_ node: JSONNode, _ message: String) -> ScenarioError {
        ScenarioError(file: file, line: node.line, path: node.path, message: message)
    }

    /// An object node whose member names are checked against `allowed`.
    func object(_ node: JSONNode, allowed: [String]) throws(ScenarioError) -> [(key: String, value: JSONNode)] {
        guard case let .object(members) = node.value else { throw fail(node, "expected an object, found \(node.typeName)") }
        for m in members where !allowed.contains(m.key) {
            throw fail(m.value, "unknown member \"\(m.key)\" (expected one of \(allowed.joined(separator: ", ")))")
        }
        return members
    }

    func array(_ node: JSONNode) throws(ScenarioError) -> [JSONNode] {
        guard case let .array(items) = node.value else { throw fail(node, "expected an array, found \(node.typeName)") }
        return items
    }

    func string(_ node: JSONNode) throws(ScenarioError) -> String {
        guard case let .string(s) = node.value else { throw fail(node, "expected a string, found \(node.typeName)") }
        return s
    }

    func bool(_ node: JSONNode) throws(ScenarioError) -> Bool {
        guard case let .bool(b) = node.value else { throw fail(node, "expected true or false, found \(node.typeName)") }
        return b
    }

    func number(_ node: JSONNode) throws(ScenarioError) -> Double {
        guard case let .number(v, _) = node.value else { throw fail(node, "expected a number, found \(node.typeName)") }
        return v
    }

    func seconds(_ node: JSONNode) throws(ScenarioError) -> Double {
        let v = try number(node)
        guard v >= 0, v <= 1_000_000, v.isFinite else { throw fail(node, "expected a time in seconds between 0 and 1000000, found \(v)") }
        return v
    }

    func integer(_ node: JSONNode, _ range: ClosedRange<Int64>) throws(ScenarioError) -> Int64 {
        var value: Double
        switch node.value {
        case let .number(v, _): value = v
        case let .string(s) where s.lowercased().hasPrefix("0x"):
            guard let v = Int64(s.dropFirst(2), radix: 16) else { throw fail(node, "invalid hexadecimal number \"\(s)\"") }
            value = Double(v)
        default: throw fail(node, "expected an integer, found \(node.typeName)")
        }
        guard value.rounded() == value, value >= Double(range.lowerBound), value <= Double(range.upperBound) else {
            throw fail(node, "expected an integer between \(range.lowerBound) and \(range.upperBound), found \(value)")
        }
        return Int64(value)
    }

    func hex(_ node: JSONNode) throws(ScenarioError) -> [UInt8] {
        let s = try string(node)
        do { return try Hex.bytes(s) } catch { throw fail(node, error.description) }
    }

    func uuid(_ node: JSONNode) throws(ScenarioError) -> String {
        let s = try string(node)
        do { return try BluetoothUUID(parsing: s).string } catch { throw fail(node, error.description) }
    }

    func address(_ node: JSONNode) throws(ScenarioError) -> String {
        let s = try string(node)
        do { return try BluetoothAddress(s).description } catch { throw fail(node, error.description) }
    }

    func oneOf(_ node: JSONNode, _ choices: [String], what: String) throws(ScenarioError) -> String {
        let s = try string(node)
        guard choices.contains(s) else {
            throw fail(node, "unknown \(what) \"\(s)\" (expected one of \(choices.joined(separator: ", ")))")
        }
        return s
    }

    func errorSpec(_ node: JSONNode) throws(ScenarioError) -> ErrorSpec {
        if case let .string(s) = node.value {
            return try errorSpec(name: s, message: nil, node: node)
        }
        let m = try object(node, allowed: ["name", "message"])
        guard let nameNode = m.first(where: { $0.key == "name" })?.value else { throw fail(node, "missing member \"name\"") }
        let message = try m.first(where: { $0.key == "message" }).map { (e) throws(ScenarioError) in try string(e.value) }
        return try errorSpec(name: try string(nameNode), message: message, node: nameNode)
    }

    private func errorSpec(name: String, message: String?, node: JSONNode) throws(ScenarioError) -> ErrorSpec {
        let short = name.hasPrefix("org.bluez.Error.") ? String(name.dropFirst("org.bluez.Error.".count)) : name
        guard knownBlueZErrors.contains(short) else {
            throw fail(node, "unknown error \"\(name)\" (expected org.bluez.Error. followed by one of \(knownBlueZErrors.joined(separator: ", ")))")
        }
        let defaults = ["Failed": "Operation failed", "InProgress": "In Progress", "NotReady": "Resource Not Ready",
                        "AuthenticationFailed": "Authentication Failed", "AuthenticationRejected": "Authentication Rejected",
                        "NotPermitted": "Not Permitted", "NotSupported": "Operation is not supported"]
        return ErrorSpec(name: "org.bluez.Error." + short, message: message ?? defaults[short] ?? short)
    }

    // MARK: Top level

    func scenario(_ root: JSONNode) throws(ScenarioError) -> Scenario {
        let members = try object(root, allowed: ["$schema", "name", "description", "duration", "settings", "adapters", "devices", "bluetoothd"])
        var s = Scenario(name: "scenario", settings: .init(), adapters: [], devices: [], outages: [])
        for (key, node) in members {
            switch key {
            case "name": s.name = try string(node)
            case "description": s.description = try string(node)
            case "duration":
                let d = try seconds(node)
                guard d > 0 else { throw fail(node, "duration must be greater than 0") }
                s.duration = d
            case "settings": s.settings = try settings(node)
            case "adapters":
                for item in try array(node) { s.adapters.append(try adapter(item, index: s.adapters.count)) }
            case "devices":
                for item in try array(node) { s.devices.append(try device(item)) }
            case "bluetoothd":
                for (k, v) in try object(node, allowed: ["outages", "experimental", "version", "replyDelay"]) {
                    switch k {
                    case "outages": s.outages = try outages(v, bluetoothd: true)
                    case "experimental": s.experimental = try bool(v)
                    case "version":
                        let text = try string(v)
                        guard let version = BluetoothdVersion(rawValue: text) else {
                            let known = BluetoothdVersion.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                            throw fail(v, "bluetoothd.version must be one of \(known), not \"\(text)\"")
                        }
                        s.bluetoothdVersion = version
                    case "replyDelay":
                        let delay = try seconds(v)
                        guard delay <= 60 else { throw fail(v, "bluetoothd.replyDelay must be at most 60 seconds, not \(delay)") }
                        s.replyDelay = delay
                    default: break
                    }
                }
            default: break
            }
        }
        if s.adapters.isEmpty {
            s.adapters = [AdapterSpec(id: "hci0", address: "00:1A:7D:DA:71:13", addressType: "public", name: "blecompanion-sim", alias: nil,
                                      classOfDevice: 0x7C010C, powered: true, discoverable: false, discoverableTimeout: 180,
                                      pairable: true, pairableTimeout: 0, modalias: "usb:v1D6Bp0246d0542", roles: ["central", "peripheral"],
                                      uuids: [], manufacturer: 2, version: 0x0C, outages: [])]
        }
        // Cross-checks.
        var ids = Set<String>()
        for (i, a) in s.adapters.enumerated() {
            if !ids.insert(a.id).inserted {
                throw ScenarioError(file: file, line: root["adapters"].map { n in (try? array(n))?[i].line ?? n.line } ?? root.line,
                                    path: "adapters[\(i)].id", message: "duplicate adapter id \"\(a.id)\"")
            }
        }
        var seen = Set<String>()
        if let devNodes = root["devices"], case let .array(items) = devNodes.value {
            for (i, d) in s.devices.enumerated() {
                let node = items[i]
                guard ids.contains(d.adapter) else {
                    throw fail(node["adapter"] ?? node, "unknown adapter \"\(d.adapter)\" (scenario has \(ids.sorted().joined(separator: ", ")))")
                }
                if !seen.insert(d.adapter + "/" + d.address).inserted {
                    throw fail(node["address"] ?? node, "duplicate device \(d.address) on \(d.adapter)")
                }
                try checkWriteTargets(d, node: node)
                // Attribute handles are 16-bit: services, declarations, values, descriptors (+ implied CCCDs).
                var handles = 0x000a
                for service in d.gatt {
                    handles += 1
                    for c in service.characteristics {
                        handles += 2 + c.descriptors.count + ((c.flags.contains("notify") || c.flags.contains("indicate")) ? 1 : 0)
                    }
                }
                if handles > 0xFFFF {
                    throw fail(node["gatt"] ?? node, "the GATT database needs \(handles) attribute handles; at most 65535 exist")
                }
            }
        }
        return s
    }

    func checkWriteTargets(_ d: DeviceSpec, node: JSONNode) throws(ScenarioError) {
        let all = Set(d.gatt.flatMap { $0.characteristics.map(\.uuid) })
        guard let gattNode = node["gatt"], case let .array(services) = gattNode.value else { return }
        for (si, service) in d.gatt.enumerated() {
            for (ci, c) in service.characteristics.enumerated() {
                for (ri, rule) in c.onWrite.enumerated() {
                    for (ai, a) in rule.actions.enumerated() {
                        guard let target = a.characteristic, !all.contains(target) else { continue }
                        let at = services[si]["characteristics"].flatMap { n -> JSONNode? in
                            guard case let .array(cs) = n.value, ci < cs.count else { return nil }
                            guard let ow = cs[ci]["onWrite"], case let .array(rules) = ow.value, ri < rules.count else { return nil }
                            guard let th = rules[ri]["then"], case let .array(acts) = th.value, ai < acts.count else { return nil }
                            return acts[ai]["characteristic"]
                        } ?? gattNode
                        throw fail(at, "no characteristic with UUID \(target) on this device")
                    }
                }
            }
        }
    }

    func settings(_ node: JSONNode) throws(ScenarioError) -> Scenario.Settings {
        var s = Scenario.Settings()
        for (k, v) in try object(node, allowed: ["temporaryDeviceTimeout", "connectDelay", "serviceResolveDelay", "disconnectDelay"]) {
            switch k {
            case "temporaryDeviceTimeout": s.temporaryDeviceTimeout = try seconds(v)
            case "connectDelay": s.connectDelay = try seconds(v)
            case "disconnectDelay": s.disconnectDelay = try seconds(v)
            default: s.serviceResolveDelay = try seconds(v)
            }
        }
        return s
    }

    func outages(_ node: JSONNode, bluetoothd: Bool = false) throws(ScenarioError) -> [Scenario.Outage] {
        var out: [Scenario.Outage] = []
        for item in try array(node) {
            var at: Double?
            var back: Double?
            var killed = false
            for (k, v) in try object(item, allowed: bluetoothd ? ["at", "returnAt", "killed"] : ["at", "returnAt"]) {
                switch k {
                case "at": at = try seconds(v)
                case "killed": killed = try bool(v)
                default: back = try seconds(v)
                }
            }
            guard let start = at else { throw fail(item, "missing member \"at\"") }
            if let back, back <= start { throw fail(item["returnAt"] ?? item, "returnAt (\(back)) must be after at (\(start))") }
            out.append(.init(at: start, returnAt: back, killed: killed))
        }
        return out
    }

    func adapter(_ node: JSONNode, index: Int) throws(ScenarioError) -> AdapterSpec {
        var a = AdapterSpec(id: "hci\(index)", address: "00:1A:7D:DA:71:\(String(format2: 0x13 + index))", addressType: "public",
                            name: "blecompanion-sim", alias: nil, classOfDevice: 0x7C010C, powered: true, discoverable: false,
                            discoverableTimeout: 180, pairable: true, pairableTimeout: 0, modalias: "usb:v1D6Bp0246d0542",
                            roles: ["central", "peripheral"], uuids: [], manufacturer: 2, version: 0x0C, outages: [])
        let allowed = ["id", "address", "addressType", "name", "alias", "class", "powered", "discoverable", "discoverableTimeout",
                       "pairable", "pairableTimeout", "modalias", "roles", "uuids", "manufacturer", "version", "outages"]
        for (k, v) in try object(node, allowed: allowed) {
            switch k {
            case "id":
                let id = try string(v)
                guard id.hasPrefix("hci"), let n = Int(id.dropFirst(3)), n >= 0, "hci\(n)" == id else {
                    throw fail(v, "invalid adapter id \"\(id)\" (expected hci0, hci1, ...)")
                }
                a.id = id
            case "address": a.address = try address(v)
            case "addressType": a.addressType = try oneOf(v, ["public", "random"], what: "address type")
            case "name": a.name = try string(v)
            case "alias": a.alias = try string(v)
            case "class": a.classOfDevice = UInt32(try integer(v, 0...0xFFFFFF))
            case "powered": a.powered = try bool(v)
            case "discoverable": a.discoverable = try bool(v)
            case "discoverableTimeout": a.discoverableTimeout = UInt32(try integer(v, 0...Int64(UInt32.max)))
            case "pairable": a.pairable = try bool(v)
            case "pairableTimeout": a.pairableTimeout = UInt32(try integer(v, 0...Int64(UInt32.max)))
            case "modalias": a.modalias = try string(v)
            case "roles":
                a.roles = []
                for r in try array(v) { a.roles.append(try oneOf(r, ["central", "peripheral", "central-peripheral"], what: "role")) }
            case "uuids":
                a.uuids = []
                for u in try array(v) { a.uuids.append(try uuid(u)) }
            case "manufacturer": a.manufacturer = UInt16(try integer(v, 0...0xFFFF))
            case "version": a.version = UInt8(try integer(v, 0...0xFF))
            default: a.outages = try outages(v)
            }
        }
        return a
    }

    func device(_ node: JSONNode) throws(ScenarioError) -> DeviceSpec {
        var d = DeviceSpec(address: "", addressType: "public", adapter: "hci0", name: nil, alias: nil, appearance: nil, classOfDevice: nil,
                           icon: nil, paired: false, trusted: false, blocked: false, connectable: true, legacyPairing: false,
                           rssi: -60, txPower: nil, manufacturerData: [:], serviceData: [:], uuids: [], advertising: nil,
                           battery: nil, batteryTimeline: nil, gatt: [], mtu: 247, pairing: PairingSpec(), faults: FaultSpec(),
                           advertisingAtStart: true)
        let allowed = ["address", "addressType", "adapter", "name", "alias", "appearance", "class", "icon", "paired", "trusted",
                       "blocked", "connectable", "legacyPairing", "rssi", "txPower", "manufacturerData", "serviceData", "uuids",
                       "advertising", "battery", "gatt", "mtu", "pairing", "faults", "advertisingAtStart", "comment", "smp", "improv"]
        let members = try object(node, allowed: allowed)
        guard members.contains(where: { $0.key == "address" }) else { throw fail(node, "missing member \"address\"") }
        for (k, v) in members {
            switch k {
            case "address": d.address = try address(v)
            case "addressType": d.addressType = try oneOf(v, ["public", "random"], what: "address type")
            case "adapter": d.adapter = try string(v)
            case "name": d.name = try string(v)
            case "alias": d.alias = try string(v)
            case "appearance": d.appearance = UInt16(try integer(v, 0...0xFFFF))
            case "class": d.classOfDevice = UInt32(try integer(v, 0...0xFFFFFF))
            case "icon": d.icon = try string(v)
            case "paired": d.paired = try bool(v)
            case "trusted": d.trusted = try bool(v)
            case "blocked": d.blocked = try bool(v)
            case "connectable": d.connectable = try bool(v)
            case "legacyPairing": d.legacyPairing = try bool(v)
            case "rssi": d.rssi = Int16(try integer(v, -127...20))
            case "txPower": d.txPower = Int16(try integer(v, -127...20))
            case "manufacturerData": d.manufacturerData = try manufacturerData(v)
            case "serviceData": d.serviceData = try serviceData(v)
            case "uuids":
                for u in try array(v) { d.uuids.append(try uuid(u)) }
            case "advertising": d.advertising = try advertising(v)
            case "battery":
                if case .object = v.value {
                    for (bk, bv) in try object(v, allowed: ["percentage", "timeline", "repeatEvery"]) {
                        switch bk {
                        case "percentage": d.battery = UInt8(try integer(bv, 0...100))
                        case "timeline":
                            var events: [ValueEvent] = []
                            for e in try array(bv) {
                                var at: Double?
                                var pct: UInt8?
                                for (ek, ev) in try object(e, allowed: ["at", "percentage"]) {
                                    if ek == "at" { at = try seconds(ev) } else { pct = UInt8(try integer(ev, 0...100)) }
                                }
                                guard let at, let pct else { throw fail(e, "a battery event needs \"at\" and \"percentage\"") }
                                events.append(ValueEvent(at: at, value: [pct]))
                            }
                            d.batteryTimeline = Timeline(events: events, repeatEvery: d.batteryTimeline?.repeatEvery)
                        default:
                            let r = try seconds(bv)
                            d.batteryTimeline = Timeline(events: d.batteryTimeline?.events ?? [], repeatEvery: r)
                        }
                    }
                    if d.battery == nil { throw fail(v, "missing member \"percentage\"") }
                } else {
                    d.battery = UInt8(try integer(v, 0...100))
                }
            case "gatt":
                for s in try array(v) { d.gatt.append(try service(s)) }
            case "mtu": d.mtu = UInt16(try integer(v, 23...517))
            case "pairing": d.pairing = try pairing(v)
            case "faults": d.faults = try faults(v)
            case "advertisingAtStart": d.advertisingAtStart = try bool(v)
            case "comment": d.comment = try string(v)
            case "smp": d.smp = try smp(v)
            case "improv": d.improv = try improv(v)
            default: break
            }
        }
        if d.smp != nil {
            // The SMP service as Zephyr's mcumgr BLE transport registers it.
            let service = "8d53dc1d-1db7-4cd3-868b-8a527460aa84", characteristic = "da2e7828-fbce-4e01-ae9e-261174997c48"
            if d.gatt.contains(where: { $0.uuid == service }) {
                throw fail(node["gatt"] ?? node, "a device with \"smp\" has the SMP service already; leave it out of \"gatt\"")
            }
            d.gatt.append(ServiceSpec(uuid: service, primary: true, characteristics: [
                CharacteristicSpec(uuid: characteristic, flags: ["write-without-response", "notify"], value: [], descriptors: [],
                                   notifications: nil, onWrite: [], readError: nil),
            ]))
        }
        if let improv = d.improv {
            // Improv's service, its five characteristics, and what the device advertises.
            let base = "00467768-6228-2272-4663-27747826800"
            if d.gatt.contains(where: { $0.uuid == base + "0" }) {
                throw fail(node["gatt"] ?? node, "a device with \"improv\" has the Improv service already; leave it out of \"gatt\"")
            }
            d.gatt.append(ServiceSpec(uuid: base + "0", primary: true, characteristics: [
                CharacteristicSpec(uuid: base + "1", flags: ["read", "notify"], value: [improv.state]),
                CharacteristicSpec(uuid: base + "2", flags: ["read", "notify"], value: [0]),
                CharacteristicSpec(uuid: base + "3", flags: ["write"], value: []),
                CharacteristicSpec(uuid: base + "4", flags: ["read", "notify"], value: []),
                CharacteristicSpec(uuid: base + "5", flags: ["read"], value: [improv.capabilities]),
            ]))
            if !d.uuids.contains(base + "0") { d.uuids.append(base + "0") }
            d.serviceData["00004677-0000-1000-8000-00805f9b34fb"] = [improv.state, improv.capabilities, 0, 0, 0, 0]
        }
        return d
    }

    func improv(_ node: JSONNode) throws(ScenarioError) -> ImprovSpec {
        var s = ImprovSpec()
        for (k, v) in try object(node, allowed: ["state", "authorizeAfter", "networks", "url", "connectTime", "capabilities", "comment"]) {
            switch k {
            case "state":
                s.state = try oneOf(v, ["authorizationRequired", "authorized"], what: "Improv state") == "authorized" ? 2 : 1
            case "authorizeAfter": s.authorizeAfter = try seconds(v)
            case "networks":
                guard case let .object(members) = v.value else { throw fail(v, "expected an object of SSID → password, found \(v.typeName)") }
                for (ssid, password) in members {
                    guard (1...32).contains(ssid.utf8.count) else { throw fail(v, "an SSID has 1 to 32 bytes: \"\(ssid)\"") }
                    s.networks[ssid] = try string(password)
                }
            case "url": s.url = try string(v)
            case "connectTime": s.connectTime = try seconds(v)
            case "capabilities": s.capabilities = UInt8(try integer(v, 0...15))
            default: break
            }
        }
        return s
    }

    func smp(_ node: JSONNode) throws(ScenarioError) -> SMPSpec {
        var s = SMPSpec()
        for (k, v) in try object(node, allowed: ["version", "hash", "bufferSize", "bufferCount", "faults", "bootTime", "comment"]) {
            switch k {
            case "version":
                s.version = try string(v)
                let parts = s.version.split(separator: ".", omittingEmptySubsequences: false)
                guard (3...4).contains(parts.count), parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isNumber) && $0.count <= 10 }) else {
                    throw fail(v, "an image version is major.minor.revision or major.minor.revision.build, found \"\(s.version)\"")
                }
            case "hash":
                let h = try hex(v)
                guard h.count == 32 else { throw fail(v, "an image hash is 32 bytes (SHA-256), found \(h.count)") }
                s.hash = h
            case "bufferSize": s.bufferSize = Int(try integer(v, 64...65_535))
            case "bufferCount": s.bufferCount = Int(try integer(v, 1...64))
            case "bootTime": s.bootTime = try seconds(v)
            case "faults":
                for (fk, fv) in try object(v, allowed: ["disconnectAfterBytes", "busyChunks", "badHash"]) {
                    switch fk {
                    case "disconnectAfterBytes": s.disconnectAfterBytes = Int(try integer(fv, 1...16_777_216))
                    case "busyChunks": s.busyChunks = Int(try integer(fv, 0...1_000))
                    default: s.badHash = try bool(fv)
                    }
                }
            default: break
            }
        }
        return s
    }

    func manufacturerData(_ node: JSONNode) throws(ScenarioError) -> [UInt16: [UInt8]] {
        guard case let .object(members) = node.value else { throw fail(node, "expected an object of company id → hex bytes, found \(node.typeName)") }
        var out: [UInt16: [UInt8]] = [:]
        for (k, v) in members {
            let id: UInt16?
            if k.lowercased().hasPrefix("0x") { id = UInt16(k.dropFirst(2), radix: 16) } else { id = UInt16(k) }
            guard let company = id else { throw fail(v, "invalid company id \"\(k)\" (expected e.g. \"0x0499\" or \"1177\")") }
            out[company] = try hex(v)
        }
        return out
    }

    func serviceData(_ node: JSONNode) throws(ScenarioError) -> [String: [UInt8]] {
        guard case let .object(members) = node.value else { throw fail(node, "expected an object of UUID → hex bytes, found \(node.typeName)") }
        var out: [String: [UInt8]] = [:]
        for (k, v) in members {
            let u: String
            do { u = try BluetoothUUID(parsing: k).string } catch { throw fail(v, "service data key: \(error.description)") }
            out[u] = try hex(v)
        }
        return out
    }

    func advertising(_ node: JSONNode) throws(ScenarioError) -> Timeline<AdvertisementEvent> {
        try timeline(node) { (e) throws(ScenarioError) -> AdvertisementEvent in
            var ev = AdvertisementEvent(at: 0)
            var hasAt = false
            for (ek, evn) in try object(e, allowed: ["at", "rssi", "txPower", "name", "manufacturerData", "serviceData", "uuids", "present"]) {
                switch ek {
                case "at": ev.at = try seconds(evn); hasAt = true
                case "rssi": ev.rssi = Int16(try integer(evn, -127...20))
                case "txPower": ev.txPower = Int16(try integer(evn, -127...20))
                case "name": ev.name = try string(evn)
                case "manufacturerData": ev.manufacturerData = try manufacturerData(evn)
                case "serviceData": ev.serviceData = try serviceData(evn)
                case "uuids":
                    var list: [String] = []
                    for u in try array(evn) { list.append(try uuid(u)) }
                    ev.uuids = list
                default: ev.present = try bool(evn)
                }
            }
            guard hasAt else { throw fail(e, "missing member \"at\"") }
            return ev
        }
    }

    func valueTimeline(_ node: JSONNode) throws(ScenarioError) -> Timeline<ValueEvent> {
        try timeline(node) { (e) throws(ScenarioError) -> ValueEvent in
            var at: Double?
            var value: [UInt8]?
            for (ek, evn) in try object(e, allowed: ["at", "value"]) {
                if ek == "at" { at = try seconds(evn) } else { value = try hex(evn) }
            }
            guard let at, let value else { throw fail(e, "an event needs \"at\" and \"value\"") }
            return ValueEvent(at: at, value: value)
        }
    }

    /// `{"timeline": [events…], "repeatEvery": s}` with events in time order
    /// and a repeat period longer than the last event.
    func timeline<Event: TimedEvent>(
        _ node: JSONNode, _ event: (JSONNode) throws(ScenarioError) -> Event
    ) throws(ScenarioError) -> Timeline<Event> {
        var t = Timeline<Event>(events: [], repeatEvery: nil)
        for (k, v) in try object(node, allowed: ["timeline", "repeatEvery"]) {
            if k == "repeatEvery" {
                let r = try seconds(v)
                guard r > 0 else { throw fail(v, "repeatEvery must be greater than 0") }
                t.repeatEvery = r
                continue
            }
            var last = -1.0
            for e in try array(v) {
                let ev = try event(e)
                guard ev.at >= last else { throw fail(e["at"] ?? e, "events must be in time order (\(ev.at) comes after \(last))") }
                last = ev.at
                t.events.append(ev)
            }
        }
        if let r = t.repeatEvery, let lastEvent = t.events.last, lastEvent.at >= r {
            throw fail(node["repeatEvery"] ?? node, "repeatEvery (\(r)) must be greater than the last event time (\(lastEvent.at))")
        }
        return t
    }

    func flags(_ node: JSONNode, allowed: [String]) throws(ScenarioError) -> [String] {
        var out: [String] = []
        for f in try array(node) {
            let s = try string(f)
            guard allowed.contains(s) else {
                throw fail(f, "unknown flag \"\(s)\" (expected one of \(allowed.joined(separator: ", ")))")
            }
            out.append(s)
        }
        return out
    }

    func value(_ node: JSONNode, text: JSONNode?) throws(ScenarioError) -> [UInt8] {
        if let text { return Array(try string(text).utf8) }
        return try hex(node)
    }

    func service(_ node: JSONNode) throws(ScenarioError) -> ServiceSpec {
        var s = ServiceSpec(uuid: "", primary: true, characteristics: [])
        let members = try object(node, allowed: ["uuid", "primary", "characteristics", "comment"])
        guard members.contains(where: { $0.key == "uuid" }) else { throw fail(node, "missing member \"uuid\"") }
        for (k, v) in members {
            switch k {
            case "uuid": s.uuid = try uuid(v)
            case "primary": s.primary = try bool(v)
            case "characteristics":
                for c in try array(v) { s.characteristics.append(try characteristic(c)) }
            default: break
            }
        }
        return s
    }

    func characteristic(_ node: JSONNode) throws(ScenarioError) -> CharacteristicSpec {
        var c = CharacteristicSpec(uuid: "", flags: ["read"], value: [], descriptors: [], notifications: nil, onWrite: [], readError: nil)
        let members = try object(node, allowed: ["uuid", "flags", "value", "text", "descriptors", "notifications", "onWrite", "readError", "comment"])
        guard members.contains(where: { $0.key == "uuid" }) else { throw fail(node, "missing member \"uuid\"") }
        for (k, v) in members {
            switch k {
            case "uuid": c.uuid = try uuid(v)
            case "flags": c.flags = try flags(v, allowed: characteristicFlags)
            case "value": c.value = try hex(v)
            case "text": c.value = Array(try string(v).utf8)
            case "descriptors":
                for dn in try array(v) {
                    var dsc = DescriptorSpec(uuid: "", flags: ["read"], value: [])
                    let dm = try object(dn, allowed: ["uuid", "flags", "value", "text"])
                    guard dm.contains(where: { $0.key == "uuid" }) else { throw fail(dn, "missing member \"uuid\"") }
                    for (dk, dv) in dm {
                        switch dk {
                        case "uuid": dsc.uuid = try uuid(dv)
                        case "flags": dsc.flags = try flags(dv, allowed: descriptorFlags)
                        case "value": dsc.value = try hex(dv)
                        default: dsc.value = Array(try string(dv).utf8)
                        }
                    }
                    c.descriptors.append(dsc)
                }
            case "notifications": c.notifications = try valueTimeline(v)
            case "readError": c.readError = try errorSpec(v)
            case "onWrite":
                for rn in try array(v) {
                    var rule = WriteRule(match: nil, error: nil, store: true, actions: [])
                    for (rk, rv) in try object(rn, allowed: ["match", "error", "store", "then"]) {
                        switch rk {
                        case "match": rule.match = try hex(rv)
                        case "error": rule.error = try errorSpec(rv)
                        case "store": rule.store = try bool(rv)
                        default:
                            for an in try array(rv) {
                                var action = WriteAction(characteristic: nil, value: [], after: 0)
                                var hasValue = false
                                for (ak, av) in try object(an, allowed: ["characteristic", "value", "after"]) {
                                    switch ak {
                                    case "characteristic": action.characteristic = try uuid(av)
                                    case "value": action.value = try hex(av); hasValue = true
                                    default: action.after = try seconds(av)
                                    }
                                }
                                guard hasValue else { throw fail(an, "missing member \"value\"") }
                                rule.actions.append(action)
                            }
                        }
                    }
                    c.onWrite.append(rule)
                }
            default: break
            }
        }
        if c.notifications != nil && !c.flags.contains("notify") && !c.flags.contains("indicate") {
            throw fail(node["notifications"] ?? node, "notifications need the \"notify\" or \"indicate\" flag")
        }
        return c
    }

    func pairing(_ node: JSONNode) throws(ScenarioError) -> PairingSpec {
        var p = PairingSpec()
        for (k, v) in try object(node, allowed: ["method", "passkey", "pinCode", "accept", "delay"]) {
            switch k {
            case "method":
                let m = try oneOf(v, PairingSpec.Method.allCases.map(\.rawValue), what: "pairing method")
                p.method = PairingSpec.Method(rawValue: m) ?? .justWorks
            case "passkey": p.passkey = UInt32(try integer(v, 0...999_999))
            case "pinCode":
                p.pinCode = try string(v)
                guard (1...16).contains(p.pinCode.utf8.count) else { throw fail(v, "a PIN code has 1 to 16 characters") }
            case "accept": p.accept = try bool(v)
            default: p.delay = try seconds(v)
            }
        }
        return p
    }

    func faults(_ node: JSONNode) throws(ScenarioError) -> FaultSpec {
        var f = FaultSpec()
        for (k, v) in try object(node, allowed: ["connectFailures", "connectError", "disconnectAfter", "pairError", "servicesUnresolved"]) {
            switch k {
            case "servicesUnresolved": f.servicesUnresolved = try bool(v)
            case "connectFailures": f.connectFailures = Int(try integer(v, 0...1_000_000))
            case "connectError": f.connectError = try errorSpec(v)
            case "disconnectAfter": f.disconnectAfter = try seconds(v)
            default: f.pairError = try errorSpec(v)
            }
        }
        return f
    }
}

extension String {
    init(format2 value: Int) {
        let s = String(value & 0xFF, radix: 16, uppercase: true)
        self = s.count == 1 ? "0" + s : s
    }
}
