import Vocabulary
/// Decodes GATT characteristic and descriptor values.
///
///     let value = try GATTDecoder.decode(characteristic: 0x2A37, value: [0x06, 0x48])
///     value.readings  // [heart_rate=72 bpm]
///
/// Known characteristics use their GATT Specification Supplement layout; any
/// other characteristic is decoded from its Characteristic Presentation
/// Format when one is given. Otherwise the result is an `.unsupported` error.
public enum GATTDecoder {
    typealias Decode = (inout ByteReader, inout GATTBuilder) throws(DecodeError) -> Void

    /// The decoder table: 16-bit UUID -> (model name, decoder).
    static func entry(_ uuid: UInt16) -> (String, Decode)? {
        switch uuid {
        // GAP
        case 0x2A00: return ("device_name", DeviceDecoders.string("device_name"))
        case 0x2A01: return ("appearance", DeviceDecoders.appearance)
        case 0x2A07: return ("tx_power_level", DeviceDecoders.txPowerLevel)
        // Battery
        case 0x2A19: return ("battery_level", DeviceDecoders.batteryLevel)
        // Time
        case 0x2A08: return ("date_time", TimeDecoders.dateTime)
        case 0x2A0A: return ("day_date_time", TimeDecoders.dayDateTime)
        case 0x2A2B: return ("current_time", TimeDecoders.currentTime)
        // Device Information
        case 0x2A23: return ("system_id", DeviceDecoders.systemID)
        case 0x2A24: return ("model_number_string", DeviceDecoders.string("model_number"))
        case 0x2A25: return ("serial_number_string", DeviceDecoders.string("serial_number"))
        case 0x2A26: return ("firmware_revision_string", DeviceDecoders.string("firmware_revision"))
        case 0x2A27: return ("hardware_revision_string", DeviceDecoders.string("hardware_revision"))
        case 0x2A28: return ("software_revision_string", DeviceDecoders.string("software_revision"))
        case 0x2A29: return ("manufacturer_name_string", DeviceDecoders.string("manufacturer_name"))
        case 0x2A50: return ("pnp_id", DeviceDecoders.pnpID)
        // Heart rate, thermometer
        case 0x2A37: return ("heart_rate_measurement", HeartRateDecoders.measurement)
        case 0x2A38: return ("body_sensor_location", HeartRateDecoders.bodySensorLocation)
        case 0x2A1C: return ("temperature_measurement", ThermometerDecoders.measurement)
        case 0x2A1D: return ("temperature_type", ThermometerDecoders.temperatureType)
        case 0x2A1E: return ("intermediate_temperature", ThermometerDecoders.measurement)
        // Environmental sensing
        case 0x2A6C: return ("elevation", EnvironmentalDecoders.elevation)
        case 0x2A6D: return ("pressure", EnvironmentalDecoders.pressure)
        case 0x2A6E: return ("temperature", EnvironmentalDecoders.temperature)
        case 0x2A6F: return ("humidity", EnvironmentalDecoders.humidity)
        case 0x2A76: return ("uv_index", EnvironmentalDecoders.uvIndex)
        case 0x2A7B: return ("dew_point", EnvironmentalDecoders.dewPoint)
        case 0x2AFB: return ("illuminance", EnvironmentalDecoders.illuminance)
        case 0x2B0D: return ("temperature_8", EnvironmentalDecoders.temperature8)
        case 0x2B8C: return ("co2_concentration", EnvironmentalDecoders.co2)
        case 0x2BD3: return ("nmvoc_concentration", EnvironmentalDecoders.massDensity(kind: .tvoc))
        case 0x2BD5: return ("pm1_concentration", EnvironmentalDecoders.massDensity(kind: .pm1))
        case 0x2BD6: return ("pm2_5_concentration", EnvironmentalDecoders.massDensity(kind: .pm25))
        case 0x2BD7: return ("pm10_concentration", EnvironmentalDecoders.massDensity(kind: .pm10))
        case 0x2BE7: return ("voc_concentration", EnvironmentalDecoders.voc)
        case 0x2C1B: return ("humidity_8", EnvironmentalDecoders.humidity8)
        // Cycling / running
        case 0x2A53: return ("rsc_measurement", CyclingDecoders.rscMeasurement)
        case 0x2A54: return ("rsc_feature", CyclingDecoders.rscFeature)
        case 0x2A5B: return ("csc_measurement", CyclingDecoders.cscMeasurement)
        case 0x2A5C: return ("csc_feature", CyclingDecoders.cscFeature)
        case 0x2A63: return ("cycling_power_measurement", CyclingDecoders.cyclingPowerMeasurement)
        case 0x2A65: return ("cycling_power_feature", CyclingDecoders.cyclingPowerFeature)
        // Health
        case 0x2A35: return ("blood_pressure_measurement", HealthDecoders.bloodPressure(intermediate: false))
        case 0x2A36: return ("intermediate_cuff_pressure", HealthDecoders.bloodPressure(intermediate: true))
        case 0x2A9C: return ("body_composition_measurement", HealthDecoders.bodyComposition)
        case 0x2A9D: return ("weight_measurement", HealthDecoders.weightMeasurement)
        case 0x2A5E: return ("plx_spot_check_measurement", HealthDecoders.plxSpotCheck)
        case 0x2A5F: return ("plx_continuous_measurement", HealthDecoders.plxContinuous)
        case 0x2A18: return ("glucose_measurement", HealthDecoders.glucose)
        // Fitness machine
        case 0x2ACD: return ("treadmill_data", FitnessMachineDecoders.treadmill)
        case 0x2AD2: return ("indoor_bike_data", FitnessMachineDecoders.indoorBike)
        // Descriptors
        case 0x2900: return ("characteristic_extended_properties", DescriptorDecoders.extendedProperties)
        case 0x2901: return ("characteristic_user_description", DescriptorDecoders.userDescription)
        case 0x2902: return ("client_characteristic_configuration", DescriptorDecoders.clientConfiguration)
        case 0x2903: return ("server_characteristic_configuration", DescriptorDecoders.serverConfiguration)
        case 0x2904: return ("characteristic_presentation_format", DescriptorDecoders.presentationFormat)
        default: return nil
        }
    }

