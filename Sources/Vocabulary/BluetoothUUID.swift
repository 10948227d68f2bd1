/// A Bluetooth UUID. Internally always the full 128-bit value; 16- and 32-bit
/// UUIDs are the SIG base UUID `0000xxxx-0000-1000-8000-00805f9b34fb` with the
/// short value in the top 32 bits.
///
/// - ``string``: canonical lower-case 36-character form.
/// - ``shortString``: "180d" / "0000fe95"-style short form when the UUID is
///   based on the SIG base UUID, else the canonical form.
/// - Parsing (`init(parsing:)`) accepts "180d", "0x180D", "0000180d", and the
///   full form with or without dashes, in any case.
/// - Air order: 16/32/128-bit UUIDs are little-endian on air; use
///   `init(littleEndianBytes:)` (the parsing module's `ByteReader.uuid16()`
///   etc. read them from a packet).
public struct BluetoothUUID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The most significant 64 bits (the first 8 bytes of the canonical form).
    public let high: UInt64
    /// The least significant 64 bits.
    public let low: UInt64

    /// Low 96 bits of the base UUID.
    public static let baseHighLow32: UInt64 = 0x0000_1000
    public static let baseLow: UInt64 = 0x8000_0080_5F9B_34FB

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A SIG 16-bit UUID, e.g. `BluetoothUUID(uuid16: 0x180D)`.
    public init(uuid16: UInt16) {
        self.init(uuid32: UInt32(uuid16))
    }

    /// A SIG 32-bit UUID.
    public init(uuid32: UInt32) {
        self.high = UInt64(uuid32) << 32 | BluetoothUUID.baseHighLow32
        self.low = BluetoothUUID.baseLow
    }

    /// From 2, 4 or 16 bytes in air (little-endian) order; nil for any other count.
    public init?<C: Collection>(littleEndianBytes bytes: C) where C.Element == UInt8 {
        var v: (high: UInt64, low: UInt64) = (0, 0)
        for (i, b) in bytes.enumerated() where i < 16 {
            if i < 8 { v.low |= UInt64(b) << (8 * UInt64(i)) } else { v.high |= UInt64(b) << (8 * UInt64(i - 8)) }
        }
        switch bytes.count {
        case 2: self.init(uuid16: UInt16(truncatingIfNeeded: v.low))
        case 4: self.init(uuid32: UInt32(truncatingIfNeeded: v.low))
        case 16: self.init(high: v.high, low: v.low)
        default: return nil
        }
    }

    /// From 16 bytes in canonical (big-endian, as written) order; nil for any other count.
    public init?<C: Collection>(bigEndianBytes bytes: C) where C.Element == UInt8 {
        guard bytes.count == 16 else { return nil }
        var h: UInt64 = 0, l: UInt64 = 0
        for (i, b) in bytes.enumerated() {
            if i < 8 { h = h << 8 | UInt64(b) } else { l = l << 8 | UInt64(b) }
        }
        self.init(high: h, low: l)
    }

    static let spelling = "4 or 8 hex digits (\"180d\", \"0x180D\", \"0000fe95\") or 32, optionally 8-4-4-4-12 with dashes"

    /// Reads "180d", "0x180D", "0000180d", "0000180d-0000-1000-8000-00805f9b34fb"
    /// or the same 32 hex digits without dashes, in either case: the one
    /// reader of UUIDs for the CLI, the configuration, scenario files, MQTT
    /// and HTTP commands and BlueZ's own properties.
    public init(parsing text: String) throws(SpellingError) {
        var utf8 = Substring(text).utf8[...]
        var skipped = 0
        if utf8.starts(with: "0x".utf8) || utf8.starts(with: "0X".utf8) { utf8 = utf8.dropFirst(2); skipped = 2 }
        var high: UInt64 = 0, low: UInt64 = 0
        var digits = 0
        var dashes: [Int] = []
        for (i, c) in utf8.enumerated() {
            if c == 0x2D { dashes.append(i); continue }
            guard let d = Hex.value(c) else { throw SpellingError(.uuid, text, expected: Self.spelling, offset: skipped + i) }
            guard digits < 32 else { throw SpellingError(.uuid, text, expected: Self.spelling) }
            if digits < 16 { high = high << 4 | UInt64(d) } else { low = low << 4 | UInt64(d) }
            digits += 1
        }
        switch digits {
        case 4 where dashes.isEmpty: self.init(uuid16: UInt16(truncatingIfNeeded: high))
        case 8 where dashes.isEmpty: self.init(uuid32: UInt32(truncatingIfNeeded: high))
        case 32 where (dashes.isEmpty || dashes == [8, 13, 18, 23]): self.init(high: high, low: low)
        default: throw SpellingError(.uuid, text, expected: Self.spelling)
        }
    }

    /// The short form of `text` (``shortString``: "180d" for a SIG UUID)
    /// if it spells a UUID, else `text` lower-cased: what every front end
    /// shows for a UUID.
    public static func short(_ text: String) -> String {
        (try? BluetoothUUID(parsing: text))?.shortString ?? text.lowercased()
    }

    /// The canonical form of `text` if it spells a UUID (BlueZ's properties
    /// hold that form), else nil.
    public static func canonical(_ text: String) -> String? {
        (try? BluetoothUUID(parsing: text))?.string
    }

    /// `true` if this is a SIG-assigned 16/32-bit UUID on the base UUID.
    public var isBased: Bool {
        (high & 0xFFFF_FFFF) == BluetoothUUID.baseHighLow32 && low == BluetoothUUID.baseLow
    }

    /// The 16-bit value, if this UUID is `0000xxxx-<base>`.
    public var uuid16: UInt16? {
        guard isBased, high >> 48 == 0 else { return nil }
        return UInt16(truncatingIfNeeded: high >> 32)
    }

    /// The 32-bit value, if this UUID is `xxxxxxxx-<base>`.
    public var uuid32: UInt32? {
        guard isBased else { return nil }
        return UInt32(truncatingIfNeeded: high >> 32)
    }

    /// Canonical lower-case form, e.g. "0000180d-0000-1000-8000-00805f9b34fb".
    public var string: String {
        // Written straight into the string's storage (no intermediate strings or arrays).
        let h = high, l = low
        return String(unsafeUninitializedCapacity: 36) { buf in
            var j = 0
            func put(_ v: UInt64, _ from: Int, _ to: Int) {
                // Hex digits `from..<to` of the 16-digit big-endian form of `v`.
                for k in from..<to {
                    let d = UInt8(truncatingIfNeeded: (v >> UInt64(4 * (15 - k))) & 0xF)
                    buf[j] = d < 10 ? d &+ 0x30 : d &+ 0x57
                    j += 1
                }
            }
            put(h, 0, 8); buf[j] = UInt8(ascii: "-"); j += 1
            put(h, 8, 12); buf[j] = UInt8(ascii: "-"); j += 1
            put(h, 12, 16); buf[j] = UInt8(ascii: "-"); j += 1
            put(l, 0, 4); buf[j] = UInt8(ascii: "-"); j += 1
            put(l, 4, 16)
            return j
        }
    }

    /// "180d" for 16-bit SIG UUIDs, 8 hex digits for 32-bit ones, else ``string``.
    public var shortString: String {
        if let s = uuid16 { return hex(UInt64(s), 4) }
        if let s = uuid32 { return hex(UInt64(s), 8) }
        return string
    }

    /// Bytes in canonical (big-endian) order.
    public var bigEndianBytes: [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * UInt64($0))) }
            + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * UInt64($0))) }
    }

    /// Bytes in air (little-endian) order: 2 bytes for 16-bit SIG UUIDs,
    /// 4 for 32-bit ones, else 16.
    public var littleEndianBytes: [UInt8] {
        if let s = uuid16 { return [UInt8(s & 0xFF), UInt8(s >> 8)] }
        if let s = uuid32 { return (0..<4).map { UInt8(truncatingIfNeeded: s >> (8 * UInt32($0))) } }
        return bigEndianBytes.reversed()
    }

    public var description: String { string }

    public static func < (a: BluetoothUUID, b: BluetoothUUID) -> Bool {
        (a.high, a.low) < (b.high, b.low)
    }

    private func hex(_ v: UInt64, _ digits: Int) -> String {
        String(unsafeUninitializedCapacity: digits) { out in
            for k in 0..<digits { out[k] = Hex.digit(UInt8(truncatingIfNeeded: v >> UInt64(4 * (digits - 1 - k)))) }
            return digits
        }
    }
}

extension BluetoothUUID: ExpressibleByIntegerLiteral {
    /// `let hr: BluetoothUUID = 0x2A37`
    public init(integerLiteral value: UInt16) {
        self.init(uuid16: value)
    }
}
