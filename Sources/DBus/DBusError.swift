/// Everything that can go wrong in the D-Bus layer.
///
/// Errors the *peer* sent (an error reply) are kept apart from faults of the
/// transport or of our own input, so callers can map `org.bluez.Error.*`
/// names without confusing them with a vanished bus.
public enum DBusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The peer answered with an error reply.
    case remote(name: String, message: String)
    /// No reply arrived within the call's timeout.
    case timedOut(member: String, milliseconds: Int)
    /// The connection is closed or was lost (bus daemon gone).
    case disconnected
    /// Connecting or authenticating to a bus failed.
    case connectionFailed(address: String, reason: String)
    /// A type signature is not valid.
    case invalidSignature(String, reason: String)
    /// An object path is not valid.
    case invalidObjectPath(String, reason: String)
    /// A bus, interface, member or error name is not valid.
    case invalidName(kind: NameKind, name: String, reason: String)
    /// A value cannot be sent as given (e.g. a string containing NUL).
    case invalidValue(String)
    /// A decoded value did not have the expected type.
    case typeMismatch(expected: String, actual: String, context: String)
    /// A message received from the bus could not be decoded.
    case malformedMessage(String)
    /// A match rule is not valid.
    case invalidMatchRule(String, reason: String)
    /// libdbus reported an allocation failure.
    case outOfMemory
    /// An operation needs a capability the connection lacks (e.g. fd passing).
    case notSupported(String)

    public enum NameKind: String, Sendable {
        case bus = "bus name"
        case interface = "interface name"
        case member = "member name"
        case errorName = "error name"
    }

    public var description: String {
        switch self {
        case let .remote(name, message):
            return message.isEmpty ? name : "\(name): \(message)"
        case let .timedOut(member, ms):
            return "no reply to \(member) within \(ms) ms"
        case .disconnected:
            return "the D-Bus connection is closed"
        case let .connectionFailed(address, reason):
            return "cannot connect to D-Bus at \(address): \(reason)"
        case let .invalidSignature(sig, reason):
            return "invalid D-Bus signature \"\(sig)\": \(reason)"
        case let .invalidObjectPath(path, reason):
            return "invalid D-Bus object path \"\(path)\": \(reason)"
        case let .invalidName(kind, name, reason):
            return "invalid D-Bus \(kind.rawValue) \"\(name)\": \(reason)"
        case let .invalidValue(reason):
            return "invalid D-Bus value: \(reason)"
        case let .typeMismatch(expected, actual, context):
            return "\(context): expected D-Bus type \(expected), got \(actual)"
        case let .malformedMessage(reason):
            return "malformed D-Bus message: \(reason)"
        case let .invalidMatchRule(rule, reason):
            return "invalid match rule \"\(rule)\": \(reason)"
        case .outOfMemory:
            return "libdbus ran out of memory"
        case let .notSupported(what):
            return "not supported: \(what)"
        }
    }

    /// The D-Bus error name when this is an error reply from the peer.
    public var remoteName: String? {
        if case let .remote(name, _) = self { return name }
        return nil
    }
}

/// Error names of the bus specification that this layer produces itself.
public enum DBusErrorName {
    public static let failed = "org.freedesktop.DBus.Error.Failed"
    public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
    public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
    public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
    public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
    public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
    public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
    public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
    public static let noReply = "org.freedesktop.DBus.Error.NoReply"
    public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
    public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
    public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
    public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"
    public static let limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
}
