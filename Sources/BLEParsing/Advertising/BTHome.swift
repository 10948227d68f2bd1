import Vocabulary
/// BTHome (https://bthome.io) v2 (service data UUID 0xFCD2) and v1
/// (0x181C plain, 0x181E encrypted).
///
/// v2 layout: one "device information" byte (bit 0 encrypted, bit 1 MAC
/// included, bit 2 trigger based, bits 5-7 version = 2), the 6-byte MAC in
/// air order when bit 1 is set, then objects `id, value…` whose value length
/// is fixed per object id (text 0x53 and raw 0x54 carry a length byte).
/// Because lengths come from the id table, an unknown object id stops the
/// decode with a typed error at its offset.
///
/// Encryption (v2): AES-128-CCM, 4-byte MIC, no AAD, nonce = MAC (6, display
/// order) + UUID 0xFCD2 little-endian (`d2 fc`) + device info byte + 4-byte
/// counter; the payload ends with counter (4) and MIC (4).
/// v1 encryption (0x181E): nonce = MAC + `1e 18` + counter, AAD = `0x11`.
public enum BTHome {
    public static let uuidV2: UInt16 = 0xFCD2
    public static let uuidV1: UInt16 = 0x181C
    public static let uuidV1Encrypted: UInt16 = 0x181E

    enum Coding { case unsigned, signed, text, raw, event, timestamp }

    struct ObjectType: Sendable {
        let name: String
        let length: Int
        let coding: Coding
        let kind: ReadingKind?
        /// Decimal exponent of the factor (value = raw / 10^decimals).
        let decimals: Int
        let unit: String?
        let label: String?
        /// Extra multiplier (only 0x58: 0.35 °C steps).
        let multiplier: Double

        init(_ name: String, _ length: Int, _ coding: Coding, _ kind: ReadingKind?, _ decimals: Int = 0,
             unit: String? = nil, label: String? = nil, multiplier: Double = 1) {
            self.name = name; self.length = length; self.coding = coding; self.kind = kind
            self.decimals = decimals; self.unit = unit; self.label = label; self.multiplier = multiplier
        }
    }

