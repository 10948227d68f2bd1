/// Hex digits and hex bytes: the one reader and writer every module uses
/// (command-line arguments, configuration, scenario files, MQTT/HTTP
/// commands, JSON output).
public enum Hex {
    /// The value of one ASCII hex digit, either case; nil for anything else.
    @inline(__always) public static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c &- 0x30
        case 0x41...0x46: return c &- 0x41 &+ 10
        case 0x61...0x66: return c &- 0x61 &+ 10
        default: return nil
        }
    }

    /// The ASCII digit for `nibble` (0…15).
    @inline(__always) public static func digit(_ nibble: UInt8, uppercase: Bool = false) -> UInt8 {
        let n = nibble & 0xF
        return n < 10 ? 0x30 &+ n : (uppercase ? 0x41 : 0x61) &+ n &- 10
    }

    /// `[0x0a, 0x1b]` → `"0a1b"` (or `"0A1B"`), no separators.
    public static func string<C: Collection>(_ bytes: C, uppercase: Bool = false) -> String where C.Element == UInt8 {
        let count = bytes.count
        guard count > 0 else { return "" }
        return String(unsafeUninitializedCapacity: count * 2) { out in
            var at = 0
            for b in bytes {
                out[at] = digit(b >> 4, uppercase: uppercase)
                out[at + 1] = digit(b, uppercase: uppercase)
                at += 2
            }
            return at
        }
    }

    /// Reads hex bytes as people write them: either case, an optional `0x`
    /// prefix, and spaces, tabs, newlines, `:` or `-` between bytes
    /// (`"0a1B"`, `"0x0a1b"`, `"0a 1b"`, `"0a:1b"`). An empty text is no bytes.
    public static func bytes(_ text: String) throws(SpellingError) -> [UInt8] {
        var utf8 = Substring(text).utf8[...]
        var skipped = 0
        if utf8.starts(with: "0x".utf8) || utf8.starts(with: "0X".utf8) { utf8 = utf8.dropFirst(2); skipped = 2 }
        var out = [UInt8]()
        out.reserveCapacity(utf8.count / 2)
        var high: UInt8? = nil
        for (i, c) in utf8.enumerated() {
            switch c {
            case 0x20, 0x3A, 0x2D, 0x0A, 0x09, 0x0D:
                if high != nil {
                    throw SpellingError(.hex, text, expected: "two hex digits per byte", offset: skipped + i)
                }
            default:
                guard let nibble = value(c) else {
                    throw SpellingError(.hex, text, expected: "hex digits such as 0a1b, \"0a 1b\" or 0a:1b", offset: skipped + i)
                }
                if let h = high {
                    out.append(h << 4 | nibble)
                    high = nil
                } else {
                    high = nibble
                }
            }
        }
        if high != nil { throw SpellingError(.hex, text, expected: "an even number of hex digits") }
        return out
    }
}
