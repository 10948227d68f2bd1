// A small HTTP/1.1 server on POSIX sockets for the gateway's local API.
internal import CPosix
import Glibc
import Locking

/// Why the server could not start; the description names the address:
/// "cannot listen on 127.0.0.1:8080: Address already in use".
public struct HTTPServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// "127.0.0.1:8080", "[::1]:8080".
    public let address: String
    public let reason: String
    /// The errno behind `reason`, when a system call failed.
    public let errorNumber: Int32?

    public var description: String { "cannot listen on \(address): \(reason)" }
}

/// An HTTP/1.1 server for a local API: JSON, Prometheus text and
/// server-sent events, behind one `handler`.
///
/// Concurrency design: one accept thread, and one POSIX thread per connection
/// (at most `Configuration.maxConnections`; one more is answered 503 and
/// closed). Every thread waits in `poll()` — on its socket and on a stop pipe,
/// with a deadline where a timeout applies — so an idle server uses no CPU, and
/// `stop()` wakes them all at once. Chosen over a DispatchSource event loop
/// because a connection is then a plain sequential program (read head, read
/// body, call the handler, write), timeouts are poll deadlines, and a slow or
/// stalled client can only ever block its own thread: sockets are blocking
/// with a send timeout (`sendTimeout`), and the accept thread never writes
/// more than one small 503. Sixty-four threads with 512 KiB stacks are
/// cheap on the gateway; the local API has a handful of clients.
///
/// The handler runs as a Swift task; its connection thread waits for the
/// result (a pipe, not the concurrency pool). A streamed body is consumed by a
/// task that hands each chunk to the connection thread and waits until it is
/// written (back-pressure to the producer's AsyncStream buffer); when the client
/// disconnects (POLLRDHUP) or the server stops, that task is cancelled, so the
/// stream terminates and its producer learns it through `onTermination`.
public final class HTTPServer: Sendable {
    public typealias Handler = @Sendable (HTTPRequest) async -> HTTPResponse
    /// Answers a request on the connection's own thread, without Swift's
    /// cooperative pool, or returns nil to leave it to the `Handler`. For
    /// what must answer when the pool is busy (a health check under
    /// overload); it must not block.
    public typealias ImmediateHandler = @Sendable (HTTPRequest) -> HTTPResponse?

    public struct Configuration: Sendable {
        /// Connections served at once.
        public var maxConnections = 64
        /// Request line plus header fields (431 beyond; 414 when the request line alone is longer).
        public var maxHeadBytes = 16 * 1024
        /// Request bodies (413 beyond).
        public var maxBodyBytes = 1 << 20
        /// From a request's first byte until its head is complete (408 after; slowloris).
        public var headerTimeout: Duration = .seconds(10)
        /// How long an open connection may wait for its next request (closed silently after).
        public var idleTimeout: Duration = .seconds(30)
        /// Longest pause while a request body arrives (408 after).
        public var bodyTimeout: Duration = .seconds(30)
        /// Longest a single send may make no progress (the connection is dropped after).
        public var sendTimeout: Duration = .seconds(30)
        /// Connections beyond `maxConnections` that serve only
        /// `reservedPaths` (anything else is answered 503 and closed): a
        /// health check is answered when every ordinary slot is taken.
        public var reservedConnections = 8
        /// The paths a reserved connection serves (exact, e.g. "/healthz").
        public var reservedPaths: Set<String> = []
        /// Once this many connections are open, a new one gets
        /// `pressureTimeout` for its head and for waiting idle (a slowloris
        /// client then holds a slot for about a second, not `headerTimeout`),
        /// and so does every reserved connection.
        public var pressureThreshold = 48
        public var pressureTimeout: Duration = .seconds(1)
        /// What a reserved connection has for its whole head. A health
        /// checker sends its request as it connects; a client that sends
        /// nothing gives the slot back after this, not `pressureTimeout`
        /// (1 000 silent connections at once kept `/healthz` answering 503
        /// for a second).
        public var reservedHeadTimeout: Duration = .milliseconds(100)
        /// Streamed responses (server-sent events) at once; one more is
        /// answered 503: subscribers cannot take every connection.
        public var maxStreams = 16
        /// The server's own errors (400/408/413/431/503…) as
        /// `{"error": "<message>"}` instead of a plain-text line, for an API
        /// whose clients parse every answer as JSON.
        public var jsonErrors = false

        public init() {}
    }

    /// The port listened on (the kernel's choice when started with port 0).
    public let boundPort: Int
    /// "127.0.0.1:8080", "[::1]:8080".
    public let address: String
    private let core: ServerCore

    private init(core: ServerCore, boundPort: Int, address: String) {
        self.core = core
        self.boundPort = boundPort
        self.address = address
    }