    /// The object id table of the BTHome v2 format (bthome.io/format).
    static let objects: [UInt8: ObjectType] = {
        var t: [UInt8: ObjectType] = [
            0x00: .init("packet_id", 1, .unsigned, .count, label: "packet_id"),
            0x01: .init("battery", 1, .unsigned, .battery),
            0x02: .init("temperature", 2, .signed, .temperature, 2),
            0x03: .init("humidity", 2, .unsigned, .humidity, 2),
            0x04: .init("pressure", 3, .unsigned, .pressure, 2),
            0x05: .init("illuminance", 3, .unsigned, .illuminance, 2),
            0x06: .init("mass_kg", 2, .unsigned, .weight, 2),
            0x07: .init("mass_lb", 2, .unsigned, .weight, 2, unit: Unit.pound),
            0x08: .init("dew_point", 2, .signed, .dewPoint, 2),
            0x09: .init("count", 1, .unsigned, .count),
            0x0A: .init("energy", 3, .unsigned, .energy, 3, unit: Unit.kilowattHour),
            0x0B: .init("power", 3, .unsigned, .power, 2),
            0x0C: .init("voltage", 2, .unsigned, .voltage, 3),
            0x0D: .init("pm2_5", 2, .unsigned, .pm25),
            0x0E: .init("pm10", 2, .unsigned, .pm10),
            0x0F: .init("generic_boolean", 1, .unsigned, .binary),
            0x10: .init("power_on", 1, .unsigned, .binary, label: "power"),
            0x11: .init("opening", 1, .unsigned, .opening),
            0x12: .init("co2", 2, .unsigned, .co2),
            0x13: .init("tvoc", 2, .unsigned, .tvoc),
            0x14: .init("moisture", 2, .unsigned, .moisture, 2),
            0x15: .init("battery_low", 1, .unsigned, .batteryLow),
            0x16: .init("battery_charging", 1, .unsigned, .batteryCharging),
            0x17: .init("carbon_monoxide", 1, .unsigned, .co),
            0x18: .init("cold", 1, .unsigned, .cold),
            0x19: .init("connectivity", 1, .unsigned, .connectivity),
            0x1A: .init("door", 1, .unsigned, .door),
            0x1B: .init("garage_door", 1, .unsigned, .garageDoor),
            0x1C: .init("gas", 1, .unsigned, .gas),
            0x1D: .init("heat", 1, .unsigned, .heat),
            0x1E: .init("light", 1, .unsigned, .light),
            0x1F: .init("lock", 1, .unsigned, .lock),
            0x20: .init("moisture_detected", 1, .unsigned, .moisture),
            0x21: .init("motion", 1, .unsigned, .motion),
            0x22: .init("moving", 1, .unsigned, .moving),
            0x23: .init("occupancy", 1, .unsigned, .occupancy),
            0x24: .init("plug", 1, .unsigned, .plug),
            0x25: .init("presence", 1, .unsigned, .presence),
            0x26: .init("problem", 1, .unsigned, .problem),
            0x27: .init("running", 1, .unsigned, .running),
            0x28: .init("safety", 1, .unsigned, .safety),
            0x29: .init("smoke", 1, .unsigned, .smoke),
            0x2A: .init("sound", 1, .unsigned, .sound),
            0x2B: .init("tamper", 1, .unsigned, .tamper),
            0x2C: .init("vibration", 1, .unsigned, .vibration),
            0x2D: .init("window", 1, .unsigned, .window),
            0x2E: .init("humidity", 1, .unsigned, .humidity),
            0x2F: .init("moisture", 1, .unsigned, .moisture),
            0x3A: .init("button", 1, .event, .button),
            0x3C: .init("dimmer", 2, .event, .dimmer),
            0x3D: .init("count", 2, .unsigned, .count),
            0x3E: .init("count", 4, .unsigned, .count),
            0x3F: .init("rotation", 2, .signed, .rotation, 1),
            0x40: .init("distance_mm", 2, .unsigned, .distance, unit: Unit.millimeter),
            0x41: .init("distance_m", 2, .unsigned, .distance, 1),
            0x42: .init("duration", 3, .unsigned, .duration, 3),
            0x43: .init("current", 2, .unsigned, .current, 3),
            0x44: .init("speed", 2, .unsigned, .speed, 2),
            0x45: .init("temperature", 2, .signed, .temperature, 1),
            0x46: .init("uv_index", 1, .unsigned, .uvIndex, 1),
            0x47: .init("volume", 2, .unsigned, .volume, 1),
            0x48: .init("volume_ml", 2, .unsigned, .volume, unit: Unit.milliliter),
            0x49: .init("volume_flow_rate", 2, .unsigned, .volumeFlowRate, 3),
            0x4A: .init("voltage", 2, .unsigned, .voltage, 1),
            0x4B: .init("gas", 3, .unsigned, .gas, 3),
            0x4C: .init("gas", 4, .unsigned, .gas, 3),
            0x4D: .init("energy", 4, .unsigned, .energy, 3, unit: Unit.kilowattHour),
            0x4E: .init("volume", 4, .unsigned, .volume, 3),
            0x4F: .init("water", 4, .unsigned, .water, 3),
            0x50: .init("timestamp", 4, .timestamp, .timestamp),
            0x51: .init("acceleration", 2, .unsigned, .acceleration, 3),
            0x52: .init("gyroscope", 2, .unsigned, .angularVelocity, 3),
            0x53: .init("text", 0, .text, nil),
            0x54: .init("raw", 0, .raw, nil),
            0x55: .init("volume_storage", 4, .unsigned, .volume, 3, label: "storage"),
            0x56: .init("conductivity", 2, .unsigned, .conductivity),
            0x57: .init("temperature", 1, .signed, .temperature),
            0x58: .init("temperature", 1, .signed, .temperature, multiplier: 0.35),
            0x59: .init("count", 1, .signed, .count),
            0x5A: .init("count", 2, .signed, .count),
            0x5B: .init("count", 4, .signed, .count),
            0x5C: .init("power", 4, .signed, .power, 2),
            0x5D: .init("current", 2, .signed, .current, 3),
            0x5E: .init("direction", 2, .unsigned, .rotation, 2, label: "direction"),
            0x5F: .init("precipitation", 2, .unsigned, .precipitation, 1),
            0x60: .init("channel", 1, .unsigned, .count, label: "channel"),
            0x61: .init("rotational_speed", 2, .unsigned, .cadence, label: "rotational_speed"),
            0x62: .init("speed", 4, .signed, .speed, 6),
            0x63: .init("acceleration", 4, .signed, .acceleration, 6),
            0x64: .init("light_level", 1, .unsigned, .count, label: "light_level"),
            // Device information objects.
            0xF0: .init("device_type_id", 2, .unsigned, nil),
            0xF1: .init("firmware_version", 4, .raw, nil),
            0xF2: .init("firmware_version", 3, .raw, nil),
        ]
        t.reserveCapacity(128)
        return t
    }()

