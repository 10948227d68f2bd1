import Vocabulary
/// A JSON-shaped value used for a model's ordered `fields`.
///
/// `.nested` keeps member order (it is an ordered list of name/value pairs),
/// so JSON output is stable and follows the byte layout.
public enum FieldValue: Equatable, Sendable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int)
    case number(Double)
    case string(String)
    /// Rendered as a lower-case hex string in JSON.
    case bytes([UInt8])
    case list([FieldValue])
    case nested([(String, FieldValue)])

    public static func == (a: FieldValue, b: FieldValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.int(x), .int(y)): return x == y
        case let (.number(x), .number(y)): return x == y || (x.isNaN && y.isNaN)
        case let (.string(x), .string(y)): return x == y
        case let (.bytes(x), .bytes(y)): return x == y
        case let (.list(x), .list(y)): return x == y
        case let (.nested(x), .nested(y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// Convenience for unsigned/signed integers of any width.
    public static func integer<T: BinaryInteger>(_ v: T) -> FieldValue {
        if let i = Int(exactly: v) { return .int(i) }
        return .number(Double(v))
    }

    /// Member lookup for `.nested` values (first match).
    public subscript(_ name: String) -> FieldValue? {
        if case let .nested(members) = self { return members.first { $0.0 == name }?.1 }
        return nil
    }

    /// Numeric view of `.int` and `.number`.
    public var doubleValue: Double? {
        switch self {
        case let .int(v): return Double(v)
        case let .number(v): return v
        default: return nil
        }
    }

    public var description: String { JSON.serialize(self) }
}

/// A protocol every decoded payload conforms to, so the CLI can print all
/// formats uniformly as
/// `{"format":…, "model":…, "readings":[…], "fields":{…}}`.
public protocol DecodedModel: Sendable {
    /// The payload format family, e.g. "gatt", "bthome", "ruuvi_rawv2".
    var formatName: String { get }
    /// The specific model/structure, e.g. "heart_rate_measurement" or a device model name.
    var modelName: String { get }
    /// Measurements projected onto the shared vocabulary.
    var readings: [Reading] { get }
    /// Every decoded field in layout order (names snake_case).
    var fields: [(String, FieldValue)] { get }
}

extension DecodedModel {
    /// The uniform JSON shape.
    public var jsonValue: FieldValue {
        .nested([
            ("format", .string(formatName)),
            ("model", .string(modelName)),
            ("readings", .list(readings.map(\.fieldValue))),
            ("fields", .nested(fields)),
        ])
    }

    /// Compact JSON text of ``jsonValue``.
    public var jsonString: String { JSON.serialize(jsonValue) }

    /// First field with that name.
    public func field(_ name: String) -> FieldValue? { fields.first { $0.0 == name }?.1 }
}

/// Shortest round-trip decimal text of a Double, without a trailing ".0"
/// for integral values ("36.4", "72", "-0.5", "1e-05").
public func formatNumber(_ v: Double) -> String {
    if v.isNaN { return "nan" }
    if v.isInfinite { return v < 0 ? "-inf" : "inf" }
    if v == v.rounded(), abs(v) < 1e15 {
        return String(Int64(v))
    }
    return v.description
}

/// A minimal JSON writer for ``FieldValue`` (no Foundation).
public enum JSON {
    /// Compact JSON. Non-finite numbers become `null`; `.bytes` becomes a hex string.
    public static func serialize(_ value: FieldValue) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    /// ``serialize(_:)`` as UTF-8 bytes: for a payload that goes out as
    /// bytes, no `String` made and read back.
    public static func bytes(_ value: FieldValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out, indent: nil, level: 0)
        return out
    }

    /// Appends `value` as compact JSON to `out` (``bytes(_:)`` into a buffer the caller keeps).
    public static func write(_ value: FieldValue, into out: inout [UInt8]) {
        write(value, into: &out, indent: nil, level: 0)
    }

    /// Appends a number as ``formatNumber(_:)`` writes it (`null` when it is
    /// not finite) without making a `String` for it: integral values and
    /// those with up to six decimals between 0.0001 and 10⁹ — every reading
    /// a sensor sends — are written from their digits; others as Swift's
    /// shortest round-trip `description`. (A gateway writes about ten
    /// numbers per advertisement; `description` made a `String` of each.)
    public static func appendNumber(_ v: Double, to out: inout [UInt8]) {
        guard v.isFinite else { out.append(contentsOf: "null".utf8); return }
        let magnitude = abs(v)
        // Integral: converting to Int64 truncates (exact below 1e15), where
        // `rounded()` was a call into libm per number.
        if magnitude < 1e15, Double(Int64(v)) == v {
            appendDecimal(Int64(v), to: &out)
            return
        }
        if magnitude >= 1e-4, magnitude < 1e9 {
            // The fewest decimals whose number parses back to `v`: the digits
            // `description` writes (the shortest round trip; for a given
            // number of decimals the nearest one). `scaled / scale` is the
            // correctly rounded quotient of two exact integers, which is what
            // parsing the decimal text gives. `+ 0.5` then truncation rounds
            // as `rounded()` does wherever the result can pass that check
            // (below 1e15 the sum is exact except just under 0.5, where
            // neither 0 nor 1 parses back to `v`).
            var scale = 1.0
            for decimals in 1...6 {
                scale *= 10
                let scaled = Double(UInt64(magnitude * scale + 0.5))
                guard scaled / scale == magnitude else { continue }
                appendDigits(UInt64(scaled), decimals: decimals, negative: v < 0, to: &out)
                return
            }
        }
        out.append(contentsOf: v.description.utf8)
    }

    /// Appends the decimal digits of `n` (a leading `-` when negative).
    public static func appendDecimal(_ n: Int64, to out: inout [UInt8]) {
        // `magnitude`: unsigned, as Int64.min has no positive counterpart.
        appendDigits(n.magnitude, decimals: 0, negative: n < 0, to: &out)
    }

    /// Appends `digits` with a decimal point before its last `decimals`
    /// digits (at least one digit before the point), `-` first when
    /// `negative`. Written from the right into a buffer on the stack and
    /// appended at once: a division by the constant 10 is a multiplication,
    /// where dividing by a power of ten found at run time (three divisions
    /// per digit) was tens of cycles each.
    static func appendDigits(_ digits: UInt64, decimals: Int, negative: Bool, to out: inout [UInt8]) {
        // 32 bytes: 20 digits, the point, the sign.
        var buffer: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &buffer) { b in
            var i = b.count, m = digits
            for _ in 0..<decimals {
                i -= 1
                b[i] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: m % 10)
                m /= 10
            }
            if decimals > 0 {
                i -= 1
                b[i] = UInt8(ascii: ".")
            }
            repeat {
                i -= 1
                b[i] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: m % 10)
                m /= 10
            } while m > 0
            if negative {
                i -= 1
                b[i] = UInt8(ascii: "-")
            }
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: b[i...]))
        }
    }

    /// Indented JSON (two spaces per level).
    public static func serializePretty(_ value: FieldValue) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        write(value, into: &out, indent: 2, level: 0)
        return String(decoding: out, as: UTF8.self)
    }

    static func write(_ value: FieldValue, into out: inout [UInt8], indent: Int?, level: Int) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case let .bool(b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case let .int(i): appendDecimal(Int64(i), to: &out)
        case let .number(d): appendNumber(d, to: &out)
        case let .string(s): writeString(s, into: &out)
        case let .bytes(b): writeString(hexString(bytes: b), into: &out)
        case let .list(items):
            if items.isEmpty { out.append(contentsOf: "[]".utf8); return }
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                newline(&out, indent, level + 1)
                write(item, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out.append(UInt8(ascii: "]"))
        case let .nested(members):
            if members.isEmpty { out.append(contentsOf: "{}".utf8); return }
            out.append(UInt8(ascii: "{"))
            for (i, (name, item)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                newline(&out, indent, level + 1)
                writeString(name, into: &out)
                out.append(UInt8(ascii: ":"))
                if indent != nil { out.append(UInt8(ascii: " ")) }
                write(item, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func newline(_ out: inout [UInt8], _ indent: Int?, _ level: Int) {
        guard let indent else { return }
        out.append(UInt8(ascii: "\n"))
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: indent * level))
    }

    /// Appends a JSON string literal with the required escapes (the one
    /// escaper, ``JSONValue/appendQuoted(_:to:)``).
    @inline(__always) public static func writeString(_ s: String, into out: inout [UInt8]) { JSONValue.appendQuoted(s, to: &out) }

    /// Appends a JSON string literal to a `String`.
    public static func writeString(_ s: String, into out: inout String) { out += JSONValue.quote(s) }
}

/// A ready-made ``DecodedModel`` for decoders that do not need their own type.
public struct DecodedPayload: DecodedModel {
    public var formatName: String
    public var modelName: String
    public var readings: [Reading]
    public var fields: [(String, FieldValue)]

    public init(formatName: String, modelName: String, readings: [Reading] = [], fields: [(String, FieldValue)] = []) {
        self.formatName = formatName
        self.modelName = modelName
        self.readings = readings
        self.fields = fields
    }
}
