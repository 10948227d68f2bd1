import BLEParsing
/// A JSON value with members in insertion order, written the way the
/// scenario files in fixtures/scenarios are: two-space indentation, short
/// objects and arrays (timeline events, flag lists) on one line.
public indirect enum JSONText: Equatable, Sendable {
    case object([(String, JSONText)])
    case array([JSONText])
    case string(String)
    /// A number already formatted (integers, or seconds from ``seconds(microseconds:)``).
    case number(String)
    case bool(Bool)
    /// A value already written as pretty text for the place it goes (see
    /// ``rendered(indent:)``): kept as text instead of a tree, which takes a
    /// fifth of the memory for a long timeline. Written as it is.
    case rendered(String)

    /// This value as pretty text for a place indented by `indent` (the
    /// indentation ``text`` gives it there), as a ``rendered(_:)`` value.
    public func rendered(indent: Int) -> JSONText {
        var out = ""
        _ = write(to: &out, indent: indent, limit: .max)
        return .rendered(out)
    }

    public static func int<T: BinaryInteger>(_ v: T) -> JSONText { .number(String(v)) }

    /// Microseconds as exact decimal seconds ("0.1", "2", "0.000001").
    public static func seconds(microseconds us: Int64) -> JSONText {
        let whole = us / 1_000_000
        var fraction = String(us % 1_000_000)
        if fraction == "0" { return .number(String(whole)) }
        fraction = String(repeating: "0", count: 6 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return .number("\(whole).\(fraction)")
    }

    public static func == (a: JSONText, b: JSONText) -> Bool {
        switch (a, b) {
        case let (.object(x), .object(y)): return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case let (.array(x), .array(y)): return x == y
        case let (.string(x), .string(y)): return x == y
        case let (.number(x), .number(y)): return x == y
        case let (.bool(x), .bool(y)): return x == y
        case let (.rendered(x), .rendered(y)): return x == y
        default: return false
        }
    }

    /// The member named `key` of an object.
    public subscript(_ key: String) -> JSONText? {
        guard case let .object(members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }

    /// Pretty text, ending with a newline.
    public var text: String {
        var out = ""
        _ = write(to: &out, indent: 0, limit: .max)
        out += "\n"
        return out
    }

    /// The pretty text, or nil as soon as it passes `limit` UTF-8 bytes (so a
    /// document too large to use is never written out whole).
    public func text(limit: Int) -> String? {
        var out = ""
        guard write(to: &out, indent: 0, limit: limit) else { return nil }
        out += "\n"
        return out.utf8.count <= limit ? out : nil
    }

    /// Compact one-line form (a ``rendered(_:)`` value as it was rendered).
    public var compact: String {
        switch self {
        case let .object(members):
            if members.isEmpty { return "{}" }
            return "{ " + members.map { JSONText.quote($0.0) + ": " + $0.1.compact }.joined(separator: ", ") + " }"
        case let .array(items):
            if items.isEmpty { return "[]" }
            return "[" + items.map(\.compact).joined(separator: ", ") + "]"
        case let .string(s): return JSONText.quote(s)
        case let .number(n): return n
        case let .bool(b): return b ? "true" : "false"
        case let .rendered(text): return text
        }
    }

    /// Objects holding no object or array of objects, and arrays of scalars, fit on one line when short.
    private var isFlat: Bool {
        switch self {
        case let .object(members): return members.allSatisfy { $0.1.isScalarOrScalarList }
        case .array: return isScalarOrScalarList
        case .rendered: return false
        default: return true
        }
    }

    private var isScalarOrScalarList: Bool {
        switch self {
        case .object, .rendered: return false
        case let .array(items): return items.allSatisfy { $0.isScalar }
        default: return true
        }
    }

    private var isScalar: Bool {
        switch self {
        case .object, .array, .rendered: return false
        default: return true
        }
    }

    /// Appends the pretty form; false once `out` has passed `limit` UTF-8
    /// bytes (what is written by then is incomplete).
    private func write(to out: inout String, indent: Int, limit: Int) -> Bool {
        // Only a flat value can go on one line, so only a flat one is
        // rendered compactly to see whether it fits: rendering every node
        // that way first wrote the whole document again at every level
        // (a 35 MB capture took 533 MB).
        if isFlat {
            let line = compact
            if line.count + indent <= 120 {
                out += line
                return out.utf8.count <= limit
            }
        }
        let pad = String(repeating: " ", count: indent + 2)
        switch self {
        case let .object(members):
            out += "{\n"
            for (n, m) in members.enumerated() {
                out += pad + JSONText.quote(m.0) + ": "
                guard m.1.write(to: &out, indent: indent + 2, limit: limit) else { return false }
                out += n + 1 < members.count ? ",\n" : "\n"
            }
            out += String(repeating: " ", count: indent) + "}"
        case let .array(items):
            out += "[\n"
            for (n, item) in items.enumerated() {
                out += pad
                guard item.write(to: &out, indent: indent + 2, limit: limit) else { return false }
                out += n + 1 < items.count ? ",\n" : "\n"
            }
            out += String(repeating: " ", count: indent) + "]"
        default:
            out += compact
        }
        return out.utf8.count <= limit
    }

    /// A JSON string literal (BLEParsing's writer: the same escapes as every JSON we write).
    static func quote(_ s: String) -> String {
        var out = ""
        JSON.writeString(s, into: &out)
        return out
    }
}
