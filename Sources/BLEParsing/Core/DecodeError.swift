import Vocabulary
/// The error type of every `BLEParsing` decoder. (A btsnoop file that cannot
/// be framed into records is a ``CaptureError``, which names the record and
/// the file offset instead of a decoder context.)
///
/// Every failure names the decoder (``context``), the byte ``offset`` inside the
/// decoded buffer where it happened (when there is one), what the decoder
/// ``expected`` and what it ``found``. ``description`` renders a one-line human
/// message, for example:
///
///     heart rate measurement: need 2 bytes for a uint16 value at offset 1, have 1
public struct DecodeError: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, in broad terms.
    public enum Kind: String, Equatable, Hashable, Sendable {
        /// The buffer ended before a value could be read.
        case truncated
        /// Bytes were left over after the layout was fully decoded.
        case trailingBytes = "trailing_bytes"
        /// A value is outside its allowed range or malformed.
        case invalidValue = "invalid_value"
        /// A value uses a code point the specification reserves for future use.
        case reserved
        /// The input is well formed but not something this library decodes
        /// (unknown characteristic, unknown format version, ...).
        case unsupported
    }

    public var kind: Kind
    /// The decoder or structure being decoded, e.g. "heart rate measurement".
    public var context: String
    /// Byte offset inside the decoded buffer, if the error is tied to one.
    public var offset: Int?
    /// What the decoder needed, e.g. "2 bytes for a uint16 value".
    public var expected: String
    /// What it found instead, e.g. "1".
    public var found: String

    public init(kind: Kind, context: String, offset: Int?, expected: String, found: String) {
        self.kind = kind
        self.context = context
        self.offset = offset
        self.expected = expected
        self.found = found
    }

    /// "need `needed` bytes for `what` at offset `offset`, have `available`".
    public static func truncated(
        context: String, offset: Int, needed: Int, available: Int, what: String
    ) -> DecodeError {
        DecodeError(
            kind: .truncated, context: context, offset: offset,
            expected: "\(needed) byte\(needed == 1 ? "" : "s") for \(what)",
            found: "\(available)")
    }

    /// The layout ended at `offset` but `extra` bytes remain.
    public static func trailingBytes(context: String, offset: Int, extra: Int) -> DecodeError {
        DecodeError(
            kind: .trailingBytes, context: context, offset: offset,
            expected: "end of data", found: "\(extra) more byte\(extra == 1 ? "" : "s")")
    }

    public static func invalidValue(
        context: String, offset: Int?, expected: String, found: String
    ) -> DecodeError {
        DecodeError(kind: .invalidValue, context: context, offset: offset, expected: expected, found: found)
    }

    public static func reserved(
        context: String, offset: Int?, field: String, found: String
    ) -> DecodeError {
        DecodeError(kind: .reserved, context: context, offset: offset, expected: "a defined \(field)", found: found)
    }

    public static func unsupported(context: String, what: String) -> DecodeError {
        DecodeError(kind: .unsupported, context: context, offset: nil, expected: "a supported input", found: what)
    }

    public var description: String {
        switch kind {
        case .truncated:
            return "\(context): need \(expected) at offset \(offset ?? 0), have \(found)"
        case .trailingBytes:
            return "\(context): expected end of data at offset \(offset ?? 0), found \(found)"
        case .invalidValue:
            return "\(context): invalid value\(at): expected \(expected), found \(found)"
        case .reserved:
            return "\(context): reserved value\(at): expected \(expected), found \(found)"
        case .unsupported:
            return "\(context): unsupported: \(found)"
        }
    }

    private var at: String {
        if let offset { return " at offset \(offset)" }
        return ""
    }
}

/// Lower-case hex rendering used in error messages and JSON (`"0x2a37"`).
@inlinable
public func hexString<T: FixedWidthInteger>(_ value: T, digits: Int = MemoryLayout<T>.size * 2) -> String {
    if value >= 0, T.bitWidth <= 64, digits <= 16 {
        // Fast path (the common case): "0x" + zero-padded lower-case digits written
        // directly into a small string, same text as the general path below.
        let v = UInt64(truncatingIfNeeded: value)
        var n = 1
        var t = v >> 4
        while t != 0 { n += 1; t >>= 4 }
        let width = max(n, digits)
        return String(unsafeUninitializedCapacity: width + 2) { buf in
            buf[0] = UInt8(ascii: "0")
            buf[1] = UInt8(ascii: "x")
            for k in 0..<width {
                let shift = UInt64(4 * (width - 1 - k))
                let d = shift < 64 ? UInt8(truncatingIfNeeded: (v >> shift) & 0xF) : 0
                buf[2 + k] = d < 10 ? d &+ 0x30 : d &+ 0x57
            }
            return width + 2
        }
    }
    var s = String(value, radix: 16)
    if s.count < digits { s = String(repeating: "0", count: digits - s.count) + s }
    return "0x" + s
}

/// Lower-case hex of a byte sequence without separators (`"0a1b"`).
public func hexString<C: Collection>(bytes: C) -> String where C.Element == UInt8 { Hex.string(bytes) }

/// Reads hex bytes as ``Hex/bytes(_:)`` does ("0a1B", "0a 1b", "0a:1b",
/// optional "0x"), with the failure as a ``DecodeError`` naming `context`.
public func parseHex(_ text: String, context: String = "hex input") throws(DecodeError) -> [UInt8] {
    do {
        return try Hex.bytes(text)
    } catch {
        throw .invalidValue(context: context, offset: error.offset, expected: error.expected, found: text.utf8.count > 40 ? "\"\(text.prefix(40))…\"" : "\"\(text)\"")
    }
}
