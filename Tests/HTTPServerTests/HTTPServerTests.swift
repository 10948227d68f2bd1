// The HTTP server over real sockets on 127.0.0.1 (port 0), with a raw client
// on dedicated threads, plus the pure parts (parsing, SSE format, auth).
import Foundation
import Glibc
import Locking
import Testing
@testable import HTTPServer

@Suite struct ExchangeTests {
    @Test func getReturnsJSONWithServerHeaders() async throws {
        let seen = Recorder<String>()
        let response = try await withServer(handler: { request in
            seen.record("\(request.method) \(request.path)")
            return .json(Array(#"{"ok":true}"#.utf8))
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/status"))
                return try client.readResponse()
            }
        }
        #expect(response.status == 200)
        #expect(response.reason == "OK")
        #expect(response.text == #"{"ok":true}"#)
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(response.headers["Content-Length"] == "11")
        #expect(response.headers["Server"] == "blecompanion")
        let date = try #require(response.headers["Date"])
        #expect(date.wholeMatch(of: #/[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT/#) != nil, "Date: \(date)")
        #expect(response.headers["Connection"] == nil)
        #expect(seen.all == ["GET /status"])
    }

    @Test func postBodyReachesHandler() async throws {
        let payload: [UInt8] = Array("line one\r\nline two\n".utf8) + [0, 255, 13, 10]
        let response = try await withServer(handler: { request in
            .init(status: .created, headers: ["Content-Type": request.headers["content-type"] ?? "?"], body: Array(request.method.utf8) + [0x20] + request.body)
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("POST", "/echo", headers: [("Content-Type", "application/octet-stream")], body: payload))
                return try client.readResponse()
            }
        }
        #expect(response.status == 201)
        #expect(response.body == Array("POST ".utf8) + payload)
        #expect(response.headers["Content-Type"] == "application/octet-stream")
    }

    @Test func keepAliveServesTwoRequestsOnOneConnection() async throws {
        let (first, second, closed) = try await withServer(handler: { request in
            .text(request.remoteAddress + " " + request.path)
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/one"))
                let first = try client.readResponse()
                try client.send(request("GET", "/two", headers: [("Connection", "close")]))
                let second = try client.readResponse()
                return (first, second, try client.seesEndOfInput())
            }
        }
        let firstWords = first.text.split(separator: " "), secondWords = second.text.split(separator: " ")
        #expect(firstWords.last == "/one")
        #expect(secondWords.last == "/two")
        #expect(firstWords.first == secondWords.first, "both requests came over one connection (same client port)")
        #expect(first.headers["Connection"] == nil)
        #expect(second.headers["Connection"] == "close")
        #expect(closed)
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        let bodies = try await withServer(handler: { request in .text(request.path) }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/a") + request("POST", "/b", body: Array("xyz".utf8)) + request("GET", "/c"))
                return try (0..<3).map { _ in try client.readResponse().text }
            }
        }
        #expect(bodies == ["/a", "/b", "/c"])
    }

    @Test func headAnswersGETHeadersWithoutBody() async throws {
        var router = Router()
        let methods = Recorder<String>()
        router.get("/status") { request in
            methods.record(request.method)
            return .text("hello")
        }
        let (head, get) = try await withServer(handler: router.handler) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("HEAD", "/status"))
                let head = try client.readResponse(toHead: true)
                // A stray body byte would corrupt this next response.
                try client.send(request("GET", "/status"))
                return (head, try client.readResponse())
            }
        }
        #expect(head.status == 200)
        #expect(head.headers["Content-Length"] == "5")
        #expect(get.status == 200)
        #expect(get.text == "hello")
        #expect(methods.all == ["HEAD", "GET"])
    }

    @Test func http10ClosesUnlessKeepAliveIsAsked() async throws {
        let (plain, plainClosed, kept, again) = try await withServer(handler: { _ in .text("ten") }) { server in
            try await onThread {
                let a = try RawClient(port: server.boundPort)
                try a.send(request("GET", "/", version: "HTTP/1.0"))
                let plain = try a.readResponse()
                let plainClosed = try a.seesEndOfInput()
                let b = try RawClient(port: server.boundPort)
                try b.send(request("GET", "/", headers: [("Connection", "keep-alive")], version: "HTTP/1.0"))
                let kept = try b.readResponse()
                try b.send(request("GET", "/", version: "HTTP/1.0"))
                return (plain, plainClosed, kept, try b.readResponse())
            }
        }
        #expect(plain.text == "ten")
        #expect(plain.headers["Connection"] == "close")
        #expect(plainClosed)
        #expect(kept.headers["Connection"] == "keep-alive")
        #expect(again.text == "ten")
    }

    @Test func handlerHeadersCannotInjectOrReframe() async throws {
        let response = try await withServer(handler: { _ in
            HTTPResponse(headers: ["X-Note": "a\r\nInjected: yes", "Content-Length": "999", "Transfer-Encoding": "chunked"], body: Array("four".utf8))
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/"))
                return try client.readResponse()
            }
        }
        #expect(response.headers["Injected"] == nil)
        #expect(response.headers["X-Note"] == "a  Injected: yes")
        #expect(response.headers.values(for: "Content-Length") == ["4"])
        #expect(response.headers["Transfer-Encoding"] == nil)
        #expect(response.text == "four")
    }
}

