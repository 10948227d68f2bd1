import Vocabulary
/// The result of decoding one GATT characteristic or descriptor value.
///
/// `formatName` is always "gatt"; `modelName` is the snake_case
/// characteristic name ("heart_rate_measurement"). `fields` follow the byte
/// layout; field names carry a unit suffix when the value has a unit
/// ("energy_expended_kj"), and readings carry the unit separately.
///
/// Conventions used by every GATT decoder:
/// - IEEE 11073 special values (NaN, NRes, ±INF, reserved) appear in fields as
///   the strings "nan", "nres", "+inf", "-inf", "reserved" and produce no reading.
/// - "value is not known" sentinels (e.g. 0x8000 for Temperature) give a
///   `null` field and no reading.
/// - Reserved flag bits are ignored (they are reported in `flags`); bytes left
///   after the layout the flags describe are an error (`.trailingBytes`).
/// - A standalone enumeration characteristic holding a reserved code is an
///   error (`.reserved`); an enumeration embedded in a measurement is reported
///   as the string "reserved_<n>" so the measurement is not lost.
public struct GATTValue: DecodedModel, Equatable {
    public let characteristic: BluetoothUUID
    public let modelName: String
    public var formatName: String { "gatt" }
    public internal(set) var readings: [Reading]
    public internal(set) var fields: [(String, FieldValue)]

    public init(characteristic: BluetoothUUID, modelName: String, readings: [Reading], fields: [(String, FieldValue)]) {
        self.characteristic = characteristic
        self.modelName = modelName
        self.readings = readings
        self.fields = fields
    }

    public static func == (a: GATTValue, b: GATTValue) -> Bool {
        a.characteristic == b.characteristic && a.modelName == b.modelName && a.readings == b.readings
            && FieldValue.nested(a.fields) == FieldValue.nested(b.fields)
    }
}

/// Accumulates readings and fields while a decoder walks the bytes.
@usableFromInline
struct GATTBuilder {
    var readings: [Reading]
    var fields: [(String, FieldValue)]

    init() {
        readings = []
        readings.reserveCapacity(4)
        fields = []
        fields.reserveCapacity(12)
    }

    mutating func field(_ name: String, _ value: FieldValue) { fields.append((name, value)) }
    mutating func field(_ name: String, _ value: Bool) { fields.append((name, .bool(value))) }
    mutating func field(_ name: String, int value: some BinaryInteger) { fields.append((name, .integer(value))) }
    mutating func field(_ name: String, _ value: Double) { fields.append((name, .number(value))) }
    mutating func field(_ name: String, _ value: String) { fields.append((name, .string(value))) }
    mutating func reading(_ r: Reading) { readings.append(r) }

    /// Adds field `name` for a medical float and, when finite, a reading built
    /// from its value (optionally rescaled by 10^`decimalShift`).
    mutating func medical(
        _ name: String, _ value: MedicalFloat, kind: ReadingKind?, unit: String?, label: String? = nil,
        decimalShift: Int = 0
    ) {
        switch value {
        case let .finite(m, e):
            let v = scaledDecimal(Int64(m), exponent: Int(e) + decimalShift)
            field(name, v)
            if let kind { reading(Reading(kind: kind, value: .number(v), unit: unit, label: label)) }
        default:
            field(name, value.fieldValue)
        }
    }
}