    /// Listens on `host` (an IPv4 or IPv6 literal, or "localhost" for
    /// 127.0.0.1) and `port` (0: any free port, see `boundPort`), and serves
    /// every request with `handler` until `stop()`.
    public static func start(
        host: String,
        port: Int,
        configuration: Configuration = Configuration(),
        immediate: ImmediateHandler? = nil,
        handler: @escaping Handler
    ) throws(HTTPServerError) -> HTTPServer {
        guard (0...65535).contains(port) else {
            throw HTTPServerError(address: formatHostPort(host, port), reason: "port must be between 0 and 65535", errorNumber: nil)
        }
        guard let address = SocketAddress(host: host, port: port) else {
            throw HTTPServerError(address: formatHostPort(host, port), reason: "not an IPv4 or IPv6 address (nor localhost)", errorNumber: nil)
        }
        let listenFD = try listen(on: address)
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listenFD, $0, &length) }
        }
        let boundPort = named == 0 ? (SocketAddress(storage: bound)?.port ?? port) : port
        guard let stopSignal = WakePipe() else {
            let code = errno
            close(listenFD)
            throw HTTPServerError(address: address.description, reason: "cannot create a pipe: \(errnoText(code))", errorNumber: code)
        }
        let core = ServerCore(configuration: configuration, immediate: immediate, handler: handler, stopSignal: stopSignal)
        guard spawnThread(name: "http-accept", { core.runAcceptLoop(listenFD: listenFD) }) else {
            close(listenFD)
            throw HTTPServerError(address: address.description, reason: "cannot start the accept thread", errorNumber: nil)
        }
        return HTTPServer(core: core, boundPort: boundPort, address: formatHostPort(address.host, boundPort))
    }

    private static func listen(on address: SocketAddress) throws(HTTPServerError) -> Int32 {
        func failure(_ what: String? = nil) -> HTTPServerError {
            let code = errno
            let reason = what.map { "\($0): \(errnoText(code))" } ?? errnoText(code)
            return HTTPServerError(address: address.description, reason: reason, errorNumber: code)
        }
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        let fd = socket(address.family, type, 0)
        guard fd >= 0 else { throw failure("cannot create a socket") }
        // Restarting while old connections linger in TIME_WAIT must work; on
        // Linux this does not let two servers listen on one port.
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard address.withSockaddr({ bind(fd, $0, $1) }) == 0 else {
            let error = failure()
            close(fd)
            throw error
        }
        guard Glibc.listen(fd, 128) == 0 else {
            let error = failure()
            close(fd)
            throw error
        }
        return fd
    }

    /// Closes the listener and every connection (open event streams
    /// included: their producers see termination), and returns once all of
    /// them are closed. A handler still running is cancelled and waited for.
    public func stop() async {
        core.beginStop()
        await core.waitUntilFinished()
    }

    deinit {
        // Not stopped: at least do not keep serving without an owner.
        core.beginStop()
    }
}

/// What the accept thread and the connection threads share.
final class ServerCore: Sendable {
    let configuration: HTTPServer.Configuration
    let handler: HTTPServer.Handler
    let immediate: HTTPServer.ImmediateHandler?
    /// Signalled once by `beginStop()` and never drained: every poll that
    /// includes it wakes up from then on.
    let stopSignal: WakePipe
    private let state = Lock(State())

    private struct State {
        var stopping = false
        var acceptLoopRunning = true
        /// Open connections' sockets by connection id.
        var connections: [Int: Int32] = [:]
        /// Of those, the ones in a reserved slot.
        var reserved: Set<Int> = []
        var streams = 0
        var nextConnectionID = 0
        var waiters: [CheckedContinuation<Void, Never>] = []

        var finished: Bool { !acceptLoopRunning && connections.isEmpty }
    }

    init(configuration: HTTPServer.Configuration, immediate: HTTPServer.ImmediateHandler? = nil,
         handler: @escaping HTTPServer.Handler, stopSignal: WakePipe) {
        self.configuration = configuration
        self.immediate = immediate
        self.handler = handler
        self.stopSignal = stopSignal
    }

    var isStopping: Bool { state.withLock { $0.stopping } }

    /// A streamed response may start (false: `maxStreams` run already).
    func beginStream() -> Bool {
        state.withLock { s in
            guard s.streams < max(0, configuration.maxStreams) else { return false }
            s.streams += 1
            return true
        }
    }

    func endStream() { state.withLock { $0.streams -= 1 } }