@Suite struct RoutingTests {
    static func router(_ seen: Recorder<[String: String]>) -> Router {
        var router = Router()
        router.get("/devices") { _ in .json(Array("[]".utf8)) }
        router.post("/devices") { _ in .init(status: .created) }
        router.get("/devices/:address") { request in
            seen.record(request.pathParameters)
            return .text("device")
        }
        router.get("/devices/scan") { _ in .text("scan") }
        return router
    }

    @Test func unknownPathIs404AndWrongMethodIs405WithAllow() async throws {
        let (missing, wrong) = try await withServer(handler: Self.router(Recorder()).handler) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/nope"))
                let missing = try client.readResponse()
                try client.send(request("DELETE", "/devices"))
                return (missing, try client.readResponse())
            }
        }
        #expect(missing.status == 404)
        #expect(missing.text == #"{"error": "not found: /nope"}"#)
        #expect(wrong.status == 405)
        #expect(wrong.headers["Allow"] == "GET, HEAD, POST")
        #expect(wrong.text == #"{"error": "method DELETE not allowed for /devices (allowed: GET, HEAD, POST)"}"#)
    }

    @Test func parametersAreDecodedAndLiteralSegmentsWin() async throws {
        let seen = Recorder<[String: String]>()
        let router = Self.router(seen)
        let device = try #require(HTTPRequest(method: "GET", target: "/devices/AA%3ABB"))
        let scan = try #require(HTTPRequest(method: "GET", target: "/devices/scan"))
        let head = try #require(HTTPRequest(method: "HEAD", target: "/devices/CC"))
        #expect(await router.handle(device).bodyBytes == Array("device".utf8))
        #expect(await router.handle(scan).bodyBytes == Array("scan".utf8))
        #expect(await router.handle(head).status == .ok)
        #expect(seen.all == [["address": "AA:BB"], ["address": "CC"]])
    }
}

