import Vocabulary
/// ATC1441 and pvvx custom thermometer firmware (service data UUID 0x181A).
///
/// atc1441 (13 bytes, big-endian): MAC (6, display order), temperature
/// sint16 (0.1 °C), humidity uint8 (%), battery uint8 (%), battery uint16 (mV),
/// frame counter uint8.
/// pvvx custom (15 bytes, little-endian): MAC (6, air order), temperature
/// sint16 (0.01 °C), humidity uint16 (0.01 %), battery uint16 (mV), battery
/// uint8 (%), counter uint8, flags uint8.
/// pvvx encrypted (11 bytes): counter (1), AES-128-CCM ciphertext (6:
/// temperature sint16 0.01 °C, humidity uint16 0.01 %, battery %, trigger
/// flags), MIC (4); AAD `0x11`; nonce = MAC (air order, 6) + the AD header of
/// the service data (length 0x0E, type 0x16, UUID `1a 18`) + counter.
/// The 8-byte atc1441 encrypted variant is reported as unsupported.
public enum ATCThermometer {
    public static let uuid: UInt16 = 0x181A

    public static func decode(_ data: [UInt8], mac: BluetoothAddress? = nil, bindkey: [UInt8]? = nil)
        throws(DecodeError) -> AdvertisementModel
    {
        if data.count == 11 { return try decodeEncryptedPvvx(data, mac: mac, bindkey: bindkey) }
        switch data.count {
        case 13:
            var r = ByteReader(data, context: "atc1441")
            let mac = try r.addressAsWritten("MAC address")
            let t = Adv.scaled(try r.i16BE("temperature"), 1)
            let h = Double(try r.u8("humidity"))
            let b = Double(try r.u8("battery"))
            let mv = try r.u16BE("battery voltage")
            let counter = try r.u8("frame counter")
            let v = Adv.scaled(mv, 3)
            return AdvertisementModel(
                formatName: "atc1441", modelName: "atc1441",
                readings: [Reading(.temperature, t), Reading(.humidity, h), Reading(.battery, b), Reading(.voltage, v)],
                deferredFields: {
                    [("mac", Adv.macField(mac)), ("temperature", .number(t)), ("humidity", .number(h)),
                     ("battery", .number(b)), ("battery_mv", .int(Int(mv))), ("frame_counter", .int(Int(counter)))]
                })
        case 15:
            var r = ByteReader(data, context: "pvvx")
            let mac = try r.address("MAC address")
            let t = Adv.scaled(try r.i16("temperature"), 2)
            let h = Adv.scaled(try r.u16("humidity"), 2)
            let mv = try r.u16("battery voltage")
            let b = Double(try r.u8("battery"))
            let counter = try r.u8("counter")
            let flags = try r.u8("flags")
            let v = Adv.scaled(mv, 3)
            return AdvertisementModel(
                formatName: "pvvx", modelName: "pvvx_custom",
                readings: [Reading(.temperature, t), Reading(.humidity, h), Reading(.battery, b), Reading(.voltage, v)],
                deferredFields: {
                    [("mac", Adv.macField(mac)), ("temperature", .number(t)), ("humidity", .number(h)),
                     ("battery_mv", .int(Int(mv))), ("battery", .number(b)), ("counter", .int(Int(counter))),
                     ("flags", .string(hexString(flags)))]
                })
        case 8:
            throw DecodeError(kind: .unsupported, context: "atc/pvvx", offset: nil,
                              expected: "atc1441 (13 bytes), pvvx (15 bytes) or encrypted pvvx (11 bytes)",
                              found: "an encrypted 8-byte atc1441 payload")
        default:
            throw DecodeError.invalidValue(context: "atc/pvvx", offset: nil,
                                           expected: "13 (atc1441), 15 (pvvx) or 11 (encrypted pvvx) bytes",
                                           found: "\(data.count) bytes")
        }
    }

