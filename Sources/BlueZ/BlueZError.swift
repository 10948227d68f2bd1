import DBus

/// What can go wrong talking to bluetoothd. BlueZ's own error replies
/// (`org.bluez.Error.*`) are ``bluez(_:message:)``; failures of D-Bus itself
/// (bus gone, timeouts, malformed replies) are kept apart in ``dbus(_:)``.
public enum BlueZError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An `org.bluez.Error.*` reply; `message` is bluetoothd's text, which for
    /// connection failures is a reason such as `le-connection-abort-by-local`
    /// (see ``connectionFailure``).
    case bluez(Name, message: String)
    /// bluetoothd is not on the bus (not running, or restarting).
    case unavailable
    /// The bus refused us: D-Bus policy does not let this user talk to bluetoothd.
    case permissionDenied(String)
    /// No such adapter, device or attribute in bluetoothd's object tree.
    case notFound(String)
    /// A reply or property did not have the type the API documents.
    case unexpectedReply(String)
    /// An argument we refused before sending anything.
    case invalidArgument(String)
    /// Waiting for a state (e.g. ServicesResolved) took longer than allowed.
    case timedOut(String)
    /// The task waiting for the answer was cancelled.
    case cancelled
    /// A D-Bus failure that is not BlueZ's answer.
    case dbus(DBusError)

    /// Maps anything thrown by a D-Bus call.
    static func from(_ error: any Error) -> BlueZError {
        if let e = error as? BlueZError { return e }
        if let e = error as? DBusError { return BlueZError(e) }
        if error is CancellationError { return .cancelled }
        return .dbus(.disconnected)
    }

    /// The error names bluetoothd documents (doc/org.bluez.*.rst).
    public enum Name: String, Sendable, CaseIterable {
        case failed = "org.bluez.Error.Failed"
        case inProgress = "org.bluez.Error.InProgress"
        case invalidArguments = "org.bluez.Error.InvalidArguments"
        case invalidLength = "org.bluez.Error.InvalidLength"
        case invalidOffset = "org.bluez.Error.InvalidOffset"
        case invalidValueLength = "org.bluez.Error.InvalidValueLength"
        case notReady = "org.bluez.Error.NotReady"
        case notSupported = "org.bluez.Error.NotSupported"
        case notAuthorized = "org.bluez.Error.NotAuthorized"
        case notAvailable = "org.bluez.Error.NotAvailable"
        case notConnected = "org.bluez.Error.NotConnected"
        case notPermitted = "org.bluez.Error.NotPermitted"
        case notPaired = "org.bluez.Error.NotPaired"
        case alreadyConnected = "org.bluez.Error.AlreadyConnected"
        case alreadyExists = "org.bluez.Error.AlreadyExists"
        case doesNotExist = "org.bluez.Error.DoesNotExist"
        case authenticationCanceled = "org.bluez.Error.AuthenticationCanceled"
        case authenticationFailed = "org.bluez.Error.AuthenticationFailed"
        case authenticationRejected = "org.bluez.Error.AuthenticationRejected"
        case authenticationTimeout = "org.bluez.Error.AuthenticationTimeout"
        case connectionAttemptFailed = "org.bluez.Error.ConnectionAttemptFailed"
        case rejected = "org.bluez.Error.Rejected"
        case canceled = "org.bluez.Error.Canceled"
        case improperlyConfigured = "org.bluez.Error.ImproperlyConfigured"
        case busy = "org.bluez.Error.Busy"
        case unknown = "org.bluez.Error.Unknown"
    }

    /// The reasons bluetoothd gives (as the message of org.bluez.Error.Failed
    /// and friends) when a connection cannot be made (src/error.h in BlueZ).
    public enum ConnectionFailure: String, Sendable, CaseIterable {
        case brAlreadyConnected = "br-connection-already-connected"
        case brPageTimeout = "br-connection-page-timeout"
        case brProfileUnavailable = "br-connection-profile-unavailable"
        case brSDPSearch = "br-connection-sdp-search"
        case brCreateSocket = "br-connection-create-socket"
        case brInvalidArguments = "br-connection-invalid-arguments"
        case brAdapterNotPowered = "br-connection-adapter-not-powered"
        case brNotSupported = "br-connection-not-suported"
        case brBadSocket = "br-connection-bad-socket"
        case brMemoryAllocation = "br-connection-memory-allocation"
        case brBusy = "br-connection-busy"
        case brConcurrentConnectionLimit = "br-connection-concurrent-connection-limit"
        case brTimeout = "br-connection-timeout"
        case brRefused = "br-connection-refused"
        case brAbortedByRemote = "br-connection-aborted-by-remote"
        case brAbortedByLocal = "br-connection-aborted-by-local"
        case brLMPProtocolError = "br-connection-lmp-protocol-error"
        case brCanceled = "br-connection-canceled"
        case brKeyMissing = "br-connection-key-missing"
        case brUnknown = "br-connection-unknown"
        case leInvalidArguments = "le-connection-invalid-arguments"
        case leAdapterNotPowered = "le-connection-adapter-not-powered"
        case leNotSupported = "le-connection-not-supported"
        case leAlreadyConnected = "le-connection-already-connected"
        case leBadSocket = "le-connection-bad-socket"
        case leMemoryAllocation = "le-connection-memory-allocation"
        case leBusy = "le-connection-busy"
        case leRefused = "le-connection-refused"
        case leCreateSocket = "le-connection-create-socket"
        case leTimeout = "le-connection-timeout"
        case leConcurrentConnectionLimit = "le-connection-concurrent-connection-limit"
        case leAbortByRemote = "le-connection-abort-by-remote"
        case leAbortByLocal = "le-connection-abort-by-local"
        case leLinkLayerProtocolError = "le-connection-link-layer-protocol-error"
        case leGATTBrowsing = "le-connection-gatt-browsing"
        case leKeyMissing = "le-connection-key-missing"
        case leUnknown = "le-connection-unknown"

        /// What a user can do about it, in a sentence.
        public var advice: String {
            switch self {
            case .leAbortByLocal, .brAbortedByLocal:
                return "the local adapter gave up on the connection; stop discovery before connecting, move closer, or retry"
            case .leTimeout, .brPageTimeout, .brTimeout:
                return "the device did not answer; it may be out of range, asleep or connected to another host"
            case .leAbortByRemote, .brAbortedByRemote, .brRefused, .leRefused:
                return "the device refused or dropped the connection; it may accept only one central or need pairing"
            case .leAdapterNotPowered, .brAdapterNotPowered:
                return "the adapter is off; power it on first"
            case .leAlreadyConnected, .brAlreadyConnected:
                return "the device is already connected"
            case .leConcurrentConnectionLimit, .brConcurrentConnectionLimit:
                return "the adapter has too many connections; disconnect another device"
            case .leKeyMissing, .brKeyMissing:
                return "the pairing keys no longer match; remove the device and pair again"
            case .leGATTBrowsing:
                return "the GATT database could not be read; retry, or remove and re-pair the device"
            default:
                return "retry; if it persists, check `blecompanion doctor` and bluetoothd's log"
            }
        }
    }

    /// The connection-failure reason in a BlueZ error's message, if any.
    public var connectionFailure: ConnectionFailure? {
        guard case let .bluez(_, message) = self else { return nil }
        return ConnectionFailure(rawValue: message)
    }

    /// Maps a D-Bus error from a call to bluetoothd.
    public init(_ error: DBusError) {
        switch error {
        case let .remote(name, message):
            if let known = Name(rawValue: name) {
                self = .bluez(known, message: message)
            } else if name.hasPrefix("org.bluez.Error.") {
                self = .bluez(.unknown, message: "\(name): \(message)")
            } else if name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner" {
                self = .unavailable
            } else if name == "org.freedesktop.DBus.Error.AccessDenied" {
                self = .permissionDenied(message)
            } else if name == "org.freedesktop.DBus.Error.UnknownObject" || name == "org.freedesktop.DBus.Error.UnknownMethod"
                        || name == "org.freedesktop.DBus.Error.UnknownInterface" {
                self = .notFound(message)
            } else {
                self = .dbus(error)
            }
        default:
            self = .dbus(error)
        }
    }

    public var description: String {
        switch self {
        case let .bluez(name, message):
            let short = String(name.rawValue.dropFirst("org.bluez.Error.".count))
            if let reason = ConnectionFailure(rawValue: message) {
                return "\(short): \(message) (\(reason.advice))"
            }
            return message.isEmpty ? short : "\(short): \(message)"
        case .unavailable: return "bluetoothd is not running (org.bluez has no owner on this bus); start it with `systemctl start bluetooth`"
        case let .permissionDenied(m): return "permission denied by D-Bus policy: \(m) (run `blecompanion doctor`)"
        case let .notFound(m): return "not found: \(m)"
        case let .unexpectedReply(m): return "unexpected reply from bluetoothd: \(m)"
        case let .invalidArgument(m): return m
        case let .timedOut(m): return "timed out: \(m)"
        case .cancelled: return "cancelled"
        case let .dbus(.timedOut(member, milliseconds)) where member.contains("."):
            // A call to bluetoothd (the bus daemon's own calls have bare
            // names): it kept its name but did not answer, as a stopped,
            // hung or swamped daemon does.
            return "bluetoothd did not answer \(member) within \(Double(milliseconds) / 1000) s: it is hung or overloaded "
                + "(see `systemctl status bluetooth` and `blecompanion doctor`)"
        case let .dbus(e): return "D-Bus: \(e)"
        }
    }
}
