import Vocabulary
/// Xiaomi MiBeacon service data (UUID 0xFE95).
///
/// Layout: frame control (uint16 LE: bit 3 encrypted, bit 4 MAC included,
/// bit 5 capability included, bit 6 object included, bit 7 mesh, bits 12-15
/// version), product id (uint16 LE), frame counter (uint8), MAC (6 bytes, air
/// order) if bit 4, capability byte if bit 5 (+1 I/O byte when capability
/// bit 5 is set), then objects `id (uint16 LE), length (uint8), value`.
///
/// Encryption v4/v5: AES-128-CCM, key = 16-byte bindkey, AAD = `0x11`,
/// nonce = MAC (air order, 6) + product id (2) + frame counter (1) +
/// extended counter (3); the payload ends with the 3-byte extended counter
/// and the 4-byte MIC. Legacy v2/v3 encryption is reported as unsupported.
public enum MiBeacon {
    public static let uuid: UInt16 = 0xFE95

    /// A few product ids (facts from the xiaomi-ble device table), for naming.
    static let products: [UInt16: String] = [
        0x0C3C: "CGC1", 0x0576: "CGD1", 0x066F: "CGDK2", 0x0347: "CGG1", 0x0B48: "CGG1-ENCRYPTED",
        0x0A83: "CGPR1", 0x03BC: "GCLS002", 0x0098: "HHCCJCY01", 0x015D: "HHCCPOT002", 0x02DF: "JQJCY01YM",
        0x2AEB: "HS1BB(MI)", 0x01AA: "LYWSDCGQ", 0x045B: "LYWSD02", 0x16E4: "LYWSD02MMC", 0x055B: "LYWSD03MMC",
        0x55B5: "MJWSD06MMC", 0x5BEA: "MJWSD06MMC", 0x098B: "MCCGQ02HL", 0x06D3: "MHO-C303", 0x0387: "MHO-C401",
        0x07F6: "MJYD02YL", 0x00DB: "MMC-T201-1", 0x0391: "MMC-W505", 0x0863: "SJWS01LM", 0x040A: "WX08ZM",
        0x1203: "XMWSDJ04MMC", 0x4F59: "CGDK3",
    ]

    public static func decode(_ data: [UInt8], mac: BluetoothAddress? = nil, bindkey: [UInt8]? = nil)
        throws(DecodeError) -> AdvertisementModel
    {
        let ctx = "xiaomi mibeacon"
        var r = ByteReader(data, context: ctx)
        let fc = try r.u16("frame control")
        let productID = try r.u16("product id")
        let frameCounter = try r.u8("frame counter")
        let encrypted = fc & 0x0008 != 0
        let macIncluded = fc & 0x0010 != 0
        let capabilityIncluded = fc & 0x0020 != 0
        let objectIncluded = fc & 0x0040 != 0
        let version = Int(fc >> 12)
        let includedMAC: BluetoothAddress? = try macIncluded ? r.address("MAC address") : nil
        let capability: UInt8? = try capabilityIncluded ? r.u8("capability") : nil
        let io: UInt8? = try (capability ?? 0) & 0x20 != 0 ? r.u8("I/O capability") : nil
        let product = products[productID]
        let modelName = product ?? "product_" + hexString(productID)
        /// The header fields in layout order (built only when `fields` is read).
        @Sendable func headerFields() -> [(String, FieldValue)] {
            var fields: [(String, FieldValue)] = []
            fields.reserveCapacity(13)
            fields += [
                ("frame_control", Adv.hex16(fc)), ("version", .int(version)), ("encrypted", .bool(encrypted)),
                ("mesh", .bool(fc & 0x0080 != 0)), ("product_id", Adv.hex16(productID)),
            ]
            if let product { fields.append(("product", .string(product))) }
            fields.append(("frame_counter", .int(Int(frameCounter))))
            if let includedMAC { fields.append(("mac", Adv.macField(includedMAC))) }
            if let capability { fields.append(("capability", .string(hexString(capability)))) }
            if let io { fields.append(("io_capability", .string(hexString(io)))) }
            return fields
        }
        guard objectIncluded else {
            return AdvertisementModel(formatName: "xiaomi_mibeacon", modelName: modelName, readings: [], deferredFields: {
                headerFields() + [("objects", .list([]))]
            })
        }
        // The objects: from the payload itself, or from the decrypted payload.
        let objectReader: ByteReader
        let extendedCounter: Int?
        if encrypted {
            guard version >= 4 else {
                throw DecodeError(kind: .unsupported, context: ctx, offset: 0,
                                  expected: "MiBeacon v4/v5 encryption", found: "legacy v\(version) encryption")
            }
            let start = r.offset
            let body = r.rest()
            guard body.count >= 7 else {
                throw DecodeError.truncated(context: ctx, offset: start, needed: 7, available: body.count,
                                            what: "extended counter and MIC")
            }
            let (key, address) = try requireDecryptionInputs(bindkey, includedMAC ?? mac, context: ctx, offset: start)
            let extStart = body.endIndex - 7  // body.count >= 7 (checked above)
            let ext = (body[extStart], body[extStart + 1], body[extStart + 2])
            var nonce = AESCCM.Nonce()
            nonce.appendAddress(address, airOrder: true)
            nonce.append(UInt8(productID & 0xFF)); nonce.append(UInt8(productID >> 8)); nonce.append(frameCounter)
            nonce.append(ext.0); nonce.append(ext.1); nonce.append(ext.2)
            let plain = try BTHome.decrypt(ctx: ctx, key: key, nonce: nonce, ciphertext: body.dropLast(7),
                                           mic: body.suffix(4), aad: Adv.aad11, offset: start)
            extendedCounter = Int(ext.0) | Int(ext.1) << 8 | Int(ext.2) << 16
            objectReader = ByteReader(plain, context: "xiaomi mibeacon (decrypted payload)")
        } else {
            extendedCounter = nil
            objectReader = r
        }
        var readings: [Reading] = []
        readings.reserveCapacity(2)
        var objects: [FieldValue] = []
        var pr = objectReader
        try parseObjects(&pr, readings: &readings, objects: &objects, buildingFields: false)
        return AdvertisementModel(formatName: "xiaomi_mibeacon", modelName: modelName, readings: readings, deferredFields: {
            var fields = headerFields()
            if let extendedCounter { fields.append(("extended_counter", .int(extendedCounter))) }
            fields.append(("objects", .list(objectFields(objectReader))))
            return fields
        })
    }