    static func decodeEncryptedPvvx(_ data: [UInt8], mac: BluetoothAddress?, bindkey: [UInt8]?)
        throws(DecodeError) -> AdvertisementModel
    {
        let ctx = "pvvx encrypted"
        let (key, mac) = try requireDecryptionInputs(bindkey, mac, context: ctx, offset: 0)
        let counter = data[0]
        var nonce = AESCCM.Nonce()
        nonce.appendAddress(mac, airOrder: true)
        for b in [UInt8(data.count + 3), 0x16, 0x1A, 0x18, counter] { nonce.append(b) }
        let plain = try BTHome.decrypt(ctx: ctx, key: key, nonce: nonce, ciphertext: data[1..<7],
                                       mic: data[7..<11], aad: Adv.aad11, offset: 1)
        var r = ByteReader(plain, context: "pvvx encrypted (decrypted payload)")
        let t = Adv.scaled(try r.i16("temperature"), 2)
        let h = Adv.scaled(try r.u16("humidity"), 2)
        let b = Double(try r.u8("battery"))
        let trigger = try r.u8("trigger flags")
        return AdvertisementModel(
            formatName: "pvvx", modelName: "pvvx_encrypted",
            readings: [Reading(.temperature, t), Reading(.humidity, h), Reading(.battery, b)],
            deferredFields: {
                [("counter", .int(Int(counter))), ("temperature", .number(t)), ("humidity", .number(h)),
                 ("battery", .number(b)), ("trigger", .string(hexString(trigger)))]
            })
    }
}

/// RuuviTag data formats 3 (RAWv1) and 5 (RAWv2), manufacturer data of
/// company 0x0499 (all fields big-endian). "Not available" sentinels of
/// format 5 yield a `null` field and no reading.
public enum Ruuvi {
    public static let companyID: UInt16 = 0x0499

    public static func decode(_ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        guard let format = data.first else {
            throw DecodeError.truncated(context: "ruuvi", offset: 0, needed: 1, available: 0, what: "data format")
        }
        switch format {
        case 5: return try decodeRAWv2(data)
        case 3: return try decodeRAWv1(data)
        default:
            throw DecodeError(kind: .unsupported, context: "ruuvi", offset: 0,
                              expected: "data format 3 or 5", found: "data format \(format)")
        }
    }

    static func decodeRAWv2(_ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        var r = ByteReader(data, context: "ruuvi rawv2")
        _ = try r.u8("data format")
        let tRaw = try r.i16BE("temperature")
        let hRaw = try r.u16BE("humidity")
        let pRaw = try r.u16BE("pressure")
        let ax = try r.i16BE("acceleration x")
        let ay = try r.i16BE("acceleration y")
        let az = try r.i16BE("acceleration z")
        let power = try r.u16BE("power info")
        let movement = try r.u8("movement counter")
        let sequence = try r.u16BE("measurement sequence")
        let macBytes = try r.bytes(6, "MAC address")
        try r.expectEnd()
        // "Not available" sentinels become nil: a null field and no reading.
        let t = tRaw != Int16.min ? Adv.rounded(Double(tRaw) * 0.005, 3) : nil
        let h = hRaw != 0xFFFF ? Adv.rounded(Double(hRaw) * 0.0025, 4) : nil
        let pa = pRaw != 0xFFFF ? Int(pRaw) + 50_000 : nil
        let gx = ax != Int16.min ? Adv.scaled(ax, 3) : nil
        let gy = ay != Int16.min ? Adv.scaled(ay, 3) : nil
        let gz = az != Int16.min ? Adv.scaled(az, 3) : nil
        let mvRaw = power >> 5
        let txRaw = power & 0x1F
        let v = mvRaw != 2047 ? Adv.scaled(Int(mvRaw) + 1600, 3) : nil
        let tx = txRaw != 31 ? Double(-40 + 2 * Int(txRaw)) : nil
        let moves = movement != 0xFF ? Int(movement) : nil
        let seq = sequence != 0xFFFF ? Int(sequence) : nil
        let mac = macBytes.allSatisfy({ $0 == 0xFF }) ? nil : BluetoothAddress(bytes: macBytes)

        var readings: [Reading] = []
        readings.reserveCapacity(9)
        if let t { readings.append(Reading(.temperature, t)) }
        if let h { readings.append(Reading(.humidity, h)) }
        if let pa { readings.append(Reading(.pressure, Adv.scaled(pa, 2))) }
        if let gx { readings.append(Reading(.acceleration, Adv.rounded(gx * 9.80665, 6), label: "x")) }
        if let gy { readings.append(Reading(.acceleration, Adv.rounded(gy * 9.80665, 6), label: "y")) }
        if let gz { readings.append(Reading(.acceleration, Adv.rounded(gz * 9.80665, 6), label: "z")) }
        if let v { readings.append(Reading(.voltage, v)) }
        if let tx { readings.append(Reading(.txPower, tx)) }
        if let moves { readings.append(Reading(.count, Double(moves), label: "movement")) }
        return AdvertisementModel(formatName: "ruuvi", modelName: "ruuvi_rawv2", readings: readings, deferredFields: {
            func number(_ x: Double?) -> FieldValue { x.map { .number($0) } ?? .null }
            func int(_ x: Int?) -> FieldValue { x.map { .int($0) } ?? .null }
            return [
                ("data_format", .int(5)), ("temperature", number(t)), ("humidity", number(h)),
                ("pressure_pa", int(pa)), ("acceleration_x_g", number(gx)), ("acceleration_y_g", number(gy)),
                ("acceleration_z_g", number(gz)), ("battery_voltage", number(v)), ("tx_power", number(tx)),
                ("movement_counter", int(moves)), ("measurement_sequence", int(seq)),
                ("mac", mac.map { Adv.macField($0) } ?? .null),
            ]
        })
    }