    static let buttonEvents: [UInt8: String] = [
        0x00: "none", 0x01: "press", 0x02: "double_press", 0x03: "triple_press", 0x04: "long_press",
        0x05: "long_double_press", 0x06: "long_triple_press", 0x80: "hold_press",
    ]
    static let dimmerEvents: [UInt8: String] = [0x00: "none", 0x01: "rotate_left", 0x02: "rotate_right"]

    // MARK: v2

    /// Decodes BTHome v2 service data (UUID 0xFCD2).
    /// - Parameters:
    ///   - mac: the advertiser's address; needed for encrypted payloads that do
    ///     not include their MAC.
    ///   - bindkey: 16-byte key for encrypted payloads.
    public static func decodeV2(_ data: [UInt8], mac: BluetoothAddress? = nil, bindkey: [UInt8]? = nil)
        throws(DecodeError) -> AdvertisementModel
    {
        let ctx = "bthome v2"
        var r = ByteReader(data, context: ctx)
        let info = try r.u8("device information")
        let encrypted = info & 0x01 != 0
        let macIncluded = info & 0x02 != 0
        let trigger = info & 0x04 != 0
        let version = info >> 5
        guard version == 2 else {
            throw DecodeError(kind: .unsupported, context: ctx, offset: 0,
                              expected: "BTHome version 2 in bits 5-7", found: "version \(version)")
        }
        let includedMAC: BluetoothAddress? = try macIncluded ? r.address("MAC address") : nil
        // The objects: from the payload itself, or from the decrypted payload.
        let objectReader: ByteReader
        let counter: Int?
        if encrypted {
            let start = r.offset
            let body = r.rest()
            guard body.count >= 8 else {
                throw DecodeError.truncated(context: ctx, offset: start, needed: 8, available: body.count,
                                            what: "encryption counter and MIC")
            }
            let (key, address) = try requireDecryptionInputs(bindkey, includedMAC ?? mac, context: ctx, offset: start)
            let c = body.endIndex - 8  // counter (4), then MIC (4)
            var nonce = AESCCM.Nonce()
            nonce.appendAddress(address, airOrder: false)
            nonce.append(0xD2); nonce.append(0xFC); nonce.append(info)
            for k in 0..<4 { nonce.append(body[c + k]) }
            let plain = try decrypt(ctx: ctx, key: key, nonce: nonce, ciphertext: body.dropLast(8), mic: body.suffix(4),
                                    aad: [], offset: start)
            counter = Int(UInt32(body[c]) | UInt32(body[c + 1]) << 8 | UInt32(body[c + 2]) << 16 | UInt32(body[c + 3]) << 24)
            objectReader = ByteReader(plain, context: "bthome v2 (decrypted payload)")
        } else {
            counter = nil
            objectReader = r
        }
        var readings: [Reading] = []
        readings.reserveCapacity(objectReader.remaining / 2)
        var objects: [FieldValue] = []
        var pr = objectReader
        try parseV2Objects(&pr, readings: &readings, objects: &objects, buildingFields: false)
        return AdvertisementModel(formatName: "bthome", modelName: "bthome_v2", readings: readings, deferredFields: {
            var fields: [(String, FieldValue)] = [
                ("version", .int(2)), ("encrypted", .bool(encrypted)),
                ("mac_included", .bool(macIncluded)), ("trigger_based", .bool(trigger)),
            ]
            if let includedMAC { fields.append(("mac", Adv.macField(includedMAC))) }
            if let counter { fields.append(("counter", .int(counter))) }
            var r = objectReader
            var unused: [Reading] = []
            var objects: [FieldValue] = []
            // Cannot fail: the same bytes decoded without error when the model was made.
            try? parseV2Objects(&r, readings: &unused, objects: &objects, buildingFields: true)
            fields.append(("objects", .list(objects)))
            return fields
        })
    }