    /// The `objects` field of the objects that `reader` (positioned at the first
    /// object) decoded without error before.
    static func objectFields(_ reader: ByteReader) -> [FieldValue] {
        var r = reader
        var readings: [Reading] = []
        var objects: [FieldValue] = []
        // Cannot fail: the same bytes decoded without error when the model was made.
        try? parseObjects(&r, readings: &readings, objects: &objects, buildingFields: true)
        return objects
    }

    /// Decodes the objects into `readings`, and into `objects` (the `objects` field) when `buildingFields`.
    static func parseObjects(_ r: inout ByteReader, readings: inout [Reading], objects: inout [FieldValue],
                             buildingFields: Bool) throws(DecodeError)
    {
        while !r.isAtEnd {
            let start = r.offset
            // Fewer than 3 bytes cannot hold an object header; devices such as
            // the MMC-W505 append one stray byte. Record and stop.
            if r.remaining < 3 {
                let trailing = r.rest()
                if buildingFields { objects.append(.nested([("trailing_bytes", .bytes(Array(trailing)))])) }
                break
            }
            let id = try r.u16("object id")
            let length = Int(try r.u8("object length"))
            let value = try r.bytes(length, lazyField: { "object \(hexString(id)) value" })
            var vr = ByteReader(value, context: r.context)
            /// The object's entry in `objects`: its id and `members` (evaluated only when building fields).
            func describe(_ members: @autoclosure () -> [(String, FieldValue)]) {
                if buildingFields { objects.append(.nested([("id", .string(hexString(id)))] + members())) }
            }
            func need(_ n: Int) throws(DecodeError) {
                if value.count < n {
                    throw DecodeError.invalidValue(context: r.context, offset: start + 2,
                                                   expected: "object \(hexString(id)) length \(n)",
                                                   found: "\(value.count)")
                }
            }
            switch id {
            case 0x1004:
                try need(2)
                let t = Adv.scaled(try vr.i16(), 1)
                describe([("name", .string("temperature")), ("value", .number(t))])
                readings.append(Reading(.temperature, t))
            case 0x1006:
                try need(2)
                let h = Adv.scaled(try vr.u16(), 1)
                describe([("name", .string("humidity")), ("value", .number(h))])
                readings.append(Reading(.humidity, h))
            case 0x1007:
                try need(3)
                let lx = Double(try vr.u24())
                describe([("name", .string("illuminance")), ("value", .number(lx))])
                readings.append(Reading(.illuminance, lx))
            case 0x1008:
                try need(1)
                let m = Double(try vr.u8())
                describe([("name", .string("moisture")), ("value", .number(m))])
                readings.append(Reading(.moisture, m))
            case 0x1009:
                try need(2)
                let c = Double(try vr.u16())
                describe([("name", .string("conductivity")), ("value", .number(c))])
                readings.append(Reading(.conductivity, c))
            case 0x100A, 0x4803, 0x4C03:
                try need(1)
                let b = Double(try vr.u8())
                describe([("name", .string("battery")), ("value", .number(b))])
                readings.append(Reading(.battery, b))
            case 0x100D:
                try need(4)
                let t = Adv.scaled(try vr.i16(), 1)
                let h = Adv.scaled(try vr.u16(), 1)
                describe([("name", .string("temperature_humidity")), ("temperature", .number(t)), ("humidity", .number(h))])
                readings.append(Reading(.temperature, t))
                readings.append(Reading(.humidity, h))
            case 0x1010:
                try need(2)
                // Formaldehyde in mg/m³ (no shared reading kind; field only).
                let f = Adv.scaled(try vr.u16(), 2)
                describe([("name", .string("formaldehyde")), ("value", .number(f)), ("unit", .string("mg/m³"))])
            case 0x1012:
                try need(1)
                let on = try vr.u8() != 0
                describe([("name", .string("power")), ("value", .bool(on))])
                readings.append(Reading(.binary, on, label: "power"))
            case 0x1013:
                try need(1)
                let level = Int(try vr.u8())
                describe([("name", .string("consumable")), ("value", .int(level)), ("unit", .string("%"))])
            case 0x1014:
                try need(1)
                let wet = try vr.u8() != 0
                describe([("name", .string("moisture_detected")), ("value", .bool(wet))])
                readings.append(Reading(.moisture, wet))
            case 0x1015:
                try need(1)
                let smoke = try vr.u8() != 0
                describe([("name", .string("smoke")), ("value", .bool(smoke))])
                readings.append(Reading(.smoke, smoke))
            case 0x1017:
                try need(4)
                let s = try vr.u32()
                describe([("name", .string("no_motion_time")), ("value", .int(Int(s)))])
                readings.append(Reading(.duration, Double(s), label: "no_motion"))
            case 0x1018:
                try need(1)
                let light = try vr.u8() != 0
                describe([("name", .string("light")), ("value", .bool(light))])
                readings.append(Reading(.light, light))
            case 0x1019:
                try need(1)
                let state = try vr.u8()
                describe([("name", .string("door")), ("value", .string(doorStates[state] ?? "unknown_\(hexString(state))"))])
                if state <= 2 { readings.append(Reading(.opening, state != 1)) }
            case 0x000F:
                try need(3)
                let lx = Double(try vr.u24())
                describe([("name", .string("motion_with_illuminance")), ("illuminance", .number(lx))])
                readings.append(Reading(.motion, true))
                readings.append(Reading(.illuminance, lx))
            case 0x0003:
                describe([("name", .string("motion"))])
                readings.append(Reading(.motion, true))
            case 0x4818:
                try need(2)
                let s = try vr.u16()
                describe([("name", .string("no_motion_duration")), ("value", .int(Int(s)))])
                readings.append(Reading(.duration, Double(s), label: "no_motion"))
            case 0x4A08:
                try need(4)
                let lx = Double(try vr.f32())
                describe([("name", .string("motion_with_illuminance")), ("illuminance", .number(lx))])
                readings.append(Reading(.motion, true))
                readings.append(Reading(.illuminance, lx))
            case 0x4C01:
                try need(4)
                let t = Adv.rounded(Double(try vr.f32()), 2)
                describe([("name", .string("temperature")), ("value", .number(t))])
                readings.append(Reading(.temperature, t))
            case 0x4C02:
                try need(1)
                let h = Double(try vr.u8())
                describe([("name", .string("humidity")), ("value", .number(h))])
                readings.append(Reading(.humidity, h))
            case 0x4C08:
                try need(4)
                let h = Adv.rounded(Double(try vr.f32()), 2)
                describe([("name", .string("humidity")), ("value", .number(h))])
                readings.append(Reading(.humidity, h))
            default:
                describe([("name", .string("unsupported")), ("value", .bytes(Array(value)))])
            }
        }
    }

    static let doorStates: [UInt8: String] = [0: "open", 1: "closed", 2: "left_open", 3: "device_reset"]
}
