// Request head parsing (RFC 9112 §2–§6): pure functions over bytes, so the
// rules can be tested without sockets.

/// Why a request is refused before it reaches the handler. The message is
/// sent as the plain-text body of the response.
struct HTTPRequestError: Error, Equatable {
    let status: HTTPStatus
    let message: String

    init(_ status: HTTPStatus, _ message: String) {
        self.status = status
        self.message = message
    }
}

private let cr: UInt8 = 0x0D
private let lf: UInt8 = 0x0A
private let sp: UInt8 = 0x20
private let htab: UInt8 = 0x09

/// Finds the end of a request head (the empty line) as bytes arrive, looking
/// at each byte once, and enforces the size limit.
struct HeadScanner {
    enum Outcome: Equatable {
        /// The head is `bytes[..<end]`, its empty line included.
        case complete(end: Int)
        case needMore
        case tooLarge(HTTPRequestError)
    }

    let limit: Int
    private var position = 0
    private var lineLength = 0
    private var sawRequestLine = false

    init(limit: Int) { self.limit = limit }

    /// Scans what was not scanned yet. Empty lines before the request line are
    /// skipped (RFC 9112 §2.2); a lone LF ends a line like CRLF does.
    mutating func scan(_ bytes: [UInt8]) -> Outcome {
        let end = min(bytes.count, limit)
        while position < end {
            let byte = bytes[position]
            position += 1
            if byte == lf {
                if lineLength > 0 {
                    sawRequestLine = true
                    lineLength = 0
                } else if sawRequestLine {
                    return .complete(end: position)
                }
            } else if byte != cr {
                lineLength += 1
            }
        }
        guard bytes.count >= limit else { return .needMore }
        // The head would be longer than `limit` bytes.
        if sawRequestLine {
            return .tooLarge(HTTPRequestError(.requestHeaderFieldsTooLarge, "request line and headers exceed \(limit) bytes"))
        }
        return .tooLarge(HTTPRequestError(.uriTooLong, "request line exceeds \(limit) bytes"))
    }
}

/// The parsed request line and header fields.
struct RequestHead: Equatable {
    var method: String
    var target: String
    var version: HTTPVersion
    var headers: HTTPHeaders

    /// Parses a complete head as delimited by `HeadScanner`.
    static func parse(_ bytes: ArraySlice<UInt8>) -> Result<RequestHead, HTTPRequestError> {
        var lines: [ArraySlice<UInt8>] = []
        for var line in bytes.split(separator: lf, omittingEmptySubsequences: false) {
            if line.last == cr { line = line.dropLast() }
            lines.append(line)
        }
        // Leading empty lines, and the empty line plus what split() leaves after it.
        while lines.first?.isEmpty == true { lines.removeFirst() }
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard let requestLine = lines.first else {
            return .failure(HTTPRequestError(.badRequest, "empty request"))
        }
        if lines.contains(where: { $0.contains(cr) }) {
            return .failure(HTTPRequestError(.badRequest, "bare CR in request head"))
        }

        let parts = requestLine.split(separator: sp, omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            return .failure(HTTPRequestError(.badRequest, "malformed request line (expected: METHOD /path HTTP/1.1)"))
        }
        guard !parts[0].isEmpty, parts[0].allSatisfy(isTokenByte) else {
            return .failure(HTTPRequestError(.badRequest, "malformed request line: invalid method"))
        }
        guard !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(HTTPRequestError(.badRequest, "malformed request line: invalid request target"))
        }
        let version: HTTPVersion
        switch parseVersion(parts[2]) {
        case .success(let v): version = v
        case .failure(let error): return .failure(error)
        }

