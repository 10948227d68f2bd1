// One client connection, served on its own thread (see `HTTPServer`).
import Glibc
import Locking

final class Connection {
    private let fd: Int32
    private let id: Int
    private let core: ServerCore
    private let remoteHost: String
    private let remotePort: Int
    /// Received and not yet consumed (a pipelined next request stays here).
    private var buffer: [UInt8] = []
    private var scratch = [UInt8](repeating: 0, count: 16 * 1024)
    private let clock = ContinuousClock()

    private var configuration: HTTPServer.Configuration { core.configuration }
    /// In a slot beyond `maxConnections`: serves `reservedPaths` only, once.
    private let reserved: Bool
    /// Admitted under pressure (or reserved): `pressureTimeout` for the head
    /// and for waiting idle.
    private let pressed: Bool
    private var headerTimeout: Duration {
        if reserved { return min(configuration.headerTimeout, configuration.reservedHeadTimeout) }
        return pressed ? min(configuration.headerTimeout, configuration.pressureTimeout) : configuration.headerTimeout
    }
    private var idleTimeout: Duration {
        // A reserved connection serves one request: waiting for its first
        // byte is waiting for its head.
        if reserved { return min(configuration.idleTimeout, configuration.reservedHeadTimeout) }
        return pressed ? min(configuration.idleTimeout, configuration.pressureTimeout) : configuration.idleTimeout
    }

    init(fd: Int32, id: Int, core: ServerCore, remoteHost: String, remotePort: Int, reserved: Bool = false, pressed: Bool = false) {
        self.fd = fd
        self.id = id
        self.core = core
        self.remoteHost = remoteHost
        self.remotePort = remotePort
        self.reserved = reserved
        self.pressed = pressed
    }

    func run() {
        setTimeout(fd, option: SO_SNDTIMEO, configuration.sendTimeout)
        var one: Int32 = 1
        // Event stream chunks and small responses go out at once.
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        while serveOneRequest() {}
        core.connectionEnded(id: id)
    }

    /// True when the connection stays open for another request.
    private func serveOneRequest() -> Bool {
        let head: RequestHead
        switch readHead() {
        case .closed: return false
        case .rejected(let error):
            reject(error)
            return false
        case .head(let h): head = h
        }
        let target: RequestTarget
        switch RequestTarget.parse(head.target) {
        case .failure(let error):
            reject(error)
            return false
        case .success(let t): target = t
        }
        if reserved && !configuration.reservedPaths.contains(target.path) {
            reject(HTTPRequestError(.serviceUnavailable,
                                    "too many connections (limit \(configuration.maxConnections)); try again later"))
            return false
        }
        let length: Int
        switch head.bodyLength(limit: configuration.maxBodyBytes) {
        case .failure(let error):
            reject(error)
            return false
        case .success(let n): length = n
        }
        if head.expectsContinue && length > buffer.count {
            guard sendAll(fd, Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) else { return false }
        }
        guard let body = readBody(length: length) else { return false }

        let request = HTTPRequest(
            method: head.method, target: target, version: head.version, headers: head.headers,
            body: body, remoteHost: remoteHost, remotePort: remotePort
        )
        guard let response = respond(to: request) else { return false }
        let keepAlive = head.wantsKeepAlive && !core.isStopping && !reserved
        return write(response, for: request, keepAlive: keepAlive) && !core.isStopping
    }

    // MARK: Reading

    private enum HeadOutcome {
        case head(RequestHead)
        case rejected(HTTPRequestError)
        /// End of input, idle timeout, server stopping: close without a word.
        case closed
    }

    private func readHead() -> HeadOutcome {
        var scanner = HeadScanner(limit: configuration.maxHeadBytes)
        let idleDeadline = clock.now + idleTimeout
        var headerDeadline: ContinuousClock.Instant?
        while true {
            if !buffer.isEmpty {
                if headerDeadline == nil { headerDeadline = clock.now + headerTimeout }
                switch scanner.scan(buffer) {
                case .complete(let end):
                    let parsed = RequestHead.parse(buffer[..<end])
                    buffer.removeFirst(end)
                    switch parsed {
                    case .success(let head): return .head(head)
                    case .failure(let error): return .rejected(error)
                    }
                case .tooLarge(let error):
                    return .rejected(error)
                case .needMore:
                    break
                }
            }
            switch readMore(until: headerDeadline ?? idleDeadline) {
            case .data: continue
            case .timeout:
                guard headerDeadline != nil else { return .closed }
                return .rejected(HTTPRequestError(.requestTimeout, "request head not complete within \(seconds(headerTimeout))"))
            case .endOfInput, .stopping, .failed:
                return .closed
            }
        }
    }

