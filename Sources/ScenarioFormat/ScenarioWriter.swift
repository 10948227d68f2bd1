import Vocabulary

/// Writes a ``Scenario`` as scenario JSON (docs/SCENARIOS.md) that
/// ``Scenario/parse(_:fileName:)`` reads back to the same model: what
/// `blecompanion record` produces. Only members that differ from the
/// loader's defaults are written; UUIDs of the Bluetooth base are shortened
/// to their 16- or 32-bit form, bytes are lower-case hex, times are rounded
/// to the millisecond (rounding keeps timelines in order).
extension Scenario {
    public func jsonText() -> String {
        var top: [(String, JSONValue)] = [("$schema", .string("./scenario.schema.json")), ("name", .string(name))]
        if let description { top.append(("description", .string(description))) }
        if let duration { top.append(("duration", .seconds(duration))) }
        let defaults = Settings()
        var set: [(String, JSONValue)] = []
        if settings.temporaryDeviceTimeout != defaults.temporaryDeviceTimeout {
            set.append(("temporaryDeviceTimeout", .seconds(settings.temporaryDeviceTimeout)))
        }
        if settings.connectDelay != defaults.connectDelay { set.append(("connectDelay", .seconds(settings.connectDelay))) }
        if settings.serviceResolveDelay != defaults.serviceResolveDelay {
            set.append(("serviceResolveDelay", .seconds(settings.serviceResolveDelay)))
        }
        if settings.disconnectDelay != defaults.disconnectDelay { set.append(("disconnectDelay", .seconds(settings.disconnectDelay))) }
        if !set.isEmpty { top.append(("settings", .object(set))) }
        var bluetoothd: [(String, JSONValue)] = []
        if !outages.isEmpty { bluetoothd.append(("outages", Self.outagesJSON(outages))) }
        if experimental { bluetoothd.append(("experimental", .bool(true))) }
        if bluetoothdVersion != .v5_66 { bluetoothd.append(("version", .string(bluetoothdVersion.rawValue))) }
        if replyDelay > 0 { bluetoothd.append(("replyDelay", .seconds(replyDelay))) }
        if !bluetoothd.isEmpty { top.append(("bluetoothd", .object(bluetoothd))) }
        top.append(("adapters", .array(adapters.map(Self.adapterJSON))))
        top.append(("devices", .array(devices.map(Self.deviceJSON))))
        return JSONValue.object(top).text
    }

    static func outagesJSON(_ list: [Outage]) -> JSONValue {
        .array(list.map { o in
            var m: [(String, JSONValue)] = [("at", .seconds(o.at))]
            if let r = o.returnAt { m.append(("returnAt", .seconds(r))) }
            if o.killed { m.append(("killed", .bool(true))) }
            return .object(m)
        })
    }

    static func adapterJSON(_ a: AdapterSpec) -> JSONValue {
        let d = AdapterSpec(id: a.id, address: a.address)
        var m: [(String, JSONValue)] = [("id", .string(a.id)), ("address", .string(a.address))]
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
        if !a.uuids.isEmpty { m.append(("uuids", .array(a.uuids.map { .string(BluetoothUUID.short($0)) }))) }
        if a.manufacturer != d.manufacturer { m.append(("manufacturer", .int(Int64(a.manufacturer)))) }
        if a.version != d.version { m.append(("version", .int(Int64(a.version)))) }
        if !a.outages.isEmpty { m.append(("outages", outagesJSON(a.outages))) }
        return .object(m)
    }

