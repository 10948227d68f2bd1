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
    // 32 bytes (a gateway keeps about ten readings per device it hears, in
    // every list and table that holds a device's state): the number, the
    // kind, one byte saying what else there is, and one optional string.
    // The unit is not stored when it is the kind's canonical unit (nearly
    // always); the string holds whichever one of the label, the text value
    // and a non-canonical unit the reading has, or, when it has several,
    // all of them (see `Parts`). Every reading has exactly one encoding, so
    // the synthesised == and hash compare what the public properties show.
    /// `.number`'s value; 1 or 0 for `.bool`; 0 for `.text`.
    private var magnitude: Double
    private var storedKind: ReadingKind
    private var form: Form
    private var tail: String?

    public init(kind: ReadingKind, value: ReadingValue, unit: String?, label: String? = nil) {
        magnitude = 0
        storedKind = kind
        form = Form()
        tail = nil
        store(value: value, unit: unit, label: label)
    }

    /// A numeric reading; `unit` defaults to the kind's canonical unit.
    public init(_ kind: ReadingKind, _ value: Double, unit: String? = nil, label: String? = nil) {
        magnitude = value
        storedKind = kind
        if unit == nil || unit == kind.canonicalUnit {
            // The decoders' case: no unit or string to look at beyond this.
            form = Form(value: .number, unit: kind.canonicalUnit == nil ? .none : .canonical, hasLabel: label != nil)
            tail = label
        } else {
            form = Form()
            tail = nil
            store(value: .number(value), unit: unit, label: label)
        }
    }

    /// A boolean state reading (no unit).
    public init(_ kind: ReadingKind, _ value: Bool, label: String? = nil) {
        self.init(kind: kind, value: .bool(value), unit: nil, label: label)
    }

    /// A text/event reading (no unit).
    public init(_ kind: ReadingKind, text: String, label: String? = nil) {
        self.init(kind: kind, value: .text(text), unit: nil, label: label)
    }

    public var kind: ReadingKind {
        get { storedKind }
        set {
            // The unit stays what it was (it may have been the old kind's canonical one).
            let (v, u, l) = (value, unit, label)
            storedKind = newValue
            store(value: v, unit: u, label: l)
        }
    }

    public var value: ReadingValue {
        get {
            switch form.value {
            case .number: return .number(magnitude)
            case .bool: return .bool(magnitude != 0)
            case .text: return .text(parts.text ?? "")
            }
        }
        set { store(value: newValue, unit: unit, label: label) }
    }

    public var unit: String? {
        get {
            switch form.unit {
            case .none: return nil
            case .canonical: return storedKind.canonicalUnit
            case .custom: return parts.unit
            }
        }
        set { store(value: value, unit: newValue, label: label) }
    }

    public var label: String? {
        get { form.hasLabel ? (form.partCount == 1 ? tail : parts.label) : nil }
        set { store(value: value, unit: unit, label: newValue) }
    }

    /// Encodes the three parts (the kind is already stored).
    private mutating func store(value: ReadingValue, unit: String?, label: String?) {
        var text: String?
        let valueForm: Form.Value
        switch value {
        case let .number(v): magnitude = v; valueForm = .number
        case let .bool(b): magnitude = b ? 1 : 0; valueForm = .bool
        case let .text(t): magnitude = 0; valueForm = .text; text = t
        }
        var customUnit: String?
        let unitForm: Form.UnitForm
        if let unit {
            if unit == storedKind.canonicalUnit { unitForm = .canonical } else { unitForm = .custom; customUnit = unit }
        } else {
            unitForm = .none
        }
        form = Form(value: valueForm, unit: unitForm, hasLabel: label != nil)
        tail = Parts(text: text, unit: customUnit, label: label).encoded(count: form.partCount)
    }

    private var parts: Parts { Parts(decoding: tail, form: form) }

    /// What the one byte says: the value's case, where the unit comes from,
    /// and whether there is a label.
    private struct Form: Hashable, Sendable {
        enum Value: UInt8 { case number = 0, bool = 1, text = 2 }
        enum UnitForm: UInt8 { case none = 0, canonical = 1, custom = 2 }
        private var bits: UInt8 = 0

        init() {}
        init(value: Value, unit: UnitForm, hasLabel: Bool) {
            bits = value.rawValue | unit.rawValue << 2 | (hasLabel ? 0x10 : 0)
        }

        var value: Value { Value(rawValue: bits & 3) ?? .number }
        var unit: UnitForm { UnitForm(rawValue: (bits >> 2) & 3) ?? .none }
        var hasLabel: Bool { bits & 0x10 != 0 }
        /// How many of text, custom unit and label the tail holds.
        var partCount: Int { (value == .text ? 1 : 0) + (unit == .custom ? 1 : 0) + (hasLabel ? 1 : 0) }
    }

    /// The strings beside the number. One of them is the tail as it is; two
    /// or three are joined, each preceded by its length in UTF-8 bytes and
    /// a colon ("1:x2:mV"), in the order text, unit, label.
    private struct Parts {
        var text: String?
        var unit: String?
        var label: String?

        init(text: String?, unit: String?, label: String?) {
            self.text = text
            self.unit = unit
            self.label = label
        }

        init(decoding tail: String?, form: Form) {
            guard let tail else { return }
            let hasText = form.value == .text, hasUnit = form.unit == .custom
            if form.partCount == 1 {
                if hasText { text = tail } else if hasUnit { unit = tail } else { label = tail }
                return
            }
            // Two or three, length-prefixed.
            var bytes = Substring(tail).utf8[...]
            func next() -> String? {
                guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")),
                      let length = Int(String(decoding: bytes[..<colon], as: UTF8.self)), length >= 0 else { return nil }
                let start = bytes.index(after: colon)
                guard let end = bytes.index(start, offsetBy: length, limitedBy: bytes.endIndex) else { return nil }
                defer { bytes = bytes[end...] }
                return String(decoding: bytes[start..<end], as: UTF8.self)
            }
            if hasText { text = next() }
            if hasUnit { unit = next() }
            if form.hasLabel { label = next() }
        }

        /// The tail for `count` parts (the number of non-nil ones).
        func encoded(count: Int) -> String? {
            switch count {
            case 0: return nil
            case 1: return text ?? unit ?? label
            default:
                var out = ""
                for part in [text, unit, label] {
                    if let part { out += "\(part.utf8.count):\(part)" }
                }
                return out
            }
        }
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