        var headers = HTTPHeaders()
        for line in lines.dropFirst() {
            if line.first == sp || line.first == htab {
                return .failure(HTTPRequestError(.badRequest, "obsolete header line folding is not supported"))
            }
            guard let colon = line.firstIndex(of: 0x3A) else {
                return .failure(HTTPRequestError(.badRequest, "malformed header line (no colon)"))
            }
            let name = line[..<colon]
            // No whitespace is allowed between name and colon (RFC 9112 §5.1).
            guard !name.isEmpty, name.allSatisfy(isTokenByte) else {
                return .failure(HTTPRequestError(.badRequest, "malformed header name"))
            }
            var value = line[(colon + 1)...]
            while let first = value.first, first == sp || first == htab { value = value.dropFirst() }
            while let last = value.last, last == sp || last == htab { value = value.dropLast() }
            let nameString = String(decoding: name, as: UTF8.self)
            guard value.allSatisfy({ $0 == htab || ($0 >= 0x20 && $0 != 0x7F) }) else {
                return .failure(HTTPRequestError(.badRequest, "invalid character in header \(nameString)"))
            }
            headers.add(nameString, String(decoding: value, as: UTF8.self))
        }

        if version == .http11 {
            // RFC 9112 §3.2: exactly one Host field in an HTTP/1.1 request.
            switch headers.values(for: "Host").count {
            case 0: return .failure(HTTPRequestError(.badRequest, "missing Host header"))
            case 1: break
            default: return .failure(HTTPRequestError(.badRequest, "more than one Host header"))
            }
        }
        let method = String(decoding: parts[0], as: UTF8.self)
        return .success(RequestHead(method: method, target: String(decoding: parts[1], as: UTF8.self), version: version, headers: headers))
    }

    private static func parseVersion(_ bytes: ArraySlice<UInt8>) -> Result<HTTPVersion, HTTPRequestError> {
        let b = Array(bytes)
        guard b.count == 8, b[0..<5].elementsEqual("HTTP/".utf8), isDigit(b[5]), b[6] == 0x2E, isDigit(b[7]) else {
            return .failure(HTTPRequestError(.badRequest, "malformed request line: invalid HTTP version"))
        }
        let major = Int(b[5] - 0x30), minor = Int(b[7] - 0x30)
        guard major == 1 else {
            return .failure(HTTPRequestError(.httpVersionNotSupported, "HTTP version \(major).\(minor) is not supported (use HTTP/1.1)"))
        }
        // A later 1.x minor version is answered as 1.1 (RFC 9110 §2.5).
        return .success(minor == 0 ? .http10 : .http11)
    }

    /// The body length from Content-Length (RFC 9112 §6). Transfer codings on
    /// requests are refused: this server reads Content-Length bodies only.
    func bodyLength(limit: Int) -> Result<Int, HTTPRequestError> {
        if headers.contains("Transfer-Encoding") {
            let codings = headers.tokens("Transfer-Encoding")
            if codings.contains("chunked") {
                return .failure(HTTPRequestError(.lengthRequired, "chunked request bodies are not supported: send Content-Length"))
            }
            return .failure(HTTPRequestError(.notImplemented, "transfer coding \(codings.joined(separator: ", ")) is not supported: send Content-Length"))
        }
        let values = headers.values(for: "Content-Length").flatMap { $0.split(separator: ",", omittingEmptySubsequences: false) }.map { trimmingWhitespace(String($0)) }
        guard let first = values.first else { return .success(0) }
        guard values.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy(isDigit) }) else {
            return .failure(HTTPRequestError(.badRequest, "invalid Content-Length (expected a decimal number of bytes)"))
        }
        guard values.allSatisfy({ $0 == first }) else {
            return .failure(HTTPRequestError(.badRequest, "conflicting Content-Length values"))
        }
        let digits = first.drop { $0 == "0" }
        // More than 18 digits cannot be within any limit (and would overflow Int).
        guard digits.count <= 18, let length = Int(digits.isEmpty ? "0" : String(digits)), length <= limit else {
            return .failure(HTTPRequestError(.contentTooLarge, "request body of \(first) bytes exceeds the limit of \(limit) bytes"))
        }
        return .success(length)
    }

    /// Whether the client wants the connection kept open after this exchange
    /// (RFC 9112 §9.3): HTTP/1.1 unless "close", HTTP/1.0 only with "keep-alive".
    var wantsKeepAlive: Bool {
        let options = headers.tokens("Connection")
        if options.contains("close") { return false }
        return version == .http11 || options.contains("keep-alive")
    }

    /// `Expect: 100-continue` (RFC 9110 §10.1.1).
    var expectsContinue: Bool {
        version == .http11 && headers.tokens("Expect").contains("100-continue")
    }
}

