extension FieldLayout {
    /// RuuviTag data format 5 (RAWv2, manufacturer data of company 0x0499,
    /// big-endian) written in the layout language: what the built-in
    /// ``Ruuvi`` decoder reads, field for field, with the same kinds, units,
    /// labels and rounding. The layout language's yardstick: the equivalence
    /// test decodes Ruuvi's frames with both, and `bench parsing` measures
    /// both (`ruuvi_v5` and `profile_ruuvi_v5`). Not a replacement for the
    /// decoder, which also knows the "not available" sentinels.
    public static let ruuviRAWv2: FieldLayout? = try? FieldLayout(fields: [
        .init(name: "format", offset: 0, encoding: .unsigned(bytes: 1, .big), values: [5: "rawv2"]),
        .init(name: "temperature", offset: 1, encoding: .signed(bytes: 2, .big), scale: 0.005, reading: .temperature, decimals: 3),
        .init(name: "humidity", offset: 3, encoding: .unsigned(bytes: 2, .big), scale: 0.0025, reading: .humidity, decimals: 4),
        .init(name: "pressure", offset: 5, encoding: .unsigned(bytes: 2, .big), scale: 0.01, add: 500, reading: .pressure, decimals: 2),
        .init(name: "acceleration_x", offset: 7, encoding: .signed(bytes: 2, .big), scale: 0.00980665, reading: .acceleration,
              label: "x", decimals: 6),
        .init(name: "acceleration_y", offset: 9, encoding: .signed(bytes: 2, .big), scale: 0.00980665, reading: .acceleration,
              label: "y", decimals: 6),
        .init(name: "acceleration_z", offset: 11, encoding: .signed(bytes: 2, .big), scale: 0.00980665, reading: .acceleration,
              label: "z", decimals: 6),
        .init(name: "voltage", offset: 13, encoding: .unsigned(bytes: 2, .big), bits: .init(shift: 5, width: 11), scale: 0.001, add: 1.6,
              reading: .voltage, decimals: 3),
        .init(name: "tx_power", offset: 13, encoding: .unsigned(bytes: 2, .big), bits: .init(shift: 0, width: 5), scale: 2, add: -40,
              reading: .txPower),
        .init(name: "movement", offset: 15, encoding: .unsigned(bytes: 1, .big), reading: .count, label: "movement"),
        .init(name: "sequence", offset: 16, encoding: .unsigned(bytes: 2, .big)),
        .init(name: "mac", offset: 18, encoding: .raw(bytes: 6)),
    ])
}
