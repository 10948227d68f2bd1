/// A JSON value to write, members in the order given: the one JSON writer
/// of every module (scenario files from `record` and `import`, `--json`
/// output, the HTTP API's bodies), with the one string escaper
/// (``appendQuoted(_:to:)``).
///
/// ``text`` is the pretty form the scenario files in fixtures/scenarios use:
/// two-space indentation, short flat objects and arrays (timeline events,
/// flag lists) on one line. ``compact`` is one line; ``sortingKeys()`` orders
/// every object's members by name, for output that must not depend on the
/// order they were built in.
public indirect enum JSONValue: Equatable, Sendable {
    case object([(String, JSONValue)])
    case array([JSONValue])
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
    public func rendered(indent: Int) -> JSONValue {
        var out = ""
        _ = write(to: &out, indent: indent, limit: .max)
        return .rendered(out)
    }

    public static func int<T: BinaryInteger>(_ v: T) -> JSONValue { .number(String(v)) }

    /// Bytes as one lower-case hex string (`"0a1b"`).
    public static func hex<C: Collection>(_ bytes: C) -> JSONValue where C.Element == UInt8 { .string(Hex.string(bytes)) }

    /// Seconds rounded to the millisecond, as few digits as needed:
    /// 1.5 → `1.5`, 2 → `2`, 0.0004 → `0`; negative or not finite → `0`.
    public static func seconds(_ t: Double) -> JSONValue {
        guard t.isFinite, t > 0, t < 9.2e15 else { return .number("0") }
        return seconds(microseconds: Int64((t * 1000).rounded()) * 1000)
    }

    /// Microseconds as exact decimal seconds ("0.1", "2", "0.000001").
    public static func seconds(microseconds us: Int64) -> JSONValue {
        let whole = us / 1_000_000
        var fraction = String(us % 1_000_000)
        if fraction == "0" { return .number(String(whole)) }
        fraction = String(repeating: "0", count: 6 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return .number("\(whole).\(fraction)")
    }

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
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
    public subscript(_ key: String) -> JSONValue? {
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
            return "{ " + members.map { JSONValue.quote($0.0) + ": " + $0.1.compact }.joined(separator: ", ") + " }"
        case let .array(items):
            if items.isEmpty { return "[]" }
            return "[" + items.map(\.compact).joined(separator: ", ") + "]"
        case let .string(s): return JSONValue.quote(s)
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
                out += pad + JSONValue.quote(m.0) + ": "
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

    /// The same value with every object's members ordered by name (recursively).
    public func sortingKeys() -> JSONValue {
        switch self {
        case let .object(members): return .object(members.map { ($0.0, $0.1.sortingKeys()) }.sorted { $0.0 < $1.0 })
        case let .array(items): return .array(items.map { $0.sortingKeys() })
        default: return self
        }
    }

    /// `s` as a JSON string literal (RFC 8259 section 7).
    public static func quote(_ s: String) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count + 2)
        appendQuoted(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `s` as a JSON string literal: `"` and `\` escaped, the short
    /// escapes for newline, return, tab, backspace and form feed, `\u00XX`
    /// for the other control characters and DEL; everything else as UTF-8.
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        out.append(0x22)
        // Most strings (keys, names, times) need no escape: checked in place,
        // then copied in one go rather than byte by byte.
        let plain = s.utf8.withContiguousStorageIfAvailable { bytes in
            !bytes.contains { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C || $0 == 0x7F }
        }
        if plain == true {
            out.append(contentsOf: s.utf8)
            out.append(0x22)
            return
        }
        for byte in s.utf8 {
            switch byte {
            case 0x22, 0x5C: out.append(0x5C); out.append(byte)
            case 0x0A: out.append(0x5C); out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(0x5C); out.append(UInt8(ascii: "r"))
            case 0x09: out.append(0x5C); out.append(UInt8(ascii: "t"))
            case 0x08: out.append(0x5C); out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(0x5C); out.append(UInt8(ascii: "f"))
            case 0..<0x20, 0x7F:
                out.append(contentsOf: "\\u00".utf8)
                out.append(Hex.digit(byte >> 4))
                out.append(Hex.digit(byte))
            default: out.append(byte)
            }
        }
        out.append(0x22)
    }
}