    func beginStop() {
        let first = state.withLock { s in
            guard !s.stopping else { return false }
            s.stopping = true
            // Under the lock: a connection closes its socket under the same
            // lock, so no descriptor here can have been reused meanwhile.
            // Shutting down wakes a thread blocked in send() to a stalled client.
            for fd in s.connections.values { _ = shutdown(fd, Int32(SHUT_RDWR)) }
            return true
        }
        if first { stopSignal.signal() }
    }

    func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s in
                if s.finished { return true }
                s.waiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    // MARK: Accepting

    func runAcceptLoop(listenFD: Int32) {
        var fds = [pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0), pollfd(fd: stopSignal.readFD, events: Int16(POLLIN), revents: 0)]
        while true {
            let rc = poll(&fds, 2, -1)
            if rc < 0 {
                if errno == EINTR { continue }
                if pauseUnlessStopping() { break }
                continue
            }
            if fds[1].revents != 0 { break }
            if fds[0].revents != 0 && !acceptOne(listenFD: listenFD) {
                if pauseUnlessStopping() { break }
            }
        }
        close(listenFD)
        finish { $0.acceptLoopRunning = false }
    }

    /// After a resource error (EMFILE, ENOBUFS…) the pending connection keeps
    /// the listener readable; waiting 100 ms instead of retrying at once keeps
    /// the loop from spinning. True when the server stops meanwhile.
    private func pauseUnlessStopping() -> Bool {
        var fd = pollfd(fd: stopSignal.readFD, events: Int16(POLLIN), revents: 0)
        return poll(&fd, 1, 100) > 0
    }

    /// False after an error that calls for a pause.
    private func acceptOne(listenFD: Int32) -> Bool {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { csystem_accept4(listenFD, $0, &length, Int32(SOCK_CLOEXEC.rawValue)) }
        }
        guard fd >= 0 else {
            switch errno {
            case EINTR, EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO: return true
            default: return false
            }
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let remote = SocketAddress(storage: storage)
        let ordinary = max(1, configuration.maxConnections)
        let reserve = configuration.reservedPaths.isEmpty ? 0 : max(0, configuration.reservedConnections)
        let admission: (id: Int, reserved: Bool, pressed: Bool)?? = state.withLock { s in
            if s.stopping { return .some(nil) }
            let open = s.connections.count
            guard open < ordinary + reserve else { return nil }
            let id = s.nextConnectionID
            s.nextConnectionID += 1
            s.connections[id] = fd
            let reserved = open >= ordinary
            if reserved { s.reserved.insert(id) }
            return (id, reserved, reserved || open >= configuration.pressureThreshold)
        }
        switch admission {
        case .none:
            refuse(fd, message: "too many connections (limit \(configuration.maxConnections)); try again later")
        case .some(.none):
            close(fd)
        case .some(.some(let admitted)):
            let id = admitted.id
            let connection = Connection(fd: fd, id: id, core: self, remoteHost: remote?.host ?? "?", remotePort: remote?.port ?? 0,
                                        reserved: admitted.reserved, pressed: admitted.pressed)
            if !spawnThread(name: "http-conn", { connection.run() }) {
                // Out of the registry before the descriptor closes (see `beginStop`).
                finish { s in s.connections[id] = nil }
                refuse(fd, message: "cannot start a connection thread")
                return false
            }
        }
        return true
    }

    /// The body and content type of an error the server answers itself.
    func errorBody(_ message: String) -> (contentType: String, body: [UInt8]) {
        configuration.jsonErrors
            ? ("application/json", Array("{\"error\": \(jsonStringLiteral(message))}\n".utf8))
            : ("text/plain; charset=utf-8", Array((message + "\n").utf8))
    }

    /// A best-effort 503 on a fresh connection: its send buffer is empty, so
    /// a non-blocking send of a few hundred bytes does not wait.
    private func refuse(_ fd: Int32, message: String) {
        let (contentType, body) = errorBody(message)
        var head = "HTTP/1.1 503 Service Unavailable\r\nDate: \(httpDate())\r\nServer: \(serverName)\r\n"
        head += "Content-Type: \(contentType)\r\nContent-Length: \(body.count)\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        let bytes = Array(head.utf8) + body
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
        _ = shutdown(fd, Int32(SHUT_WR))
        close(fd)
    }

    // MARK: Connections ending

    /// Removes and closes a connection's socket (one step under the lock, see
    /// `beginStop`).
    func connectionEnded(id: Int) {
        finish { s in
            s.reserved.remove(id)
            if let fd = s.connections.removeValue(forKey: id) { close(fd) }
        }
    }

    private func finish(_ change: (inout State) -> Void) {
        let waiters = state.withLock { s in
            change(&s)
            guard s.finished else { return [CheckedContinuation<Void, Never>]() }
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

let serverName = "blecompanion"