@Suite struct RefusalTests {
    /// Sends `bytes` on a fresh connection; the response, and whether the
    /// server closed the connection after it.
    static func exchange(_ bytes: [UInt8], configuration: HTTPServer.Configuration = .init()) async throws -> (ClientResponse, closed: Bool) {
        try await withServer(configuration: configuration, handler: { _ in .text("handler ran") }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(bytes)
                let response = try client.readResponse()
                return (response, try client.seesEndOfInput())
            }
        }
    }

    @Test func malformedRequestLineIs400WithMessage() async throws {
        let (response, closed) = try await Self.exchange(Array("GARBAGE\r\n\r\n".utf8))
        #expect(response.status == 400)
        #expect(response.text == "malformed request line (expected: METHOD /path HTTP/1.1)\n")
        #expect(response.headers["Content-Type"] == "text/plain; charset=utf-8")
        #expect(response.headers["Connection"] == "close")
        #expect(closed)
    }

    @Test func oversizedHeadIs431() async throws {
        let big = request("GET", "/", headers: [("X-Big", String(repeating: "a", count: 17 * 1024))])
        let (response, closed) = try await Self.exchange(big)
        #expect(response.status == 431)
        #expect(response.text == "request line and headers exceed 16384 bytes\n")
        #expect(closed)
    }

    /// With `jsonErrors` the server's own errors are `{"error": …}` like the API's.
    @Test func theServersOwnErrorsCanBeJSON() async throws {
        var configuration = HTTPServer.Configuration()
        configuration.jsonErrors = true
        let big = request("GET", "/", headers: [("X-Big", String(repeating: "a", count: 17 * 1024))])
        let (response, closed) = try await Self.exchange(big, configuration: configuration)
        #expect(response.status == 431)
        #expect(response.headers["Content-Type"] == "application/json")
        #expect(response.text == "{\"error\": \"request line and headers exceed 16384 bytes\"}\n")
        #expect(closed)
        let (malformed, _) = try await Self.exchange(Array("GET /\"quoted HTTP/1.1\r\n\r\n".utf8), configuration: configuration)
        #expect(malformed.status == 400 && malformed.headers["Content-Type"] == "application/json")
        let decoded = try JSONSerialization.jsonObject(with: Data(malformed.body)) as? [String: String]
        #expect(decoded?["error"]?.isEmpty == false, "\(malformed.text)")
    }

    @Test func overlongRequestLineIs414() async throws {
        let (response, _) = try await Self.exchange(request("GET", "/" + String(repeating: "x", count: 17 * 1024)))
        #expect(response.status == 414)
    }

    @Test func bodyOverTheLimitIs413() async throws {
        let head = Array("POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 2097152\r\n\r\n".utf8)
        let (response, closed) = try await Self.exchange(head + [UInt8](repeating: 0x61, count: 4096))
        #expect(response.status == 413)
        #expect(response.text == "request body of 2097152 bytes exceeds the limit of 1048576 bytes\n")
        #expect(closed)
    }

    @Test(arguments: ["abc", "-5", "5, 6", "1 2", ""])
    func badContentLengthIs400(_ value: String) async throws {
        let (response, closed) = try await Self.exchange(request("POST", "/", headers: [("Content-Length", value)], body: Array("hello".utf8)))
        #expect(response.status == 400)
        #expect(response.text.contains("Content-Length"), "\(response.text)")
        #expect(closed)
    }

    @Test func chunkedRequestBodyIs411AndOtherCodings501() async throws {
        let (chunked, _) = try await Self.exchange(request("POST", "/", headers: [("Transfer-Encoding", "chunked")]) + Array("5\r\nhello\r\n0\r\n\r\n".utf8))
        #expect(chunked.status == 411)
        #expect(chunked.text == "chunked request bodies are not supported: send Content-Length\n")
        let (gzip, _) = try await Self.exchange(request("POST", "/", headers: [("Transfer-Encoding", "gzip")]))
        #expect(gzip.status == 501)
        #expect(gzip.text.contains("gzip"))
    }

    @Test func trickledHeadIs408AfterHeaderTimeout() async throws {
        // Slowloris: a header line every 100 ms never leaves the connection
        // idle, but the head as a whole must arrive within headerTimeout.
        var configuration = HTTPServer.Configuration()
        configuration.headerTimeout = .milliseconds(300)
        let (response, linesSent, closed) = try await withServer(configuration: configuration, handler: { _ in .text("handler ran") }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send("GET / HTTP/1.1\r\nHost: test\r\n")
                var linesSent = 0
                while linesSent < 30 && !client.isReadable(within: 100) {
                    try client.send("X-Slow: \(linesSent)\r\n")
                    linesSent += 1
                }
                let response = try client.readResponse()
                return (response, linesSent, try client.seesEndOfInput())
            }
        }
        #expect(response.status == 408)
        #expect(response.text == "request head not complete within 0.3 s\n")
        #expect(linesSent >= 2 && linesSent < 30, "answered after the 300 ms head timeout, while the client was still sending (\(linesSent) lines; a loaded machine answers later)")
        #expect(closed)
    }

    /// Slow clients hold every ordinary slot: a health check still gets a
    /// reserved one (and only a health check does), and once the server is
    /// under pressure a slow head is cut after `pressureTimeout`, not
    /// `headerTimeout` (without this, /healthz answered 503 in 36 of 40 probes).
    @Test func healthIsAnsweredWhenSlowClientsHoldEveryOrdinarySlot() async throws {
        var configuration = HTTPServer.Configuration()
        configuration.maxConnections = 4
        configuration.reservedConnections = 2
        configuration.reservedPaths = ["/healthz"]
        configuration.pressureThreshold = 2
        // Long enough for the probes below on a loaded machine: with 3 s,
        // 6 s and 12 s the full suite on 2 cores now and then took longer
        // than that (in its first seconds, while every suite starts its
        // daemons) between the slow clients and the intruder, whose 503 then
        // became a 200. Still well apart from the 60 s header timeout.
        configuration.pressureTimeout = .seconds(20)
        configuration.headerTimeout = .seconds(60)
        let (health, other, cutAfter, calm) = try await withServer(configuration: configuration, handler: { r in .text("path \(r.path)") }) { server in
            try await onThread {
                // Four slowloris clients: a request line and no more.
                let slow = try (0..<4).map { _ in try RawClient(port: server.boundPort) }
                for c in slow { try c.send("GET / HTTP/1.1\r\n") }
                Thread.sleep(forTimeInterval: 0.1)
                let probe = try RawClient(port: server.boundPort)
                try probe.send(request("GET", "/healthz"))
                let health = try probe.readResponse()
                let closed = try probe.seesEndOfInput()
                let intruder = try RawClient(port: server.boundPort)
                try intruder.send(request("GET", "/data"))
                let other = try intruder.readResponse()
                // The two admitted under pressure are cut after ~20 s; the first two keep their 60 s.
                let start = Date()
                let cut = try slow[2].readResponse()
                let cutAfter = Date().timeIntervalSince(start)
                #expect(cut.status == 408 && closed)
                let calm = !slow[0].isReadable(within: 0)   // admitted before the pressure: still waiting
                for c in slow { c.close() }
                return (health, other, cutAfter, calm)
            }
        }
        #expect(health.status == 200 && health.text == "path /healthz")
        #expect(other.status == 503 && other.text.contains("too many connections"), "\(other.status) \(other.text)")
        #expect(cutAfter < 40, "a slow head under pressure is cut after the pressure timeout (\(cutAfter) s)")
        #expect(calm, "a connection admitted before the pressure keeps its own header timeout")
    }

    /// Silent clients that land in the reserved slots (every ordinary one
    /// taken) give them back after `reservedHeadTimeout`, not the pressure
    /// timeout: a health check a moment later is answered.
    @Test func silentClientsInReservedSlotsLeaveThemQuickly() async throws {
        var configuration = HTTPServer.Configuration()
        configuration.maxConnections = 2
        configuration.reservedConnections = 2
        configuration.reservedPaths = ["/healthz"]
        configuration.pressureThreshold = 1
        configuration.pressureTimeout = .seconds(30)
        configuration.reservedHeadTimeout = .milliseconds(100)
        let (full, cut, health) = try await withServer(configuration: configuration, handler: { r in .text("path \(r.path)") }) { server in
            try await onThread {
                // Two ordinary and two reserved slots, all silent.
                let silent = try (0..<4).map { _ in try RawClient(port: server.boundPort) }
                Thread.sleep(forTimeInterval: 0.02)
                let refused = try RawClient(port: server.boundPort)
                try refused.send(request("GET", "/healthz"))
                let full = try refused.readResponse()
                defer { for c in silent { c.close() } }
                // The two in reserved slots are closed after ~0.1 s (they
                // sent nothing, so no 408); the ordinary two keep their 30 s.
                let start = Date()
                let cut = try silent[2].seesEndOfInput() && silent[3].seesEndOfInput() ? Date().timeIntervalSince(start) : -1
                let probe = try RawClient(port: server.boundPort)
                try probe.send(request("GET", "/healthz"))
                let health = try probe.readResponse()
                return (full, cut, health)
            }
        }
        #expect(full.status == 503, "every slot taken: \(full.status)")
        #expect(cut >= 0 && cut < 5, "silent clients in reserved slots closed after \(cut) s")
        #expect(health.status == 200 && health.text == "path /healthz", "\(health.status) \(health.text)")
    }

    /// Event-stream subscribers are limited on their own: one more is
    /// answered 503 and ordinary requests still get through.
    @Test func streamsBeyondTheirLimitGet503() async throws {
        var configuration = HTTPServer.Configuration()
        configuration.maxStreams = 2
        let producers = (0..<3).map { _ in StreamingTests.Producer() }
        let next = Lock(0)
        let (statuses, plain) = try await withServer(configuration: configuration, handler: { r in
            if r.path == "/plain" { return .text("plain") }
            let i = next.withLock { n -> Int in defer { n += 1 }; return n }
            return ServerSentEvents.response(producers[min(i, 2)].stream)
        }) { server in
            try await onThread {
                let clients = try (0..<3).map { _ in try RawClient(port: server.boundPort) }
                var statuses: [Int] = []
                for c in clients {
                    try c.send(request("GET", "/events"))
                    statuses.append(try c.readHead().status)
                }
                let p = try RawClient(port: server.boundPort)
                try p.send(request("GET", "/plain"))
                let plain = try p.readResponse()
                for c in clients { c.close() }
                return (statuses, plain)
            }
        }
        #expect(statuses == [200, 200, 503])
        #expect(plain.text == "plain")
        #expect(await producers[2].terminated.wait(), "the refused stream's producer is told")
    }

    @Test func connectionsBeyondTheLimitGet503() async throws {
        var configuration = HTTPServer.Configuration()
        configuration.maxConnections = 1
        let (first, refused, afterwards) = try await withServer(configuration: configuration, handler: { _ in .text("ok") }) { server in
            try await onThread {
                let a = try RawClient(port: server.boundPort)
                try a.send(request("GET", "/"))
                let first = try a.readResponse()  // a now holds the only slot
                let b = try RawClient(port: server.boundPort)
                let refused = try b.readResponse()
                // The server frees the slot before it closes the socket, so
                // once a sees the end, a new client must be served.
                try a.send(request("GET", "/", headers: [("Connection", "close")]))
                _ = try a.readResponse()
                guard try a.seesEndOfInput() else { throw ClientError("a was not closed") }
                let c = try RawClient(port: server.boundPort)
                try c.send(request("GET", "/"))
                return (first, refused, try c.readResponse())
            }
        }
        #expect(first.status == 200)
        #expect(refused.status == 503)
        #expect(refused.text == "too many connections (limit 1); try again later\n")
        #expect(afterwards.text == "ok")
    }
}

