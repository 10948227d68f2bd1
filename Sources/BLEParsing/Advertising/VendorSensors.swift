import Vocabulary
/// Govee thermo-hygrometers (manufacturer data; `data` excludes the company id).
///
/// * 0xEC88, 6 bytes (H5072/H5075): byte 0 reserved, bytes 1-3 a 24-bit
///   big-endian packed value (bit 23 = negative, rest = |t|·10000 + rh·10,
///   i.e. temperature = (v / 1000) / 10, humidity = (v % 1000) / 10), byte 4
///   battery (bit 7 = sensor error).
/// * 0xEC88, 7 or 9 bytes (H5074, H5051/H5052/H5071): byte 0 reserved,
///   temperature sint16 LE (0.01 °C), humidity uint16 LE (0.01 %), battery.
/// * 0x0001, 6 or 8 bytes starting `01 01` (H5100-H5105/H5108/H5110/H5174/
///   H5177/GV5179): packed value in bytes 2-4, battery byte 5.
/// * 0x0001, 9 bytes starting `01 01` (H5178): sensor id byte 2 (0 primary,
///   1 remote), packed value bytes 3-5, battery byte 6.
/// * 0x8801, 9 bytes (H5179): temperature sint16 LE at 4, humidity uint16 LE
///   at 6 (0.01), battery at 8.
/// Packed values outside -40...100 °C or with the error bit give no
/// temperature/humidity readings (field `sensor_error` = true).
public enum Govee {
    public static let companyIDs: Set<UInt16> = [0xEC88, 0x0001, 0x8801]

    public static func matches(companyID: UInt16, data: [UInt8]) -> Bool {
        switch companyID {
        case 0xEC88: return data.count == 6 || data.count == 7 || data.count == 9
        case 0x0001: return (data.count == 6 || data.count == 8 || data.count == 9) && data.starts(with: [0x01, 0x01])
        case 0x8801: return data.count == 9
        default: return false
        }
    }

    public static func decode(companyID: UInt16, data: [UInt8], name: String? = nil) throws(DecodeError)
        -> AdvertisementModel
    {
        let ctx = "govee"
        var r = ByteReader(data, context: ctx)
        switch (companyID, data.count) {
        case (0xEC88, 6):
            try r.skip(1, "reserved byte")
            return try packed(&r, model: modelName(name, fallback: "H5072/H5075"), sensorID: nil)
        case (0xEC88, 7), (0xEC88, 9):
            try r.skip(1, "reserved byte")
            let t = Adv.scaled(try r.i16("temperature"), 2)
            let h = Adv.scaled(try r.u16("humidity"), 2)
            let b = Double(try r.u8("battery"))
            let fallback = data.count == 7 ? "H5074" : "H5051/H5052/H5071"
            return AdvertisementModel(
                formatName: "govee", modelName: modelName(name, fallback: fallback),
                readings: [Reading(.temperature, t), Reading(.humidity, h), Reading(.battery, b)],
                fields: [("temperature", .number(t)), ("humidity", .number(h)), ("battery", .number(b))])
        case (0x0001, 6), (0x0001, 8):
            try r.skip(2, "header")
            return try packed(&r, model: modelName(name, fallback: data.count == 8 ? "H5108" : "H5101/H5102/H5177"),
                              sensorID: nil)
        case (0x0001, 9):
            try r.skip(2, "header")
            let sensor = try r.u8("sensor id")
            return try packed(&r, model: modelName(name, fallback: "H5178"), sensorID: sensor)
        case (0x8801, 9):
            try r.skip(4, "header")
            let t = Adv.scaled(try r.i16("temperature"), 2)
            let h = Adv.scaled(try r.u16("humidity"), 2)
            let b = Double(try r.u8("battery"))
            return AdvertisementModel(
                formatName: "govee", modelName: modelName(name, fallback: "H5179"),
                readings: [Reading(.temperature, t), Reading(.humidity, h), Reading(.battery, b)],
                fields: [("temperature", .number(t)), ("humidity", .number(h)), ("battery", .number(b))])
        default:
            throw DecodeError(kind: .unsupported, context: ctx, offset: nil,
                              expected: "a known Govee company id / payload length",
                              found: "company \(hexString(companyID)) with \(data.count) bytes")
        }
    }

