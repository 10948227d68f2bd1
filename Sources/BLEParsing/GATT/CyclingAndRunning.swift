/// Cycling Speed and Cadence, Running Speed and Cadence and Cycling Power.
enum CyclingDecoders {
    /// CSC Measurement (0x2A5B). Flags: bit0 wheel data (uint32 revolutions,
    /// uint16 last event time 1/1024 s), bit1 crank data (uint16, uint16).
    static func cscMeasurement(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        if flags.bit(0) {
            let revs = try r.u32("cumulative wheel revolutions")
            let time = try r.u16("last wheel event time")
            b.field("cumulative_wheel_revolutions", int: revs)
            b.field("last_wheel_event_time_s", scaled(Int64(time), binaryExponent: -10))
            b.reading(Reading(.count, Double(revs), label: "wheel_revolutions"))
        }
        if flags.bit(1) {
            let revs = try r.u16("cumulative crank revolutions")
            let time = try r.u16("last crank event time")
            b.field("cumulative_crank_revolutions", int: revs)
            b.field("last_crank_event_time_s", scaled(Int64(time), binaryExponent: -10))
            b.reading(Reading(.count, Double(revs), label: "crank_revolutions"))
        }
    }

    /// CSC Feature (0x2A5C): uint16 bit field.
    static func cscFeature(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u16("CSC feature")
        b.field("features", int: v)
        b.field("wheel_revolution_data_supported", v.bit(0))
        b.field("crank_revolution_data_supported", v.bit(1))
        b.field("multiple_sensor_locations_supported", v.bit(2))
    }

    /// RSC Measurement (0x2A53): flags, uint16 speed (1/256 m/s), uint8 cadence
    /// (1/min), bit0 uint16 stride length (0.01 m), bit1 uint32 total distance
    /// (0.1 m), bit2 running (else walking).
    static func rscMeasurement(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        let speed = scaled(Int64(try r.u16("instantaneous speed")), binaryExponent: -8)
        let cadence = try r.u8("instantaneous cadence")
        b.field("speed_m_s", speed)
        b.reading(Reading(.speed, speed))
        b.field("cadence_per_min", int: cadence)
        b.reading(Reading(.cadence, Double(cadence), unit: Unit.stepsPerMinute))
        if flags.bit(0) {
            let stride = scaledDecimal(Int64(try r.u16("instantaneous stride length")), exponent: -2)
            b.field("stride_length_m", stride)
            b.reading(Reading(.distance, stride, label: "stride_length"))
        }
        if flags.bit(1) {
            let total = scaledDecimal(Int64(try r.u32("total distance")), exponent: -1)
            b.field("total_distance_m", total)
            b.reading(Reading(.distance, total, label: "total"))
        }
        b.field("status", flags.bit(2) ? "running" : "walking")
    }

    /// RSC Feature (0x2A54).
    static func rscFeature(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u16("RSC feature")
        b.field("features", int: v)
        b.field("stride_length_measurement_supported", v.bit(0))
        b.field("total_distance_measurement_supported", v.bit(1))
        b.field("walking_or_running_status_supported", v.bit(2))
        b.field("calibration_procedure_supported", v.bit(3))
        b.field("multiple_sensor_locations_supported", v.bit(4))
    }

    /// Cycling Power Measurement (0x2A63), every optional field.
    static func cyclingPowerMeasurement(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u16("flags")
        b.field("flags", int: flags)
        let power = try r.i16("instantaneous power")
        b.field("instantaneous_power_w", int: power)
        b.reading(Reading(.power, Double(power)))
        if flags.bit(0) {
            let raw = try r.u8("pedal power balance")
            b.field("pedal_power_balance_percent", Double(raw) / 2)
            b.field("pedal_power_balance_reference", flags.bit(1) ? "left" : "unknown")
        }
        if flags.bit(2) {
            let torque = scaled(Int64(try r.u16("accumulated torque")), binaryExponent: -5)
            b.field("accumulated_torque_nm", torque)
            b.field("accumulated_torque_source", flags.bit(3) ? "crank" : "wheel")
            b.reading(Reading(.torque, torque, label: "accumulated"))
        }
        if flags.bit(4) {
            let revs = try r.u32("cumulative wheel revolutions")
            let time = try r.u16("last wheel event time")
            b.field("cumulative_wheel_revolutions", int: revs)
            b.field("last_wheel_event_time_s", scaled(Int64(time), binaryExponent: -11))
            b.reading(Reading(.count, Double(revs), label: "wheel_revolutions"))
        }
        if flags.bit(5) {
            let revs = try r.u16("cumulative crank revolutions")
            let time = try r.u16("last crank event time")
            b.field("cumulative_crank_revolutions", int: revs)
            b.field("last_crank_event_time_s", scaled(Int64(time), binaryExponent: -10))
            b.reading(Reading(.count, Double(revs), label: "crank_revolutions"))
        }
        if flags.bit(6) {
            b.field("maximum_force_n", int: try r.i16("maximum force magnitude"))
            b.field("minimum_force_n", int: try r.i16("minimum force magnitude"))
        }
        if flags.bit(7) {
            b.field("maximum_torque_nm", scaled(Int64(try r.i16("maximum torque magnitude")), binaryExponent: -5))
            b.field("minimum_torque_nm", scaled(Int64(try r.i16("minimum torque magnitude")), binaryExponent: -5))
        }
        if flags.bit(8) {
            let packed = try r.u24("extreme angles")
            b.field("maximum_angle_deg", int: packed & 0xFFF)
            b.field("minimum_angle_deg", int: packed >> 12)
        }
        if flags.bit(9) { b.field("top_dead_spot_angle_deg", int: try r.u16("top dead spot angle")) }
        if flags.bit(10) { b.field("bottom_dead_spot_angle_deg", int: try r.u16("bottom dead spot angle")) }
        if flags.bit(11) {
            let energy = try r.u16("accumulated energy")
            b.field("accumulated_energy_kj", int: energy)
            b.reading(Reading(.energy, Double(energy), unit: Unit.kilojoule))
        }
        b.field("offset_compensation_indicator", flags.bit(12))
    }

    static let cyclingPowerFeatureNames: [String?] = [
        "pedal_power_balance", "accumulated_torque", "wheel_revolution_data", "crank_revolution_data",
        "extreme_magnitudes", "extreme_angles", "top_and_bottom_dead_spot_angles", "accumulated_energy",
        "offset_compensation_indicator", "offset_compensation", "cycling_power_measurement_content_masking",
        "multiple_sensor_locations", "crank_length_adjustment", "chain_length_adjustment",
        "chain_weight_adjustment", "span_length_adjustment", nil, "instantaneous_measurement_direction",
        "factory_calibration_date", "enhanced_offset_compensation_procedure",
    ]

    /// Cycling Power Feature (0x2A65): uint32 bit field.
    static func cyclingPowerFeature(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u32("cycling power feature")
        b.field("features", int: v)
        b.field("supported", GATTCommon.setBits(UInt64(v), cyclingPowerFeatureNames))
        b.field("sensor_measurement_context", v.bit(16) ? "torque_based" : "force_based")
        let distributed = ["unspecified", "not_for_use_in_distributed_system", "for_use_in_distributed_system", "reserved"]
        b.field("distributed_system_support", distributed[Int((v >> 20) & 3)])
    }
}
