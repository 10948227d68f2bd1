/// Writes a ``Scenario`` as scenario JSON (docs/SCENARIOS.md) that
/// ``Scenario/parse(_:fileName:)`` reads back to the same model: what
/// `blecompanion record` produces. Only members that differ from the
/// loader's defaults are written; UUIDs of the Bluetooth base are shortened
/// to their 16- or 32-bit form, bytes are lower-case hex, times are rounded
/// to the millisecond (rounding keeps timelines in order).
extension Scenario {
    public func jsonText() -> String {
        var top: [(String, JSONOut)] = [("$schema", .string("./scenario.schema.json")), ("name", .string(name))]
        if let description { top.append(("description", .string(description))) }
        if let duration { top.append(("duration", .seconds(duration))) }
        let defaults = Settings()
        var set: [(String, JSONOut)] = []
        if settings.temporaryDeviceTimeout != defaults.temporaryDeviceTimeout {
            set.append(("temporaryDeviceTimeout", .seconds(settings.temporaryDeviceTimeout)))
        }
        if settings.connectDelay != defaults.connectDelay { set.append(("connectDelay", .seconds(settings.connectDelay))) }
        if settings.serviceResolveDelay != defaults.serviceResolveDelay {
            set.append(("serviceResolveDelay", .seconds(settings.serviceResolveDelay)))
        }
        if settings.disconnectDelay != defaults.disconnectDelay { set.append(("disconnectDelay", .seconds(settings.disconnectDelay))) }
        if !set.isEmpty { top.append(("settings", .object(set))) }
        var bluetoothd: [(String, JSONOut)] = []
        if !outages.isEmpty { bluetoothd.append(("outages", Self.outagesJSON(outages))) }
        if experimental { bluetoothd.append(("experimental", .bool(true))) }
        if bluetoothdVersion != .v5_66 { bluetoothd.append(("version", .string(bluetoothdVersion.rawValue))) }
        if replyDelay > 0 { bluetoothd.append(("replyDelay", .seconds(replyDelay))) }
        if !bluetoothd.isEmpty { top.append(("bluetoothd", .object(bluetoothd))) }
        top.append(("adapters", .array(adapters.map(Self.adapterJSON))))
        top.append(("devices", .array(devices.map(Self.deviceJSON))))
        var out = ""
        JSONOut.object(top).write(to: &out, indent: 0)
        return out + "\n"
    }

    static func outagesJSON(_ list: [Outage]) -> JSONOut {
        .array(list.map { o in
            var m: [(String, JSONOut)] = [("at", .seconds(o.at))]
            if let r = o.returnAt { m.append(("returnAt", .seconds(r))) }
            if o.killed { m.append(("killed", .bool(true))) }
            return .object(m)
        })
    }

    static func adapterJSON(_ a: AdapterSpec) -> JSONOut {
        let d = AdapterSpec(id: a.id, address: a.address)
        var m: [(String, JSONOut)] = [("id", .string(a.id)), ("address", .string(a.address))]
        if a.addressType != d.addressType { m.append(("addressType", .string(a.addressType))) }
        m.append(("name", .string(a.name)))
        if let alias = a.alias, alias != a.name { m.append(("alias", .string(alias))) }
        if a.classOfDevice != d.classOfDevice { m.append(("class", .int(Int64(a.classOfDevice)))) }
        if a.powered != d.powered { m.append(("powered", .bool(a.powered))) }
        if a.discoverable != d.discoverable { m.append(("discoverable", .bool(a.discoverable))) }
        if a.discoverableTimeout != d.discoverableTimeout { m.append(("discoverableTimeout", .int(Int64(a.discoverableTimeout)))) }
        if a.pairable != d.pairable { m.append(("pairable", .bool(a.pairable))) }
        if a.pairableTimeout != d.pairableTimeout { m.append(("pairableTimeout", .int(Int64(a.pairableTimeout)))) }
        if let mod = a.modalias, mod != d.modalias { m.append(("modalias", .string(mod))) }
        if a.roles != d.roles { m.append(("roles", .array(a.roles.map { .string($0) }))) }
        if !a.uuids.isEmpty { m.append(("uuids", .array(a.uuids.map { .string(shortUUID($0)) }))) }
        if a.manufacturer != d.manufacturer { m.append(("manufacturer", .int(Int64(a.manufacturer)))) }
        if a.version != d.version { m.append(("version", .int(Int64(a.version)))) }
        if !a.outages.isEmpty { m.append(("outages", outagesJSON(a.outages))) }
        return .object(m)
    }