@Suite struct TargetTests {
    @Test func pathSegmentsAndQueryAreDecoded() async throws {
        let seen = Recorder<HTTPRequest>()
        let target = "/devices/AA%3ABB%3ACC/name%20with%2Fslash/?q=hello%20world&tag=a+b&flag&q=second&empty=&caf%C3%A9=%E2%9C%93"
        let response = try await withServer(handler: { request in
            seen.record(request)
            return .text("ok")
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", target))
                return try client.readResponse()
            }
        }
        #expect(response.status == 200)
        let seenRequest = try #require(seen.all.first)
        #expect(seenRequest.path == "/devices/AA%3ABB%3ACC/name%20with%2Fslash/")
        #expect(seenRequest.pathSegments == ["devices", "AA:BB:CC", "name with/slash"])
        #expect(seenRequest.query == ["q": "hello world", "tag": "a b", "flag": "", "empty": "", "café": "✓"])
        #expect(seenRequest.queryItems.map(\.name) == ["q", "tag", "flag", "q", "empty", "café"])
        #expect(seenRequest.queryItems[3].value == "second")
        #expect(seenRequest.target == target)
        #expect(seenRequest.remoteHost == "127.0.0.1")
        #expect(seenRequest.remoteAddress == "127.0.0.1:\(seenRequest.remotePort)")
    }

