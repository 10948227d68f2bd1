import BLEParsing

/// ReadingKind → Home Assistant device class and state class.
///
/// The table follows Home Assistant's documented device classes: sensor
/// (https://www.home-assistant.io/integrations/sensor/#device-class,
/// `SensorDeviceClass` in https://developers.home-assistant.io/docs/core/entity/sensor)
/// and binary sensor (`BinarySensorDeviceClass` in
/// https://developers.home-assistant.io/docs/core/entity/binary-sensor).
/// A kind HA has no class for (heart rate, cadence, BMI, …) gets none —
/// HA rejects unknown classes, and a class whose units do not include the
/// reading's unit makes it reject the entity, so this stays conservative.
enum DeviceClasses {
    /// Device class of a numeric reading.
    static func sensor(_ kind: ReadingKind, unit: String?) -> String? {
        switch kind {
        case .temperature, .dewPoint: return "temperature"
        case .humidity: return "humidity"
        case .pressure: return "pressure"
        case .battery: return "battery"
        case .voltage: return "voltage"
        case .current: return "current"
        case .power: return "power"
        case .energy: return "energy"
        case .illuminance: return "illuminance"
        case .moisture: return "moisture"
        case .conductivity: return "conductivity"
        case .co2: return "carbon_dioxide"
        case .co: return "carbon_monoxide"
        case .tvoc:
            // µg/m³ is volatile_organic_compounds; ppb/ppm the "_parts" class.
            return unit == Unit.ppb || unit == Unit.ppm ? "volatile_organic_compounds_parts" : "volatile_organic_compounds"
        case .pm1: return "pm1"
        case .pm25: return "pm25"
        case .pm10: return "pm10"
        case .speed: return "speed"
        case .distance, .elevation: return "distance"
        case .weight: return "weight"
        case .duration: return "duration"
        case .volume: return "volume"
        case .water: return "water"
        case .gas: return "gas"
        case .volumeFlowRate: return "volume_flow_rate"
        case .frequency: return "frequency"
        case .soundPressure: return "sound_pressure"
        case .precipitation: return "precipitation"
        case .signalStrength, .txPower: return "signal_strength"
        default: return nil
        }
    }

    /// State class of a numeric reading: meters that only grow are
    /// `total_increasing` (HA's long-term statistics handle their resets);
    /// counters and timestamps get none; everything else is a `measurement`.
    static func stateClass(_ kind: ReadingKind) -> String? {
        switch kind {
        case .energy, .water, .gas: return "total_increasing"
        case .count, .timestamp: return nil
        default: return "measurement"
        }
    }

    /// Device class of a boolean reading (`true` is HA's "on").
    static func binarySensor(_ kind: ReadingKind) -> String? {
        switch kind {
        case .batteryLow: return "battery"
        case .batteryCharging: return "battery_charging"
        case .cold: return "cold"
        case .connectivity: return "connectivity"
        case .door: return "door"
        case .garageDoor: return "garage_door"
        case .heat: return "heat"
        case .light: return "light"
        case .lock: return "lock"
        case .motion: return "motion"
        case .moving: return "moving"
        case .occupancy: return "occupancy"
        case .opening: return "opening"
        case .plug: return "plug"
        case .presence: return "presence"
        case .problem: return "problem"
        case .running: return "running"
        case .safety: return "safety"
        case .smoke: return "smoke"
        case .sound: return "sound"
        case .tamper: return "tamper"
        case .vibration: return "vibration"
        case .window: return "window"
        case .moisture: return "moisture"
        case .co: return "co"
        case .gas: return "gas"
        default: return nil
        }
    }
}