    static func deviceJSON(_ dev: DeviceSpec) -> JSONOut {
        let d = DeviceSpec(address: dev.address)
        var m: [(String, JSONOut)] = []
        if let c = dev.comment { m.append(("comment", .string(c))) }
        m.append(("address", .string(dev.address)))
        if dev.addressType != d.addressType { m.append(("addressType", .string(dev.addressType))) }
        if dev.adapter != d.adapter { m.append(("adapter", .string(dev.adapter))) }
        if let v = dev.name { m.append(("name", .string(v))) }
        if let v = dev.alias { m.append(("alias", .string(v))) }
        if let v = dev.appearance { m.append(("appearance", .int(Int64(v)))) }
        if let v = dev.classOfDevice { m.append(("class", .int(Int64(v)))) }
        if let v = dev.icon { m.append(("icon", .string(v))) }
        if dev.paired { m.append(("paired", .bool(true))) }
        if dev.trusted { m.append(("trusted", .bool(true))) }
        if dev.blocked { m.append(("blocked", .bool(true))) }
        if !dev.connectable { m.append(("connectable", .bool(false))) }
        if dev.legacyPairing { m.append(("legacyPairing", .bool(true))) }
        if !dev.advertisingAtStart { m.append(("advertisingAtStart", .bool(false))) }
        m.append(("rssi", .int(Int64(dev.rssi))))
        if let v = dev.txPower { m.append(("txPower", .int(Int64(v)))) }
        if !dev.uuids.isEmpty { m.append(("uuids", .array(dev.uuids.map { .string(shortUUID($0)) }))) }
        if !dev.manufacturerData.isEmpty { m.append(("manufacturerData", manufacturerJSON(dev.manufacturerData))) }
        if !dev.serviceData.isEmpty { m.append(("serviceData", serviceDataJSON(dev.serviceData))) }
        if let t = dev.advertising {
            m.append(("advertising", timelineJSON(t) { e in
                var f: [(String, JSONOut)] = [("at", .seconds(e.at))]
                if let p = e.present { f.append(("present", .bool(p))) }
                if let v = e.rssi { f.append(("rssi", .int(Int64(v)))) }
                if let v = e.txPower { f.append(("txPower", .int(Int64(v)))) }
                if let v = e.name { f.append(("name", .string(v))) }
                if let v = e.uuids { f.append(("uuids", .array(v.map { .string(shortUUID($0)) }))) }
                if let v = e.manufacturerData { f.append(("manufacturerData", manufacturerJSON(v))) }
                if let v = e.serviceData { f.append(("serviceData", serviceDataJSON(v))) }
                return f
            }))
        }
        if let b = dev.battery {
            if let t = dev.batteryTimeline {
                var bm: [(String, JSONOut)] = [("percentage", .int(Int64(b)))]
                bm.append(("timeline", .array(t.events.map { e in
                    .object([("at", .seconds(e.at)), ("percentage", .int(Int64(e.value.first ?? 0)))])
                })))
                if let r = t.repeatEvery { bm.append(("repeatEvery", .seconds(r))) }
                m.append(("battery", .object(bm)))
            } else {
                m.append(("battery", .int(Int64(b))))
            }
        }
        if !dev.gatt.isEmpty { m.append(("gatt", .array(dev.gatt.map(serviceJSON)))) }
        if dev.mtu != d.mtu { m.append(("mtu", .int(Int64(dev.mtu)))) }
        return .object(m)
    }

    static func serviceJSON(_ s: ServiceSpec) -> JSONOut {
        var m: [(String, JSONOut)] = [("uuid", .string(shortUUID(s.uuid)))]
        if !s.primary { m.append(("primary", .bool(false))) }
        m.append(("characteristics", .array(s.characteristics.map { c in
            var cm: [(String, JSONOut)] = [("uuid", .string(shortUUID(c.uuid))), ("flags", .array(c.flags.map { .string($0) }))]
            cm.append(("value", .hex(c.value)))
            if !c.descriptors.isEmpty {
                cm.append(("descriptors", .array(c.descriptors.map { d in
                    .object([("uuid", .string(shortUUID(d.uuid))), ("flags", .array(d.flags.map { .string($0) })), ("value", .hex(d.value))])
                })))
            }
            if let n = c.notifications {
                cm.append(("notifications", timelineJSON(n) { e in [("at", .seconds(e.at)), ("value", .hex(e.value))] }))
            }
            if let e = c.readError { cm.append(("readError", .object([("name", .string(e.name)), ("message", .string(e.message))]))) }
            // Write rules are behaviour a recording cannot observe; written for completeness.
            if !c.onWrite.isEmpty {
                cm.append(("onWrite", .array(c.onWrite.map { r in
                    var rm: [(String, JSONOut)] = []
                    if let match = r.match { rm.append(("match", .hex(match))) }
                    if let e = r.error { rm.append(("error", .object([("name", .string(e.name)), ("message", .string(e.message))]))) }
                    if !r.store { rm.append(("store", .bool(false))) }
                    if !r.actions.isEmpty {
                        rm.append(("then", .array(r.actions.map { a in
                            var am: [(String, JSONOut)] = []
                            if let t = a.characteristic { am.append(("characteristic", .string(shortUUID(t)))) }
                            am.append(("value", .hex(a.value)))
                            if a.after != 0 { am.append(("after", .seconds(a.after))) }
                            return .object(am)
                        })))
                    }
                    return .object(rm)
                })))
            }
            return .object(cm)
        })))
        return .object(m)
    }

