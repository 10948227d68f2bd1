/// A Swift type that maps to one D-Bus type, both ways.
///
/// `[String: DBusValue]` decodes `a{sv}` (``DBusValue`` stands for a
/// variant here), and `[ObjectPath: [String: [String: DBusValue]]]` decodes
/// what `GetManagedObjects` returns.
public protocol DBusRepresentable: Sendable {
    static var dbusType: DBusType { get }
    init(dbusValue: DBusValue) throws(DBusError)
    var dbusValue: DBusValue { get }
}

@inline(__always)
func mismatch(_ expected: DBusType, _ value: DBusValue) -> DBusError {
    .typeMismatch(expected: expected.signature, actual: value.type.signature, context: "decoding")
}

extension UInt8: DBusRepresentable {
    public static var dbusType: DBusType { .byte }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .byte(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .byte(self) }
}

extension Bool: DBusRepresentable {
    public static var dbusType: DBusType { .boolean }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .boolean(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .boolean(self) }
}

extension Int16: DBusRepresentable {
    public static var dbusType: DBusType { .int16 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .int16(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .int16(self) }
}

extension UInt16: DBusRepresentable {
    public static var dbusType: DBusType { .uint16 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .uint16(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .uint16(self) }
}

extension Int32: DBusRepresentable {
    public static var dbusType: DBusType { .int32 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .int32(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .int32(self) }
}

extension UInt32: DBusRepresentable {
    public static var dbusType: DBusType { .uint32 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .uint32(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .uint32(self) }
}

extension Int64: DBusRepresentable {
    public static var dbusType: DBusType { .int64 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .int64(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .int64(self) }
}

extension UInt64: DBusRepresentable {
    public static var dbusType: DBusType { .uint64 }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .uint64(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .uint64(self) }
}

extension Double: DBusRepresentable {
    public static var dbusType: DBusType { .double }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .double(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .double(self) }
}

extension String: DBusRepresentable {
    public static var dbusType: DBusType { .string }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .string(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .string(self) }
}

extension ObjectPath: DBusRepresentable {
    public static var dbusType: DBusType { .objectPath }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .objectPath(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .objectPath(self) }
}

extension DBusSignature: DBusRepresentable {
    public static var dbusType: DBusType { .signature }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .signature(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = v
    }
    public var dbusValue: DBusValue { .signature(self) }
}

extension UnixFileDescriptor: DBusRepresentable {
    public static var dbusType: DBusType { .unixFD }
    public convenience init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .unixFD(v) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self.init(owning: try v.duplicate())
    }
    public var dbusValue: DBusValue { .unixFD(self) }
}

/// As a ``DBusRepresentable``, a `DBusValue` is a variant: decoding unwraps
/// one variant level, encoding wraps in one.
extension DBusValue: DBusRepresentable {
    public static var dbusType: DBusType { .variant }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .variant(inner) = dbusValue else { throw mismatch(Self.dbusType, dbusValue) }
        self = inner
    }
    public var dbusValue: DBusValue { .variant(self) }
}

extension Array: DBusRepresentable where Element: DBusRepresentable {
    public static var dbusType: DBusType { .array(Element.dbusType) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        switch dbusValue {
        case let .bytes(raw) where Element.self == UInt8.self:
            // Cheap path for ay.
            self = raw.map { unsafeBitCast($0, to: Element.self) }
        case let .array(elementType, items) where elementType == Element.dbusType:
            var out: [Element] = []
            out.reserveCapacity(items.count)
            for item in items { out.append(try Element(dbusValue: item)) }
            self = out
        default:
            throw mismatch(Self.dbusType, dbusValue)
        }
    }
    public var dbusValue: DBusValue {
        if Element.self == UInt8.self {
            return .bytes(self.map { unsafeBitCast($0, to: UInt8.self) })
        }
        return .array(Element.dbusType, map(\.dbusValue))
    }
}

extension Dictionary: DBusRepresentable where Key: DBusRepresentable, Value: DBusRepresentable {
    public static var dbusType: DBusType { .dictionary(key: Key.dbusType, value: Value.dbusType) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case let .dictionary(k, v, entries) = dbusValue, k == Key.dbusType, v == Value.dbusType else {
            throw mismatch(Self.dbusType, dbusValue)
        }
        var out: [Key: Value] = [:]
        out.reserveCapacity(entries.count)
        for entry in entries {
            out[try Key(dbusValue: entry.key)] = try Value(dbusValue: entry.value)
        }
        self = out
    }
    public var dbusValue: DBusValue {
        .dictionary(key: Key.dbusType, value: Value.dbusType, map { DBusDictEntry($0.key.dbusValue, $0.value.dbusValue) })
    }
}

extension DBusValue {
    /// Decodes this value as `T`.
    public func decode<T: DBusRepresentable>(as _: T.Type = T.self) throws(DBusError) -> T {
        try T(dbusValue: self)
    }
}