    static func decrypt(ctx: String, key: [UInt8], nonce: AESCCM.Nonce, ciphertext: ArraySlice<UInt8>,
                        mic: ArraySlice<UInt8>, aad: [UInt8], offset: Int) throws(DecodeError) -> [UInt8] {
        do {
            return try AESCCM.decrypt(key: key, nonce: nonce, ciphertext: ciphertext, tag: mic, aad: aad[...])
        } catch .badKeyLength(let n) {
            throw DecodeError.invalidValue(context: ctx, offset: nil, expected: "a 16-byte bindkey",
                                           found: "\(n) bytes")
        } catch .authenticationFailed {
            throw DecodeError.invalidValue(context: ctx, offset: offset,
                                           expected: "a payload that authenticates with the bindkey (MIC)",
                                           found: "MIC mismatch (wrong bindkey or corrupted data)")
        } catch {
            throw DecodeError.invalidValue(context: ctx, offset: offset, expected: "AES-CCM decryption",
                                           found: "\(error)")
        }
    }

    /// Decodes the v2 objects into `readings`, and into `objects` (the `objects` field) when `buildingFields`.
    static func parseV2Objects(_ r: inout ByteReader, readings: inout [Reading], objects: inout [FieldValue],
                               buildingFields: Bool) throws(DecodeError)
    {
        while !r.isAtEnd {
            let idOffset = r.offset
            let id = try r.u8("object id")
            guard let type = objects_(id) else {
                throw DecodeError(kind: .unsupported, context: r.context, offset: idOffset,
                                  expected: "a known BTHome object id (value lengths are per id)",
                                  found: "unknown object id \(hexString(id)) at offset \(idOffset); parsing stopped")
            }
            var length = type.length
            if type.coding == .text || (type.coding == .raw && type.length == 0) {
                length = Int(try r.u8(lazyField: { "\(type.name) length" }))
            }
            let value = try r.bytes(length, lazyField: { "\(type.name) (object \(hexString(id)))" })
            try interpret(id: id, type: type, value: value, offset: idOffset, context: r.context,
                          readings: &readings, objects: &objects, buildingFields: buildingFields)
        }
    }

    /// ``objects`` indexed by id (no hashing on the hot path).
    static let objectTable: [ObjectType?] = (0...255).map { objects[UInt8($0)] }

    @inline(__always)
    static func objects_(_ id: UInt8) -> ObjectType? { objectTable[Int(id)] }

    static func unsignedLE(_ b: ArraySlice<UInt8>) -> UInt64 {
        var v: UInt64 = 0
        var shift: UInt64 = 0
        for x in b { v |= UInt64(x) << shift; shift += 8 }
        return v
    }

    static func signedLE(_ b: ArraySlice<UInt8>) -> Int64 {
        let v = unsignedLE(b)
        let bits = UInt64(b.count * 8)
        if bits == 0 || bits >= 64 { return Int64(bitPattern: v) }
        let shift = 64 - bits
        return Int64(bitPattern: v << shift) >> Int64(shift)
    }