    @Test(arguments: ["/bad%zz", "/bad%4", "/bad%FF", "/x?q=%G1"])
    func invalidPercentEncodingIs400(_ target: String) async throws {
        let (response, closed) = try await RefusalTests.exchange(request("GET", target))
        #expect(response.status == 400)
        #expect(response.text.contains("invalid percent-encoding"), "\(response.text)")
        #expect(closed)
    }

    @Test func absoluteFormAndRelativeTargets() {
        let absolute = RequestTarget.parse("http://gateway.local:8080/metrics?x=1")
        #expect(absolute == .success(RequestTarget(raw: "http://gateway.local:8080/metrics?x=1", path: "/metrics", segments: ["metrics"], queryItems: [.init(name: "x", value: "1")])))
        guard case .failure(let error) = RequestTarget.parse("metrics") else {
            Issue.record("a relative target was accepted")
            return
        }
        #expect(error.status == .badRequest)
    }
}

@Suite struct HeadParsingTests {
    static func parse(_ text: String) -> Result<RequestHead, HTTPRequestError> {
        RequestHead.parse(Array(text.utf8)[...])
    }

    @Test func acceptsLeadingEmptyLinesBareLFAndKeepsHeaderOrder() throws {
        let head = try Self.parse("\r\nGET /x HTTP/1.1\nHost: a\r\nX-One:  1 \r\nx-one: 2\r\n\r\n").get()
        #expect(head.method == "GET")
        #expect(head.target == "/x")
        #expect(head.version == .http11)
        #expect(head.headers["X-ONE"] == "1")
        #expect(head.headers.values(for: "x-one") == ["1", "2"])
    }