    static func timelineJSON<E>(_ t: Timeline<E>, _ event: (E) -> [(String, JSONOut)]) -> JSONOut {
        var m: [(String, JSONOut)] = [("timeline", .array(t.events.map { .object(event($0)) }))]
        if let r = t.repeatEvery { m.append(("repeatEvery", .seconds(r))) }
        return .object(m)
    }

    static func manufacturerJSON(_ data: [UInt16: [UInt8]]) -> JSONOut {
        .object(data.sorted { $0.key < $1.key }.map { ("0x" + hex4($0.key.asInt), .hex($0.value)) })
    }

    static func serviceDataJSON(_ data: [String: [UInt8]]) -> JSONOut {
        .object(data.sorted { $0.key < $1.key }.map { (shortUUID($0.key), .hex($0.value)) })
    }
}

extension UInt16 {
    fileprivate var asInt: Int { Int(self) }
}

/// "0000180d-0000-1000-8000-00805f9b34fb" → "180d"; other UUIDs unchanged.
func shortUUID(_ uuid: String) -> String {
    let suffix = "-0000-1000-8000-00805f9b34fb"
    guard uuid.count == 36, uuid.hasSuffix(suffix) else { return uuid }
    let head = uuid.prefix(8)
    return head.hasPrefix("0000") ? String(head.dropFirst(4)) : String(head)
}

/// A JSON value to write, members in the order given.
enum JSONOut {
    case object([(String, JSONOut)])
    case array([JSONOut])
    case string(String)
    case int(Int64)
    case bool(Bool)
    /// Seconds, rounded to the millisecond.
    case seconds(Double)
    case hex([UInt8])

    /// Objects and arrays that fit on one line (≤ 100 characters, no
    /// nested arrays of objects) are written on one line.
    func write(to out: inout String, indent: Int) {
        switch self {
        case let .object(members):
            if members.isEmpty { out += "{}"; return }
            let one = compact()
            if one.count <= 100 && !hasNestedContainerArray { out += one; return }
            out += "{\n"
            for (i, (k, v)) in members.enumerated() {
                out += String(repeating: "  ", count: indent + 1) + quoted(k) + ": "
                v.write(to: &out, indent: indent + 1)
                out += i == members.count - 1 ? "\n" : ",\n"
            }
            out += String(repeating: "  ", count: indent) + "}"
        case let .array(items):
            if items.isEmpty { out += "[]"; return }
            let one = compact()
            if one.count <= 100 && !hasNestedContainerArray { out += one; return }
            out += "[\n"
            for (i, v) in items.enumerated() {
                out += String(repeating: "  ", count: indent + 1)
                v.write(to: &out, indent: indent + 1)
                out += i == items.count - 1 ? "\n" : ",\n"
            }
            out += String(repeating: "  ", count: indent) + "]"
        default:
            out += compact()
        }
    }

    /// An array of objects inside: keep one element per line.
    private var hasNestedContainerArray: Bool {
        switch self {
        case let .array(items): return items.contains { if case .object = $0 { return true } else { return $0.hasNestedContainerArray } }
        case let .object(members): return members.contains { $0.1.hasNestedContainerArray }
        default: return false
        }
    }

    func compact() -> String {
        switch self {
        case let .object(members): return "{ " + members.map { quoted($0.0) + ": " + $0.1.compact() }.joined(separator: ", ") + " }"
        case let .array(items): return "[" + items.map { $0.compact() }.joined(separator: ", ") + "]"
        case let .string(s): return quoted(s)
        case let .int(v): return String(v)
        case let .bool(b): return b ? "true" : "false"
        case let .seconds(t): return millis(t)
        case let .hex(bytes):
            let digits: [Character] = Array("0123456789abcdef")
            var s = ""
            s.reserveCapacity(bytes.count * 2)
            for b in bytes { s.append(digits[Int(b >> 4)]); s.append(digits[Int(b & 0xF)]) }
            return quoted(s)
        }
    }
}

/// 1.5 → "1.5", 2 → "2", 0.0004 → "0".
func millis(_ t: Double) -> String {
    guard t.isFinite else { return "0" }
    let ms = Int64((max(0, t) * 1000).rounded())
    let whole = ms / 1000, frac = ms % 1000
    if frac == 0 { return String(whole) }
    var f = String(frac)
    f = String(repeating: "0", count: 3 - f.count) + f
    while f.hasSuffix("0") { f.removeLast() }
    return "\(whole).\(f)"
}

/// A JSON string literal.
func quoted(_ s: String) -> String {
    var out = "\""
    for u in s.unicodeScalars {
        switch u {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if u.value < 0x20 {
                let h = String(u.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - h.count) + h
            } else {
                out.unicodeScalars.append(u)
            }
        }
    }
    return out + "\""
}
