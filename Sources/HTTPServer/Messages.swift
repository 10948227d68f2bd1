// The values handlers see and return: headers, status, request, response.
import Vocabulary

/// Header fields in the order received (or added), with case-insensitive
/// lookup by name (RFC 9110 §5.1: field names are case-insensitive).
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public struct Field: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public private(set) var fields: [Field] = []

    public init() {}

    public init(_ pairs: [(String, String)]) {
        fields = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// The first value of `name`; setting replaces every field of that name
    /// (nil removes them).
    public subscript(name: String) -> String? {
        get { fields.first { asciiCaseInsensitiveEquals($0.name, name) }?.value }
        set {
            remove(name)
            if let newValue { add(name, newValue) }
        }
    }

    /// Every value of `name`, in order.
    public func values(for name: String) -> [String] {
        fields.filter { asciiCaseInsensitiveEquals($0.name, name) }.map(\.value)
    }

    public func contains(_ name: String) -> Bool {
        fields.contains { asciiCaseInsensitiveEquals($0.name, name) }
    }

    public mutating func add(_ name: String, _ value: String) {
        fields.append(Field(name: name, value: value))
    }

    public mutating func remove(_ name: String) {
        fields.removeAll { asciiCaseInsensitiveEquals($0.name, name) }
    }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// The comma-separated tokens of every `name` field, trimmed and lowercased
    /// (for list-valued fields such as Connection and Transfer-Encoding).
    func tokens(_ name: String) -> [String] {
        values(for: name).flatMap { $0.split(separator: ",") }.map { asciiLowercased(trimmingWhitespace(String($0))) }.filter { !$0.isEmpty }
    }
}

/// An HTTP status code with its reason phrase (RFC 9110 §15).
public struct HTTPStatus: Sendable, Hashable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    public let code: Int

    public init(_ code: Int) { self.code = code }
    public init(integerLiteral code: Int) { self.code = code }

    public static let ok: HTTPStatus = 200
    public static let created: HTTPStatus = 201
    public static let accepted: HTTPStatus = 202
    public static let noContent: HTTPStatus = 204
    public static let notModified: HTTPStatus = 304
    public static let badRequest: HTTPStatus = 400
    public static let unauthorized: HTTPStatus = 401
    public static let forbidden: HTTPStatus = 403
    public static let notFound: HTTPStatus = 404
    public static let methodNotAllowed: HTTPStatus = 405
    public static let requestTimeout: HTTPStatus = 408
    public static let conflict: HTTPStatus = 409
    public static let lengthRequired: HTTPStatus = 411
    public static let contentTooLarge: HTTPStatus = 413
    public static let uriTooLong: HTTPStatus = 414
    public static let unsupportedMediaType: HTTPStatus = 415
    public static let unprocessableContent: HTTPStatus = 422
    public static let tooManyRequests: HTTPStatus = 429
    public static let requestHeaderFieldsTooLarge: HTTPStatus = 431
    public static let internalServerError: HTTPStatus = 500
    public static let notImplemented: HTTPStatus = 501
    public static let serviceUnavailable: HTTPStatus = 503
    public static let httpVersionNotSupported: HTTPStatus = 505

    /// The RFC 9110 reason phrase; empty for codes without one (the phrase is
    /// optional on the wire).
    public var reasonPhrase: String {
        switch code {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 411: "Length Required"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default: ""
        }
    }

    public var description: String { reasonPhrase.isEmpty ? "\(code)" : "\(code) \(reasonPhrase)" }
}

public struct HTTPVersion: Sendable, Hashable, CustomStringConvertible {
    public let major: Int
    public let minor: Int

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    public static let http10 = HTTPVersion(major: 1, minor: 0)
    public static let http11 = HTTPVersion(major: 1, minor: 1)

    public var description: String { "HTTP/\(major).\(minor)" }
}

/// One request as the handler sees it: the head parsed and checked, the body
/// read completely (Content-Length only).
public struct HTTPRequest: Sendable {
    public struct QueryItem: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// As sent (methods are case-sensitive, RFC 9110 §9.1): "GET", "POST", …
    public var method: String
    /// The request target as sent, e.g. "/devices?limit=5".
    public var target: String
    /// The path as sent, still percent-encoded, without the query.
    public var path: String
    /// The path's segments, percent-decoded; empty segments are left out, so
    /// "/devices/" and "/devices" both give ["devices"].
    public var pathSegments: [String]
    /// Query parameters, names and values percent-decoded ("+" is a space).
    /// A name given twice keeps its first value; `queryItems` has them all.
    public var query: [String: String]
    public var queryItems: [QueryItem]
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// The client's IP address ("127.0.0.1", "::1"; IPv4-mapped IPv6 addresses
    /// are given as IPv4).
    public var remoteHost: String
    public var remotePort: Int
    /// Values of the route's `:name` segments, filled in by `Router`.
    public var pathParameters: [String: String] = [:]