    /// The body's bytes, or nil when the connection is to be closed.
    private func readBody(length: Int) -> [UInt8]? {
        guard length > 0 else { return [] }
        buffer.reserveCapacity(length)
        while buffer.count < length {
            switch readMore(until: clock.now + configuration.bodyTimeout) {
            case .data: continue
            case .timeout:
                reject(HTTPRequestError(.requestTimeout, "request body stalled: \(buffer.count) of \(length) bytes received, then nothing for \(seconds(configuration.bodyTimeout))"))
                return nil
            case .endOfInput, .stopping, .failed:
                return nil
            }
        }
        let body = Array(buffer[..<length])
        buffer.removeFirst(length)
        return body
    }

    private enum ReadOutcome { case data, endOfInput, timeout, stopping, failed }

    /// Appends what the socket has to `buffer`, waiting until `deadline`.
    private func readMore(until deadline: ContinuousClock.Instant) -> ReadOutcome {
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: core.stopSignal.readFD, events: Int16(POLLIN), revents: 0)]
        while true {
            let timeout = pollMilliseconds(deadline - clock.now)
            guard timeout > 0 else { return .timeout }
            let rc = poll(&fds, 2, timeout)
            if rc < 0 {
                if errno == EINTR { continue }
                return .failed
            }
            if rc == 0 { continue }  // the deadline is checked above
            if fds[1].revents != 0 { return .stopping }
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: scratch[..<n])
                return .data
            }
            if n == 0 { return .endOfInput }
            if errno == EINTR || errno == EAGAIN { continue }
            return .failed
        }
    }

    // MARK: The handler

    /// The handler's response, or nil when the server stops meanwhile (the
    /// handler is cancelled and waited for; nothing is written).
    private func respond(to request: HTTPRequest) -> HTTPResponse? {
        if let immediate = core.immediate, let response = immediate(request) { return response }
        guard let slot = ResponseSlot() else {
            let (contentType, body) = core.errorBody("server out of file descriptors")
            return HTTPResponse(status: .serviceUnavailable, headers: ["Content-Type": contentType], body: body)
        }
        let handler = core.handler
        let task = Task { slot.deliver(await handler(request)) }
        if waitReadable([slot.wake.readFD, core.stopSignal.readFD]) == 0, let response = slot.take() {
            return response
        }
        task.cancel()
        while slot.take() == nil {
            guard waitReadable([slot.wake.readFD]) != nil else { break }
        }
        return nil
    }

    // MARK: Writing

    /// True when the connection can carry another request.
    private func write(_ response: HTTPResponse, for request: HTTPRequest, keepAlive requested: Bool) -> Bool {
        var status = response.status
        if !(200...599).contains(status.code) { status = .internalServerError }
        let isHead = request.method == "HEAD"
        let bodyForbidden = status.code == 204 || status.code == 304
        var keepAlive = requested && !response.headers.tokens("Connection").contains("close")
        var headers = outgoingHeaders(response.headers)

        switch response.body {
        case .bytes(let bytes):
            if !bodyForbidden { headers.add("Content-Length", String(bytes.count)) }
            addConnection(&headers, keepAlive: keepAlive, version: request.version)
            let payload = isHead || bodyForbidden ? [] : bytes
            return sendAll(fd, serializeHead(status, headers) + payload) && keepAlive

        case .stream(let stream):
            let counted = !isHead && !bodyForbidden
            guard !counted || core.beginStream() else {
                discard(stream)
                let (contentType, message) = core.errorBody("too many open streams (limit \(configuration.maxStreams)); try again later")
                var refusal = HTTPHeaders()
                refusal.add("Content-Type", contentType)
                refusal.add("Content-Length", String(message.count))
                refusal.add("Retry-After", "5")
                addConnection(&refusal, keepAlive: false, version: request.version)
                _ = sendAll(fd, serializeHead(.serviceUnavailable, outgoingHeaders(refusal)) + (isHead ? [] : message))
                return false
            }
            defer { if counted { core.endStream() } }
            let isEventStream = response.headers["Content-Type"].map { asciiLowercased($0).hasPrefix(ServerSentEvents.contentType) } ?? false
            // Event streams end with the connection (EventSource clients
            // expect that, and proxies pass them on unbuffered); so do
            // streams to HTTP/1.0 clients, which know no chunked coding.
            let chunked = request.version == .http11 && !isEventStream
            if !chunked { keepAlive = false }
            if isEventStream && !headers.contains("Cache-Control") { headers.add("Cache-Control", "no-cache") }
            if chunked && !bodyForbidden { headers.add("Transfer-Encoding", "chunked") }
            addConnection(&headers, keepAlive: keepAlive, version: request.version)
            guard sendAll(fd, serializeHead(status, headers)) else {
                discard(stream)
                return false
            }
            if isHead || bodyForbidden {
                discard(stream)
                return keepAlive
            }
            return pump(stream, chunked: chunked) && keepAlive
        }
    }

    private func addConnection(_ headers: inout HTTPHeaders, keepAlive: Bool, version: HTTPVersion) {
        if !keepAlive {
            headers.add("Connection", "close")
        } else if version == .http10 {
            headers.add("Connection", "keep-alive")
        }
    }

    /// Writes `stream` until it finishes (true), the client disconnects or the
    /// server stops (false).
    private func pump(_ stream: AsyncStream<[UInt8]>, chunked: Bool) -> Bool {
        guard let pump = StreamPump() else {
            discard(stream)
            return false
        }
        let task = Task { await pump.consume(stream) }
        var fds = [
            // Only a hang-up, not input: a pipelined request waits in the kernel.
            pollfd(fd: fd, events: pollReadHangUp, revents: 0),
            pollfd(fd: pump.wake.readFD, events: Int16(POLLIN), revents: 0),
            pollfd(fd: core.stopSignal.readFD, events: Int16(POLLIN), revents: 0),
        ]
        var completed = false
        loop: while true {
            let rc = poll(&fds, 3, -1)
            if rc < 0 {
                if errno == EINTR { continue }
                break
            }
            if fds[2].revents != 0 { break }
            if fds[0].revents != 0 { break }  // POLLRDHUP, POLLHUP or POLLERR: the client is gone
            guard fds[1].revents != 0 else { continue }
            pump.wake.drain()
            while let item = pump.nextItem() {
                switch item {
                case .chunk(let bytes):
                    guard sendAll(fd, chunked ? chunkFrame(bytes) : bytes) else { break loop }
                    pump.acknowledge()
                case .finished:
                    completed = !chunked || sendAll(fd, Array("0\r\n\r\n".utf8))
                    break loop
                }
            }
        }
        // Cancel first: the consumer then finds its task cancelled when the
        // pump refuses the next chunk (see `StreamPump.consume`).
        task.cancel()
        pump.close()
        // The producer has seen termination before the connection closes
        // (and before `stop()` returns).
        while !pump.consumerDone {
            guard waitReadable([pump.wake.readFD]) != nil else { break }
            pump.wake.drain()
        }
        return completed
    }

    /// A stream that will not be written (HEAD, 204, the client gone):
    /// consumed by a cancelled task, so the producer sees termination.
    private func discard(_ stream: AsyncStream<[UInt8]>) {
        let task = Task {
            var iterator = stream.makeAsyncIterator()
            _ = await iterator.next()
        }
        task.cancel()
    }

    /// A plain-text error, then the connection closes.
    private func reject(_ error: HTTPRequestError) {
        let (contentType, body) = core.errorBody(error.message)
        let headers: HTTPHeaders = [
            "Date": httpDate(), "Server": serverName, "Content-Type": contentType,
            "Content-Length": String(body.count), "Connection": "close",
        ]
        if sendAll(fd, serializeHead(error.status, headers) + body) { lingeringClose() }
    }

    /// Closing a socket with unread input makes the kernel send a reset, which
    /// can destroy the error response before the client has read it. So: end
    /// our side, then read and discard for up to two seconds (or 1 MiB) until
    /// the client closes too (RFC 9112 §9.6).
    private func lingeringClose() {
        _ = shutdown(fd, Int32(SHUT_WR))
        let deadline = clock.now + .seconds(2)
        var discarded = 0
        buffer = []
        while discarded < 1 << 20, case .data = readMore(until: deadline) {
            discarded += buffer.count
            buffer.removeAll(keepingCapacity: true)
        }
    }
}

