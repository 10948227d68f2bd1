import Locking
internal import CPosix
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A private `dbus-daemon` on a temporary Unix socket: what the demo, the
/// simulator and the tests run against instead of the system bus.
///
/// The daemon and its temporary directory are removed by ``stop()``, which
/// also runs when the object is released.
public final class PrivateBus: @unchecked Sendable {
    public let address: String
    public let directory: String
    public let pid: Glibc.pid_t
    private let lock = Lock<Void>()
    private var stopped = false

    public enum LaunchError: Error, CustomStringConvertible {
        case daemonNotFound(String)
        case failed(String)
        public var description: String {
            switch self {
            case let .daemonNotFound(hint): return "dbus-daemon not found: \(hint)"
            case let .failed(reason): return "cannot start a private dbus-daemon: \(reason)"
            }
        }
    }

    /// Locations tried for the daemon binary, after `$BLECOMPANION_DBUS_DAEMON`.
    static let candidates = ["/usr/bin/dbus-daemon", "/bin/dbus-daemon", "/usr/local/bin/dbus-daemon"]

    private init(address: String, directory: String, pid: pid_t) {
        self.address = address
        self.directory = directory
        self.pid = pid
    }

    /// Starts a daemon. `policy` is extra `<policy>` XML; by default anyone
    /// may own any name and send anything (a private test bus).
    public static func start(extraConfig: String = "") throws -> PrivateBus {
        var daemon: String?
        if let env = getenv("BLECOMPANION_DBUS_DAEMON") { daemon = String(cString: env) }
        if daemon == nil { daemon = candidates.first { access($0, X_OK) == 0 } }
        guard let daemonPath = daemon else {
            throw LaunchError.daemonNotFound("install Debian's dbus-daemon package (apt-get install dbus-daemon)")
        }
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array("\(base)/blecompanion-bus-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ buf in buf.baseAddress.flatMap { mkdtemp($0) } }) else {
            throw LaunchError.failed("mkdtemp in \(base) failed: errno \(errno)")
        }
        let dir = String(cString: made)
        let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(dir)/bus</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
          <limit name="max_incoming_bytes">1000000000</limit>
          <limit name="max_incoming_unix_fds">250000000</limit>
          <limit name="max_outgoing_bytes">1000000000</limit>
          <limit name="max_outgoing_unix_fds">250000000</limit>
          <limit name="max_message_size">1000000000</limit>
          <limit name="max_replies_per_connection">50000</limit>
          <limit name="reply_timeout">300000</limit>
          <limit name="max_match_rules_per_connection">50000</limit>
          <limit name="max_connections_per_user">1000</limit>
          \(extraConfig)
        </busconfig>
        """
        let configPath = "\(dir)/bus.conf"
        guard let f = fopen(configPath, "w") else {
            rmdir(dir)
            throw LaunchError.failed("cannot write \(configPath): errno \(errno)")
        }
        _ = config.withCString { fputs($0, f) }
        fclose(f)

        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            cleanup(dir)
            throw LaunchError.failed("pipe2 failed: errno \(errno)")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 3)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        // The daemon's own complaints go to a log beside its socket; they
        // are quoted if it fails to start.
        posix_spawn_file_actions_addopen(&actions, 2, "\(dir)/daemon.log", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // Nothing else of the caller's: the daemon outlives most of what the
        // caller has open, and a pipe it kept would never reach EOF for
        // whoever reads it.
        _ = csystem_spawn_close_from(&actions, 4)
        let args = [daemonPath, "--config-file=\(configPath)", "--nofork", "--nopidfile", "--print-address=3", "--nosyslog"]
        var cargs: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
        defer { for a in cargs { free(a) } }
        // The child must not inherit a blocked signal mask from the calling
        // thread (dispatch worker threads block signals), or it would ignore
        // the SIGTERM that stop() sends.
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var emptySet = sigset_t()
        sigemptyset(&emptySet)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGTERM, SIGINT, SIGHUP, SIGPIPE] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigmask(&attr, &emptySet)
        posix_spawnattr_setsigdefault(&attr, &defaults)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, daemonPath, &actions, &attr, &cargs, environ)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            cleanup(dir)
            throw LaunchError.failed("posix_spawn \(daemonPath) failed: \(String(cString: strerror(rc)))")
        }
        // Read the address line (the daemon prints it once it listens).
        var line: [UInt8] = []
        var pfd = pollfd(fd: fds[0], events: Int16(POLLIN), revents: 0)
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while !line.contains(UInt8(ascii: "\n")) {
            let now = monotonicNanoseconds()
            guard now < deadline else { break }
            let r = poll(&pfd, 1, Int32((deadline - now) / 1_000_000))
            if r < 0 && errno == EINTR { continue }
            guard r > 0 else { break }
            var chunk = [UInt8](repeating: 0, count: 512)
            let n = read(fds[0], &chunk, 512)
            if n <= 0 { break }
            line += chunk[0..<n]
        }
        close(fds[0])
        let text = String(decoding: line, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        guard !text.isEmpty else {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            let log = readLog(dir)
            cleanup(dir)
            throw LaunchError.failed("dbus-daemon did not report its address" + (log.isEmpty ? "" : ": \(log)"))
        }
        return PrivateBus(address: text, directory: dir, pid: pid)
    }

    /// Stops the daemon and removes its directory. Safe to call twice.
    /// A second caller (e.g. a signal handler racing normal shutdown) waits
    /// until the first has finished, so nobody exits half-way through.
    public func stop() {
        lock.withLock {
            guard !stopped else { return }
            PrivateBus.terminate(pid)
            PrivateBus.cleanup(directory)
            stopped = true
        }
    }

    deinit { stop() }

    /// SIGTERM, then SIGKILL if the process has not exited within 2 s.
    static func terminate(_ pid: pid_t) {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        let deadline = monotonicNanoseconds() + 2_000_000_000
        while monotonicNanoseconds() < deadline {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid || (r < 0 && errno != EINTR) { return }
            usleep(5_000)
        }
        kill(pid, SIGKILL)
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    private static func readLog(_ dir: String) -> String {
        guard let f = fopen("\(dir)/daemon.log", "r") else { return "" }
        defer { fclose(f) }
        var buffer = [CChar](repeating: 0, count: 2048)
        let n = fread(&buffer, 1, 2047, f)
        let text = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return String(text.split(whereSeparator: \.isNewline).joined(separator: "; "))
    }

    private static func cleanup(_ dir: String) {
        unlink("\(dir)/daemon.log")
        unlink("\(dir)/bus")
        unlink("\(dir)/bus.conf")
        rmdir(dir)
    }
}
