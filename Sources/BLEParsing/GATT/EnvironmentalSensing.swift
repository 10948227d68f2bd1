/// Environmental Sensing Service characteristics (GATT Specification Supplement).
enum EnvironmentalDecoders {
    /// Temperature (0x2A6E): sint16, 0.01 °C, 0x8000 = unknown.
    static func temperature(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let raw = try r.i16("temperature")
        if raw == Int16.min { b.field("temperature_c", .null); return }
        let v = scaledDecimal(Int64(raw), exponent: -2)
        b.field("temperature_c", v)
        b.reading(Reading(.temperature, v))
    }

    /// Temperature 8 (0x2B0D): sint8, 0.5 °C, 0x7F = unknown.
    static func temperature8(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let raw = try r.i8("temperature")
        if raw == Int8.max { b.field("temperature_c", .null); return }
        let v = Double(raw) / 2
        b.field("temperature_c", v)
        b.reading(Reading(.temperature, v))
    }

    /// Humidity (0x2A6F): uint16, 0.01 %, 0xFFFF = unknown, > 100.00 prohibited.
    static func humidity(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let raw = try r.u16("humidity")
        if raw == 0xFFFF { b.field("humidity_percent", .null); return }
        if raw > 10000 { throw r.invalid(expected: "humidity 0...100.00 % (raw 0...10000)", found: "\(raw)", at: 0) }
        let v = scaledDecimal(Int64(raw), exponent: -2)
        b.field("humidity_percent", v)
        b.reading(Reading(.humidity, v))
    }

    /// Humidity 8 (0x2C1B): uint8, 0.5 %, 0xFF = unknown, > 100 % prohibited.
    static func humidity8(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let raw = try r.u8("humidity")
        if raw == 0xFF { b.field("humidity_percent", .null); return }
        if raw > 200 { throw r.invalid(expected: "humidity 0...100 % (raw 0...200)", found: "\(raw)", at: 0) }
        let v = Double(raw) / 2
        b.field("humidity_percent", v)
        b.reading(Reading(.humidity, v))
    }

    /// Pressure (0x2A6D): uint32, 0.1 Pa. Reading in hPa.
    static func pressure(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let raw = try r.u32("pressure")
        b.field("pressure_pa", scaledDecimal(Int64(raw), exponent: -1))
        b.reading(Reading(.pressure, scaledDecimal(Int64(raw), exponent: -3)))
    }

    /// UV Index (0x2A76): uint8.
    static func uvIndex(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u8("UV index")
        b.field("uv_index", int: v)
        b.reading(Reading(.uvIndex, Double(v)))
    }

    /// Illuminance (0x2AFB): uint24, 0.01 lx, 0xFFFFFF = unknown.
    static func illuminance(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let raw = try r.u24("illuminance")
        if raw == 0xFF_FFFF { b.field("illuminance_lx", .null); return }
        let v = scaledDecimal(Int64(raw), exponent: -2)
        b.field("illuminance_lx", v)
        b.reading(Reading(.illuminance, v))
    }

    /// Elevation (0x2A6C): sint24, 0.01 m.
    static func elevation(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = scaledDecimal(Int64(try r.i24("elevation")), exponent: -2)
        b.field("elevation_m", v)
        b.reading(Reading(.elevation, v))
    }

    /// Dew Point (0x2A7B): sint8, 1 °C.
    static func dewPoint(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.i8("dew point")
        b.field("dew_point_c", int: v)
        b.reading(Reading(.dewPoint, Double(v)))
    }

    /// uint16 concentration with 0xFFFE = "65534 or greater", 0xFFFF = unknown.
    static func concentration16(
        _ r: inout ByteReader, _ b: inout GATTBuilder, field: String, kind: ReadingKind, unit: String
    ) throws(DecodeError) {
        let raw = try r.u16("concentration")
        switch raw {
        case 0xFFFF:
            b.field(field, .null)
        case 0xFFFE:
            b.field(field, int: raw)
            b.field("at_least", true)
            b.reading(Reading(kind, Double(raw), unit: unit))
        default:
            b.field(field, int: raw)
            b.reading(Reading(kind, Double(raw), unit: unit))
        }
    }

    /// CO2 Concentration (0x2B8C): uint16 ppm.
    static func co2(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        try concentration16(&r, &b, field: "co2_ppm", kind: .co2, unit: Unit.ppm)
    }

    /// VOC Concentration (0x2BE7): uint16 ppb.
    static func voc(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        try concentration16(&r, &b, field: "voc_ppb", kind: .tvoc, unit: Unit.ppb)
    }

    /// SFLOAT in kg/m³ reported in µg/m³ (PM1 0x2BD5, PM2.5 0x2BD6, PM10 0x2BD7, NMVOC 0x2BD3).
    static func massDensity(kind: ReadingKind) -> GATTDecoder.Decode {
        { (r: inout ByteReader, b: inout GATTBuilder) throws(DecodeError) in
            let v = try r.sfloat("concentration")
            b.medical("concentration_ug_m3", v, kind: kind, unit: Unit.microgramsPerCubicMeter, decimalShift: 9)
        }
    }
}

extension String {
    func replacingUnderscores() -> String {
        String(self.map { $0 == "_" ? " " : $0 })
    }
}
