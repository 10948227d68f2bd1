import Foundation
import CPosix
import Locking
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Runs blocking work (a child process, a pipe read, waitpid) on a thread of
/// its own — never on the cooperative pool (on a 2-core machine a blocked pool
/// thread starves the simulators and buses other suites run in-process), and
/// never on Dispatch's global queue either: its few worker threads blocked in
/// such waits left no thread for the pipe readers they wait for.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { c in
        Thread { c.resume(with: Result { try body() }) }.start()
    }
}

public struct BrokerError: Error, CustomStringConvertible {
    public let description: String
    public init(description: String) { self.description = description }
}

/// A free TCP port on 127.0.0.1: bind port 0, read what the kernel chose, close.
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw BrokerError(description: "socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = loopback(port: 0)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw BrokerError(description: "bind: \(String(cString: strerror(errno)))") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    guard named == 0 else { throw BrokerError(description: "getsockname: \(String(cString: strerror(errno)))") }
    return Int(UInt16(bigEndian: address.sin_port))
}

private func loopback(port: Int) -> sockaddr_in {
    var a = sockaddr_in()
    a.sin_family = sa_family_t(AF_INET)
    a.sin_port = UInt16(port).bigEndian
    a.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return a
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` (blocking).
private func acceptsConnections(port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = loopback(port: port)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    } == 0
}

/// Starts `path` with `arguments`, stdout and stderr to /dev/null, no other
/// descriptor of ours, with an
/// empty signal mask and default dispositions: a Dispatch worker thread has
/// SIGTERM blocked, and a child would inherit that and ignore our SIGTERM.
public func spawn(_ path: String, _ arguments: [String], environment: [String: String]? = nil,
                  stdin: String = "/dev/null", stdout: String = "/dev/null", stderr: String = "/dev/null") throws -> pid_t {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var none = sigset_t()
    sigemptyset(&none)
    posix_spawnattr_setsigmask(&attributes, &none)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGTERM, SIGINT, SIGPIPE, SIGHUP] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, stdin, O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    // Nothing else of ours: a pipe another test is reading to EOF must not
    // stay open in a long-lived child (its reader would wait for that child).
    closeDescriptors(from: 3, in: &actions)

    let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for a in argv { free(a) } }
    let envp: [UnsafeMutablePointer<CChar>?]? = environment.map { env in env.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil] }
    defer { for e in envp ?? [] { free(e) } }
    var pid: pid_t = 0
    let rc: Int32 = if let envp { envp.withUnsafeBufferPointer { posix_spawn(&pid, path, &actions, &attributes, argv, $0.baseAddress) } }
        else { posix_spawn(&pid, path, &actions, &attributes, argv, environ) }
    guard rc == 0 else { throw BrokerError(description: "posix_spawn \(path): \(String(cString: strerror(rc)))") }
    return pid
}

/// Adds a spawn action closing every descriptor from `from` up: a child
/// started by one test keeps no pipe or socket of another (a reader waiting
/// for EOF would otherwise wait for that child to exit).
public func closeDescriptors(from: Int32, in actions: inout posix_spawn_file_actions_t) {
    _ = csystem_spawn_close_from(&actions, from)
}

/// Waits (blocking) for `pid` to exit; returns its wait status.
@discardableResult
/// Blocks until `pid` exits and returns its wait status. A child still
/// running after `limit` seconds is killed (SIGKILL, status 9), so a process
/// that ignores its signal fails the test that waited for it instead of
/// hanging the whole suite.
public func waitForExit(_ pid: pid_t, limit: Double = 60) -> Int32 {
    var status: Int32 = 0
    let deadline = Date().addingTimeInterval(limit)
    while Date() < deadline {
        let r = waitpid(pid, &status, WNOHANG)
        if r == pid || (r < 0 && errno != EINTR) { return status }
        usleep(10_000)
    }
    kill(pid, SIGKILL)
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return status
}

/// A private mosquitto broker on a free loopback port, in its own temporary
/// directory (config, optional password file, log). Never the system broker.
public final class Broker: Sendable {
    public let port: Int
    public let directory: URL
    private let pid = Lock<pid_t?>(nil)

    var configFile: URL { directory.appendingPathComponent("mosquitto.conf") }
    var logFile: URL { directory.appendingPathComponent("mosquitto.log") }

    /// `users`: name → password; when given, anonymous clients are refused.
    /// `persistent`: sessions and queued messages are saved when the broker
    /// stops and loaded when it starts again (``pause()``/``resume()``).
    /// `bridgeTo`: the port of another broker on this host, bridged both ways for every topic.
    private init(port: Int, directory: URL, users: [String: String]?, persistent: Bool, bridgeTo: Int? = nil) throws {
        self.port = port
        self.directory = directory
        var config = """
            listener \(port) 127.0.0.1
            persistence \(persistent)
            persistence_location \(directory.path)/
            log_dest file \(logFile.path)
            log_type all

            """
        if geteuid() == 0 { config += "user root\n" }  // else it drops to user mosquitto and cannot read our files
        if let users {
            let passwords = directory.appendingPathComponent("passwords")
            for (index, (user, password)) in users.sorted(by: { $0.key < $1.key }).enumerated() {
                let tool = try spawn("/usr/bin/mosquitto_passwd", (index == 0 ? ["-c"] : []) + ["-b", passwords.path, user, password])
                let status = waitForExit(tool)
                guard status == 0 else { throw BrokerError(description: "mosquitto_passwd failed (wait status \(status))") }
            }
            config += "allow_anonymous false\npassword_file \(passwords.path)\n"
        } else {
            config += "allow_anonymous true\n"
        }
        // Last: every line after `connection` configures that bridge.
        if let bridgeTo {
            // A mosquitto bridge, as a second site would run one: every topic both ways, retained ones included.
            config += "connection bridge-\(port)-\(bridgeTo)\naddress 127.0.0.1:\(bridgeTo)\ntopic # both 1\n"
            config += "cleansession true\ntry_private true\nrestart_timeout 1\nstart_type automatic\n"
        }
        try config.write(to: configFile, atomically: true, encoding: .utf8)
    }

    public static func start(users: [String: String]? = nil, persistent: Bool = false, bridgeTo: Int? = nil) async throws -> Broker {
        try await offPool {
            // The free port is found by binding port 0 and closing it, so another test may take
            // it before mosquitto binds it: mosquitto then exits, and a new port is tried, in a
            // directory of its own (a failed broker's deinit removes its directory).
            var lastError: Error = BrokerError(description: "no attempt")
            for _ in 0..<3 {
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mqtt-broker-\(UUID().uuidString)")
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                do {
                    let broker = try Broker(port: try freeLoopbackPort(), directory: directory, users: users, persistent: persistent,
                                            bridgeTo: bridgeTo)
                    try broker.launch()
                    return broker
                } catch {
                    lastError = error
                    try? FileManager.default.removeItem(at: directory)
                }
            }
            throw lastError
        }
    }

    /// Starts mosquitto and waits (blocking) until it logged that it runs
    /// (so its listener is bound) and the port accepts connections. The port
    /// accepting alone is not enough: another test's broker may have taken
    /// the port first, and this one then exits while the test would talk to
    /// that one (seen once: a batch acknowledged by a broker this test had
    /// frozen, because the SIGSTOP went to a broker that had exited).
    private func launch() throws {
        let logged = log.utf8.count   // a restart appends to the same log
        let child = try spawn("/usr/sbin/mosquitto", ["-c", configFile.path])
        pid.withLock { $0 = child }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if String(log.utf8.dropFirst(logged))?.contains(" running\n") == true && acceptsConnections(port: port) { return }
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child {
                pid.withLock { $0 = nil }
                throw BrokerError(description: "mosquitto exited (wait status \(status)): \(log)")
            }
            usleep(20_000)
        }
        terminate()
        throw BrokerError(description: "mosquitto did not listen on \(port) within 10 s: \(log)")
    }

    public var log: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "(no log)" }

    /// SIGTERM and wait (blocking). SIGCONT too: a frozen broker acts on
    /// SIGTERM only once it runs again.
    private func terminate(signal: Int32 = SIGTERM) {
        guard let child = pid.withLock({ p in defer { p = nil }; return p }) else { return }
        kill(child, signal)
        kill(child, SIGCONT)
        waitForExit(child)
    }

    /// Kills the broker with SIGKILL (no clean close of any connection), as a
    /// crash would; `resume()` starts it again on the same port.
    public func crash() async throws { try await offPool { self.terminate(signal: SIGKILL) } }

    /// SIGSTOP: the broker's sockets stay open and the kernel keeps accepting
    /// connections into its backlog, but nothing answers — a blackholed
    /// broker as a hung host or a dropped route looks to a client.
    public func freeze() { if let child = pid.withLock({ $0 }) { kill(child, SIGSTOP) } }

    /// SIGCONT after ``freeze()``.
    public func thaw() { if let child = pid.withLock({ $0 }) { kill(child, SIGCONT) } }

    /// Stops the broker, keeping its directory (to start it again on the same port).
    public func pause() async throws { try await offPool { self.terminate() } }

    /// Starts the broker again on the same port.
    public func resume() async throws { try await offPool { try self.launch() } }

    /// Stops the broker and removes its directory.
    public func stop() async {
        _ = try? await offPool {
            self.terminate()
            try? FileManager.default.removeItem(at: self.directory)
        }
    }

    deinit {
        terminate()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Runs `body` with a fresh broker, and always stops it.
public func withBroker<T>(users: [String: String]? = nil, persistent: Bool = false, _ body: (Broker) async throws -> T) async throws -> T {
    let broker = try await Broker.start(users: users, persistent: persistent)
    do {
        let result = try await body(broker)
        await broker.stop()
        return result
    } catch {
        await broker.stop()
        throw error
    }
}

/// Collects a stream's elements in the background so tests can wait for a
/// count with a deadline without consuming (and so ending) the stream.
public final class Inbox<Element: Sendable>: Sendable {
    private let items = Lock<[Element]>([])
    private let task = Lock<Task<Void, Never>?>(nil)

    public init(_ stream: AsyncStream<Element>) {
        let t = Task { [weak self] in
            for await element in stream {
                guard let self else { return }
                self.items.withLock { $0.append(element) }
            }
        }
        task.withLock { $0 = t }
    }

    public var all: [Element] { items.withLock { $0 } }

    /// Waits until `condition` holds for what arrived, at most `timeout`; returns what arrived.
    @discardableResult
    public func wait(timeout: Duration = .seconds(15), until condition: ([Element]) -> Bool) async -> [Element] {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while clock.now < deadline {
            let now = all
            if condition(now) { return now }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return all
    }

    public func cancel() { task.withLock { $0?.cancel() } }
    deinit { task.withLock { $0?.cancel() } }
}
