// The sd_notify protocol, spoken directly: no libsystemd.
//
// Facts it relies on (sd_notify(3), systemd.service(5)):
// - systemd passes the address of its notification socket in $NOTIFY_SOCKET:
//   an absolute path, or a name in the abstract namespace written with a
//   leading "@" (the "@" stands for the leading NUL byte of the address).
// - A notification is one datagram (AF_UNIX, SOCK_DGRAM) of newline-separated
//   VARIABLE=value assignments: READY=1, STOPPING=1, STATUS=…, WATCHDOG=1.
// - With WatchdogSec= set, systemd passes WATCHDOG_USEC (microseconds) and
//   WATCHDOG_PID (the process that is meant to ping); a process whose pid is
//   not WATCHDOG_PID must not act on WATCHDOG_USEC. systemd recommends
//   pinging at half the interval.
// - NotifyAccess=main (our unit) accepts messages from the main process only;
//   the kernel attaches our credentials to each datagram.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging

/// Tells systemd how the service is doing: ready, stopping, a status line,
/// and watchdog keep-alives.
///
/// Outside systemd (no `$NOTIFY_SOCKET`) the notifier is inactive and every
/// call does nothing, so the gateway needs no `if` around it. Sending is best
/// effort: a failure is logged and reported as `false`, never thrown.
public struct SystemdNotifier: Sendable {
    /// Where notifications go.
    public enum Destination: Sendable, Equatable {
        /// A socket file (`NOTIFY_SOCKET=/run/systemd/notify`).
        case path(String)
        /// A name in the abstract namespace (`NOTIFY_SOCKET=@name`; the name is without the `@`).
        case abstract(String)
    }

    /// nil when inactive: no `$NOTIFY_SOCKET`, or one this implementation
    /// cannot use (not absolute, not abstract, or too long for `sun_path`).
    public let destination: Destination?
    /// How often systemd expects WATCHDOG=1: from `WATCHDOG_USEC`, nil when
    /// unset, invalid, zero, or meant for another process (`WATCHDOG_PID`).
    public let watchdogInterval: Duration?
    private let logger: Logger

    public var isActive: Bool { destination != nil }

    /// - Parameters:
    ///   - environment: the variables to read (`NOTIFY_SOCKET`,
    ///     `WATCHDOG_USEC`, `WATCHDOG_PID`); the process's own by default.
    ///   - logger: where send failures and unusable variables are reported.
    public init(environment: [String: String] = SystemdNotifier.processEnvironment(), logger: Logger = Logger(label: "systemd-notify")) {
        self.logger = logger
        self.destination = Self.parseDestination(environment["NOTIFY_SOCKET"], logger: logger)
        self.watchdogInterval = Self.parseWatchdog(
            usec: environment["WATCHDOG_USEC"], pid: environment["WATCHDOG_PID"], ownPID: getpid(), logger: logger)
    }

