import Locking
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An owned Unix file descriptor carried in a message (`h`).
///
/// The descriptor is closed when the last reference goes away; use
/// ``duplicate()`` or ``take()`` to keep it beyond that.
public final class UnixFileDescriptor: @unchecked Sendable, Hashable, CustomStringConvertible {
    // The descriptor number is written once at init and only read after,
    // except by take(), which a single owner calls; a lock guards it.
    private let lock = Lock<Void>()
    private var fd: Int32

    /// Takes ownership of `fd`.
    public init(owning fd: Int32) { self.fd = fd }

    /// The descriptor number, or -1 once taken.
    public var rawValue: Int32 { lock.withLock { fd } }

    /// Returns a new descriptor (dup with close-on-exec) the caller owns.
    public func duplicate() throws(DBusError) -> Int32 {
        let current = rawValue
        guard current >= 0 else { throw .invalidValue("file descriptor was already taken") }
        let copy = fcntl(current, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { throw .invalidValue("dup of fd \(current) failed: errno \(errno)") }
        return copy
    }

    /// Gives up ownership: the caller must close the returned descriptor.
    public func take() -> Int32 {
        lock.withLock {
            let v = fd
            fd = -1
            return v
        }
    }

    deinit {
        let v = fd
        if v >= 0 { _ = close(v) }
    }

    public static func == (lhs: UnixFileDescriptor, rhs: UnixFileDescriptor) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String { "fd(\(rawValue))" }
}

/// One entry of a D-Bus dictionary, in wire order.
public struct DBusDictEntry: Sendable, Hashable {
    public var key: DBusValue
    public var value: DBusValue
    public init(_ key: DBusValue, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// Any D-Bus value, arbitrarily nested.
///
/// Byte arrays (`ay`) are always represented as ``bytes(_:)`` by the
/// decoders; ``array(_:_:)`` with a `.byte` element type is accepted when
/// sending and compares unequal to the same bytes in ``bytes(_:)``, so build
/// byte arrays with ``bytes(_:)``.
public enum DBusValue: Sendable, Hashable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(DBusSignature)
    case unixFD(UnixFileDescriptor)
    /// `ay`.
    case bytes([UInt8])
    /// `aT` for element type `T` (not `y`, not a dictionary entry).
    case array(DBusType, [DBusValue])
    /// `a{KV}`, entries in wire order.
    case dictionary(key: DBusType, value: DBusType, [DBusDictEntry])
    case structure([DBusValue])
    indirect case variant(DBusValue)

    /// The D-Bus type of this value.
    public var type: DBusType {
        switch self {
        case .byte: return .byte
        case .boolean: return .boolean
        case .int16: return .int16
        case .uint16: return .uint16
        case .int32: return .int32
        case .uint32: return .uint32
        case .int64: return .int64
        case .uint64: return .uint64
        case .double: return .double
        case .string: return .string
        case .objectPath: return .objectPath
        case .signature: return .signature
        case .unixFD: return .unixFD
        case .bytes: return .array(.byte)
        case let .array(element, _): return .array(element)
        case let .dictionary(key, value, _): return .dictionary(key: key, value: value)
        case let .structure(fields): return .structure(fields.map(\.type))
        case .variant: return .variant
        }
    }

    /// Builds a string-keyed dictionary of variants (`a{sv}`), sorted by key
    /// so the wire order is deterministic.
    public static func propertyMap(_ dict: [String: DBusValue]) -> DBusValue {
        .dictionary(
            key: .string, value: .variant,
            dict.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .variant($0.value)) }
        )
    }

    /// Checks that every element matches its declared type, recursively,
    /// and that strings carry no NUL (which D-Bus cannot send).
    public func validate() throws(DBusError) {
        switch self {
        case let .string(s):
            if s.utf8.contains(0) { throw .invalidValue("string contains a NUL byte") }
        case let .array(element, items):
            if element == .byte {
                // allowed: sent as bytes
            }
            if case .dictionary = element {
                throw .invalidValue("use .dictionary for dictionary arrays")
            }
            for (i, item) in items.enumerated() {
                guard item.type == element else {
                    throw .typeMismatch(expected: element.signature, actual: item.type.signature, context: "array element \(i)")
                }
                try item.validate()
            }
        case let .dictionary(key, value, entries):
            guard key.isBasic else { throw .invalidValue("dictionary key type \(key) is not basic") }
            for (i, e) in entries.enumerated() {
                guard e.key.type == key else {
                    throw .typeMismatch(expected: key.signature, actual: e.key.type.signature, context: "dictionary key \(i)")
                }
                guard e.value.type == value else {
                    throw .typeMismatch(expected: value.signature, actual: e.value.type.signature, context: "dictionary value \(i)")
                }
                try e.key.validate()
                try e.value.validate()
            }
        case let .structure(fields):
            if fields.isEmpty { throw .invalidValue("empty struct") }
            for f in fields { try f.validate() }
        case let .variant(inner):
            try inner.validate()
        default:
            break
        }
    }

    /// True when a Unix fd is carried anywhere inside, variants included.
    public var containsUnixFD: Bool {
        switch self {
        case .unixFD: return true
        case let .array(element, items): return element.containsUnixFD || items.contains { $0.containsUnixFD }
        case let .dictionary(_, _, entries): return entries.contains { $0.key.containsUnixFD || $0.value.containsUnixFD }
        case let .structure(fields): return fields.contains { $0.containsUnixFD }
        case let .variant(inner): return inner.containsUnixFD
        default: return false
        }
    }

    /// The string inside `.string`, `.objectPath` or `.signature`.
    public var stringValue: String? {
        switch self {
        case let .string(s): return s
        case let .objectPath(p): return p.rawValue
        case let .signature(g): return g.rawValue
        case let .variant(v): return v.stringValue
        default: return nil
        }
    }

    /// This value with any variant wrappers removed.
    public var unwrapped: DBusValue {
        if case let .variant(v) = self { return v.unwrapped }
        return self
    }
}

extension DBusValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case let .byte(v): return "byte \(v)"
        case let .boolean(v): return "boolean \(v)"
        case let .int16(v): return "int16 \(v)"
        case let .uint16(v): return "uint16 \(v)"
        case let .int32(v): return "int32 \(v)"
        case let .uint32(v): return "uint32 \(v)"
        case let .int64(v): return "int64 \(v)"
        case let .uint64(v): return "uint64 \(v)"
        case let .double(v): return "double \(v)"
        case let .string(v): return "string \"\(v)\""
        case let .objectPath(v): return "object path \(v)"
        case let .signature(v): return "signature \"\(v)\""
        case let .unixFD(v): return "\(v)"
        case let .bytes(v): return "bytes [\(v.map { String($0, radix: 16) }.joined(separator: " "))]"
        case let .array(t, v): return "array of \(t) [\(v.map(\.description).joined(separator: ", "))]"
        case let .dictionary(_, _, v): return "dict {\(v.map { "\($0.key): \($0.value)" }.joined(separator: ", "))}"
        case let .structure(v): return "struct (\(v.map(\.description).joined(separator: ", ")))"
        case let .variant(v): return "variant \(v)"
        }
    }
}