    static let modelNames: [StaticString] = [
        "H5072", "H5075", "H5074", "H5051", "H5052", "H5071", "H5100", "H5101", "H5102", "H5103", "H5104",
        "H5105", "H5108", "H5110", "H5174", "H5177", "H5178", "H5179", "GV5179",
    ]

    static func modelName(_ name: String?, fallback: String) -> String {
        guard let name else { return fallback }
        if ASCIIMatch.isASCII(name) {
            // Byte-level search, same answers as `String.contains` for ASCII.
            // Every model name contains "5"; skip the scan when the name has none.
            guard ASCIIMatch.contains(name, "5", foldCase: false) else { return fallback }
            for m in modelNames where ASCIIMatch.contains(name, m, foldCase: false) {
                return m.withUTF8Buffer { String(decoding: $0, as: UTF8.self) }
            }
            if ASCIIMatch.contains(name, "5178", foldCase: false) { return "H5178" }
            return fallback
        }
        for m in ["H5072", "H5075", "H5074", "H5051", "H5052", "H5071", "H5100", "H5101", "H5102", "H5103", "H5104",
                  "H5105", "H5108", "H5110", "H5174", "H5177", "H5178", "H5179", "GV5179"] where name.contains(m) {
            return m
        }
        if name.contains("5178") { return "H5178" }
        return fallback
    }

    static func packed(_ r: inout ByteReader, model: String, sensorID: UInt8?) throws(DecodeError) -> AdvertisementModel {
        let v = try r.u24BE("packed temperature/humidity")
        let batteryByte = try r.u8("battery")
        let negative = v & 0x80_0000 != 0
        let magnitude = v & 0x7F_FFFF
        let tAbs = Double(magnitude / 1000) / 10
        let t = negative ? -tAbs : tAbs
        let h = Double(magnitude % 1000) / 10
        let battery = Double(batteryByte & 0x7F)
        let error = batteryByte & 0x80 != 0 || t < -40 || t > 100
        var fields: [(String, FieldValue)] = []
        var label: String? = nil
        if let sensorID {
            label = sensorID == 1 ? "remote" : "primary"
            fields.append(("sensor_id", .int(Int(sensorID))))
        }
        fields += [("temperature", .number(t)), ("humidity", .number(h)), ("battery", .number(battery)),
                   ("sensor_error", .bool(error))]
        var readings: [Reading] = []
        if !error { readings += [Reading(.temperature, t, label: label), Reading(.humidity, h, label: label)] }
        readings.append(Reading(.battery, battery, label: label))
        return AdvertisementModel(formatName: "govee", modelName: model, readings: readings, fields: fields)
    }
}

/// Inkbird thermometers (manufacturer data). The sensors put measurement
/// bytes into the company-id position, so decoders take the company id too.
///
/// * IBS-TH / IBS-TH2 / P01B (local name "sps" / "tps"): temperature = company
///   id as sint16 (0.01 °C), humidity = uint16 LE at data[0] (0.01 %, IBS-TH2:
///   0 = no sensor), battery at data[5].
/// * iBBQ/xBBQ probes (IBT-2X/4XS/6XS, name contains "BBQ"): probes are sint16 LE
///   (0.1 °C) from data[8] on; 0xFFFF = probe not connected.
/// * ITH-11-B/ITH-13-B/ITH-21-B/IBS-P02B (company 0x2449, 16 bytes): temperature
///   sint16 LE at data[4] (0.1 °C), humidity uint16 LE at data[6] (0.1 %, 0 =
///   none), battery at data[8].
public enum Inkbird {
    /// What the local name says about the device (case-insensitive).
    enum NameClass { case sps, tps, bbq, other }

    /// Classifies the name without allocating for ASCII names; other names
    /// go through the Unicode-aware `lowercased()` as before.
    static func nameClass(_ name: String?) -> NameClass {
        guard let name, !name.isEmpty else { return .other }
        if ASCIIMatch.isASCII(name) {
            if ASCIIMatch.equalsIgnoringCase(name, "sps") { return .sps }
            if ASCIIMatch.equalsIgnoringCase(name, "tps") { return .tps }
            if ASCIIMatch.contains(name, "ibbq", foldCase: true) || ASCIIMatch.contains(name, "xbbq", foldCase: true) {
                return .bbq
            }
            return .other
        }
        let lower = name.lowercased()
        if lower == "sps" { return .sps }
        if lower == "tps" { return .tps }
        if lower.contains("ibbq") || lower.contains("xbbq") { return .bbq }
        return .other
    }

