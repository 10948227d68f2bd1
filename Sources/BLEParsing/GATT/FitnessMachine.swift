/// Fitness Machine Service: Indoor Bike Data (0x2AD2) and Treadmill Data (0x2ACD).
///
/// Bit 0 of the flags is "More Data": Instantaneous Speed is present when it
/// is **0**. Two field encodings differ between FTMS 1.0 and the current GATT
/// Specification Supplement (GSS):
/// - Indoor Bike Resistance Level: FTMS 1.0 sint16 (resolution 1), GSS uint8
///   (M=1, d=1, i.e. ×10).
/// - Treadmill Instantaneous/Average Pace: FTMS 1.0 uint8 km/min (0.1), GSS
///   uint16 seconds per 500 m.
/// Since every field has a fixed size, the total length identifies the
/// encoding: the decoder uses the GSS layout unless the length matches only
/// the FTMS 1.0 layout, and reports which in `layout`.
enum FitnessMachineDecoders {
    enum Layout { case gss, ftms10 }

    static func chooseLayout(_ r: ByteReader, gss: Int, legacy: Int) -> Layout {
        if r.count != gss && r.count == legacy { return .ftms10 }
        return .gss
    }

    static func energy(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let total = try r.u16("total energy")
        let perHour = try r.u16("energy per hour")
        let perMinute = try r.u8("energy per minute")
        b.field("total_energy_kcal", total == 0xFFFF ? .null : .int(Int(total)))
        b.field("energy_per_hour_kcal", perHour == 0xFFFF ? .null : .int(Int(perHour)))
        b.field("energy_per_minute_kcal", perMinute == 0xFF ? .null : .int(Int(perMinute)))
        if total != 0xFFFF { b.reading(Reading(.energy, Double(total), unit: Unit.kilocalorie, label: "total")) }
    }

    static func tail(_ r: inout ByteReader, _ b: inout GATTBuilder, hr: Bool, met: Bool, elapsed: Bool, remaining: Bool) throws(DecodeError) {
        if hr {
            let v = try r.u8("heart rate")
            b.field("heart_rate_bpm", int: v)
            b.reading(Reading(.heartRate, Double(v)))
        }
        if met { b.field("metabolic_equivalent", scaledDecimal(Int64(try r.u8("metabolic equivalent")), exponent: -1)) }
        if elapsed {
            let v = try r.u16("elapsed time")
            b.field("elapsed_time_s", int: v)
            b.reading(Reading(.duration, Double(v), label: "elapsed"))
        }
        if remaining {
            let v = try r.u16("remaining time")
            b.field("remaining_time_s", int: v)
            b.reading(Reading(.duration, Double(v), label: "remaining"))
        }
    }

    static func speed(_ r: inout ByteReader, _ b: inout GATTBuilder, average: Bool) throws(DecodeError) {
        let v = scaledDecimal(Int64(try r.u16(average ? "average speed" : "instantaneous speed")), exponent: -2)
        b.field(average ? "average_speed_km_h" : "instantaneous_speed_km_h", v)
        b.reading(Reading(.speed, v, unit: Unit.kilometersPerHour, label: average ? "average" : nil))
    }

    static let indoorBikeSizes: [(Int, Int)] = [
        (1, 2), (2, 2), (3, 2), (4, 3), (5, 1), (6, 2), (7, 2), (8, 5), (9, 1), (10, 1), (11, 2), (12, 2),
    ]
    static let treadmillSizes: [(Int, Int)] = [
        (1, 2), (2, 3), (3, 4), (4, 4), (5, 2), (6, 2), (7, 5), (8, 1), (9, 1), (10, 2), (11, 2), (12, 4),
    ]