/// The handler's response, handed from its task to the connection thread.
private final class ResponseSlot: Sendable {
    let wake: WakePipe
    private let response = Lock<HTTPResponse?>(nil)

    init?() {
        guard let wake = WakePipe() else { return nil }
        self.wake = wake
    }

    func deliver(_ response: HTTPResponse) {
        self.response.withLock { $0 = response }
        wake.signal()
    }

    func take() -> HTTPResponse? { response.withLock { $0.take() } }
}

/// Hands a stream's chunks from the consuming task to the connection thread,
/// one at a time: the task waits until its chunk is written.
final class StreamPump: Sendable {
    enum Item {
        case chunk([UInt8])
        case finished
    }

    private struct State {
        var pending: [UInt8]?
        var waiting: CheckedContinuation<Bool, Never>?
        var finished = false
        var closed = false
        var consumerDone = false
    }

    let wake: WakePipe
    private let state = Lock(State())

    init?() {
        guard let wake = WakePipe() else { return nil }
        self.wake = wake
    }

    /// Runs in the consuming task.
    func consume(_ stream: AsyncStream<[UInt8]>) async {
        defer { markConsumerDone() }
        var iterator = stream.makeAsyncIterator()
        while let chunk = await iterator.next() {
            if chunk.isEmpty { continue }  // an empty chunk would end the chunked body
            guard await put(chunk) else {
                // The connection is gone and this task is cancelled. AsyncStream
                // notices cancellation only inside next(), and the producer still
                // holds its continuation (so the stream is not deinitialized):
                // without this call its onTermination would never run.
                _ = await iterator.next()
                return
            }
        }
        state.withLock { $0.finished = true }
        wake.signal()
    }

