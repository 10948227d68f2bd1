import ArgumentParser
import BLEParsing
import Vocabulary

/// Parsers for the `decode` command-line arguments. Each throws a
/// `ValidationError` whose message says what was expected; ArgumentParser
/// prefixes it with the argument's name and exits with status 64.
enum DecodeArguments {
    /// Hex bytes: upper/lower case, optional "0x" prefix, spaces, colons or dashes between bytes.
    static func hex(_ text: String) throws -> [UInt8] {
        do { return try Hex.bytes(text.trimmingSpaces()) } catch { throw ValidationError(error.description) }
    }

    /// A non-empty payload.
    static func payload(_ text: String) throws -> [UInt8] {
        let bytes = try hex(text)
        if bytes.isEmpty { throw ValidationError("expected at least one byte of hex, found none") }
        return bytes
    }

    /// A 16-byte AES key (BTHome, MiBeacon v4/v5, pvvx).
    static func bindkey(_ text: String) throws -> [UInt8] {
        let bytes = try hex(text)
        guard bytes.count == 16 else {
            throw ValidationError("a bindkey is 16 bytes (32 hex digits), found \(bytes.count) byte\(bytes.count == 1 ? "" : "s")")
        }
        return bytes
    }

    /// "AA:BB:CC:DD:EE:FF", dashes or underscores instead of colons, or 12 hex digits.
    static func mac(_ text: String) throws -> BluetoothAddress {
        do { return try BluetoothAddress(text.trimmingSpaces()) } catch { throw ValidationError(error.description) }
    }

    /// "180d", "0x180D", "0000fcd2", or a full 128-bit UUID.
    static func uuid(_ text: String) throws -> BluetoothUUID {
        do { return try BluetoothUUID(parsing: text.trimmingSpaces()) } catch { throw ValidationError(error.description) }
    }

    /// "0x0499" / "0X499" (hex) or "1177" (decimal), 0...65535.
    static func companyID(_ text: String) throws -> UInt16 {
        let t = text.trimmingSpaces()
        let value: UInt64?
        if t.hasPrefix("0x") || t.hasPrefix("0X") {
            let digits = t.dropFirst(2)
            value = digits.isEmpty ? nil : UInt64(digits, radix: 16)
        } else {
            value = t.isEmpty ? nil : UInt64(t, radix: 10)
        }
        guard let value, value <= 0xFFFF else {
            throw ValidationError("expected a 16-bit company identifier such as 0x0499 or 1177 (decimal), found \"\(text)\"")
        }
        return UInt16(value)
    }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\n" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\n" { s = s.dropLast() }
        return String(s)
    }
}