    public static func matches(companyID: UInt16, data: [UInt8], name: String?) -> Bool {
        if companyID == 0x2449 && data.count == 16 && data[13] == 0 && data[14] == 0 && data[15] == 0 { return true }
        let n = data.count
        guard n == 7 || n == 10 || n == 12 || n == 16 || n == 20, let name, !name.isEmpty else { return false }
        switch nameClass(name) {
        case .sps, .tps: return n == 7
        case .bbq: return n != 7
        case .other: return false
        }
    }

    public static func decode(companyID: UInt16, data: [UInt8], name: String?) throws(DecodeError) -> AdvertisementModel {
        let ctx = "inkbird"
        let cls = nameClass(name)
        var r = ByteReader(data, context: ctx)
        if cls == .sps || cls == .tps {
            let t = Adv.scaled(Int16(bitPattern: companyID), 2)
            let hRaw = try r.u16("humidity")
            try r.skip(3, "reserved bytes")
            let b = Double(try r.u8("battery"))
            let h = Adv.scaled(hRaw, 2)
            var readings = [Reading(.temperature, t)]
            let hasHumidity = cls == .sps || hRaw != 0
            if hasHumidity { readings.append(Reading(.humidity, h)) }
            readings.append(Reading(.battery, b))
            return AdvertisementModel(formatName: "inkbird", modelName: cls == .sps ? "IBS-TH" : "IBS-TH2/P01B",
                                      readings: readings,
                                      fields: [("temperature", .number(t)), ("humidity", hasHumidity ? .number(h) : .null),
                                               ("battery", .number(b))])
        }
        if cls == .bbq {
            try r.skip(8, "header")
            var readings: [Reading] = []
            var probes: [FieldValue] = []
            var n = 0
            while !r.isAtEnd {
                n += 1
                let raw = try r.i16("probe \(n) temperature")
                if raw == -1 {
                    probes.append(.null)
                } else {
                    let t = Adv.scaled(raw, 1)
                    probes.append(.number(t))
                    readings.append(Reading(.temperature, t, label: "probe_\(n)"))
                }
            }
            return AdvertisementModel(formatName: "inkbird", modelName: "iBBQ-\(n)", readings: readings,
                                      fields: [("probes", .list(probes))])
        }
        if companyID == 0x2449 && data.count == 16 {
            try r.skip(4, "header")
            let t = Adv.scaled(try r.i16("temperature"), 1)
            let hRaw = try r.u16("humidity")
            let b = Double(try r.u8("battery"))
            var readings = [Reading(.temperature, t)]
            if hRaw != 0 { readings.append(Reading(.humidity, Adv.scaled(hRaw, 1))) }
            readings.append(Reading(.battery, b))
            return AdvertisementModel(formatName: "inkbird", modelName: modelName(name), readings: readings,
                                      fields: [("temperature", .number(t)),
                                               ("humidity", hRaw != 0 ? .number(Adv.scaled(hRaw, 1)) : .null),
                                               ("battery", .number(b))])
        }
        throw DecodeError(kind: .unsupported, context: ctx, offset: nil, expected: "a known Inkbird name / payload",
                          found: "company \(hexString(companyID)) with \(data.count) bytes")
    }

    static func modelName(_ name: String?) -> String {
        guard let name, !name.isEmpty else { return "ITH/IBS-P02B" }
        return name
    }
}

/// SwitchBot meters and sensors. Service data UUID 0xFD3D (0x0D00 on old
/// firmware): byte 0 bits 0-6 = device type ('T' meter, 'i' meter plus,
/// 'w' outdoor meter, 'd' contact, 's' motion), byte 2 bits 0-6 = battery.
/// Meter temperature/humidity: 3 bytes (decimal in bits 0-3, integer in bits
/// 0-6 with bit 7 = positive, humidity bits 0-6 with bit 7 = °F display),
/// at service data[3] or manufacturer data (company 0x0969) [8].
public enum SwitchBot {
    public static let serviceUUIDs: [UInt16] = [0xFD3D, 0x0D00]
    public static let companyID: UInt16 = 0x0969

    static let names: [UInt8: String] = [0x54: "meter", 0x69: "meter_plus", 0x77: "outdoor_meter",
                                         0x64: "contact_sensor", 0x73: "motion_sensor"]

