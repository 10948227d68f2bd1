/// The fixed vocabulary of physical quantities and states a decoder can
/// report. Raw values are snake_case and follow Home Assistant's sensor and
/// binary-sensor device classes where one exists, so a reading can be handed
/// to HA (or MQTT discovery) without a translation table.
///
/// Each case documents its canonical unit (``canonicalUnit``). Decoders
/// should emit that unit; when the source uses another unit that HA also
/// accepts (°F, lb, km/h, kWh, mmHg, ...), the decoder may keep it and put
/// that unit string in ``Reading/unit``.
///
/// Numeric kinds (value `.number`):
///
/// | kind | unit | meaning |
/// |---|---|---|
/// | `temperature` | °C | air, body or object temperature |
/// | `dew_point` | °C | dew point |
/// | `humidity` | % | relative humidity |
/// | `pressure` | hPa | air or fluid pressure |
/// | `blood_pressure` | mmHg | systolic/diastolic/mean arterial (label tells which) |
/// | `battery` | % | battery level |
/// | `voltage` | V | |
/// | `current` | A | |
/// | `power` | W | |
/// | `energy` | kJ | energy (kWh in metering formats) |
/// | `illuminance` | lx | |
/// | `uv_index` | (none) | UV index |
/// | `moisture` | % | soil/material moisture (bool value: wet/dry) |
/// | `conductivity` | µS/cm | soil conductivity |
/// | `co2` | ppm | carbon dioxide |
/// | `co` | ppm | carbon monoxide (bool value: detected) |
/// | `tvoc` | µg/m³ | total volatile organic compounds (ppb if the device reports ppb) |
/// | `pm1` | µg/m³ | PM1 |
/// | `pm25` | µg/m³ | PM2.5 |
/// | `pm10` | µg/m³ | PM10 |
/// | `heart_rate` | bpm | heart or pulse rate |
/// | `oxygen_saturation` | % | SpO2 |
/// | `glucose` | mg/dL | blood glucose concentration (mmol/L allowed) |
/// | `speed` | m/s | linear speed (km/h allowed) |
/// | `cadence` | rpm | crank/step cadence (steps/min for running) |
/// | `distance` | m | |
/// | `elevation` | m | elevation/altitude |
/// | `weight` | kg | body or object mass (lb allowed) |
/// | `impedance` | Ω | body impedance |
/// | `body_fat` | % | body fat percentage |
/// | `bmi` | kg/m² | body mass index |
/// | `acceleration` | m/s² | |
/// | `angular_velocity` | °/s | gyroscope rate |
/// | `rotation` | ° | angle / rotation / direction |
/// | `torque` | N·m | |
/// | `inclination` | % | grade |
/// | `duration` | s | time span (RR interval, elapsed time) |
/// | `timestamp` | (none) | seconds since 1970-01-01 UTC, or a date string (text value) |
/// | `volume` | L | volume of liquid |
/// | `water` | L | water consumption |
/// | `gas` | m³ | gas consumption (bool value: gas detected) |
/// | `volume_flow_rate` | m³/h | |
/// | `frequency` | Hz | |
/// | `sound_pressure` | dB | |
/// | `precipitation` | mm | |
/// | `count` | (none) | counter / packet id / steps / generic number |
/// | `signal_strength` | dBm | received signal strength (RSSI) |
/// | `tx_power` | dBm | transmit power level |
///
/// State kinds (value `.bool`, `true` = the "on"/problem state HA uses):
/// `battery_low`, `battery_charging`, `cold`, `connectivity`, `door`,
/// `garage_door`, `heat`, `light`, `lock` (true = unlocked), `motion`,
/// `moving`, `occupancy`, `opening`, `plug`, `presence`, `problem`,
/// `running`, `safety` (true = unsafe), `smoke`, `sound`, `tamper`,
/// `vibration`, `window`, `binary` (generic on/off), plus `moisture`, `co`
/// and `gas` with a bool value.
///
/// Event kinds (value `.text`): `button` ("press", "double_press",
/// "long_press", ...), `dimmer` ("rotate_left 3", ...).
public enum ReadingKind: String, CaseIterable, Hashable, Sendable {
    case temperature
    case dewPoint = "dew_point"
    case humidity
    case pressure
    case bloodPressure = "blood_pressure"
    case battery
    case voltage
    case current
    case power
    case energy
    case illuminance
    case uvIndex = "uv_index"
    case moisture
    case conductivity
    case co2
    case co
    case tvoc
    case pm1
    case pm25
    case pm10
    case heartRate = "heart_rate"
    case oxygenSaturation = "oxygen_saturation"
    case glucose
    case speed
    case cadence
    case distance
    case elevation
    case weight
    case impedance
    case bodyFat = "body_fat"
    case bmi
    case acceleration
    case angularVelocity = "angular_velocity"
    case rotation
    case torque
    case inclination
    case duration
    case timestamp
    case volume
    case water
    case gas
    case volumeFlowRate = "volume_flow_rate"
    case frequency
    case soundPressure = "sound_pressure"
    case precipitation
    case count
    case signalStrength = "signal_strength"
    case txPower = "tx_power"