    /// Indoor Bike Data (0x2AD2).
    static func indoorBike(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u16("flags")
        var gss = 2 + (flags.bit(0) ? 0 : 2)
        for (bit, size) in indoorBikeSizes where flags.bit(bit) { gss += size }
        let layout = chooseLayout(r, gss: gss, legacy: gss + (flags.bit(5) ? 1 : 0))
        b.field("flags", int: flags)
        b.field("more_data", flags.bit(0))
        if !flags.bit(0) { try speed(&r, &b, average: false) }
        if flags.bit(1) { try speed(&r, &b, average: true) }
        if flags.bit(2) {
            let v = Double(try r.u16("instantaneous cadence")) / 2
            b.field("instantaneous_cadence_rpm", v)
            b.reading(Reading(.cadence, v))
        }
        if flags.bit(3) { b.field("average_cadence_rpm", Double(try r.u16("average cadence")) / 2) }
        if flags.bit(4) {
            let v = try r.u24("total distance")
            b.field("total_distance_m", int: v)
            b.reading(Reading(.distance, Double(v), label: "total"))
        }
        if flags.bit(5) {
            switch layout {
            case .gss: b.field("resistance_level", int: Int(try r.u8("resistance level")) * 10)
            case .ftms10: b.field("resistance_level", int: try r.i16("resistance level"))
            }
        }
        if flags.bit(6) {
            let v = try r.i16("instantaneous power")
            b.field("instantaneous_power_w", int: v)
            b.reading(Reading(.power, Double(v)))
        }
        if flags.bit(7) {
            let v = try r.i16("average power")
            b.field("average_power_w", int: v)
            b.reading(Reading(.power, Double(v), label: "average"))
        }
        if flags.bit(8) { try energy(&r, &b) }
        try tail(&r, &b, hr: flags.bit(9), met: flags.bit(10), elapsed: flags.bit(11), remaining: flags.bit(12))
        if flags.bit(5) { b.field("layout", layout == .gss ? "gss" : "ftms_1.0") }
    }

    /// Treadmill Data (0x2ACD).
    static func treadmill(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u16("flags")
        var gss = 2 + (flags.bit(0) ? 0 : 2)
        for (bit, size) in treadmillSizes where flags.bit(bit) { gss += size }
        let legacy = gss - (flags.bit(5) ? 1 : 0) - (flags.bit(6) ? 1 : 0)
        let layout = chooseLayout(r, gss: gss, legacy: legacy)
        b.field("flags", int: flags)
        b.field("more_data", flags.bit(0))
        if !flags.bit(0) { try speed(&r, &b, average: false) }
        if flags.bit(1) { try speed(&r, &b, average: true) }
        if flags.bit(2) {
            let v = try r.u24("total distance")
            b.field("total_distance_m", int: v)
            b.reading(Reading(.distance, Double(v), label: "total"))
        }
        if flags.bit(3) {
            let incl = try r.i16("inclination")
            let ramp = try r.i16("ramp angle setting")
            if incl == Int16.max {
                b.field("inclination_percent", .null)
            } else {
                let v = scaledDecimal(Int64(incl), exponent: -1)
                b.field("inclination_percent", v)
                b.reading(Reading(.inclination, v))
            }
            b.field("ramp_angle_deg", ramp == Int16.max ? .null : .number(scaledDecimal(Int64(ramp), exponent: -1)))
        }
        if flags.bit(4) {
            b.field("positive_elevation_gain_m", scaledDecimal(Int64(try r.u16("positive elevation gain")), exponent: -1))
            b.field("negative_elevation_gain_m", scaledDecimal(Int64(try r.u16("negative elevation gain")), exponent: -1))
        }
        for average in [false, true] where flags.bit(average ? 6 : 5) {
            let what = average ? "average pace" : "instantaneous pace"
            switch layout {
            case .gss:
                b.field(average ? "average_pace_s_per_500m" : "instantaneous_pace_s_per_500m", int: try r.u16(what))
            case .ftms10:
                b.field(average ? "average_pace_km_min" : "instantaneous_pace_km_min", scaledDecimal(Int64(try r.u8(what)), exponent: -1))
            }
        }
        if flags.bit(7) { try energy(&r, &b) }
        try tail(&r, &b, hr: flags.bit(8), met: flags.bit(9), elapsed: flags.bit(10), remaining: flags.bit(11))
        if flags.bit(12) {
            let force = try r.i16("force on belt")
            let power = try r.i16("power output")
            b.field("force_on_belt_n", int: force)
            b.field("power_output_w", int: power)
            b.reading(Reading(.power, Double(power)))
        }
        if flags.bit(5) || flags.bit(6) { b.field("layout", layout == .gss ? "gss" : "ftms_1.0") }
    }
}