    @Test(arguments: [
        ("GET /x HTTP/1.1 extra\r\nHost: a\r\n\r\n", 400, "malformed request line (expected: METHOD /path HTTP/1.1)"),
        ("GET  /x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "malformed request line (expected: METHOD /path HTTP/1.1)"),
        ("G(T /x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "malformed request line: invalid method"),
        ("GET /x HTTP/1.1x\r\nHost: a\r\n\r\n", 400, "malformed request line: invalid HTTP version"),
        ("GET /x HTTP/2.0\r\nHost: a\r\n\r\n", 505, "HTTP version 2.0 is not supported (use HTTP/1.1)"),
        ("GET /x HTTP/1.1\r\n\r\n", 400, "missing Host header"),
        ("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host header"),
        ("GET /x HTTP/1.1\r\nHost : a\r\n\r\n", 400, "malformed header name"),
        ("GET /x HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n continued\r\n\r\n", 400, "obsolete header line folding is not supported"),
        ("GET /x HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400, "malformed header line (no colon)"),
        ("GET /x HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, "bare CR in request head"),
        ("GET /x HTTP/1.1\r\nHost: a\u{01}\r\n\r\n", 400, "invalid character in header Host"),
    ])
    func rejects(_ text: String, _ status: Int, _ message: String) {
        #expect(Self.parse(text) == .failure(HTTPRequestError(HTTPStatus(status), message)))
    }

    @Test func http10NeedsNoHost() throws {
        let head = try Self.parse("GET / HTTP/1.0\r\n\r\n").get()
        #expect(head.version == .http10)
        #expect(!head.wantsKeepAlive)
    }

    @Test func scannerFindsTheEndAcrossReadsAndEnforcesTheLimit() {
        var scanner = HeadScanner(limit: 64)
        var bytes = Array("\r\nGET / HTTP/1.1\r\nHost: a\r".utf8)
        #expect(scanner.scan(bytes) == .needMore)
        bytes += Array("\n\r\nBODY".utf8)
        #expect(scanner.scan(bytes) == .complete(end: bytes.count - 4))

        var small = HeadScanner(limit: 16)
        #expect(small.scan(Array("GET / HTTP/1.1\r\nHost: a".utf8)) == .tooLarge(HTTPRequestError(.requestHeaderFieldsTooLarge, "request line and headers exceed 16 bytes")))
        var line = HeadScanner(limit: 8)
        #expect(line.scan(Array("GET /long-path".utf8)) == .tooLarge(HTTPRequestError(.uriTooLong, "request line exceeds 8 bytes")))
    }
}

@Suite struct StreamingTests {
    /// A producer whose continuation stays alive (as a real one would),
    /// and which signals when its stream terminates.
    final class Producer: Sendable {
        let stream: AsyncStream<[UInt8]>
        let continuation: AsyncStream<[UInt8]>.Continuation
        let terminated = Signal()

        init() {
            (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self)
            let terminated = self.terminated
            continuation.onTermination = { _ in terminated.fire() }
        }
    }

    @Test func eventStreamClientDisconnectTerminatesProducer() async throws {
        let producer = Producer()
        let (head, events) = try await withServer(handler: { _ in
            for i in 1...3 { producer.continuation.yield(ServerSentEvents.event(name: "tick", data: "n=\(i)", id: "\(i)")) }
            return ServerSentEvents.response(producer.stream)
        }) { server in
            let result = try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/events"))
                let head = try client.readHead()
                let events = try (0..<3).map { _ in String(decoding: try client.read(through: Array("\n\n".utf8)), as: UTF8.self) }
                client.close()
                return (head, events)
            }
            #expect(await producer.terminated.wait(), "the producer learns that the client went away")
            return result
        }
        #expect(head.status == 200)
        #expect(head.headers["Content-Type"] == "text/event-stream")
        #expect(head.headers["Cache-Control"] == "no-cache")
        #expect(head.headers["Connection"] == "close")
        #expect(head.headers["Content-Length"] == nil)
        #expect(head.headers["Transfer-Encoding"] == nil)
        #expect(events == (1...3).map { "id: \($0)\nevent: tick\ndata: n=\($0)\n\n" })
    }

    @Test func clientLeavingDuringAStalledSendTerminatesProducer() async throws {
        // 8 MiB queued at once, a client that reads nothing with a small
        // receive buffer: the server's send stalls while the consumer waits
        // for it, then the client leaves (with unread data: a reset).
        let producer = Producer()
        let chunk = [UInt8](repeating: 0x78, count: 64 * 1024)
        let sent = Signal()
        let head = try await withServer(handler: { _ in
            for _ in 0..<128 { producer.continuation.yield(chunk) }
            return .stream(headers: ["Content-Type": "application/octet-stream"], body: producer.stream)
        }) { server in
            let head = try await onThread {
                let client = try RawClient(port: server.boundPort, receiveBuffer: 4096)
                try client.send(request("GET", "/bulk"))
                let head = try client.readHead()
                sent.fire()
                usleep(200_000)  // let the server's send fill the buffers and stall
                client.close()
                return head
            }
            #expect(await sent.wait())
            #expect(await producer.terminated.wait(), "the producer learns that the client went away")
            return head
        }
        #expect(head.headers["Transfer-Encoding"] == "chunked")
    }

    @Test func stopClosesAnOpenEventStream() async throws {
        let producer = Producer()
        let firstEvent = Signal()
        let server = try HTTPServer.start(host: "127.0.0.1", port: 0) { _ in
            producer.continuation.yield(ServerSentEvents.keepAlive)
            return ServerSentEvents.response(producer.stream)
        }
        let port = server.boundPort
        async let clientSawEnd = onThread {
            let client = try RawClient(port: port)
            try client.send(request("GET", "/events"))
            _ = try client.readHead()
            let comment = try client.read(through: Array("\n\n".utf8))
            firstEvent.fire()
            return (comment, try client.seesEndOfInput())
        }
        #expect(await firstEvent.wait())
        await server.stop()
        #expect(producer.terminated.isFired, "termination reached the producer before stop() returned")
        let (comment, ended) = try await clientSawEnd
        #expect(comment == Array(": keep-alive\n\n".utf8))
        #expect(ended)
    }

    @Test func chunkedStreamEndsAndKeepsTheConnection() async throws {
        let (streamed, next) = try await withServer(handler: { request in
            guard request.path == "/stream" else { return .text("next") }
            let (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self)
            Task {
                for part in ["one ", "", "two ", "three"] { continuation.yield(Array(part.utf8)) }
                continuation.finish()
            }
            return .stream(headers: ["Content-Type": "text/plain"], body: stream)
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("GET", "/stream"))
                let streamed = try client.readResponse()
                try client.send(request("GET", "/other"))
                return (streamed, try client.readResponse())
            }
        }
        #expect(streamed.headers["Transfer-Encoding"] == "chunked")
        #expect(streamed.headers["Connection"] == nil)
        #expect(streamed.text == "one two three")
        #expect(next.text == "next")
    }

    @Test func headOfAStreamSendsNoBodyAndTerminatesIt() async throws {
        let producer = Producer()
        let (head, after) = try await withServer(handler: { request in
            request.path == "/stream" ? .stream(body: producer.stream) : .text("after")
        }) { server in
            try await onThread {
                let client = try RawClient(port: server.boundPort)
                try client.send(request("HEAD", "/stream"))
                let head = try client.readResponse(toHead: true)
                try client.send(request("GET", "/other"))
                return (head, try client.readResponse())
            }
        }
        #expect(head.headers["Transfer-Encoding"] == "chunked")
        #expect(after.text == "after")
        #expect(await producer.terminated.wait())
    }

    @Test func eventFormatFollowsTheSSESpec() {
        let event = ServerSentEvents.event(name: "reading", data: "line1\nline2\r\nline3\rline4", id: "7")
        #expect(String(decoding: event, as: UTF8.self) == "id: 7\nevent: reading\ndata: line1\ndata: line2\ndata: line3\ndata: line4\n\n")
        #expect(ServerSentEvents.event(data: "") == Array("data: \n\n".utf8))
        #expect(ServerSentEvents.event(data: "x\n") == Array("data: x\ndata: \n\n".utf8))
        #expect(ServerSentEvents.event(name: "a\nb", data: "d", id: "1\r2\u{0}", retry: 1500) == Array("id: 1 2\nevent: a b\nretry: 1500\ndata: d\n\n".utf8))
        #expect(ServerSentEvents.keepAlive == Array(": keep-alive\n\n".utf8))
        #expect(ServerSentEvents.comment("a\nb") == Array(": a\n: b\n\n".utf8))
    }
}

@Suite struct AuthTests {
    static func request(authorization: [String]) throws -> HTTPRequest {
        try #require(HTTPRequest(method: "GET", target: "/", headers: HTTPHeaders(authorization.map { ("Authorization", $0) })))
    }

    @Test func bearerTokenIsChecked() throws {
        let token = "s3cret-Token_42"
        #expect(BearerAuth.check(try Self.request(authorization: ["Bearer s3cret-Token_42"]), token: token))
        #expect(BearerAuth.check(try Self.request(authorization: ["bearer s3cret-Token_42 "]), token: token), "the scheme is case-insensitive")
        #expect(!BearerAuth.check(try Self.request(authorization: ["Bearer s3cret-Token_43"]), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: ["Bearer s3cret-Token_4"]), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: ["Bearer s3cret-Token_422"]), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: ["Basic s3cret-Token_42"]), token: token), "wrong scheme")
        #expect(!BearerAuth.check(try Self.request(authorization: ["Bearers3cret-Token_42"]), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: ["s3cret-Token_42"]), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: []), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: ["Bearer s3cret-Token_42", "Bearer s3cret-Token_42"]), token: token))
        #expect(!BearerAuth.check(try Self.request(authorization: ["Bearer "]), token: ""), "an empty secret opens nothing")
    }

    @Test func unauthorizedCarriesTheChallenge() {
        let response = BearerAuth.unauthorized()
        #expect(response.status == .unauthorized)
        #expect(response.headers["WWW-Authenticate"] == "Bearer realm=\"blecompanion\"")
        #expect(response.bodyBytes == Array(#"{"error": "missing or invalid bearer token"}"#.utf8))
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("127.5.6.7", true), ("::1", true), ("[::1]", true), ("localhost", true), ("LocalHost", true),
        ("::ffff:127.0.0.1", true), ("0:0:0:0:0:0:0:1", true),
        ("128.0.0.1", false), ("10.0.0.1", false), ("::2", false), ("::", false), ("", false), ("example.com", false),
        ("localhost.example.com", false), ("::ffff:10.0.0.1", false), ("fe80::1", false),
    ])
    func loopbackHosts(_ host: String, _ expected: Bool) {
        #expect(BearerAuth.isLoopback(host: host) == expected)
    }
}

@Suite struct ListenerTests {
    @Test func addressInUseNamesTheAddress() async throws {
        let first = try HTTPServer.start(host: "127.0.0.1", port: 0) { _ in .text("") }
        defer { Task { await first.stop() } }
        let port = first.boundPort
        #expect(port > 0)
        #expect(first.address == "127.0.0.1:\(port)")
        #expect(throws: HTTPServerError(address: "127.0.0.1:\(port)", reason: "Address already in use", errorNumber: EADDRINUSE)) {
            _ = try HTTPServer.start(host: "127.0.0.1", port: port) { _ in .text("") }
        }
        let error = #expect(throws: HTTPServerError.self) {
            _ = try HTTPServer.start(host: "gateway.example", port: 8080) { _ in .text("") }
        }
        #expect(error?.description == "cannot listen on gateway.example:8080: not an IPv4 or IPv6 address (nor localhost)")
        #expect(throws: HTTPServerError.self) { _ = try HTTPServer.start(host: "127.0.0.1", port: 70000) { _ in .text("") } }
    }

    @Test func localhostListensOnIPv4Loopback() async throws {
        let server = try HTTPServer.start(host: "localhost", port: 0) { request in .text(request.remoteHost) }
        let response = try await onThread {
            let client = try RawClient(port: server.boundPort)
            try client.send(request("GET", "/"))
            return try client.readResponse()
        }
        await server.stop()
        #expect(server.address.hasPrefix("127.0.0.1:"))
        #expect(response.text == "127.0.0.1")
    }

    @Test func servesIPv6Loopback() async throws {
        if let reason = ipv6LoopbackUnavailable() {
            // No IPv6 in this kernel: then the failure must name the address.
            print("IPv6 loopback not available, checking the error instead: \(reason)")
            let error = #expect(throws: HTTPServerError.self) { _ = try HTTPServer.start(host: "::1", port: 0) { _ in .text("") } }
            #expect(error?.address == "[::1]:0")
            return
        }
        let server = try HTTPServer.start(host: "[::1]", port: 0) { request in .text(request.remoteAddress) }
        let response = try await onThread {
            let client = try RawClient(host: "::1", port: server.boundPort)
            try client.send(request("GET", "/", headers: [("Host", "[::1]")]))
            return try client.readResponse()
        }
        await server.stop()
        #expect(server.address == "[::1]:\(server.boundPort)")
        #expect(response.status == 200)
        #expect(response.text.hasPrefix("[::1]:"))
    }

    @Test func stopClosesIdleConnectionsAndFreesThePort() async throws {
        let server = try HTTPServer.start(host: "127.0.0.1", port: 0) { _ in .text("ok") }
        let port = server.boundPort
        let connected = Signal()
        async let closedByServer = onThread {
            let client = try RawClient(port: port)
            try client.send(request("GET", "/"))
            _ = try client.readResponse()
            connected.fire()
            return try client.seesEndOfInput()
        }
        #expect(await connected.wait())
        await server.stop()
        #expect(try await closedByServer)
        let again = try HTTPServer.start(host: "127.0.0.1", port: port) { _ in .text("") }
        #expect(again.boundPort == port)
        await again.stop()
    }

    @Test func stopCancelsARunningHandler() async throws {
        let started = Signal(), cancelled = Signal()
        let server = try HTTPServer.start(host: "127.0.0.1", port: 0) { _ in
            started.fire()
            // Waits until cancelled (sleep throws then).
            try? await Task.sleep(for: .seconds(60))
            if Task.isCancelled { cancelled.fire() }
            return .text("late")
        }
        let port = server.boundPort
        async let outcome = onThread {
            let client = try RawClient(port: port)
            try client.send(request("GET", "/"))
            return try client.readToEnd()
        }
        #expect(await started.wait())
        await server.stop()
        #expect(cancelled.isFired, "stop() waited for the cancelled handler")
        #expect(try await outcome.isEmpty, "nothing is written after stop()")
    }
}

@Suite struct ResponseTests {
    @Test func problemIsJSONWithEscapes() {
        let response = HTTPResponse.problem(status: .badRequest, "bad \"name\"\n\\ \u{01}")
        #expect(response.status.code == 400)
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.bodyBytes == Array(#"{"error": "bad \"name\"\n\\ \u0001"}"#.utf8))
    }

    @Test func textAndStatusDescriptions() {
        #expect(HTTPResponse.text(status: .notFound, "gone").headers["Content-Type"] == "text/plain; charset=utf-8")
        #expect(HTTPStatus.requestHeaderFieldsTooLarge.description == "431 Request Header Fields Too Large")
        #expect(HTTPStatus(299).description == "299")
        #expect(httpDate(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT")
    }
}