    public static func decode(serviceData: [UInt8]?, manufacturerData: [UInt8]?) throws(DecodeError) -> AdvertisementModel {
        let ctx = "switchbot"
        guard let sd = serviceData else {
            // Manufacturer data only: meters put their reading at [8...10].
            guard let md = manufacturerData, md.count >= 11 else {
                throw DecodeError(kind: .unsupported, context: ctx, offset: nil,
                                  expected: "service data, or 11+ bytes of meter manufacturer data",
                                  found: "\(manufacturerData?.count ?? 0) bytes of manufacturer data")
            }
            var r = ByteReader(md, context: "switchbot manufacturer data")
            let mac = try r.addressAsWritten("MAC address")
            try r.skip(2, "sequence/state")
            var model = try meter(&r, battery: nil, model: "meter")
            model.fields.insert(("mac", Adv.macField(mac)), at: 0)
            return model
        }
        var r = ByteReader(sd, context: ctx)
        let typeByte = try r.u8("device type")
        let type = typeByte & 0x7F
        guard let name = names[type] ?? names[type | 0x20] else {
            throw DecodeError(kind: .unsupported, context: ctx, offset: 0,
                              expected: "a SwitchBot meter, contact or motion sensor type",
                              found: "type '\(String(Unicode.Scalar(type)))' (\(hexString(type)))")
        }
        let status = try r.u8("status")
        let battery = Double(try r.u8("battery") & 0x7F)
        switch type | 0x20 {
        case 0x74, 0x69, 0x77:
            if let md = manufacturerData, md.count >= 11 {
                var mr = ByteReader(md, context: "switchbot manufacturer data")
                try mr.skip(8, "MAC and state")
                return try meter(&mr, battery: battery, model: name)
            }
            return try meter(&r, battery: battery, model: name)
        case 0x64:
            let flags = try r.u8("contact flags")
            try r.skip(4, "timers")
            let buttons = try r.u8("button count") & 0x0F
            let motion = status & 0x40 != 0
            let timeout = flags & 0x04 != 0
            let open = flags & 0x02 != 0 || timeout
            let light = flags & 0x01 != 0
            return AdvertisementModel(
                formatName: "switchbot", modelName: name,
                readings: [Reading(.battery, battery), Reading(.opening, open), Reading(.motion, motion),
                           Reading(.light, light)],
                fields: [("battery", .number(battery)), ("tested", .bool(status & 0x80 != 0)), ("motion", .bool(motion)),
                         ("contact_open", .bool(open)), ("contact_timeout", .bool(timeout)), ("light", .bool(light)),
                         ("button_count", .int(Int(buttons)))])
        default:  // motion
            try r.skip(2, "timer")
            let flags = try r.u8("motion flags")
            let motion = status & 0x40 != 0
            let light = flags & 0x02 != 0
            return AdvertisementModel(
                formatName: "switchbot", modelName: name,
                readings: [Reading(.battery, battery), Reading(.motion, motion), Reading(.light, light)],
                fields: [("battery", .number(battery)), ("tested", .bool(status & 0x80 != 0)), ("motion", .bool(motion)),
                         ("light", .bool(light)), ("light_intensity", .int(Int(flags & 0x03))),
                         ("sense_distance", .int(Int((flags & 0x0C) >> 2)))])
        }
    }

    static func meter(_ r: inout ByteReader, battery: Double?, model: String) throws(DecodeError) -> AdvertisementModel {
        let b0 = try r.u8("temperature decimal")
        let b1 = try r.u8("temperature")
        let b2 = try r.u8("humidity")
        let magnitude = Double(b1 & 0x7F) + Double(b0 & 0x0F) / 10
        let t = Adv.rounded(b1 & 0x80 != 0 ? magnitude : -magnitude, 1)
        let h = Double(b2 & 0x7F)
        var readings = [Reading(.temperature, t), Reading(.humidity, h)]
        var fields: [(String, FieldValue)] = [("temperature", .number(t)), ("humidity", .number(h)),
                                              ("fahrenheit_display", .bool(b2 & 0x80 != 0))]
        if let battery {
            readings.append(Reading(.battery, battery))
            fields.append(("battery", .number(battery)))
        }
        return AdvertisementModel(formatName: "switchbot", modelName: model, readings: readings, fields: fields)
    }
}
