/// Heart Rate Service and Health Thermometer Service characteristics.
enum HeartRateDecoders {
    /// Heart Rate Measurement (0x2A37).
    /// Flags: bit0 uint16 value, bit1 contact detected, bit2 contact supported,
    /// bit3 Energy Expended (uint16 kJ), bit4 RR-Intervals (uint16[n], 1/1024 s).
    static func measurement(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        let bpm: Int = flags.bit(0) ? Int(try r.u16("heart rate")) : Int(try r.u8("heart rate"))
        b.field("heart_rate_bpm", int: bpm)
        b.reading(Reading(.heartRate, Double(bpm)))
        b.field("sensor_contact_supported", flags.bit(2))
        if flags.bit(2) { b.field("sensor_contact_detected", flags.bit(1)) }
        if flags.bit(3) {
            let energy = try r.u16("energy expended")
            b.field("energy_expended_kj", int: energy)
            b.reading(Reading(.energy, Double(energy), unit: Unit.kilojoule))
        }
        if flags.bit(4) {
            var intervals: [FieldValue] = []
            while !r.isAtEnd {
                let raw = try r.u16("RR-interval")
                let seconds = scaled(Int64(raw), binaryExponent: -10)
                intervals.append(.number(seconds))
                b.reading(Reading(.duration, seconds, label: "rr_interval"))
            }
            b.field("rr_intervals_s", .list(intervals))
        }
    }

    static let bodySensorLocations: [Int: String] = [
        0: "other", 1: "chest", 2: "wrist", 3: "finger", 4: "hand", 5: "ear_lobe", 6: "foot",
    ]

    /// Body Sensor Location (0x2A38).
    static func bodySensorLocation(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u8("body sensor location")
        guard let name = bodySensorLocations[Int(v)] else {
            throw r.reserved("body sensor location (0...6)", found: "\(v)", at: 0)
        }
        b.field("location", name)
    }
}

enum ThermometerDecoders {
    static let temperatureTypes: [Int: String] = [
        1: "armpit", 2: "body", 3: "ear", 4: "finger", 5: "gastrointestinal_tract",
        6: "mouth", 7: "rectum", 8: "toe", 9: "tympanum",
    ]

    /// Temperature Measurement (0x2A1C) and Intermediate Temperature (0x2A1E).
    /// Flags: bit0 Fahrenheit, bit1 Time Stamp, bit2 Temperature Type.
    static func measurement(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let flags = try r.u8("flags")
        b.field("flags", int: flags)
        let unit = flags.bit(0) ? Unit.fahrenheit : Unit.celsius
        let value = try r.medfloat32("temperature")
        b.medical("temperature", value, kind: .temperature, unit: unit)
        b.field("unit", unit)
        if flags.bit(1) { b.field("timestamp", try GATTCommon.dateTime(&r, "time stamp")) }
        if flags.bit(2) {
            let t = try r.u8("temperature type")
            b.field("temperature_type", GATTCommon.enumName(Int(t), temperatureTypes))
        }
    }

    /// Temperature Type (0x2A1D).
    static func temperatureType(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let t = try r.u8("temperature type")
        guard let name = temperatureTypes[Int(t)] else {
            throw r.reserved("temperature type (1...9)", found: "\(t)", at: 0)
        }
        b.field("temperature_type", name)
    }
}
