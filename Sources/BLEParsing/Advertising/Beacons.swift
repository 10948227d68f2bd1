import Vocabulary
/// Apple iBeacon: manufacturer data of company 0x004C starting `02 15`,
/// then proximity UUID (16, big-endian), major (uint16 BE), minor (uint16 BE),
/// measured power at 1 m (sint8 dBm).
public enum IBeacon {
    public static let companyID: UInt16 = 0x004C

    public static func matches(_ data: [UInt8]) -> Bool { data.count >= 2 && data[0] == 0x02 && data[1] == 0x15 }

    public static func decode(_ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        var r = ByteReader(data, context: "ibeacon")
        let type = try r.u8("beacon type")
        let length = try r.u8("beacon length")
        guard type == 0x02, length == 0x15 else {
            throw DecodeError.invalidValue(context: "ibeacon", offset: 0, expected: "type 0x02 length 0x15",
                                           found: "\(hexString(type)) \(hexString(length))")
        }
        let uuid = BluetoothUUID(high: try r.u64BE("proximity UUID"), low: try r.u64BE("proximity UUID"))
        let major = try r.u16BE("major")
        let minor = try r.u16BE("minor")
        let power = try r.i8("measured power")
        try r.expectEnd()
        return AdvertisementModel(
            formatName: "ibeacon", modelName: "ibeacon",
            readings: [Reading(.txPower, Double(power), label: "measured_power_1m")],
            deferredFields: {
                [("uuid", .string(uuid.string)), ("major", .int(Int(major))), ("minor", .int(Int(minor))),
                 ("measured_power", .int(Int(power)))]
            })
    }
}

/// Google Eddystone (service data UUID 0xFEAA): UID (0x00), URL (0x10),
/// TLM (0x20, unencrypted version 0x00), EID (0x30).
public enum Eddystone {
    public static let uuid: UInt16 = 0xFEAA

    static let schemes = ["http://www.", "https://www.", "http://", "https://"]
    static let expansions = [".com/", ".org/", ".edu/", ".net/", ".info/", ".biz/", ".gov/",
                             ".com", ".org", ".edu", ".net", ".info", ".biz", ".gov"]

    public static func decode(_ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        var r = ByteReader(data, context: "eddystone")
        let frame = try r.u8("frame type")
        switch frame {
        case 0x00:
            let tx = try r.i8("tx power at 0 m")
            let ns = try r.bytes(10, "namespace")
            let inst = try r.bytes(6, "instance")
            // Two reserved bytes are optional (RFU).
            if r.remaining != 0 && r.remaining != 2 {
                throw DecodeError.trailingBytes(context: "eddystone uid", offset: r.offset, extra: r.remaining)
            }
            return AdvertisementModel(
                formatName: "eddystone", modelName: "eddystone_uid",
                readings: [Reading(.txPower, Double(tx), label: "at_0m")],
                fields: [("frame", .string("uid")), ("tx_power", .int(Int(tx))), ("namespace", .bytes(Array(ns))),
                         ("instance", .bytes(Array(inst)))])
        case 0x10:
            let tx = try r.i8("tx power at 0 m")
            let schemeOffset = r.offset
            let scheme = try r.u8("URL scheme")
            guard Int(scheme) < schemes.count else {
                throw DecodeError.reserved(context: "eddystone url", offset: schemeOffset, field: "URL scheme prefix",
                                           found: hexString(scheme))
            }
            var url = schemes[Int(scheme)]
            while !r.isAtEnd {
                let at = r.offset
                let c = try r.u8()
                if Int(c) < expansions.count {
                    url += expansions[Int(c)]
                } else if c > 0x20 && c < 0x7F {
                    url.unicodeScalars.append(Unicode.Scalar(c))
                } else {
                    throw DecodeError.reserved(context: "eddystone url", offset: at, field: "URL character or expansion code",
                                               found: hexString(c))
                }
            }
            return AdvertisementModel(
                formatName: "eddystone", modelName: "eddystone_url",
                readings: [Reading(.txPower, Double(tx), label: "at_0m")],
                fields: [("frame", .string("url")), ("tx_power", .int(Int(tx))), ("url", .string(url))])
        case 0x20:
            let version = try r.u8("TLM version")
            guard version == 0 else {
                throw DecodeError(kind: .unsupported, context: "eddystone tlm", offset: 1,
                                  expected: "unencrypted TLM (version 0x00)", found: "version \(hexString(version))")
            }
            let mv = try r.u16BE("battery voltage")
            let tRaw = try r.i16BE("beacon temperature")
            let advCount = try r.u32BE("advertising PDU count")
            let secCount = try r.u32BE("time since power-on")
            try r.expectEnd()
            var readings: [Reading] = []
            var fields: [(String, FieldValue)] = [("frame", .string("tlm")), ("version", .int(0))]
            if mv != 0 {
                readings.append(Reading(.voltage, Adv.scaled(mv, 3)))
                fields.append(("battery_mv", .int(Int(mv))))
            } else { fields.append(("battery_mv", .null)) }
            if tRaw != Int16.min {
                let t = Double(tRaw) / 256
                readings.append(Reading(.temperature, t))
                fields.append(("temperature", .number(t)))
            } else { fields.append(("temperature", .null)) }
            let uptime = Adv.scaled(secCount, 1)
            readings.append(Reading(.count, Double(advCount), label: "advertisements"))
            readings.append(Reading(.duration, uptime, label: "uptime"))
            fields += [("adv_count", .int(Int(advCount))), ("uptime_s", .number(uptime))]
            return AdvertisementModel(formatName: "eddystone", modelName: "eddystone_tlm", readings: readings, fields: fields)
        case 0x30:
            let tx = try r.i8("tx power at 0 m")
            let eid = try r.bytes(8, "ephemeral identifier")
            try r.expectEnd()
            return AdvertisementModel(
                formatName: "eddystone", modelName: "eddystone_eid",
                readings: [Reading(.txPower, Double(tx), label: "at_0m")],
                fields: [("frame", .string("eid")), ("tx_power", .int(Int(tx))), ("eid", .bytes(Array(eid)))])
        default:
            throw DecodeError.reserved(context: "eddystone", offset: 0, field: "frame type", found: hexString(frame))
        }
    }
}
