#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Syntax of the values that are more than a type and not Bluetooth words
/// (addresses, UUIDs and hex are read by the Vocabulary module).
/// Each check returns the normalised value, or `nil` when it does not fit.
enum Syntax {
    /// `hci0`, `hci1`, … (no leading zeros).
    static func isAdapterName(_ text: String) -> Bool {
        guard text.hasPrefix("hci") else { return false }
        let number = text.dropFirst(3)
        return !number.isEmpty && number.count <= 4 && number.allSatisfy { $0.isASCII && $0.isNumber }
            && (number == "0" || number.first != "0")
    }

    /// A D-Bus server address: `transport:key=value,…`, several joined by `;`.
    static func isDBusAddress(_ text: String) -> Bool {
        let entries = text.split(separator: ";")
        guard !entries.isEmpty else { return false }
        return entries.allSatisfy { entry in
            guard let colon = entry.firstIndex(of: ":") else { return false }
            let transport = entry[..<colon]
            guard !transport.isEmpty, transport.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else { return false }
            let pairs = entry[entry.index(after: colon)...]
            guard !pairs.isEmpty else { return true }
            return pairs.split(separator: ",", omittingEmptySubsequences: false).allSatisfy { pair in
                guard let equals = pair.firstIndex(of: "=") else { return false }
                return equals != pair.startIndex && pair.index(after: equals) != pair.endIndex
            }
        }
    }

    /// Gateway ids end up in MQTT topics and Home Assistant ids: letters, digits, `.`, `_`, `-`.
    /// An identity's name becomes `id_<name>` in topics and ids.
    static func isIdentityName(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 60 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }
    }

    /// Profile, field and command names: letters, digits, `_`, `-`, at most 64.
    static func isIdentifier(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }
    }

    static func isGatewayID(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 64 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") }
    }

    /// Why `text` cannot be the start of MQTT topics the gateway publishes to, or `nil` if it can.
    static func topicProblem(_ text: String) -> String? {
        if text.isEmpty { return "must not be empty" }
        if text.contains(where: { $0 == "+" || $0 == "#" }) { return "must not contain the MQTT wildcards + or #" }
        if text.hasSuffix("/") { return "must not end with /" }
        if text.unicodeScalars.contains(where: { $0.value == 0 }) { return "must not contain NUL" }
        return nil
    }
}

/// `host:port` or `[ipv6]:port`, as the HTTP `listen` key takes it.
enum ListenAddress {
    enum Parsed: Equatable {
        case valid(host: String, port: Int)
        case invalid(String)
    }

    static func parse(_ text: String) -> Parsed {
        let host: Substring
        let port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return .invalid("missing ] after the IPv6 address") }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return .invalid("expected :port after ]") }
            port = rest.dropFirst()
            guard isIPv6(String(host)) else { return .invalid("\"\(host)\" is not an IPv6 address") }
        } else {
            guard let colon = text.lastIndex(of: ":") else {
                return .invalid("expected host:port, like 127.0.0.1:8080")
            }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            if host.contains(":") { return .invalid("an IPv6 address needs brackets, like [::1]:8080") }
            if host.isEmpty { return .invalid("the host is missing; 0.0.0.0:8080 listens on every IPv4 address") }
            guard isIPv4(String(host)) || isHostName(host) else { return .invalid("\"\(host)\" is not an IP address or host name") }
        }
        guard let number = Int(port), port.allSatisfy({ $0.isASCII && $0.isNumber }), (1...65535).contains(number) else {
            return .invalid("expected a port 1…65535 after the colon, got \"\(port)\"")
        }
        return .valid(host: String(host), port: number)
    }

    /// 127.0.0.0/8, `::1`, `localhost`.
    static func isLoopback(_ host: String) -> Bool {
        if host.lowercased() == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { $0.first == 127 }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { bytes in bytes.dropLast().allSatisfy { $0 == 0 } && bytes.last == 1 }
        }
        return false
    }

    static func isIPv4(_ host: String) -> Bool {
        var address = in_addr()
        return inet_pton(AF_INET, host, &address) == 1
    }

    static func isIPv6(_ host: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET6, host, &address) == 1
    }

    static func isHostName(_ host: Substring) -> Bool {
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        return host.count <= 253 && labels.allSatisfy { label in
            !label.isEmpty && label.count <= 63 && label.first != "-" && label.last != "-"
                && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        } && !host.allSatisfy { $0.isNumber || $0 == "." }
    }
}