    /// Appends the readings of one object, and its `objects` entry when `buildingFields`.
    static func interpret(id: UInt8, type: ObjectType, value: ArraySlice<UInt8>, offset: Int, context: String,
                          readings: inout [Reading], objects: inout [FieldValue], buildingFields: Bool)
        throws(DecodeError)
    {
        var member: [(String, FieldValue)] = []
        if buildingFields {
            member.reserveCapacity(4)
            member.append(("id", .string(hexString(id))))
            member.append(("name", .string(type.name)))
        }
        switch type.coding {
        case .unsigned, .signed:
            let numeric: Double
            if type.coding == .signed {
                numeric = Adv.scaled(signedLE(value), type.decimals) * type.multiplier
            } else {
                numeric = Adv.scaled(unsignedLE(value), type.decimals) * type.multiplier
            }
            let v = type.multiplier == 1 ? numeric : Adv.rounded(numeric, 2)
            if buildingFields { member.append(("value", .number(v))) }
            if let kind = type.kind {
                if isState(kind, id: id) {
                    readings.append(Reading(kind, v != 0, label: type.label))
                } else {
                    readings.append(Reading(kind, v, unit: type.unit, label: type.label))
                }
            }
        case .timestamp:
            let v = unsignedLE(value)
            if buildingFields { member.append(("value", .integer(v))) }
            readings.append(Reading(.timestamp, Double(v)))
        case .text:
            guard let s = String(validating: value, as: UTF8.self) else {
                throw DecodeError.invalidValue(context: context, offset: offset + 2, expected: "UTF-8 text",
                                               found: "invalid UTF-8 bytes \(hexString(bytes: value))")
            }
            if buildingFields { member.append(("value", .string(s))) }
        case .raw:
            guard buildingFields else { break }
            if id == 0xF1 || id == 0xF2 {
                member.append(("value", .string(value.reversed().map { String($0) }.joined(separator: "."))))
            } else {
                member.append(("value", .bytes(Array(value))))
            }
        case .event:
            let code = value[value.startIndex]
            if id == 0x3A {
                let name = buttonEvents[code] ?? "unknown_\(hexString(code))"
                if buildingFields { member.append(("event", .string(name))) }
                readings.append(Reading(.button, text: name))
            } else {
                let name = dimmerEvents[code] ?? "unknown_\(hexString(code))"
                let steps = value[value.startIndex + 1]
                if buildingFields {
                    member.append(("event", .string(name)))
                    member.append(("steps", .int(Int(steps))))
                }
                readings.append(Reading(.dimmer, text: code == 0 ? name : "\(name) \(steps)"))
            }
        }
        if buildingFields { objects.append(.nested(member)) }
    }

    /// Binary (state) objects are 0x0F...0x2D.
    @inline(__always)
    static func isState(_ kind: ReadingKind, id: UInt8) -> Bool { id >= 0x0F && id <= 0x2D && id != 0x12 && id != 0x13 && id != 0x14 }

    // MARK: v1

    /// Decodes BTHome v1 service data. `uuid` selects plain (0x181C) or
    /// encrypted (0x181E). v1 objects carry their own length and data type
    /// (control byte: bits 0-4 length incl. the type byte, bits 5-7 format),
    /// so unknown object ids are kept as raw fields instead of stopping.
    public static func decodeV1(_ data: [UInt8], uuid: UInt16, mac: BluetoothAddress? = nil, bindkey: [UInt8]? = nil)
        throws(DecodeError) -> AdvertisementModel
    {
        let ctx = "bthome v1"
        let encrypted = uuid == uuidV1Encrypted
        // The objects: from the payload itself, or from the decrypted payload.
        let objectReader: ByteReader
        let counter: Int?
        if encrypted {
            guard data.count >= 8 else {
                throw DecodeError.truncated(context: ctx, offset: 0, needed: 8, available: data.count,
                                            what: "encryption counter and MIC")
            }
            let (key, mac) = try requireDecryptionInputs(bindkey, mac, context: ctx, offset: 0)
            let c = data.count - 8  // counter (4), then MIC (4)
            var nonce = AESCCM.Nonce()
            nonce.appendAddress(mac, airOrder: false)
            nonce.append(0x1E); nonce.append(0x18)
            for k in 0..<4 { nonce.append(data[c + k]) }
            let plain = try decrypt(ctx: ctx, key: key, nonce: nonce, ciphertext: data.dropLast(8), mic: data.suffix(4),
                                    aad: Adv.aad11, offset: 0)
            counter = Int(unsignedLE(data[c..<(c + 4)]))
            objectReader = ByteReader(plain, context: ctx + " (decrypted payload)")
        } else if uuid != uuidV1 {
            throw DecodeError.unsupported(context: ctx, what: "service data UUID \(hexString(uuid))")
        } else {
            counter = nil
            objectReader = ByteReader(data, context: ctx)
        }
        var readings: [Reading] = []
        readings.reserveCapacity(objectReader.remaining / 3)
        var objects: [FieldValue] = []
        var pr = objectReader
        try parseV1Objects(&pr, readings: &readings, objects: &objects, buildingFields: false)
        return AdvertisementModel(formatName: "bthome", modelName: "bthome_v1", readings: readings, deferredFields: {
            var fields: [(String, FieldValue)] = [("version", .int(1)), ("encrypted", .bool(encrypted))]
            if let counter { fields.append(("counter", .int(counter))) }
            var r = objectReader
            var unused: [Reading] = []
            var objects: [FieldValue] = []
            // Cannot fail: the same bytes decoded without error when the model was made.
            try? parseV1Objects(&r, readings: &unused, objects: &objects, buildingFields: true)
            fields.append(("objects", .list(objects)))
            return fields
        })
    }

