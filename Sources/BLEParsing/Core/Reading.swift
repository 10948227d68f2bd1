/// The value of a ``Reading``.
public enum ReadingValue: Equatable, Hashable, Sendable {
    case number(Double)
    case bool(Bool)
    case text(String)

    /// The number, if this is `.number`.
    public var number: Double? {
        if case let .number(v) = self { return v }
        return nil
    }

    public var fieldValue: FieldValue {
        switch self {
        case let .number(v): return .number(v)
        case let .bool(v): return .bool(v)
        case let .text(v): return .string(v)
        }
    }
}

/// One measurement projected onto the shared ``ReadingKind`` vocabulary,
/// e.g. `Reading(.temperature, 21.5, unit: "°C")`.
///
/// `label` disambiguates several readings of the same kind in one model
/// ("systolic", "diastolic", "rr_interval", "instantaneous", ...); it is
/// `nil` for the primary reading of a kind.
public struct Reading: Equatable, Hashable, Sendable, CustomStringConvertible {
    // `value` before `kind`: the one-byte kind then fills the value's tag
    // padding, making a reading 56 bytes instead of 64 (a gateway keeps
    // about ten of them per device it hears).
    public var value: ReadingValue
    public var kind: ReadingKind
    public var unit: String?
    public var label: String?

    public init(kind: ReadingKind, value: ReadingValue, unit: String?, label: String? = nil) {
        self.kind = kind
        self.value = value
        self.unit = unit
        self.label = label
    }

    /// A numeric reading; `unit` defaults to the kind's canonical unit.
    public init(_ kind: ReadingKind, _ value: Double, unit: String? = nil, label: String? = nil) {
        self.init(kind: kind, value: .number(value), unit: unit ?? kind.canonicalUnit, label: label)
    }

    /// A boolean state reading (no unit).
    public init(_ kind: ReadingKind, _ value: Bool, label: String? = nil) {
        self.init(kind: kind, value: .bool(value), unit: nil, label: label)
    }

    /// A text/event reading (no unit).
    public init(_ kind: ReadingKind, text: String, label: String? = nil) {
        self.init(kind: kind, value: .text(text), unit: nil, label: label)
    }

    /// JSON object: `{"kind":…,"value":…,"unit":…}` plus `"label"` when set.
    public var fieldValue: FieldValue {
        var members: [(String, FieldValue)] = [("kind", .string(kind.rawValue)), ("value", value.fieldValue)]
        members.append(("unit", unit.map { .string($0) } ?? .null))
        if let label { members.append(("label", .string(label))) }
        return .nested(members)
    }

    public var description: String {
        var s = kind.rawValue
        if let label { s += "[\(label)]" }
        switch value {
        case let .number(v): s += "=\(formatNumber(v))"
        case let .bool(v): s += "=\(v)"
        case let .text(v): s += "=\(v)"
        }
        if let unit { s += " \(unit)" }
        return s
    }
}
