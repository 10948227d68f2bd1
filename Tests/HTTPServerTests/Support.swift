// Test support: a raw-socket HTTP client run on dedicated threads, and a
// one-shot signal to await events from the server side.
import Foundation
import Glibc
import Locking
import HTTPServer

struct ClientError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs blocking socket work on its own thread: neither the concurrency
/// pool nor Dispatch's global queues, which two busy cores would starve.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// Starts a server on 127.0.0.1, port 0; stops it after `body`, also on error.
func withServer<T: Sendable>(
    configuration: HTTPServer.Configuration = HTTPServer.Configuration(),
    handler: @escaping HTTPServer.Handler,
    _ body: (HTTPServer) async throws -> T
) async throws -> T {
    let server = try HTTPServer.start(host: "127.0.0.1", port: 0, configuration: configuration, handler: handler)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

struct ClientResponse: Sendable {
    var status: Int
    var reason: String
    var headers: HTTPHeaders
    var body: [UInt8]
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// A request as bytes; Host is added unless given.
func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = [], version: String = "HTTP/1.1") -> [UInt8] {
    var text = "\(method) \(target) \(version)\r\n"
    if !headers.contains(where: { $0.0.lowercased() == "host" }) && version == "HTTP/1.1" { text += "Host: test\r\n" }
    for (name, value) in headers { text += "\(name): \(value)\r\n" }
    if !body.isEmpty && !headers.contains(where: { $0.0.lowercased() == "content-length" }) { text += "Content-Length: \(body.count)\r\n" }
    text += "\r\n"
    return Array(text.utf8) + body
}

/// A blocking HTTP/1.1 client on a raw socket; every read gives up after
/// `timeout` milliseconds so that a broken server fails the test instead of
/// hanging it. Use only on a thread of `onThread`.
final class RawClient {
    private var fd: Int32
    private var buffer: [UInt8] = []
    private let timeout: Int32

    /// `receiveBuffer` (SO_RCVBUF) makes a client that does not read stall the server's sends early.
    init(host: String = "127.0.0.1", port: Int, timeout: Int32 = 30_000, receiveBuffer: Int32? = nil) throws {
        self.timeout = timeout
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        let family: Int32
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            family = AF_INET
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = UInt16(port).bigEndian
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            family = AF_INET6
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = UInt16(port).bigEndian
        } else {
            throw ClientError("not an address: \(host)")
        }
        fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ClientError("socket: \(String(cString: strerror(errno)))") }
        if var size = receiveBuffer {
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        let rc: Int32
        if family == AF_INET {
            rc = withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        } else {
            rc = withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        }
        guard rc == 0 else {
            let text = String(cString: strerror(errno))
            Glibc.close(fd)
            throw ClientError("connect to \(host):\(port): \(text)")
        }
    }

    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw ClientError("send: \(String(cString: strerror(errno)))") }
            offset += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Whether the server has sent something (or closed) within `milliseconds`.
    func isReadable(within milliseconds: Int32) -> Bool {
        if !buffer.isEmpty { return true }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, milliseconds) > 0
    }

    /// Reads once more; false at end of input (or a reset).
    private func fill() throws -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let rc = poll(&p, 1, timeout)
        guard rc > 0 else { throw ClientError("no answer from the server within \(timeout) ms") }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let n = recv(fd, &chunk, chunk.count, 0)
        if n > 0 {
            buffer += chunk[..<n]
            return true
        }
        return false
    }

    /// Bytes up to and including `marker`.
    func read(through marker: [UInt8]) throws -> [UInt8] {
        while true {
            if let range = firstRange(of: marker) {
                let out = Array(buffer[..<range.upperBound])
                buffer.removeFirst(range.upperBound)
                return out
            }
            guard try fill() else { throw ClientError("connection closed before \(String(decoding: marker, as: UTF8.self).debugDescription)") }
        }
    }

    func read(exactly count: Int) throws -> [UInt8] {
        while buffer.count < count {
            guard try fill() else { throw ClientError("connection closed after \(buffer.count) of \(count) bytes") }
        }
        let out = Array(buffer[..<count])
        buffer.removeFirst(count)
        return out
    }

    /// Everything until the server closes the connection.
    func readToEnd() throws -> [UInt8] {
        while try fill() {}
        defer { buffer = [] }
        return buffer
    }

    /// Whether the server closes the connection (with nothing more to read).
    func seesEndOfInput() throws -> Bool {
        try readToEnd().isEmpty
    }

    func readHead() throws -> ClientResponse {
        let head = String(decoding: try read(through: Array("\r\n\r\n".utf8)), as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        guard !lines.isEmpty else { throw ClientError("empty response head") }
        let statusLine = lines.removeFirst().split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard statusLine.count >= 2, statusLine[0] == "HTTP/1.1", let status = Int(statusLine[1]) else {
            throw ClientError("malformed status line in \(head.debugDescription)")
        }
        var headers = HTTPHeaders()
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { throw ClientError("malformed header line \(line.debugDescription)") }
            headers.add(String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return ClientResponse(status: status, reason: statusLine.count > 2 ? String(statusLine[2]) : "", headers: headers, body: [])
    }

    /// A whole response; its body framed by Content-Length, chunked coding,
    /// or the end of the connection. HEAD responses have no body.
    func readResponse(toHead: Bool = false) throws -> ClientResponse {
        var response = try readHead()
        if toHead || response.status == 204 || response.status == 304 { return response }
        if let length = response.headers["Content-Length"] {
            guard let n = Int(length) else { throw ClientError("bad Content-Length \(length)") }
            response.body = try read(exactly: n)
        } else if response.headers["Transfer-Encoding"]?.lowercased() == "chunked" {
            response.body = try readChunkedBody()
        } else {
            response.body = try readToEnd()
        }
        return response
    }

    func readChunkedBody() throws -> [UInt8] {
        var body: [UInt8] = []
        while true {
            let sizeLine = String(decoding: try read(through: [0x0D, 0x0A]).dropLast(2), as: UTF8.self)
            guard let size = Int(sizeLine, radix: 16) else { throw ClientError("bad chunk size \(sizeLine.debugDescription)") }
            if size == 0 {
                guard try read(exactly: 2) == [0x0D, 0x0A] else { throw ClientError("no CRLF after the last chunk") }
                return body
            }
            body += try read(exactly: size)
            guard try read(exactly: 2) == [0x0D, 0x0A] else { throw ClientError("no CRLF after a chunk") }
        }
    }

    private func firstRange(of marker: [UInt8]) -> Range<Int>? {
        guard buffer.count >= marker.count else { return nil }
        for start in 0...(buffer.count - marker.count) where buffer[start..<(start + marker.count)].elementsEqual(marker) {
            return start..<(start + marker.count)
        }
        return nil
    }
}

/// A one-shot event that tasks can await with a timeout.
final class Signal: Sendable {
    private struct State {
        var fired = false
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        var nextID = 0
    }

    private let state = Lock(State())

    var isFired: Bool { state.withLock { $0.fired } }

    func fire() {
        let waiters = state.withLock { s in
            s.fired = true
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: true) }
    }

    /// True when fired within `timeout`.
    func wait(timeout: Duration = .seconds(20)) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let id: Int? = state.withLock { s in
                if s.fired { return nil }
                let id = s.nextID
                s.nextID += 1
                s.waiters[id] = continuation
                return id
            }
            guard let id else {
                continuation.resume(returning: true)
                return
            }
            Task {
                try? await Task.sleep(for: timeout)
                let expired = self.state.withLock { $0.waiters.removeValue(forKey: id) }
                expired?.resume(returning: false)
            }
        }
    }
}

/// Values a handler observed, for the test to check afterwards.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Lock<[Value]>([])
    func record(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
}

/// Why IPv6 loopback cannot be used here, or nil when it can.
func ipv6LoopbackUnavailable() -> String? {
    let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return "no IPv6 sockets: \(String(cString: strerror(errno)))" }
    defer { Glibc.close(fd) }
    var address = sockaddr_in6()
    address.sin6_family = sa_family_t(AF_INET6)
    address.sin6_addr = in6addr_loopback
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
    }
    return rc == 0 ? nil : "cannot bind ::1: \(String(cString: strerror(errno)))"
}