    /// Decodes the v1 objects into `readings`, and into `objects` (the `objects` field) when `buildingFields`.
    static func parseV1Objects(_ r: inout ByteReader, readings: inout [Reading], objects: inout [FieldValue],
                               buildingFields: Bool) throws(DecodeError)
    {
        let ctx = r.context
        while !r.isAtEnd {
            let start = r.offset
            let control = try r.u8("object control byte")
            let length = Int(control & 0x1F)
            let format = control >> 5
            guard length >= 1 else {
                throw DecodeError.invalidValue(context: ctx, offset: start, expected: "an object length of at least 1",
                                               found: "0")
            }
            let id = try r.u8("object id")
            let value = try r.bytes(length - 1, lazyField: { "object \(hexString(id)) value" })
            guard let known = objects_(id) else {
                if buildingFields { objects.append(.nested([("id", .string(hexString(id))), ("value", .bytes(Array(value)))])) }
                continue
            }
            let coding: Coding
            switch format {
            case 0: coding = known.coding == .event ? .event : (known.coding == .timestamp ? .timestamp : .unsigned)
            case 1: coding = .signed
            case 2:
                // IEEE float (2, 4 or 8 bytes).
                var fr = ByteReader(value, context: ctx)
                let f: Double
                switch value.count {
                case 2: f = Double(try fr.f16())
                case 4: f = Double(try fr.f32())
                case 8: f = try fr.f64()
                default:
                    throw DecodeError.invalidValue(context: ctx, offset: start + 2,
                                                   expected: "a 2, 4 or 8 byte float", found: "\(value.count) bytes")
                }
                // The object's factor applies to float values too.
                let scaledFloat = Adv.rounded(Adv.scaledDouble(f, known.decimals) * known.multiplier, 9)
                if buildingFields {
                    objects.append(.nested([("id", .string(hexString(id))), ("name", .string(known.name)),
                                            ("value", .number(scaledFloat))]))
                }
                if let kind = known.kind {
                    readings.append(Reading(kind, scaledFloat, unit: known.unit, label: known.label))
                }
                continue
            case 3: coding = .text
            case 4: coding = .raw
            case 5: coding = .timestamp
            default:
                throw DecodeError.reserved(context: ctx, offset: start, field: "BTHome v1 data format",
                                           found: "\(format)")
            }
            if (coding == .event && value.count < known.length) || ((coding == .unsigned || coding == .signed) && value.count > 8) {
                throw DecodeError.invalidValue(context: ctx, offset: start, expected: "a valid length for object \(hexString(id))",
                                               found: "\(value.count) bytes")
            }
            let type = ObjectType(known.name, value.count, coding, coding == .text || coding == .raw ? nil : known.kind,
                                  known.decimals, unit: known.unit, label: known.label, multiplier: known.multiplier)
            try interpret(id: id, type: type, value: value, offset: start, context: ctx,
                          readings: &readings, objects: &objects, buildingFields: buildingFields)
        }
    }
}
