/// Characteristic Presentation Format descriptor (0x2904): how to read a
/// characteristic value without knowing the characteristic.
///
/// Layout (7 bytes): uint8 Format, sint8 Exponent, uint16 Unit (a 0x27xx unit
/// UUID), uint8 Name Space, uint16 Description.
public struct PresentationFormat: Equatable, Hashable, Sendable {
    public var format: UInt8
    /// Decimal exponent applied to integer formats: value = raw × 10^exponent.
    public var exponent: Int8
    public var unit: UInt16
    public var namespace: UInt8
    public var descriptionValue: UInt16

    public init(format: UInt8, exponent: Int8 = 0, unit: UInt16 = 0x2700, namespace: UInt8 = 1, description: UInt16 = 0) {
        self.format = format
        self.exponent = exponent
        self.unit = unit
        self.namespace = namespace
        self.descriptionValue = description
    }

    /// Decodes the 7-byte descriptor value.
    public init(bytes: [UInt8]) throws(DecodeError) {
        var r = ByteReader(bytes, context: "characteristic presentation format")
        try self.init(reading: &r)
        try r.expectEnd()
    }

    init(reading r: inout ByteReader) throws(DecodeError) {
        try r.require(7, for: "a 7-byte presentation format")
        let format = try r.u8("format")
        if PresentationFormat.formatNames[Int(format)] == nil {
            throw r.reserved("format type (0x01...0x1C)", found: hexString(format), at: r.offset - 1)
        }
        self.init(
            format: format, exponent: try r.i8("exponent"), unit: try r.u16("unit"),
            namespace: try r.u8("name space"), description: try r.u16("description"))
    }

    /// Format type short names from the Assigned Numbers (core/formattypes).
    static let formatNames: [Int: String] = [
        0x01: "boolean", 0x02: "uint2", 0x03: "uint4", 0x04: "uint8", 0x05: "uint12", 0x06: "uint16",
        0x07: "uint24", 0x08: "uint32", 0x09: "uint48", 0x0A: "uint64", 0x0B: "uint128", 0x0C: "sint8",
        0x0D: "sint12", 0x0E: "sint16", 0x0F: "sint24", 0x10: "sint32", 0x11: "sint48", 0x12: "sint64",
        0x13: "sint128", 0x14: "float32", 0x15: "float64", 0x16: "medfloat16", 0x17: "medfloat32",
        0x18: "uint16[2]", 0x19: "utf8s", 0x1A: "utf16s", 0x1B: "struct", 0x1C: "medASN1",
    ]

    /// e.g. "sint16".
    public var formatName: String { PresentationFormat.formatNames[Int(format)] ?? "reserved_\(format)" }

    /// Unit symbol (as Home Assistant writes it) and reading kind, for the
    /// units a reading can be made of.
    static let units: [UInt16: (String, ReadingKind?)] = [
        0x2701: ("m", .distance), 0x2702: ("kg", .weight), 0x2703: ("s", .duration), 0x2704: ("A", .current),
        0x2705: ("K", .temperature), 0x2710: ("m²", nil), 0x2711: ("m³", .volume), 0x2712: ("m/s", .speed),
        0x2713: ("m/s²", .acceleration), 0x2720: ("rad", nil), 0x2722: ("Hz", .frequency), 0x2723: ("N", nil),
        0x2724: ("Pa", .pressure), 0x2725: ("J", .energy), 0x2726: ("W", .power), 0x2727: ("C", nil),
        0x2728: ("V", .voltage), 0x2729: ("F", nil), 0x272A: ("Ω", .impedance), 0x272B: ("S", nil),
        0x272F: ("°C", .temperature), 0x2730: ("lm", nil), 0x2731: ("lx", .illuminance), 0x2741: ("N·m", .torque),
        0x2743: ("rad/s", nil), 0x2760: ("min", .duration), 0x2761: ("h", .duration), 0x2762: ("d", .duration),
        0x2763: ("°", .rotation), 0x2767: ("L", .volume), 0x2768: ("t", .weight), 0x2780: ("bar", .pressure),
        0x2781: ("mmHg", .pressure), 0x2785: ("kn", .speed), 0x2787: ("B", nil), 0x27A0: ("yd", .distance),
        0x27A2: ("in", .distance), 0x27A3: ("ft", .distance), 0x27A4: ("mi", .distance), 0x27A5: ("psi", .pressure),
        0x27A6: ("km/h", .speed), 0x27A7: ("mph", .speed), 0x27A8: ("rpm", .cadence), 0x27A9: ("cal", .energy),
        0x27AA: ("kcal", .energy), 0x27AB: ("kWh", .energy), 0x27AC: ("°F", .temperature), 0x27AD: ("%", nil),
        0x27AE: ("‰", nil), 0x27AF: ("bpm", .heartRate), 0x27B0: ("Ah", nil), 0x27B1: ("mg/dL", .glucose),
        0x27B2: ("mmol/L", .glucose), 0x27B3: ("a", nil), 0x27B4: ("mo", nil), 0x27B6: ("W/m²", nil),
        0x27B8: ("lb", .weight), 0x27BA: ("steps/min", .cadence), 0x27BC: ("strokes/min", .cadence),
        0x27C1: ("g/s", nil), 0x27C2: ("L/s", nil), 0x27C3: ("dB", .soundPressure), 0x27C4: ("ppm", nil),
        0x27C5: ("ppb", nil), 0x27C8: ("VA", nil),
    ]

