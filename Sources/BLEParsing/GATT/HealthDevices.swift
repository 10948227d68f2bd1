/// Blood Pressure, Weight Scale, Body Composition, Pulse Oximeter and Glucose.
enum HealthDecoders {
    // MARK: Blood pressure

    /// Blood Pressure Measurement (0x2A35) and Intermediate Cuff Pressure (0x2A36).
    /// Flags: bit0 kPa (else mmHg), bit1 Time Stamp, bit2 Pulse Rate,
    /// bit3 User ID, bit4 Measurement Status.
    static func bloodPressure(intermediate: Bool) -> GATTDecoder.Decode {
        { (r: inout ByteReader, b: inout GATTBuilder) throws(DecodeError) in
            let flags = try r.u8("flags")
            b.field("flags", int: flags)
            let unit = flags.bit(0) ? Unit.kilopascal : Unit.mmHg
            let first = try r.sfloat(intermediate ? "current cuff pressure" : "systolic")
            let diastolic = try r.sfloat("diastolic")
            let map = try r.sfloat("mean arterial pressure")
            if intermediate {
                b.medical("current_cuff_pressure", first, kind: .bloodPressure, unit: unit, label: "cuff_pressure")
            } else {
                b.medical("systolic", first, kind: .bloodPressure, unit: unit, label: "systolic")
                b.medical("diastolic", diastolic, kind: .bloodPressure, unit: unit, label: "diastolic")
                b.medical("mean_arterial_pressure", map, kind: .bloodPressure, unit: unit, label: "mean_arterial_pressure")
            }
            b.field("unit", unit)
            if flags.bit(1) { b.field("timestamp", try GATTCommon.dateTime(&r, "time stamp")) }
            if flags.bit(2) { b.medical("pulse_rate_bpm", try r.sfloat("pulse rate"), kind: .heartRate, unit: Unit.bpm) }
            if flags.bit(3) { userID(try r.u8("user ID"), &b) }
            if flags.bit(4) {
                let s = try r.u16("measurement status")
                b.field("measurement_status", int: s)
                b.field("body_movement_detected", s.bit(0))
                b.field("cuff_too_loose", s.bit(1))
                b.field("irregular_pulse_detected", s.bit(2))
                let range = ["within_range", "exceeds_upper_limit", "below_lower_limit", "reserved"]
                b.field("pulse_rate_range", range[Int((s >> 3) & 3)])
                b.field("improper_measurement_position", s.bit(5))
            }
        }
    }

    static func userID(_ id: UInt8, _ b: inout GATTBuilder) {
        b.field("user_id", id == 0xFF ? .string("unknown") : .int(Int(id)))
    }

    // MARK: Weight scale / body composition

    /// Mass in kg (resolution 0.005) or lb (0.01).
    static func mass(_ raw: UInt16, imperial: Bool) -> Double {
        imperial ? scaledDecimal(Int64(raw), exponent: -2) : scaledDecimal(Int64(raw) * 5, exponent: -3)
    }

    /// Height in m (0.001) or in (0.1).
    static func height(_ raw: UInt16, imperial: Bool) -> Double {
        imperial ? scaledDecimal(Int64(raw), exponent: -1) : scaledDecimal(Int64(raw), exponent: -3)
    }

    /// Weight Measurement (0x2A9D). Flags: bit0 imperial, bit1 Time Stamp,
    /// bit2 User ID, bit3 BMI and Height. Weight 0xFFFF = measurement unsuccessful.
    static func weightMeasurement(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        let imperial = flags.bit(0)
        let massUnit = imperial ? Unit.pound : Unit.kilogram
        let lengthUnit = imperial ? Unit.inch : Unit.meter
        let raw = try r.u16("weight")
        if raw == 0xFFFF {
            b.field("weight", .null)
            b.field("measurement_unsuccessful", true)
        } else {
            let w = mass(raw, imperial: imperial)
            b.field("weight", w)
            b.reading(Reading(.weight, w, unit: massUnit))
        }
        b.field("weight_unit", massUnit)
        if flags.bit(1) { b.field("timestamp", try GATTCommon.dateTime(&r, "time stamp")) }
        if flags.bit(2) { userID(try r.u8("user ID"), &b) }
        if flags.bit(3) {
            let bmi = scaledDecimal(Int64(try r.u16("BMI")), exponent: -1)
            let h = height(try r.u16("height"), imperial: imperial)
            b.field("bmi", bmi)
            b.reading(Reading(.bmi, bmi))
            b.field("height", h)
            b.field("height_unit", lengthUnit)
            b.reading(Reading(.distance, h, unit: lengthUnit, label: "height"))
        }
    }

