/// A single complete D-Bus type, as described by the specification's
/// "Type System" section.
public enum DBusType: Sendable, Hashable, CustomStringConvertible {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature, unixFD
    case variant
    indirect case array(DBusType)
    /// `a{KV}`: only valid as an array element; represented directly.
    indirect case dictionary(key: DBusType, value: DBusType)
    case structure([DBusType])

    /// The type a one-character code stands for (basic types and `v`).
    @inline(__always) static func singleCharacter(_ c: UInt8) -> DBusType? {
        switch c {
        case UInt8(ascii: "y"): return .byte
        case UInt8(ascii: "b"): return .boolean
        case UInt8(ascii: "n"): return .int16
        case UInt8(ascii: "q"): return .uint16
        case UInt8(ascii: "i"): return .int32
        case UInt8(ascii: "u"): return .uint32
        case UInt8(ascii: "x"): return .int64
        case UInt8(ascii: "t"): return .uint64
        case UInt8(ascii: "d"): return .double
        case UInt8(ascii: "s"): return .string
        case UInt8(ascii: "o"): return .objectPath
        case UInt8(ascii: "g"): return .signature
        case UInt8(ascii: "h"): return .unixFD
        case UInt8(ascii: "v"): return .variant
        default: return nil
        }
    }

    /// True for the basic (non-container) types, which are the only ones
    /// allowed as dictionary keys.
    public var isBasic: Bool {
        switch self {
        case .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double,
             .string, .objectPath, .signature, .unixFD:
            return true
        case .variant, .array, .dictionary, .structure:
            return false
        }
    }

    /// Wire alignment in bytes.
    public var alignment: Int {
        switch self {
        case .byte, .signature, .variant: return 1
        case .int16, .uint16: return 2
        case .boolean, .int32, .uint32, .unixFD, .string, .objectPath, .array, .dictionary: return 4
        case .int64, .uint64, .double, .structure: return 8
        }
    }

    /// True when this type contains a Unix file descriptor anywhere.
    public var containsUnixFD: Bool {
        switch self {
        case .unixFD: return true
        case let .array(e): return e.containsUnixFD
        case let .dictionary(k, v): return k.containsUnixFD || v.containsUnixFD
        case let .structure(fields): return fields.contains { $0.containsUnixFD }
        default: return false
        }
    }

    /// The signature string of this single type.
    public var signature: String {
        var out = ""
        append(to: &out)
        return out
    }

    public var description: String { signature }

    func append(to out: inout String) {
        switch self {
        case .byte: out += "y"
        case .boolean: out += "b"
        case .int16: out += "n"
        case .uint16: out += "q"
        case .int32: out += "i"
        case .uint32: out += "u"
        case .int64: out += "x"
        case .uint64: out += "t"
        case .double: out += "d"
        case .string: out += "s"
        case .objectPath: out += "o"
        case .signature: out += "g"
        case .unixFD: out += "h"
        case .variant: out += "v"
        case let .array(element):
            out += "a"
            element.append(to: &out)
        case let .dictionary(key, value):
            out += "a{"
            key.append(to: &out)
            value.append(to: &out)
            out += "}"
        case let .structure(fields):
            out += "("
            for f in fields { f.append(to: &out) }
            out += ")"
        }
    }
}

/// A validated D-Bus signature: zero or more complete types.
public struct DBusSignature: Sendable, Hashable, CustomStringConvertible, ExpressibleByArrayLiteral {
    public let types: [DBusType]
    public let rawValue: String

    public static let empty = DBusSignature(validated: [], raw: "")

    init(validated types: [DBusType], raw: String) {
        self.types = types
        self.rawValue = raw
    }

    public init(_ types: [DBusType]) {
        self.types = types
        var raw = ""
        for t in types { t.append(to: &raw) }
        self.rawValue = raw
    }

    public init(arrayLiteral elements: DBusType...) {
        self.init(elements)
    }

    /// Parses and validates a signature string.
    public init(_ string: String) throws(DBusError) {
        self.types = try SignatureParser.parse(string)
        self.rawValue = string
    }

    public var description: String { rawValue }

    /// The single complete type of a one-type signature.
    public var singleType: DBusType? { types.count == 1 ? types[0] : nil }
}

enum SignatureParser {
    static let maximumLength = 255
    static let maximumArrayDepth = 32
    static let maximumStructDepth = 32