    /// The three variables the notifier reads, from this process's environment.
    public static func processEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            if let value = getenv(name) { result[name] = String(cString: value) }
        }
        return result
    }

    // MARK: Notifications

    /// READY=1: start-up is complete (Type=notify units leave "activating").
    @discardableResult
    public func ready(status: String? = nil) -> Bool {
        send(["READY=1"] + (status.map { ["STATUS=" + Self.oneLine($0)] } ?? []))
    }

    /// STOPPING=1: shutdown has begun.
    @discardableResult
    public func stopping(status: String? = nil) -> Bool {
        send(["STOPPING=1"] + (status.map { ["STATUS=" + Self.oneLine($0)] } ?? []))
    }

    /// STATUS=…: a one-line status shown by `systemctl status` (newlines are
    /// turned into spaces: a newline would start a new assignment).
    @discardableResult
    public func status(_ text: String) -> Bool {
        send(["STATUS=" + Self.oneLine(text)])
    }

    /// WATCHDOG=1: one keep-alive.
    @discardableResult
    public func watchdog() -> Bool {
        send(["WATCHDOG=1"])
    }

    /// Sends WATCHDOG=1 now and then every half `watchdogInterval` until the
    /// task is cancelled. Returns at once when inactive or when systemd asked
    /// for no watchdog. Sleeps between pings (no busy loop); a failed ping is
    /// logged and the loop goes on.
    public func runWatchdog() async {
        guard isActive, let interval = watchdogInterval else { return }
        let period = interval / 2
        while !Task.isCancelled {
            watchdog()
            do {
                try await Task.sleep(for: period)
            } catch {
                return
            }
        }
    }

    /// Sends the assignments as one datagram. Returns false (and logs) when
    /// it could not be sent; does nothing and returns false when inactive.
    @discardableResult
    public func send(_ assignments: [String]) -> Bool {
        guard let destination else { return false }
        let message = assignments.joined(separator: "\n")
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            logFailure("socket", errno: errno, message: message)
            return false
        }
        defer { close(fd) }

        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes: [UInt8]
        switch destination {
        case .path(let path): pathBytes = Array(path.utf8)
        case .abstract(let name): pathBytes = [0] + Array(name.utf8)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: pathBytes.prefix(raw.count))
        }
        // A path address is counted with its terminating NUL (the rest of
        // sun_path is zero); an abstract one is exactly as long as its name.
        let familySize = MemoryLayout<sa_family_t>.size
        let length = socklen_t(familySize + pathBytes.count + (pathBytes.first == 0 ? 0 : 1))

        let bytes = Array(message.utf8)
        let sent = bytes.withUnsafeBytes { body in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, body.baseAddress, body.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        guard sent == bytes.count else {
            logFailure("sendto", errno: sent < 0 ? errno : EMSGSIZE, message: message)
            return false
        }
        return true
    }

    // MARK: Parsing

    static let maximumPathBytes = MemoryLayout<sockaddr_un>.size - MemoryLayout<sa_family_t>.size

    static func parseDestination(_ value: String?, logger: Logger) -> Destination? {
        guard let value, !value.isEmpty else { return nil }
        if value.hasPrefix("@") {
            let name = String(value.dropFirst())
            // The leading NUL byte takes one byte of sun_path.
            guard !name.isEmpty, name.utf8.count + 1 <= maximumPathBytes else {
                logger.warning("NOTIFY_SOCKET is not a usable abstract socket name; not notifying systemd",
                               metadata: ["NOTIFY_SOCKET": "\(value)"])
                return nil
            }
            return .abstract(name)
        }
        if value.hasPrefix("/") {
            // Room for the terminating NUL.
            guard value.utf8.count < maximumPathBytes, !value.utf8.contains(0) else {
                logger.warning("NOTIFY_SOCKET path is too long for a Unix socket address; not notifying systemd",
                               metadata: ["NOTIFY_SOCKET": "\(value)"])
                return nil
            }
            return .path(value)
        }
        logger.warning("NOTIFY_SOCKET is neither an absolute path nor an abstract name; not notifying systemd",
                       metadata: ["NOTIFY_SOCKET": "\(value)"])
        return nil
    }

    static func parseWatchdog(usec: String?, pid: String?, ownPID: pid_t, logger: Logger) -> Duration? {
        guard let usec else { return nil }
        guard let microseconds = Int64(usec), microseconds > 0 else {
            logger.warning("WATCHDOG_USEC is not a positive number of microseconds; no watchdog pings",
                           metadata: ["WATCHDOG_USEC": "\(usec)"])
            return nil
        }
        if let pid {
            guard let target = pid_t(pid) else {
                logger.warning("WATCHDOG_PID is not a process id; no watchdog pings", metadata: ["WATCHDOG_PID": "\(pid)"])
                return nil
            }
            // Meant for another process (we were started by a process that
            // was itself watched, and inherited its environment).
            guard target == ownPID else { return nil }
        }
        return .microseconds(microseconds)
    }

    static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\r\n" || $0 == "\r" ? " " : $0 })
    }

    private func logFailure(_ call: String, errno code: Int32, message: String) {
        logger.error("could not notify systemd", metadata: [
            "call": "\(call)",
            "reason": "\(String(cString: strerror(code)))",
            "notification": "\(message.replacingNewlines())",
        ])
    }
}

extension String {
    fileprivate func replacingNewlines() -> String {
        split(separator: "\n", omittingEmptySubsequences: false).joined(separator: " ")
    }
}
