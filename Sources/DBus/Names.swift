#if canImport(Glibc)
import Glibc
#endif

/// A validated D-Bus object path such as `/org/bluez/hci0`.
public struct ObjectPath: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    public static let root = ObjectPath(unchecked: "/")

    /// Validates `string` as an object path.
    public init(_ string: String) throws(DBusError) {
        try NameValidation.validateObjectPath(string)
        rawValue = string
    }

    /// For literals in code: an invalid literal is a programming error that
    /// tests catch; it is replaced by "/" rather than trapping.
    public init(stringLiteral value: String) {
        if (try? NameValidation.validateObjectPath(value)) != nil {
            rawValue = value
        } else {
            assertionFailure("invalid object path literal \(value)")
            rawValue = "/"
        }
    }

    init(unchecked: String) { rawValue = unchecked }

    public var description: String { rawValue }

    public static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The path of a child element (the element must be `[A-Za-z0-9_]+`).
    public func appending(_ element: String) throws(DBusError) -> ObjectPath {
        try ObjectPath(rawValue == "/" ? "/" + element : rawValue + "/" + element)
    }

    /// The parent path, or nil for the root.
    public var parent: ObjectPath? {
        guard rawValue != "/" else { return nil }
        guard let slash = rawValue.utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        if slash == rawValue.utf8.startIndex { return .root }
        return ObjectPath(unchecked: String(rawValue[..<slash]))
    }

    /// The last element ("hci0" for /org/bluez/hci0); empty for the root.
    public var lastElement: Substring {
        guard let slash = rawValue.lastIndex(of: "/") else { return rawValue[...] }
        return rawValue[rawValue.index(after: slash)...]
    }

    /// True when `self` equals `other` or lies below it.
    public func isDescendant(ofOrEqualTo other: ObjectPath) -> Bool {
        var prefix = other.rawValue
        var me = rawValue
        return prefix.withUTF8 { o in
            if o.count == 1 { return true } // the root
            return me.withUTF8 { m in
                guard m.count >= o.count, let mb = m.baseAddress, let ob = o.baseAddress,
                      memcmp(mb, ob, o.count) == 0 else { return false }
                return m.count == o.count || m[o.count] == UInt8(ascii: "/")
            }
        }
    }

    /// True when `self` lies strictly below `other`.
    public func isStrictDescendant(of other: ObjectPath) -> Bool {
        rawValue != other.rawValue && isDescendant(ofOrEqualTo: other)
    }
}

/// Validation of names and paths, following the D-Bus specification's
/// "Valid Names" and "Valid Object Paths" rules, with errors that say what
/// is wrong and where.
public enum NameValidation {
    static let maximumNameLength = 255

    @inline(__always) static func isAlpha(_ c: UInt8) -> Bool {
        (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)
    }
    @inline(__always) static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }

    public static func validateObjectPath(_ s: String) throws(DBusError) {
        let b = Array(s.utf8)
        guard let first = b.first else { throw .invalidObjectPath(s, reason: "empty") }
        guard first == UInt8(ascii: "/") else { throw .invalidObjectPath(s, reason: "must begin with '/'") }
        if b.count == 1 { return }
        guard b.last != UInt8(ascii: "/") else { throw .invalidObjectPath(s, reason: "must not end with '/'") }
        var previousSlash = true
        for (i, c) in b.enumerated().dropFirst() {
            if c == UInt8(ascii: "/") {
                if previousSlash { throw .invalidObjectPath(s, reason: "empty element at position \(i)") }
                previousSlash = true
            } else if isAlpha(c) || isDigit(c) || c == UInt8(ascii: "_") {
                previousSlash = false
            } else {
                throw .invalidObjectPath(s, reason: "character at position \(i) is not in [A-Za-z0-9_]")
            }
        }
    }

    /// Interface names and error names share these rules.
    public static func validateInterface(_ s: String, kind: DBusError.NameKind = .interface) throws(DBusError) {
        let b = Array(s.utf8)
        guard !b.isEmpty else { throw .invalidName(kind: kind, name: s, reason: "empty") }
        guard b.count <= maximumNameLength else {
            throw .invalidName(kind: kind, name: s, reason: "longer than \(maximumNameLength) bytes")
        }
        var elements = 0
        var elementStart = true
        for (i, c) in b.enumerated() {
            if c == UInt8(ascii: ".") {
                if elementStart { throw .invalidName(kind: kind, name: s, reason: "empty element at position \(i)") }
                elementStart = true
            } else if isAlpha(c) || c == UInt8(ascii: "_") || (!elementStart && isDigit(c)) {
                if elementStart { elements += 1 }
                elementStart = false
            } else if elementStart && isDigit(c) {
                throw .invalidName(kind: kind, name: s, reason: "element at position \(i) begins with a digit")
            } else {
                throw .invalidName(kind: kind, name: s, reason: "character at position \(i) is not in [A-Za-z0-9_]")
            }
        }
        if elementStart { throw .invalidName(kind: kind, name: s, reason: "must not end with '.'") }
        guard elements >= 2 else { throw .invalidName(kind: kind, name: s, reason: "needs at least two elements separated by '.'") }
    }

    public static func validateErrorName(_ s: String) throws(DBusError) {
        try validateInterface(s, kind: .errorName)
    }

    public static func validateMember(_ s: String) throws(DBusError) {
        let b = Array(s.utf8)
        guard !b.isEmpty else { throw .invalidName(kind: .member, name: s, reason: "empty") }
        guard b.count <= maximumNameLength else {
            throw .invalidName(kind: .member, name: s, reason: "longer than \(maximumNameLength) bytes")
        }
        for (i, c) in b.enumerated() {
            if isAlpha(c) || c == UInt8(ascii: "_") || (i > 0 && isDigit(c)) { continue }
            throw .invalidName(kind: .member, name: s, reason: i == 0 && isDigit(c) ? "begins with a digit" : "character at position \(i) is not in [A-Za-z0-9_]")
        }
    }

    public static func validateBusName(_ s: String) throws(DBusError) {
        let b = Array(s.utf8)
        guard !b.isEmpty else { throw .invalidName(kind: .bus, name: s, reason: "empty") }
        guard b.count <= maximumNameLength else {
            throw .invalidName(kind: .bus, name: s, reason: "longer than \(maximumNameLength) bytes")
        }
        let unique = b[0] == UInt8(ascii: ":")
        var elements = 0
        var elementStart = true
        for (i, c) in b.enumerated() {
            if unique && i == 0 { continue }
            if c == UInt8(ascii: ".") {
                if elementStart { throw .invalidName(kind: .bus, name: s, reason: "empty element at position \(i)") }
                elementStart = true
            } else if isAlpha(c) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-") || ((unique || !elementStart) && isDigit(c)) {
                if elementStart { elements += 1 }
                elementStart = false
            } else if elementStart && isDigit(c) {
                throw .invalidName(kind: .bus, name: s, reason: "element at position \(i) of a well-known name begins with a digit")
            } else {
                throw .invalidName(kind: .bus, name: s, reason: "character at position \(i) is not in [A-Za-z0-9_-]")
            }
        }
        if elementStart { throw .invalidName(kind: .bus, name: s, reason: "must not end with '.'") }
        guard elements >= 2 else { throw .invalidName(kind: .bus, name: s, reason: "needs at least two elements separated by '.'") }
    }
}