    static func decodeRAWv1(_ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        var r = ByteReader(data, context: "ruuvi rawv1")
        _ = try r.u8("data format")
        let hRaw = try r.u8("humidity")
        let tInt = try r.u8("temperature")
        let tFrac = try r.u8("temperature fraction")
        let pRaw = try r.u16BE("pressure")
        let ax = try r.i16BE("acceleration x")
        let ay = try r.i16BE("acceleration y")
        let az = try r.i16BE("acceleration z")
        let mv = try r.u16BE("battery voltage")
        try r.expectEnd()
        if tFrac > 99 {
            throw DecodeError.invalidValue(context: "ruuvi rawv1", offset: 3, expected: "a temperature fraction 0...99",
                                           found: "\(tFrac)")
        }
        let magnitude = Double(tInt & 0x7F) + Double(tFrac) / 100
        let t = Adv.rounded(tInt & 0x80 != 0 ? -magnitude : magnitude, 2)
        let h = Double(hRaw) / 2
        let pa = Int(pRaw) + 50_000
        let v = Adv.scaled(mv, 3)
        var readings = [Reading(.temperature, t), Reading(.humidity, h), Reading(.pressure, Adv.scaled(pa, 2))]
        var fields: [(String, FieldValue)] = [("data_format", .int(3)), ("humidity", .number(h)),
                                              ("temperature", .number(t)), ("pressure_pa", .int(pa))]
        for (name, a) in [("x", ax), ("y", ay), ("z", az)] {
            let g = Adv.scaled(a, 3)
            fields.append(("acceleration_\(name)_g", .number(g)))
            readings.append(Reading(.acceleration, Adv.rounded(g * 9.80665, 6), label: name))
        }
        readings.append(Reading(.voltage, v))
        fields.append(("battery_voltage", .number(v)))
        return AdvertisementModel(formatName: "ruuvi", modelName: "ruuvi_rawv1", readings: readings, fields: fields)
    }
}

/// Qingping sensors (service data UUID 0xFDCD): frame control (1), device
/// type (1), MAC (6, air order), then TLVs `id (1), length (1), value`.
public enum Qingping {
    public static let uuid: UInt16 = 0xFDCD