    // binary states
    case batteryLow = "battery_low"
    case batteryCharging = "battery_charging"
    case cold
    case connectivity
    case door
    case garageDoor = "garage_door"
    case heat
    case light
    case lock
    case motion
    case moving
    case occupancy
    case opening
    case plug
    case presence
    case problem
    case running
    case safety
    case smoke
    case sound
    case tamper
    case vibration
    case window
    case binary

    // events
    case button
    case dimmer

    /// What a reading of this kind holds (the table above): a number, an
    /// on/off state, or an event's text. `moisture`, `co` and `gas` take a
    /// number or a state.
    public enum Shape: Sendable { case number, state, event, numberOrState }

    public var shape: Shape {
        switch self {
        case .batteryLow, .batteryCharging, .cold, .connectivity, .door, .garageDoor, .heat, .light, .lock, .motion, .moving,
             .occupancy, .opening, .plug, .presence, .problem, .running, .safety, .smoke, .sound, .tamper, .vibration, .window, .binary:
            return .state
        case .button, .dimmer: return .event
        case .moisture, .co, .gas: return .numberOrState
        default: return .number
        }
    }

    /// The unit a decoder should use for this kind, `nil` for unitless,
    /// boolean and event kinds.
    public var canonicalUnit: String? {
        switch self {
        case .temperature, .dewPoint: return Unit.celsius
        case .humidity, .battery, .moisture, .oxygenSaturation, .bodyFat, .inclination: return Unit.percent
        case .pressure: return Unit.hectopascal
        case .bloodPressure: return Unit.mmHg
        case .voltage: return Unit.volt
        case .current: return Unit.ampere
        case .power: return Unit.watt
        case .energy: return Unit.kilojoule
        case .illuminance: return Unit.lux
        case .conductivity: return Unit.microsiemensPerCm
        case .co2, .co: return Unit.ppm
        case .tvoc, .pm1, .pm25, .pm10: return Unit.microgramsPerCubicMeter
        case .heartRate: return Unit.bpm
        case .glucose: return Unit.mgPerDL
        case .speed: return Unit.metersPerSecond
        case .cadence: return Unit.rpm
        case .distance, .elevation: return Unit.meter
        case .weight: return Unit.kilogram
        case .impedance: return Unit.ohm
        case .bmi: return Unit.kgPerSquareMeter
        case .acceleration: return Unit.metersPerSecondSquared
        case .angularVelocity: return Unit.degreesPerSecond
        case .rotation: return Unit.degree
        case .torque: return Unit.newtonMeter
        case .duration: return Unit.second
        case .volume, .water: return Unit.liter
        case .gas: return Unit.cubicMeter
        case .volumeFlowRate: return Unit.cubicMetersPerHour
        case .frequency: return Unit.hertz
        case .soundPressure: return Unit.decibel
        case .precipitation: return Unit.millimeter
        case .signalStrength, .txPower: return Unit.dBm
        default: return nil
        }
    }
}

/// Unit strings as Home Assistant writes them.
public enum Unit {
    public static let celsius = "°C"
    public static let fahrenheit = "°F"
    public static let kelvin = "K"
    public static let percent = "%"
    public static let hectopascal = "hPa"
    public static let pascal = "Pa"
    public static let mmHg = "mmHg"
    public static let kilopascal = "kPa"
    public static let volt = "V"
    public static let millivolt = "mV"
    public static let ampere = "A"
    public static let milliampere = "mA"
    public static let watt = "W"
    public static let kilowatt = "kW"
    public static let joule = "J"
    public static let kilojoule = "kJ"
    public static let kilocalorie = "kcal"
    public static let wattHour = "Wh"
    public static let kilowattHour = "kWh"
    public static let lux = "lx"
    public static let microsiemensPerCm = "µS/cm"
    public static let ppm = "ppm"
    public static let ppb = "ppb"
    public static let microgramsPerCubicMeter = "µg/m³"
    public static let bpm = "bpm"
    public static let mgPerDL = "mg/dL"
    public static let mmolPerL = "mmol/L"
    public static let metersPerSecond = "m/s"
    public static let kilometersPerHour = "km/h"
    public static let rpm = "rpm"
    public static let stepsPerMinute = "steps/min"
    public static let meter = "m"
    public static let kilometer = "km"
    public static let millimeter = "mm"
    public static let centimeter = "cm"
    public static let kilogram = "kg"
    public static let gram = "g"
    public static let pound = "lb"
    public static let inch = "in"
    public static let ohm = "Ω"
    public static let kgPerSquareMeter = "kg/m²"
    public static let metersPerSecondSquared = "m/s²"
    public static let degreesPerSecond = "°/s"
    public static let degree = "°"
    public static let newtonMeter = "N·m"
    public static let second = "s"
    public static let millisecond = "ms"
    public static let minute = "min"
    public static let hour = "h"
    public static let liter = "L"
    public static let milliliter = "mL"
    public static let cubicMeter = "m³"
    public static let cubicMetersPerHour = "m³/h"
    public static let hertz = "Hz"
    public static let decibel = "dB"
    public static let dBm = "dBm"
}
