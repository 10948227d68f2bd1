// Access control helpers for the local API.
import Glibc

public enum BearerAuth {
    /// Whether `request` carries exactly one `Authorization: Bearer <token>`
    /// (RFC 6750 §2.1; the scheme name is case-insensitive, RFC 9110 §11.1)
    /// with `token`. The comparison takes the same time wherever the tokens
    /// differ. An empty `token` never matches: an unset secret must not open
    /// the API.
    public static func check(_ request: HTTPRequest, token: String) -> Bool {
        let values = request.headers.values(for: "Authorization")
        guard !token.isEmpty, values.count == 1 else { return false }
        let header = Array(values[0].utf8)
        let scheme = Array("bearer".utf8)
        guard header.count > scheme.count, header[scheme.count] == 0x20,
              asciiLowercased(String(decoding: header[..<scheme.count], as: UTF8.self)) == "bearer" else { return false }
        var presented = header[(scheme.count + 1)...]
        while presented.first == 0x20 { presented = presented.dropFirst() }
        while presented.last == 0x20 || presented.last == 0x09 { presented = presented.dropLast() }
        return constantTimeEquals(presented, Array(token.utf8))
    }

    /// A 401 with the challenge clients expect (RFC 6750 §3).
    public static func unauthorized(_ message: String = "missing or invalid bearer token") -> HTTPResponse {
        var response = HTTPResponse.problem(status: .unauthorized, message)
        response.headers.add("WWW-Authenticate", "Bearer realm=\"\(serverName)\"")
        return response
    }

    /// 127.0.0.0/8, ::1 (also IPv4-mapped ::ffff:127.x.y.z, with or without
    /// brackets) and the name localhost.
    public static func isLoopback(host: String) -> Bool {
        var literal = host
        if literal.hasPrefix("["), literal.hasSuffix("]") { literal = String(literal.dropFirst().dropLast()) }
        let lower = asciiLowercased(literal)
        if lower == "localhost" || lower == "localhost." { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, literal, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { $0[0] } == 127
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, literal, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
        return bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
    }

    /// Time depends on the expected token's length only.
    static func constantTimeEquals(_ presented: ArraySlice<UInt8>, _ expected: [UInt8]) -> Bool {
        var difference: UInt8 = presented.count == expected.count ? 0 : 1
        for i in 0..<expected.count {
            let index = presented.startIndex + i
            let byte = index < presented.endIndex ? presented[index] : 0
            difference |= byte ^ expected[i]
        }
        return difference == 0
    }
}
