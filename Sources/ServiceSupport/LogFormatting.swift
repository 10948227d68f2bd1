// Shared by the JSON and text handlers: timestamps, JSON string escaping and
// metadata rendering, all straight to UTF-8 bytes.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging

enum LogFormatting {
    /// Now, UTC, with milliseconds: `2026-11-23T02:00:00.123Z`.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return timestamp(seconds: Int(now.tv_sec), nanoseconds: Int(now.tv_nsec))
    }

    /// The RFC 3339 UTC form of a point in time given as seconds since the
    /// epoch plus nanoseconds (truncated to milliseconds).
    static func timestamp(seconds: Int, nanoseconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return "1970-01-01T00:00:00.000Z" }
        var out = ""
        out.reserveCapacity(24)
        out += padded(Int(parts.tm_year) + 1900, 4)
        out += "-" + padded(Int(parts.tm_mon) + 1, 2)
        out += "-" + padded(Int(parts.tm_mday), 2)
        out += "T" + padded(Int(parts.tm_hour), 2)
        out += ":" + padded(Int(parts.tm_min), 2)
        out += ":" + padded(Int(parts.tm_sec), 2)
        out += "." + padded(nanoseconds / 1_000_000, 3) + "Z"
        return out
    }

    private static func padded(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `string` as a JSON string literal (with the quotes). Quotes,
    /// backslashes and every control character (U+0000–U+001F, and DEL) are
    /// escaped; everything else, non-ASCII included, is copied as UTF-8.
    static func appendJSONString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        appendEscaped(string, to: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// The inside of a JSON string literal; also what the text handler uses
    /// so that a device name cannot put escape sequences on a terminal.
    static func appendEscaped(_ string: String, to out: inout [UInt8]) {
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x08: out += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: out += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0x00..<0x20, 0x7F:
                out += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                        hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default:
                out.append(byte)
            }
        }
    }

    /// Appends a metadata value as JSON: strings as strings, dictionaries as
    /// objects (keys sorted, so output is stable), arrays as arrays. Values
    /// logged as integers, booleans or finite floating-point numbers through
    /// `.stringConvertible` become JSON numbers and booleans.
    static func appendJSON(_ value: Logger.MetadataValue, to out: inout [UInt8]) {
        switch value {
        case .string(let string):
            appendJSONString(string, to: &out)
        case .stringConvertible(let convertible):
            if let literal = jsonLiteral(convertible) {
                out += Array(literal.utf8)
            } else {
                appendJSONString(convertible.description, to: &out)
            }
        case .dictionary(let dictionary):
            out.append(UInt8(ascii: "{"))
            for (index, key) in dictionary.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendJSONString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                if let nested = dictionary[key] { appendJSON(nested, to: &out) }
            }
            out.append(UInt8(ascii: "}"))
        case .array(let array):
            out.append(UInt8(ascii: "["))
            for (index, element) in array.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                appendJSON(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
    }

    private static func jsonLiteral(_ value: any CustomStringConvertible & Sendable) -> String? {
        switch value {
        case let flag as Bool: return flag ? "true" : "false"
        case let integer as any BinaryInteger: return String(describing: integer)
        case let number as Double: return number.isFinite ? String(describing: number) : nil
        case let number as Float: return number.isFinite ? String(describing: number) : nil
        default: return nil
        }
    }

    /// A metadata value as plain text for the terminal handler (escaped, no
    /// quotes around simple strings).
    static func appendText(_ value: Logger.MetadataValue, to out: inout [UInt8]) {
        switch value {
        case .string(let string):
            if string.isEmpty || string.utf8.contains(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\"") }) {
                appendJSONString(string, to: &out)
            } else {
                appendEscaped(string, to: &out)
            }
        case .stringConvertible(let convertible):
            appendText(.string(convertible.description), to: &out)
        case .dictionary, .array:
            appendJSON(value, to: &out)
        }
    }

    /// The handler's metadata, then the provider's, then the call's (later
    /// ones win on equal keys), as swift-log's own handlers merge them.
    static func merged(
        _ handler: Logger.Metadata,
        _ provider: Logger.MetadataProvider?,
        _ event: Logger.Metadata?
    ) -> Logger.Metadata {
        var result = handler
        if let provided = provider?.get(), !provided.isEmpty {
            result.merge(provided) { _, new in new }
        }
        if let event, !event.isEmpty {
            result.merge(event) { _, new in new }
        }
        return result
    }
}
