import Vocabulary

/// CBOR (RFC 8949), the body encoding of Zephyr's Simple Management Protocol
/// (SMP, mcumgr). Written here: no maintained Swift CBOR package resolves
/// on the machines the project builds on (docs/ARCHITECTURE.md), and SMP
/// needs a small part of it. Pure; bad bytes give a ``DecodeError``.
///
/// Decoding takes every well-formed item SMP peers send: definite and
/// indefinite lengths (Zephyr's older mcumgr writes indefinite maps), tags,
/// half/single/double floats, simple values; nesting deeper than 32 and
/// lengths past the input are errors. Encoding writes the preferred
/// serialisation: definite lengths, the shortest integer heads, floats as
/// 64-bit, map keys in the order given.
public indirect enum CBOR: Sendable, Hashable, CustomStringConvertible {
    case unsigned(UInt64)
    /// The integer -1 - n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    case map([Pair])
    case tagged(UInt64, CBOR)
    case bool(Bool)
    case null
    case undefined
    case float(Double)
    case simple(UInt8)

    public struct Pair: Sendable, Hashable {
        public var key: CBOR
        public var value: CBOR
        public init(_ key: CBOR, _ value: CBOR) {
            self.key = key
            self.value = value
        }
    }

    public static let maximumDepth = 32

    // MARK: Building

    public static func int(_ v: Int) -> CBOR { v >= 0 ? .unsigned(UInt64(v)) : .negative(UInt64(-(v + 1))) }

    /// A map with text keys, in the order given.
    public static func object(_ members: [(String, CBOR)]) -> CBOR { .map(members.map { Pair(.text($0.0), $0.1) }) }

    // MARK: Reading

    /// A map's value for a text key.
    public subscript(key: String) -> CBOR? {
        guard case let .map(pairs) = self else { return nil }
        return pairs.first { $0.key == .text(key) }?.value
    }

    /// The integer, when it is one that fits an `Int`.
    public var int: Int? {
        switch self {
        case let .unsigned(u): return u <= UInt64(Int.max) ? Int(u) : nil
        case let .negative(n): return n <= UInt64(Int.max) ? -Int(n) - 1 : nil
        default: return nil
        }
    }

    public var uint64: UInt64? { if case let .unsigned(u) = self { return u } else { return nil } }
    public var string: String? { if case let .text(t) = self { return t } else { return nil } }
    public var data: [UInt8]? { if case let .bytes(b) = self { return b } else { return nil } }
    public var boolValue: Bool? { if case let .bool(b) = self { return b } else { return nil } }
    public var items: [CBOR]? { if case let .array(a) = self { return a } else { return nil } }

    /// CBOR diagnostic notation (RFC 8949 §8), for logs and errors.
    public var description: String {
        switch self {
        case let .unsigned(u): return "\(u)"
        case let .negative(n): return n == .max ? "-18446744073709551616" : "-\(n + 1)"
        case let .bytes(b): return "h'\(Hex.string(b))'"
        case let .text(t): return JSONValue.quote(t)
        case let .array(a): return "[" + a.map(\.description).joined(separator: ", ") + "]"
        case let .map(m): return "{" + m.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case let .tagged(t, v): return "\(t)(\(v))"
        case let .bool(b): return b ? "true" : "false"
        case .null: return "null"
        case .undefined: return "undefined"
        case let .float(x): return "\(x)"
        case let .simple(v): return "simple(\(v))"
        }
    }

    // MARK: Encoding

    public var encoded: [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    public func encode(into out: inout [UInt8]) {
        switch self {
        case let .unsigned(u): Self.head(0, u, &out)
        case let .negative(n): Self.head(1, n, &out)
        case let .bytes(b):
            Self.head(2, UInt64(b.count), &out)
            out.append(contentsOf: b)
        case let .text(t):
            let utf8 = Array(t.utf8)
            Self.head(3, UInt64(utf8.count), &out)
            out.append(contentsOf: utf8)
        case let .array(a):
            Self.head(4, UInt64(a.count), &out)
            for item in a { item.encode(into: &out) }
        case let .map(m):
            Self.head(5, UInt64(m.count), &out)
            for pair in m {
                pair.key.encode(into: &out)
                pair.value.encode(into: &out)
            }
        case let .tagged(tag, v):
            Self.head(6, tag, &out)
            v.encode(into: &out)
        case let .bool(b): out.append(b ? 0xF5 : 0xF4)
        case .null: out.append(0xF6)
        case .undefined: out.append(0xF7)
        case let .float(x):
            out.append(0xFB)
            let bits = x.bitPattern
            for k in (0..<8).reversed() { out.append(UInt8(truncatingIfNeeded: bits >> UInt64(8 * k))) }
        case let .simple(v):
            if v < 24 { out.append(0xE0 | v) } else { out.append(contentsOf: [0xF8, v]) }
        }
    }

    static func head(_ major: UInt8, _ value: UInt64, _ out: inout [UInt8]) {
        let m = major << 5
        switch value {
        case 0..<24: out.append(m | UInt8(value))
        case 24...0xFF: out.append(contentsOf: [m | 24, UInt8(value)])
        case 0x100...0xFFFF: out.append(contentsOf: [m | 25, UInt8(value >> 8), UInt8(truncatingIfNeeded: value)])
        case 0x1_0000...0xFFFF_FFFF:
            out.append(m | 26)
            for k in (0..<4).reversed() { out.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * k))) }
        default:
            out.append(m | 27)
            for k in (0..<8).reversed() { out.append(UInt8(truncatingIfNeeded: value >> UInt64(8 * k))) }
        }
    }

    // MARK: Decoding

    /// One item that is the whole of `bytes`.
    public static func decode(_ bytes: [UInt8], context: String = "CBOR") throws(DecodeError) -> CBOR {
        var reader = Reader(bytes: bytes, context: context)
        let item = try reader.item(depth: 0)
        guard reader.offset == bytes.count else {
            throw DecodeError.trailingBytes(context: context, offset: reader.offset, extra: bytes.count - reader.offset)
        }
        return item
    }

    /// One item from the front of `bytes`, and the bytes it took.
    public static func decodePrefix(_ bytes: [UInt8], context: String = "CBOR") throws(DecodeError) -> (CBOR, Int) {
        var reader = Reader(bytes: bytes, context: context)
        let item = try reader.item(depth: 0)
        return (item, reader.offset)
    }

    struct Reader {
        let bytes: [UInt8]
        let context: String
        var offset = 0

        mutating func byte(_ what: String) throws(DecodeError) -> UInt8 {
            guard offset < bytes.count else {
                throw DecodeError.truncated(context: context, offset: offset, needed: 1, available: 0, what: what)
            }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func uint(_ count: Int, _ what: String) throws(DecodeError) -> UInt64 {
            guard offset + count <= bytes.count else {
                throw DecodeError.truncated(context: context, offset: offset, needed: count, available: bytes.count - offset, what: what)
            }
            var v: UInt64 = 0
            for k in 0..<count { v = v << 8 | UInt64(bytes[offset + k]) }
            offset += count
            return v
        }

        /// The argument of an initial byte's additional information; nil: indefinite (31).
        mutating func argument(_ info: UInt8, at start: Int) throws(DecodeError) -> UInt64? {
            switch info {
            case 0..<24: return UInt64(info)
            case 24: return try uint(1, "a 1-byte argument")
            case 25: return try uint(2, "a 2-byte argument")
            case 26: return try uint(4, "a 4-byte argument")
            case 27: return try uint(8, "an 8-byte argument")
            case 31: return nil
            default:
                throw DecodeError(kind: .reserved, context: context, offset: start, expected: "additional information 0…27 or 31",
                                  found: "\(info)")
            }
        }

        /// A length that fits what is left of the input (each element takes at least a byte).
        mutating func length(_ value: UInt64, at start: Int, _ what: String) throws(DecodeError) -> Int {
            let left = bytes.count - offset
            guard value <= UInt64(left) else {
                throw DecodeError.truncated(context: context, offset: start, needed: value > UInt64(Int32.max) ? Int(Int32.max) : Int(value),
                                            available: left, what: what)
            }
            return Int(value)
        }

        mutating func item(depth: Int) throws(DecodeError) -> CBOR {
            guard depth <= CBOR.maximumDepth else {
                throw DecodeError.invalidValue(context: context, offset: offset, expected: "nesting at most \(CBOR.maximumDepth) deep", found: "deeper")
            }
            let start = offset
            let initial = try byte("an item")
            let major = initial >> 5, info = initial & 0x1F
            switch major {
            case 0:
                guard let v = try argument(info, at: start) else { throw indefinite(start, "an integer") }
                return .unsigned(v)
            case 1:
                guard let v = try argument(info, at: start) else { throw indefinite(start, "an integer") }
                return .negative(v)
            case 2, 3:
                var content: [UInt8] = []
                if let n = try argument(info, at: start) {
                    let count = try length(n, at: start, major == 2 ? "a byte string" : "a text string")
                    content = Array(bytes[offset..<(offset + count)])
                    offset += count
                } else {
                    // Indefinite: definite chunks of the same major type until the break.
                    while true {
                        let chunkStart = offset
                        let b = try byte("a string chunk or the break")
                        if b == 0xFF { break }
                        guard b >> 5 == major, let n = try argument(b & 0x1F, at: chunkStart) else {
                            throw DecodeError.invalidValue(context: context, offset: chunkStart, expected: "a definite chunk of the same string type",
                                                           found: hexString(b))
                        }
                        let count = try length(n, at: chunkStart, "a string chunk")
                        content += bytes[offset..<(offset + count)]
                        offset += count
                    }
                }
                if major == 2 { return .bytes(content) }
                guard let text = String(validating: content, as: UTF8.self) else {
                    throw DecodeError.invalidValue(context: context, offset: start, expected: "UTF-8 text", found: Hex.string(content))
                }
                return .text(text)
            case 4:
                var items: [CBOR] = []
                if let n = try argument(info, at: start) {
                    let count = try length(n, at: start, "an array's items")
                    items.reserveCapacity(count)
                    for _ in 0..<count { items.append(try item(depth: depth + 1)) }
                } else {
                    while try !atBreak() { items.append(try item(depth: depth + 1)) }
                }
                return .array(items)
            case 5:
                var pairs: [Pair] = []
                if let n = try argument(info, at: start) {
                    let count = try length(n, at: start, "a map's entries")
                    pairs.reserveCapacity(count)
                    for _ in 0..<count { pairs.append(Pair(try item(depth: depth + 1), try item(depth: depth + 1))) }
                } else {
                    while try !atBreak() { pairs.append(Pair(try item(depth: depth + 1), try item(depth: depth + 1))) }
                }
                return .map(pairs)
            case 6:
                guard let tag = try argument(info, at: start) else { throw indefinite(start, "a tag") }
                return .tagged(tag, try item(depth: depth + 1))
            default:
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                case 23: return .undefined
                case 24:
                    let v = try byte("a simple value")
                    guard v >= 32 else {
                        throw DecodeError.invalidValue(context: context, offset: start, expected: "a two-byte simple value of 32 or more", found: "\(v)")
                    }
                    return .simple(v)
                case 25: return .float(FieldLayout.halfToDouble(UInt16(try uint(2, "a half-precision float"))))
                case 26: return .float(Double(Float(bitPattern: UInt32(try uint(4, "a single-precision float")))))
                case 27: return .float(Double(bitPattern: try uint(8, "a double-precision float")))
                case 31:
                    throw DecodeError.invalidValue(context: context, offset: start, expected: "an item", found: "a break outside an indefinite-length item")
                case 28, 29, 30:
                    throw DecodeError(kind: .reserved, context: context, offset: start, expected: "a defined simple value", found: "\(info)")
                default: return .simple(info)
                }
            }
        }

        /// Consumes the break (0xFF) if it is next.
        mutating func atBreak() throws(DecodeError) -> Bool {
            guard offset < bytes.count else {
                throw DecodeError.truncated(context: context, offset: offset, needed: 1, available: 0, what: "the break of an indefinite-length item")
            }
            if bytes[offset] == 0xFF {
                offset += 1
                return true
            }
            return false
        }

        func indefinite(_ at: Int, _ what: String) -> DecodeError {
            DecodeError.invalidValue(context: context, offset: at, expected: "\(what) with a definite argument", found: "indefinite (31)")
        }
    }
}