    /// "127.0.0.1:54321" or "[::1]:54321".
    public var remoteAddress: String { formatHostPort(remoteHost, remotePort) }

    /// Builds a request as the server would (for calling handlers without a
    /// socket). Nil when `target` is not an origin-form or absolute-form target
    /// or its percent-encoding is invalid.
    public init?(
        method: String,
        target: String,
        version: HTTPVersion = .http11,
        headers: HTTPHeaders = [:],
        body: [UInt8] = [],
        remoteHost: String = "127.0.0.1",
        remotePort: Int = 0
    ) {
        guard case .success(let parsed) = RequestTarget.parse(target) else { return nil }
        self.init(method: method, target: parsed, version: version, headers: headers, body: body, remoteHost: remoteHost, remotePort: remotePort)
    }

    init(method: String, target: RequestTarget, version: HTTPVersion, headers: HTTPHeaders, body: [UInt8], remoteHost: String, remotePort: Int) {
        self.method = method
        self.target = target.raw
        self.path = target.path
        self.pathSegments = target.segments
        self.queryItems = target.queryItems
        var query: [String: String] = [:]
        for item in target.queryItems where query[item.name] == nil {
            query[item.name] = item.value
        }
        self.query = query
        self.version = version
        self.headers = headers
        self.body = body
        self.remoteHost = remoteHost
        self.remotePort = remotePort
    }
}

/// What a handler returns. The server adds Date, Server, Content-Length (or
/// Transfer-Encoding) and Connection itself; framing headers set here are
/// ignored, except that `Connection: close` is honoured.
public struct HTTPResponse: Sendable {
    public enum Body: Sendable {
        case bytes([UInt8])
        /// Written as it is produced: chunked for HTTP/1.1, or until the
        /// connection closes for `text/event-stream` and HTTP/1.0 clients.
        /// When the client goes away the consuming task is cancelled, so the
        /// stream terminates (its `onTermination` runs with `.cancelled`).
        case stream(AsyncStream<[UInt8]>)
    }

    public var status: HTTPStatus
    public var headers: HTTPHeaders
    public var body: Body

    public init(status: HTTPStatus = .ok, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = .bytes(body)
    }

    public init(status: HTTPStatus = .ok, headers: HTTPHeaders = [:], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON body that is already encoded.
    public static func json(status: HTTPStatus = .ok, _ body: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body)
    }

    public static func text(status: HTTPStatus = .ok, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "text/plain; charset=utf-8"], body: Array(text.utf8))
    }

    /// An error for API clients: `{"error": "<message>"}`.
    public static func problem(status: HTTPStatus, _ message: String) -> HTTPResponse {
        .json(status: status, Array("{\"error\": \(jsonStringLiteral(message))}".utf8))
    }

    /// A body written while `body` produces it (see `Body.stream`).
    public static func stream(status: HTTPStatus = .ok, headers: HTTPHeaders = [:], body: AsyncStream<[UInt8]>) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers, body: .stream(body))
    }

    /// The body when it is not a stream.
    public var bodyBytes: [UInt8]? {
        if case .bytes(let bytes) = body { return bytes }
        return nil
    }
}

// MARK: Small text helpers (ASCII rules of HTTP, no locale)

func asciiLowercased(_ s: String) -> String {
    String(decoding: s.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
}

func asciiCaseInsensitiveEquals(_ a: String, _ b: String) -> Bool {
    let x = a.utf8, y = b.utf8
    guard x.count == y.count else { return false }
    for (p, q) in zip(x, y) {
        let lp = p >= 0x41 && p <= 0x5A ? p + 0x20 : p
        let lq = q >= 0x41 && q <= 0x5A ? q + 0x20 : q
        if lp != lq { return false }
    }
    return true
}

func trimmingWhitespace(_ s: String) -> String {
    var bytes = Substring(s).utf8[...]
    while let first = bytes.first, first == 0x20 || first == 0x09 { bytes = bytes.dropFirst() }
    while let last = bytes.last, last == 0x20 || last == 0x09 { bytes = bytes.dropLast() }
    return String(decoding: bytes, as: UTF8.self)
}

func formatHostPort(_ host: String, _ port: Int) -> String {
    host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
}

/// A JSON string literal for `s` (RFC 8259 §7).
func jsonStringLiteral(_ s: String) -> String { JSONValue.quote(s) }
