// How `blecompanion gateway` ends, as numbers systemd and scripts can act on.
// docs/GATEWAY.md ("Exit codes") is the user-facing copy of this table; a test
// keeps the two in step.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The gateway's exit statuses. The non-zero values are the BSD sysexits.h
/// codes, so they mean what they mean elsewhere. The unit file lists `usage`
/// and `config` in `RestartPreventExitStatus=`: restarting cannot fix them.
///
/// (Named `GatewayExitCode`, not `ExitCode`, because the `blecompanion`
/// executable also imports ArgumentParser, whose `ExitCode` would make an
/// unqualified name ambiguous there.)
public enum GatewayExitCode: Int32, Sendable, CaseIterable, CustomStringConvertible {
    /// Stopped on request (SIGTERM, SIGINT) and shut down cleanly.
    case cleanStop = 0
    /// EX_USAGE: the command line is wrong (unknown option, missing --config).
    case usage = 64
    /// EX_UNAVAILABLE: bluetoothd (org.bluez) or the D-Bus system bus was not reachable at start.
    case unavailable = 69
    /// EX_SOFTWARE: an internal error (a bug); the log says where.
    case internalError = 70
    /// EX_IOERR: the state directory or the readings database could not be read or written.
    case ioError = 74
    /// EX_CONFIG: the configuration file is missing, unreadable or invalid (the log names key and line).
    case config = 78

    /// The sysexits.h name (`EX_OK` for 0).
    public var name: String {
        switch self {
        case .cleanStop: "EX_OK"
        case .usage: "EX_USAGE"
        case .unavailable: "EX_UNAVAILABLE"
        case .internalError: "EX_SOFTWARE"
        case .ioError: "EX_IOERR"
        case .config: "EX_CONFIG"
        }
    }

    /// One line: what happened.
    public var meaning: String {
        switch self {
        case .cleanStop: "stopped on request and shut down cleanly"
        case .usage: "bad command line"
        case .unavailable: "bluetoothd (org.bluez) or the D-Bus system bus not reachable at start"
        case .internalError: "internal error"
        case .ioError: "state directory or readings database could not be read or written"
        case .config: "configuration file missing, unreadable or invalid"
        }
    }

    /// Whether systemd should restart the service after this status
    /// (`Restart=on-failure` minus `RestartPreventExitStatus=`).
    public var isWorthRestarting: Bool {
        switch self {
        case .cleanStop, .usage, .config: false
        case .unavailable, .internalError, .ioError: true
        }
    }

    public var description: String { "\(rawValue) (\(name)): \(meaning)" }

    /// Ends the process with this status (stdio buffers are flushed).
    public func exitProcess() -> Never {
        exit(rawValue)
    }
}