    /// Body Composition Measurement (0x2A9C), all optional fields.
    static func bodyComposition(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u16("flags")
        b.field("flags", int: flags)
        let imperial = flags.bit(0)
        let massUnit = imperial ? Unit.pound : Unit.kilogram
        let lengthUnit = imperial ? Unit.inch : Unit.meter
        let fat = try r.u16("body fat percentage")
        if fat == 0xFFFF {
            b.field("body_fat_percent", .null)
            b.field("measurement_unsuccessful", true)
        } else {
            let v = scaledDecimal(Int64(fat), exponent: -1)
            b.field("body_fat_percent", v)
            b.reading(Reading(.bodyFat, v))
        }
        b.field("mass_unit", massUnit)
        if flags.bit(1) { b.field("timestamp", try GATTCommon.dateTime(&r, "time stamp")) }
        if flags.bit(2) { userID(try r.u8("user ID"), &b) }
        if flags.bit(3) {
            let kj = try r.u16("basal metabolism")
            b.field("basal_metabolism_kj", int: kj)
            b.reading(Reading(.energy, Double(kj), unit: Unit.kilojoule, label: "basal_metabolism"))
        }
        if flags.bit(4) { b.field("muscle_percent", scaledDecimal(Int64(try r.u16("muscle percentage")), exponent: -1)) }
        let masses: [(Int, String, String)] = [
            (5, "muscle_mass", "muscle mass"), (6, "fat_free_mass", "fat free mass"),
            (7, "soft_lean_mass", "soft lean mass"), (8, "body_water_mass", "body water mass"),
        ]
        for (bit, name, text) in masses where flags.bit(bit) {
            let m = mass(try r.u16(text), imperial: imperial)
            b.field(name, m)
            b.reading(Reading(.weight, m, unit: massUnit, label: name))
        }
        if flags.bit(9) {
            let ohm = scaledDecimal(Int64(try r.u16("impedance")), exponent: -1)
            b.field("impedance_ohm", ohm)
            b.reading(Reading(.impedance, ohm))
        }
        if flags.bit(10) {
            let w = mass(try r.u16("weight"), imperial: imperial)
            b.field("weight", w)
            b.reading(Reading(.weight, w, unit: massUnit))
        }
        if flags.bit(11) {
            let h = height(try r.u16("height"), imperial: imperial)
            b.field("height", h)
            b.field("height_unit", lengthUnit)
            b.reading(Reading(.distance, h, unit: lengthUnit, label: "height"))
        }
        b.field("multiple_packet_measurement", flags.bit(12))
    }

    // MARK: Pulse oximeter

    static let plxMeasurementStatusNames: [String?] = [
        nil, nil, nil, nil, nil, "measurement_ongoing", "early_estimated_data", "validated_data",
        "fully_qualified_data", "data_from_measurement_storage", "data_for_demonstration", "data_for_testing",
        "calibration_ongoing", "measurement_unavailable", "questionable_measurement_detected",
        "invalid_measurement_detected",
    ]
    static let plxDeviceStatusNames: [String?] = [
        "extended_display_update_ongoing", "equipment_malfunction_detected", "signal_processing_irregularity_detected",
        "inadequate_signal_detected", "poor_signal_detected", "low_perfusion_detected", "erratic_signal_detected",
        "nonpulsatile_signal_detected", "questionable_pulse_detected", "signal_analysis_ongoing",
        "sensor_interference_detected", "sensor_unconnected_to_user", "unknown_sensor_connected", "sensor_displaced",
        "sensor_malfunctioning", "sensor_disconnected",
    ]

    static func spo2pr(_ r: inout ByteReader, _ b: inout GATTBuilder, prefix: String, label: String?) throws(DecodeError) {
        let spo2 = try r.sfloat("SpO2")
        let pr = try r.sfloat("pulse rate")
        b.medical(prefix.isEmpty ? "spo2_percent" : prefix + "spo2_percent", spo2, kind: .oxygenSaturation, unit: Unit.percent, label: label)
        b.medical(prefix.isEmpty ? "pulse_rate_bpm" : prefix + "pulse_rate_bpm", pr, kind: .heartRate, unit: Unit.bpm, label: label)
    }