    /// Every UUID with a dedicated decoder, ascending.
    public static let supportedUUIDs: [BluetoothUUID] = (UInt16(0x2900)...UInt16(0x2CFF))
        .filter { entry($0) != nil }.map { BluetoothUUID(uuid16: $0) }

    /// `true` if `uuid` has a dedicated decoder.
    public static func isSupported(_ uuid: BluetoothUUID) -> Bool {
        uuid.uuid16.flatMap(entry) != nil
    }

    /// The snake_case model name used for `uuid`, or nil if it has no dedicated decoder.
    public static func modelName(for uuid: BluetoothUUID) -> String? {
        uuid.uuid16.flatMap(entry)?.0
    }

    /// Decodes a characteristic (or descriptor) value.
    ///
    /// - Parameters:
    ///   - characteristic: the characteristic or descriptor UUID.
    ///   - value: the value bytes as read or notified.
    ///   - presentationFormat: the characteristic's 0x2904 descriptor, used
    ///     when the characteristic has no dedicated decoder.
    /// - Throws: `DecodeError` — `.truncated`/`.trailingBytes` for a wrong
    ///   length, `.invalidValue`/`.reserved` for values outside the spec,
    ///   `.unsupported` for an unknown characteristic without presentation format.
    public static func decode(
        characteristic: BluetoothUUID, value: [UInt8], presentationFormat: PresentationFormat? = nil
    ) throws(DecodeError) -> GATTValue {
        try decode(characteristic: characteristic, value: value[...], presentationFormat: presentationFormat)
    }

    public static func decode(
        characteristic: BluetoothUUID, value: ArraySlice<UInt8>, presentationFormat: PresentationFormat? = nil
    ) throws(DecodeError) -> GATTValue {
        if let short = characteristic.uuid16, let (model, decoder) = entry(short) {
            // The reader's context is the model name; errors (the slow path)
            // get the human form "heart rate measurement".
            var r = ByteReader(value, context: model)
            var b = GATTBuilder()
            do {
                try decoder(&r, &b)
                try r.expectEnd()
            } catch {
                var e = error
                e.context = model.replacingUnderscores()
                throw e
            }
            return GATTValue(characteristic: characteristic, modelName: model, readings: b.readings, fields: b.fields)
        }
        guard let pf = presentationFormat else {
            let name = AssignedNumbers.name(for: characteristic).map { " (\($0))" } ?? ""
            throw DecodeError.unsupported(
                context: "gatt", what: "characteristic \(characteristic.shortString)\(name) has no decoder and no presentation format")
        }
        let model = genericModelName(characteristic)
        var r = ByteReader(value, context: model.replacingUnderscores())
        var b = GATTBuilder()
        try pf.decodeValue(&r, &b)
        try r.expectEnd()
        return GATTValue(characteristic: characteristic, modelName: model, readings: b.readings, fields: b.fields)
    }

    /// Decodes a descriptor value (same table as characteristics).
    public static func decode(descriptor: BluetoothUUID, value: [UInt8]) throws(DecodeError) -> GATTValue {
        try decode(characteristic: descriptor, value: value[...], presentationFormat: nil)
    }

    /// snake_case of the SIG name, or "characteristic_<uuid>".
    static func genericModelName(_ uuid: BluetoothUUID) -> String {
        if let name = AssignedNumbers.name(for: uuid) {
            var out = ""
            var lastUnderscore = true
            for c in name.lowercased().unicodeScalars {
                if ("a"..."z").contains(c) || ("0"..."9").contains(c) {
                    out.unicodeScalars.append(c)
                    lastUnderscore = false
                } else if !lastUnderscore {
                    out += "_"
                    lastUnderscore = true
                }
            }
            while out.hasSuffix("_") { out.removeLast() }
            if !out.isEmpty { return out }
        }
        return "characteristic_\(uuid.shortString)"
    }
}