/// A request target split into path and query, decoded.
struct RequestTarget: Equatable {
    let raw: String
    let path: String
    let segments: [String]
    let queryItems: [HTTPRequest.QueryItem]

    /// Origin form ("/a/b?q"), absolute form ("http://host/a/b?q", RFC 9112
    /// §3.2.2: the authority is dropped) and asterisk form ("*", for OPTIONS).
    static func parse(_ raw: String) -> Result<RequestTarget, HTTPRequestError> {
        let bytes = Array(raw.utf8)
        guard !bytes.isEmpty, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(HTTPRequestError(.badRequest, "invalid request target"))
        }
        if raw == "*" {
            return .success(RequestTarget(raw: raw, path: "*", segments: [], queryItems: []))
        }
        if bytes.contains(0x23) {
            return .failure(HTTPRequestError(.badRequest, "request target must not contain a fragment (#)"))
        }
        var rest = bytes[...]
        if bytes.first != 0x2F {
            let lower = asciiLowercased(raw)
            guard let schemeEnd = ["http://", "https://"].first(where: lower.hasPrefix)?.utf8.count else {
                return .failure(HTTPRequestError(.badRequest, "request target must be a path starting with /"))
            }
            rest = bytes[schemeEnd...]
            // Authority: up to the path or the query.
            if let slash = rest.firstIndex(where: { $0 == 0x2F || $0 == 0x3F }) {
                rest = rest[slash...]
            } else {
                rest = []
            }
            if rest.first != 0x2F { rest = [0x2F] + rest }
        }
        let pathBytes: ArraySlice<UInt8>
        var queryBytes: ArraySlice<UInt8> = []
        if let question = rest.firstIndex(of: 0x3F) {
            pathBytes = rest[..<question]
            queryBytes = rest[(question + 1)...]
        } else {
            pathBytes = rest
        }

        var segments: [String] = []
        for segment in pathBytes.split(separator: 0x2F) {
            guard let decoded = percentDecode(segment, plusIsSpace: false) else {
                return .failure(HTTPRequestError(.badRequest, "invalid percent-encoding in path"))
            }
            segments.append(decoded)
        }
        var items: [HTTPRequest.QueryItem] = []
        for pair in queryBytes.split(separator: 0x26) {
            let name: ArraySlice<UInt8>, value: ArraySlice<UInt8>
            if let equals = pair.firstIndex(of: 0x3D) {
                name = pair[..<equals]
                value = pair[(equals + 1)...]
            } else {
                name = pair
                value = []
            }
            guard let n = percentDecode(name, plusIsSpace: true), let v = percentDecode(value, plusIsSpace: true) else {
                return .failure(HTTPRequestError(.badRequest, "invalid percent-encoding in query"))
            }
            items.append(HTTPRequest.QueryItem(name: n, value: v))
        }
        return .success(RequestTarget(raw: raw, path: String(decoding: pathBytes, as: UTF8.self), segments: segments, queryItems: items))
    }
}

/// Decodes %XX escapes (RFC 3986 §2.1); nil for a malformed escape or when
/// the result is not UTF-8. In query components "+" stands for a space (the
/// HTML form encoding clients use for query strings).
func percentDecode(_ bytes: ArraySlice<UInt8>, plusIsSpace: Bool) -> String? {
    var out: [UInt8] = []
    out.reserveCapacity(bytes.count)
    var i = bytes.startIndex
    while i < bytes.endIndex {
        let byte = bytes[i]
        if byte == 0x25 {
            guard i + 2 < bytes.endIndex, let high = hexValue(bytes[i + 1]), let low = hexValue(bytes[i + 2]) else { return nil }
            out.append(high << 4 | low)
            i += 3
        } else {
            out.append(plusIsSpace && byte == 0x2B ? sp : byte)
            i += 1
        }
    }
    return String(validating: out, as: UTF8.self)
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: byte - 0x30
    case 0x41...0x46: byte - 0x41 + 10
    case 0x61...0x66: byte - 0x61 + 10
    default: nil
    }
}

func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

/// tchar of RFC 9110 §5.6.2.
func isTokenByte(_ byte: UInt8) -> Bool {
    switch byte {
    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
    case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
         UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
         UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"): true
    default: false
    }
}