    static let models: [UInt8: String] = [
        0x01: "CGG1", 0x04: "CGH1", 0x07: "CGG1", 0x09: "CGP1W", 0x0C: "CGD1", 0x0E: "CGDN1", 0x0F: "CGM1",
        0x12: "CGPR1", 0x15: "CGF1W", 0x16: "CGG1", 0x18: "CGP23W", 0x1E: "CGC1", 0x24: "CGDN1", 0x33: "CGP22C",
        0x4F: "CGG3", 0x5D: "CGP22C",
    ]

    public static func decode(_ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        let ctx = "qingping"
        var r = ByteReader(data, context: ctx)
        let fc = try r.u8("frame control")
        let type = try r.u8("device type")
        let mac = try r.address("MAC address")
        var fields: [(String, FieldValue)] = [("frame_control", .string(hexString(fc))),
                                              ("device_type", .string(hexString(type))), ("mac", Adv.macField(mac))]
        var readings: [Reading] = []
        var items: [FieldValue] = []
        while !r.isAtEnd {
            let start = r.offset
            let id = try r.u8("TLV id")
            let len = Int(try r.u8("TLV length"))
            let v = try r.bytes(len, lazyField: { "TLV \(hexString(id)) value" })
            var vr = ByteReader(v, context: ctx)
            var member: [(String, FieldValue)] = [("id", .string(hexString(id)))]
            func bad() -> DecodeError {
                DecodeError.invalidValue(context: ctx, offset: start + 1, expected: "the length of TLV \(hexString(id))",
                                         found: "\(len)")
            }
            switch id {
            case 0x01:
                guard len == 4 else { throw bad() }
                let t = Adv.scaled(try vr.i16(), 1), h = Adv.scaled(try vr.u16(), 1)
                readings += [Reading(.temperature, t), Reading(.humidity, h)]
                member += [("temperature", .number(t)), ("humidity", .number(h))]
            case 0x02:
                guard len == 1 else { throw bad() }
                let b = Double(try vr.u8())
                readings.append(Reading(.battery, b)); member.append(("battery", .number(b)))
            case 0x04:
                guard len == 1 else { throw bad() }
                let s = try vr.u8()
                // 0 open, 1 closed, 2 left open (door sensor).
                readings.append(Reading(.door, s != 1)); member.append(("door_state", .int(Int(s))))
            case 0x07:
                guard len == 2 else { throw bad() }
                let p = Adv.scaled(try vr.u16(), 1)
                readings.append(Reading(.pressure, p)); member.append(("pressure", .number(p)))
            case 0x08:
                guard len == 4 else { throw bad() }
                let motion = try vr.u8() != 0
                let lo = try vr.u16(), hi = try vr.u8()
                let lx = Double(UInt32(lo) | UInt32(hi) << 16)
                readings += [Reading(.motion, motion), Reading(.illuminance, lx)]
                member += [("motion", .bool(motion)), ("illuminance", .number(lx))]
            case 0x09:
                guard len == 4 else { throw bad() }
                let lx = Double(try vr.u32())
                readings.append(Reading(.illuminance, lx)); member.append(("illuminance", .number(lx)))
            case 0x11:
                guard len == 1 else { throw bad() }
                let light = try vr.u8() != 0
                readings.append(Reading(.light, light)); member.append(("light", .bool(light)))
            case 0x12:
                guard len == 4 else { throw bad() }
                let pm25 = Double(try vr.u16()), pm10 = Double(try vr.u16())
                readings += [Reading(.pm25, pm25), Reading(.pm10, pm10)]
                member += [("pm25", .number(pm25)), ("pm10", .number(pm10))]
            case 0x13:
                guard len == 2 else { throw bad() }
                let co2 = Double(try vr.u16())
                readings.append(Reading(.co2, co2)); member.append(("co2", .number(co2)))
            case 0x0F:
                member.append(("packet_id", .bytes(Array(v))))
            default:
                member.append(("value", .bytes(Array(v))))
            }
            items.append(.nested(member))
        }
        fields.append(("tlvs", .list(items)))
        return AdvertisementModel(formatName: "qingping", modelName: models[type] ?? "type_\(hexString(type))",
                                  readings: readings, fields: fields)
    }
}