    static func parse(_ string: String) throws(DBusError) -> [DBusType] {
        let bytes = Array(string.utf8)
        return try parse(bytes: bytes[...], original: string)
    }

    static func parse(bytes: ArraySlice<UInt8>, original: @autoclosure () -> String) throws(DBusError) -> [DBusType] {
        guard bytes.count <= maximumLength else {
            throw .invalidSignature(original(), reason: "longer than \(maximumLength) bytes")
        }
        var index = bytes.startIndex
        var result: [DBusType] = []
        while index < bytes.endIndex {
            result.append(try parseOne(bytes, &index, arrayDepth: 0, structDepth: 0, original: original))
        }
        return result
    }

    /// Parses exactly one complete type (as a variant's signature must be).
    static func parseSingle(bytes: ArraySlice<UInt8>, original: @autoclosure () -> String) throws(DBusError) -> DBusType {
        let types = try parse(bytes: bytes, original: original())
        guard types.count == 1 else {
            throw .invalidSignature(original(), reason: "a variant must hold exactly one complete type, found \(types.count)")
        }
        return types[0]
    }

    private static func parseOne(
        _ b: ArraySlice<UInt8>, _ i: inout Int, arrayDepth: Int, structDepth: Int,
        original: () -> String
    ) throws(DBusError) -> DBusType {
        guard i < b.endIndex else {
            throw .invalidSignature(original(), reason: "ends in the middle of a type")
        }
        let c = b[i]
        let position = i - b.startIndex
        i += 1
        if let single = DBusType.singleCharacter(c) { return single }
        switch c {
        case UInt8(ascii: "a"):
            guard arrayDepth < maximumArrayDepth else {
                throw .invalidSignature(original(), reason: "arrays nested deeper than \(maximumArrayDepth)")
            }
            if i < b.endIndex, b[i] == UInt8(ascii: "{") {
                i += 1
                guard structDepth < maximumStructDepth else {
                    throw .invalidSignature(original(), reason: "structs nested deeper than \(maximumStructDepth)")
                }
                let key = try parseOne(b, &i, arrayDepth: arrayDepth + 1, structDepth: structDepth + 1, original: original)
                guard key.isBasic else {
                    throw .invalidSignature(original(), reason: "dictionary key at position \(position + 2) must be a basic type, not \(key)")
                }
                guard i < b.endIndex, b[i] != UInt8(ascii: "}") else {
                    throw .invalidSignature(original(), reason: "dictionary entry at position \(position + 1) needs exactly a key and a value")
                }
                let value = try parseOne(b, &i, arrayDepth: arrayDepth + 1, structDepth: structDepth + 1, original: original)
                guard i < b.endIndex, b[i] == UInt8(ascii: "}") else {
                    throw .invalidSignature(original(), reason: "dictionary entry at position \(position + 1) is not closed by '}' after one key and one value")
                }
                i += 1
                return .dictionary(key: key, value: value)
            }
            let element = try parseOne(b, &i, arrayDepth: arrayDepth + 1, structDepth: structDepth, original: original)
            return .array(element)
        case UInt8(ascii: "("):
            guard structDepth < maximumStructDepth else {
                throw .invalidSignature(original(), reason: "structs nested deeper than \(maximumStructDepth)")
            }
            var fields: [DBusType] = []
            while true {
                guard i < b.endIndex else {
                    throw .invalidSignature(original(), reason: "struct opened at position \(position) is not closed")
                }
                if b[i] == UInt8(ascii: ")") {
                    i += 1
                    break
                }
                fields.append(try parseOne(b, &i, arrayDepth: arrayDepth, structDepth: structDepth + 1, original: original))
            }
            guard !fields.isEmpty else {
                throw .invalidSignature(original(), reason: "empty struct at position \(position)")
            }
            return .structure(fields)
        case UInt8(ascii: "{"):
            throw .invalidSignature(original(), reason: "dictionary entry at position \(position) outside an array")
        case UInt8(ascii: ")"), UInt8(ascii: "}"):
            throw .invalidSignature(original(), reason: "unexpected '\(Character(Unicode.Scalar(c)))' at position \(position)")
        default:
            let shown = c >= 0x20 && c < 0x7f ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x\(String(c, radix: 16))"
            throw .invalidSignature(original(), reason: "unknown type code \(shown) at position \(position)")
        }
    }
}