    /// False when the connection is gone.
    private func put(_ chunk: [UInt8]) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let accepted = state.withLock { s in
                guard !s.closed else { return false }
                s.pending = chunk
                s.waiting = continuation
                return true
            }
            if accepted {
                wake.signal()
            } else {
                continuation.resume(returning: false)
            }
        }
    }

    private func markConsumerDone() {
        state.withLock { $0.consumerDone = true }
        wake.signal()
    }

    // Connection thread side.

    func nextItem() -> Item? {
        state.withLock { s in
            if let chunk = s.pending {
                s.pending = nil
                return .chunk(chunk)
            }
            return s.finished ? .finished : nil
        }
    }

    /// The chunk taken last is written: the consumer may go on.
    func acknowledge() {
        let waiting = state.withLock { $0.waiting.take() }
        waiting?.resume(returning: true)
    }

    func close() {
        let waiting = state.withLock { s in
            s.closed = true
            s.pending = nil
            return s.waiting.take()
        }
        waiting?.resume(returning: false)
    }

    var consumerDone: Bool { state.withLock { $0.consumerDone } }
}

// MARK: Serializing

/// Response headers from the handler, made safe to send: names must be
/// tokens, values lose CR, LF and NUL (no header injection), and framing
/// fields are the server's to set. Date and Server are added unless present.
private func outgoingHeaders(_ given: HTTPHeaders) -> HTTPHeaders {
    var headers = HTTPHeaders()
    if !given.contains("Date") { headers.add("Date", httpDate()) }
    if !given.contains("Server") { headers.add("Server", serverName) }
    for field in given {
        let name = asciiLowercased(field.name)
        guard !field.name.isEmpty, field.name.utf8.allSatisfy(isTokenByte),
              !["content-length", "transfer-encoding", "connection", "keep-alive"].contains(name) else { continue }
        let value = String(decoding: field.value.utf8.map { $0 == 0x0D || $0 == 0x0A || $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
        headers.add(field.name, value)
    }
    return headers
}

func serializeHead(_ status: HTTPStatus, _ headers: HTTPHeaders) -> [UInt8] {
    var text = "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n"
    for field in headers { text += "\(field.name): \(field.value)\r\n" }
    text += "\r\n"
    return Array(text.utf8)
}

/// One chunk of the chunked transfer coding (RFC 9112 §7.1).
func chunkFrame(_ bytes: [UInt8]) -> [UInt8] {
    Array("\(String(bytes.count, radix: 16))\r\n".utf8) + bytes + [0x0D, 0x0A]
}

private func seconds(_ duration: Duration) -> String {
    let (s, atto) = duration.components
    if atto == 0 { return "\(s) s" }
    return "\(Double(s) + Double(atto) / 1e18) s"
}