    static func deviceJSON(_ dev: DeviceSpec) -> JSONValue {
        let d = DeviceSpec(address: dev.address)
        var m: [(String, JSONValue)] = []
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
        if !dev.uuids.isEmpty { m.append(("uuids", .array(dev.uuids.map { .string(BluetoothUUID.short($0)) }))) }
        if !dev.manufacturerData.isEmpty { m.append(("manufacturerData", manufacturerJSON(dev.manufacturerData))) }
        if !dev.serviceData.isEmpty { m.append(("serviceData", serviceDataJSON(dev.serviceData))) }
        if let t = dev.advertising {
            m.append(("advertising", timelineJSON(t) { e in
                var f: [(String, JSONValue)] = [("at", .seconds(e.at))]
                if let p = e.present { f.append(("present", .bool(p))) }
                if let v = e.rssi { f.append(("rssi", .int(Int64(v)))) }
                if let v = e.txPower { f.append(("txPower", .int(Int64(v)))) }
                if let v = e.name { f.append(("name", .string(v))) }
                if let v = e.uuids { f.append(("uuids", .array(v.map { .string(BluetoothUUID.short($0)) }))) }
                if let v = e.manufacturerData { f.append(("manufacturerData", manufacturerJSON(v))) }
                if let v = e.serviceData { f.append(("serviceData", serviceDataJSON(v))) }
                return f
            }))
        }
        if let b = dev.battery {
            if let t = dev.batteryTimeline {
                var bm: [(String, JSONValue)] = [("percentage", .int(Int64(b)))]
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

    static func serviceJSON(_ s: ServiceSpec) -> JSONValue {
        var m: [(String, JSONValue)] = [("uuid", .string(BluetoothUUID.short(s.uuid)))]
        if !s.primary { m.append(("primary", .bool(false))) }
        m.append(("characteristics", .array(s.characteristics.map { c in
            var cm: [(String, JSONValue)] = [("uuid", .string(BluetoothUUID.short(c.uuid))), ("flags", .array(c.flags.map { .string($0) }))]
            cm.append(("value", .hex(c.value)))
            if !c.descriptors.isEmpty {
                cm.append(("descriptors", .array(c.descriptors.map { d in
                    .object([("uuid", .string(BluetoothUUID.short(d.uuid))), ("flags", .array(d.flags.map { .string($0) })), ("value", .hex(d.value))])
                })))
            }
            if let n = c.notifications {
                cm.append(("notifications", timelineJSON(n) { e in [("at", .seconds(e.at)), ("value", .hex(e.value))] }))
            }
            if let e = c.readError { cm.append(("readError", .object([("name", .string(e.name)), ("message", .string(e.message))]))) }
            // Write rules are behaviour a recording cannot observe; written for completeness.
            if !c.onWrite.isEmpty {
                cm.append(("onWrite", .array(c.onWrite.map { r in
                    var rm: [(String, JSONValue)] = []
                    if let match = r.match { rm.append(("match", .hex(match))) }
                    if let e = r.error { rm.append(("error", .object([("name", .string(e.name)), ("message", .string(e.message))]))) }
                    if !r.store { rm.append(("store", .bool(false))) }
                    if !r.actions.isEmpty {
                        rm.append(("then", .array(r.actions.map { a in
                            var am: [(String, JSONValue)] = []
                            if let t = a.characteristic { am.append(("characteristic", .string(BluetoothUUID.short(t)))) }
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

    static func timelineJSON<E>(_ t: Timeline<E>, _ event: (E) -> [(String, JSONValue)]) -> JSONValue {
        var m: [(String, JSONValue)] = [("timeline", .array(t.events.map { .object(event($0)) }))]
        if let r = t.repeatEvery { m.append(("repeatEvery", .seconds(r))) }
        return .object(m)
    }

    static func manufacturerJSON(_ data: [UInt16: [UInt8]]) -> JSONValue {
        .object(data.sorted { $0.key < $1.key }.map { ("0x" + Hex.string([UInt8($0.key >> 8), UInt8($0.key & 0xFF)]), .hex($0.value)) })
    }

    static func serviceDataJSON(_ data: [String: [UInt8]]) -> JSONValue {
        .object(data.sorted { $0.key < $1.key }.map { (BluetoothUUID.short($0.key), .hex($0.value)) })
    }
}