    /// Unit symbol, or nil for unitless (0x2700) and units without one.
    public var unitSymbol: String? { PresentationFormat.units[unit]?.0 }
    /// Reading kind implied by the unit, if unambiguous.
    public var readingKind: ReadingKind? { PresentationFormat.units[unit]?.1 }

    var fields: [(String, FieldValue)] {
        [
            ("format", .int(Int(format))), ("format_name", .string(formatName)), ("exponent", .int(Int(exponent))),
            ("unit", .string(hexString(unit))),
            ("unit_name", AssignedNumbers.unitName(unit).map { .string($0) } ?? .null),
            ("unit_symbol", unitSymbol.map { .string($0) } ?? .null),
            ("namespace", .int(Int(namespace))), ("description", .int(Int(descriptionValue))),
        ]
    }

    /// Decodes a value laid out as this format says.
    func decodeValue(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        func integer(_ raw: Int64) {
            let v = exponent == 0 ? Double(raw) : scaledDecimal(raw, exponent: Int(exponent))
            if exponent == 0 { b.field("value", int: raw) } else { b.field("value", v) }
            emit(v)
        }
        func unsigned(_ raw: UInt64) {
            if let s = Int64(exactly: raw) { integer(s); return }
            let v = Double(raw) * scaledDecimal(1, exponent: Int(exponent))
            b.field("value", v)
            emit(v)
        }
        func emit(_ v: Double) {
            if let kind = readingKind, v.isFinite { b.reading(Reading(kind: kind, value: .number(v), unit: unitSymbol)) }
        }
        switch format {
        case 0x01:
            let v = try r.u8("boolean")
            if v > 1 { throw r.invalid(expected: "boolean 0 or 1", found: "\(v)", at: r.offset - 1) }
            b.field("value", v == 1)
        case 0x02: unsigned(UInt64(try r.u8("uint2") & 0x03))
        case 0x03: unsigned(UInt64(try r.u8("uint4") & 0x0F))
        case 0x04: unsigned(UInt64(try r.u8()))
        case 0x05: unsigned(UInt64(try r.u16("uint12") & 0x0FFF))
        case 0x06: unsigned(UInt64(try r.u16()))
        case 0x07: unsigned(UInt64(try r.u24()))
        case 0x08: unsigned(UInt64(try r.u32()))
        case 0x09: unsigned(try r.u48())
        case 0x0A: unsigned(try r.u64())
        case 0x0C: integer(Int64(try r.i8()))
        case 0x0D:
            let raw = try r.u16("sint12") & 0x0FFF
            integer(Int64(Int16(bitPattern: raw << 4) >> 4))
        case 0x0E: integer(Int64(try r.i16()))
        case 0x0F: integer(Int64(try r.i24()))
        case 0x10: integer(Int64(try r.i32()))
        case 0x11: integer(try r.int(size: 6, "sint48"))
        case 0x12: integer(try r.i64())
        case 0x0B, 0x13: b.field("value", .bytes(Array(try r.bytes(16, "a 128-bit integer"))))
        case 0x14:
            let v = Double(try r.f32())
            b.field("value", v.isFinite ? .number(v) : .string(v.isNaN ? "nan" : (v < 0 ? "-inf" : "+inf")))
            emit(v)
        case 0x15:
            let v = try r.f64()
            b.field("value", v.isFinite ? .number(v) : .string(v.isNaN ? "nan" : (v < 0 ? "-inf" : "+inf")))
            emit(v)
        case 0x16, 0x17:
            let v = format == 0x16 ? try r.sfloat() : try r.medfloat32()
            b.field("value", v.fieldValue)
            if case .finite = v, let d = v.doubleValue { emit(d) }
        case 0x18:
            b.field("value", .list([.int(Int(try r.u16("first uint16"))), .int(Int(try r.u16("second uint16")))]))
        case 0x19:
            b.field("value", try r.utf8Rest())
        case 0x1A:
            let raw = r.rest()
            if raw.count % 2 != 0 {
                throw r.invalid(expected: "an even number of bytes for UTF-16", found: "\(raw.count)", at: 0)
            }
            var units: [UInt16] = []
            var i = raw.startIndex
            while i < raw.endIndex { units.append(UInt16(raw[i]) | UInt16(raw[i + 1]) << 8); i += 2 }
            while units.last == 0 { units.removeLast() }
            b.field("value", String(decoding: units, as: UTF16.self))
        default:  // struct, medASN1: opaque
            b.field("value", .bytes(Array(r.rest())))
        }
        b.field("format", formatName)
        if exponent != 0 { b.field("exponent", int: exponent) }
        b.field("unit", unitSymbol.map { .string($0) } ?? (unit == 0x2700 ? .null : .string(hexString(unit))))
    }
}
