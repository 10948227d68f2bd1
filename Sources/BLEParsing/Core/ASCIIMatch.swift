/// Allocation-free ASCII helpers for name matching on hot paths.
///
/// Each helper gives the same answer as the `String` based spelling it
/// replaces (`lowercased()`, `contains`), because callers only use them when
/// the haystack is pure ASCII (``isASCII(_:)``); for other names they fall
/// back to the Unicode-aware `String` operations.
enum ASCIIMatch {
    /// Whether every UTF-8 code unit of `s` is ASCII.
    @inline(__always)
    static func isASCII(_ s: String) -> Bool {
        var s = s
        return s.withUTF8 { buf in
            for b in buf where b >= 0x80 { return false }
            return true
        }
    }

    @inline(__always)
    static func lower(_ b: UInt8) -> UInt8 {
        (b >= 0x41 && b <= 0x5A) ? b | 0x20 : b
    }

    /// `s.lowercased() == needle` for ASCII `s`; `needle` must be lower-case ASCII.
    static func equalsIgnoringCase(_ s: String, _ needle: StaticString) -> Bool {
        var s = s
        return s.withUTF8 { buf in
            let n = needle.utf8CodeUnitCount
            guard buf.count == n else { return false }
            let p = needle.utf8Start
            for i in 0..<n where lower(buf[i]) != p[i] { return false }
            return true
        }
    }

    /// `s.lowercased().contains(needle)` for ASCII `s` (`needle` lower-case
    /// ASCII), or `s.contains(needle)` when `foldCase` is false.
    static func contains(_ s: String, _ needle: StaticString, foldCase: Bool) -> Bool {
        var s = s
        return s.withUTF8 { buf in
            let n = needle.utf8CodeUnitCount
            let p = needle.utf8Start
            if n == 0 { return true }
            guard buf.count >= n else { return false }
            var start = 0
            while start + n <= buf.count {
                var i = 0
                while i < n {
                    let b = foldCase ? lower(buf[start + i]) : buf[start + i]
                    if b != p[i] { break }
                    i += 1
                }
                if i == n { return true }
                start += 1
            }
            return false
        }
    }
}