    static func plxStatus(_ r: inout ByteReader, _ b: inout GATTBuilder, measurement: Bool, device: Bool) throws(DecodeError) {
        if measurement {
            let s = try r.u16("measurement status")
            b.field("measurement_status", int: s)
            b.field("measurement_status_flags", GATTCommon.setBits(UInt64(s), plxMeasurementStatusNames))
        }
        if device {
            let s = try r.u24("device and sensor status")
            b.field("device_and_sensor_status", int: s)
            b.field("device_and_sensor_status_flags", GATTCommon.setBits(UInt64(s), plxDeviceStatusNames))
        }
    }

    /// PLX Spot-Check Measurement (0x2A5E). Flags: bit0 Timestamp,
    /// bit1 Measurement Status, bit2 Device and Sensor Status,
    /// bit3 Pulse Amplitude Index, bit4 device clock not set.
    static func plxSpotCheck(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        try spo2pr(&r, &b, prefix: "", label: nil)
        if flags.bit(0) { b.field("timestamp", try GATTCommon.dateTime(&r, "timestamp")) }
        try plxStatus(&r, &b, measurement: flags.bit(1), device: flags.bit(2))
        if flags.bit(3) { b.medical("pulse_amplitude_index_percent", try r.sfloat("pulse amplitude index"), kind: nil, unit: nil) }
        b.field("device_clock_not_set", flags.bit(4))
    }

    /// PLX Continuous Measurement (0x2A5F). Flags: bit0 SpO2PR-Fast,
    /// bit1 SpO2PR-Slow, bit2 Measurement Status, bit3 Device and Sensor
    /// Status, bit4 Pulse Amplitude Index.
    static func plxContinuous(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        try spo2pr(&r, &b, prefix: "", label: nil)
        if flags.bit(0) { try spo2pr(&r, &b, prefix: "fast_", label: "fast") }
        if flags.bit(1) { try spo2pr(&r, &b, prefix: "slow_", label: "slow") }
        try plxStatus(&r, &b, measurement: flags.bit(2), device: flags.bit(3))
        if flags.bit(4) { b.medical("pulse_amplitude_index_percent", try r.sfloat("pulse amplitude index"), kind: nil, unit: nil) }
    }

    // MARK: Glucose

    static let glucoseTypes: [Int: String] = [
        1: "capillary_whole_blood", 2: "capillary_plasma", 3: "venous_whole_blood", 4: "venous_plasma",
        5: "arterial_whole_blood", 6: "arterial_plasma", 7: "undetermined_whole_blood", 8: "undetermined_plasma",
        9: "interstitial_fluid", 10: "control_solution",
    ]
    static let glucoseLocations: [Int: String] = [
        1: "finger", 2: "alternate_site_test", 3: "earlobe", 4: "control_solution", 15: "not_available",
    ]
    static let glucoseStatusNames: [String?] = [
        "device_battery_low", "sensor_malfunction", "sample_size_insufficient", "strip_insertion_error",
        "strip_type_incorrect", "sensor_result_too_high", "sensor_result_too_low", "sensor_temperature_too_high",
        "sensor_temperature_too_low", "sensor_read_interrupted", "general_device_fault", "time_fault",
    ]

    /// Glucose Measurement (0x2A18). Flags: bit0 Time Offset, bit1
    /// Concentration + Type-Sample Location, bit2 mol/L (else kg/L), bit3
    /// Sensor Status Annunciation, bit4 context information follows.
    /// Concentration readings are converted to mg/dL or mmol/L.
    static func glucose(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        b.field("sequence_number", int: try r.u16("sequence number"))
        b.field("base_time", try GATTCommon.dateTime(&r, "base time"))
        if flags.bit(0) { b.field("time_offset_min", int: try r.i16("time offset")) }
        if flags.bit(1) {
            let c = try r.sfloat("glucose concentration")
            if flags.bit(2) {
                b.medical("glucose_mmol_l", c, kind: .glucose, unit: Unit.mmolPerL, decimalShift: 3)
            } else {
                b.medical("glucose_mg_dl", c, kind: .glucose, unit: Unit.mgPerDL, decimalShift: 5)
            }
            let ts = try r.u8("type-sample location")
            b.field("type", GATTCommon.enumName(Int(ts & 0x0F), glucoseTypes))
            b.field("sample_location", GATTCommon.enumName(Int(ts >> 4), glucoseLocations))
        }
        if flags.bit(3) {
            let s = try r.u16("sensor status annunciation")
            b.field("sensor_status", int: s)
            b.field("sensor_status_flags", GATTCommon.setBits(UInt64(s), glucoseStatusNames))
        }
        b.field("context_information_follows", flags.bit(4))
    }
}
