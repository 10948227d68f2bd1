/// A Bluetooth device address (BD_ADDR): 48 bits, written most significant
/// byte first as bluetoothd and every tool show it (`AA:BB:CC:DD:EE:FF`), sent
/// least significant byte first on air.
///
/// One type for every layer: the parser's advertisement models, BlueZ's
/// object paths, the gateway's topics and the configuration all hold this.
/// An integer, not an array: an address is the key of every per-device table
/// and is read from every PropertiesChanged signal.
public struct BluetoothAddress: Sendable, Hashable, Comparable, CustomStringConvertible, Codable {
    /// The 48 bits; `0xAABBCCDDEEFF` for `AA:BB:CC:DD:EE:FF`.
    public let value: UInt64

    /// From its 48-bit value (bits above 48 are dropped).
    @inline(__always) public init(value: UInt64) {
        self.value = value & 0xFFFF_FFFF_FFFF
    }

    /// From 6 bytes as written (`bytes[0]` is `AA`); nil unless there are 6.
    public init?<C: Collection>(bytes: C) where C.Element == UInt8 {
        guard bytes.count == 6 else { return nil }
        self.init(value: bytes.reduce(0) { $0 << 8 | UInt64($1) })
    }

    /// From 6 bytes in air order (`bytes[0]` is `FF`); nil unless there are 6.
    public init?<C: Collection>(littleEndianBytes bytes: C) where C.Element == UInt8 {
        guard bytes.count == 6 else { return nil }
        self.init(value: bytes.reversed().reduce(0) { $0 << 8 | UInt64($1) })
    }

    static let spelling = "six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none"

    /// Reads `AA:BB:CC:DD:EE:FF` in either case, with `:`, `-` or `_`
    /// between the pairs (the last is bluetoothd's object-path form), or the
    /// 12 hex digits alone (`aabbccddeeff`, as in MQTT topics). The CLI, the
    /// configuration, scenario files and the HTTP API all read addresses here.
    public init(_ text: String) throws(SpellingError) {
        var v: UInt64 = 0
        let utf8 = text.utf8
        switch utf8.count {
        case 12:
            for (i, c) in utf8.enumerated() {
                guard let d = Hex.value(c) else { throw SpellingError(.address, text, expected: Self.spelling, offset: i) }
                v = v << 4 | UInt64(d)
            }
        case 17:
            var separator: UInt8 = 0
            for (i, c) in utf8.enumerated() {
                if i % 3 == 2 {
                    guard c == 0x3A || c == 0x2D || c == 0x5F, separator == 0 || c == separator else {
                        throw SpellingError(.address, text, expected: Self.spelling, offset: i)
                    }
                    separator = c
                } else {
                    guard let d = Hex.value(c) else { throw SpellingError(.address, text, expected: Self.spelling, offset: i) }
                    v = v << 4 | UInt64(d)
                }
            }
        default:
            throw SpellingError(.address, text, expected: Self.spelling)
        }
        value = v
    }

    /// Byte `i` (0…5) as written, most significant first.
    @inline(__always) public func byte(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: value >> (8 * (5 - i))) }

    /// The six bytes as written (`AA` first).
    public var bytes: [UInt8] { (0..<6).map { byte($0) } }
    /// The six bytes in air order (`FF` first).
    public var littleEndianBytes: [UInt8] { (0..<6).map { byte(5 - $0) } }

    /// `AA:BB:CC:DD:EE:FF`, upper case as bluetoothd writes it.
    public var description: String { written(separator: 0x3A) }

    /// Appends ``description``'s 17 bytes to `out` (no `String` made).
    public func appendDescription(to out: inout [UInt8]) {
        for i in 0..<6 {
            let b = byte(i)
            if i > 0 { out.append(0x3A) }
            out.append(Hex.digit(b >> 4, uppercase: true))
            out.append(Hex.digit(b, uppercase: true))
        }
    }

    /// The form in bluetoothd's object paths: `AA_BB_CC_DD_EE_FF`.
    public var pathComponent: String { written(separator: 0x5F) }

    /// The 12 digits without separators, lower case: `aabbccddeeff` (MQTT topics, file names).
    public var compact: String {
        String(unsafeUninitializedCapacity: 12) { out in
            writeCompact(to: out, at: 0)
            return 12
        }
    }

    /// Writes the 12 digits of ``compact`` into `out` from `offset` (room
    /// for them is the caller's to make): for strings that contain them,
    /// made in one allocation (a gateway's state topic, every message).
    public func writeCompact(to out: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
        for i in 0..<6 {
            out[offset + 2 * i] = Hex.digit(byte(i) >> 4)
            out[offset + 2 * i + 1] = Hex.digit(byte(i))
        }
    }

    /// One allocation, no intermediate strings (the dashboard writes every
    /// visible row's address on every frame).
    private func written(separator: UInt8) -> String {
        String(unsafeUninitializedCapacity: 17) { out in
            var at = 0
            for i in 0..<6 {
                let b = byte(i)
                if i > 0 { out[at] = separator; at += 1 }
                out[at] = Hex.digit(b >> 4, uppercase: true)
                out[at + 1] = Hex.digit(b, uppercase: true)
                at += 2
            }
            return at
        }
    }

    /// Whether `text` is this address exactly as ``description`` writes it,
    /// without making that string.
    public func isWritten(as text: String) -> Bool {
        var utf8 = text.utf8.makeIterator()
        for i in 0..<6 {
            let b = byte(i)
            if i > 0, utf8.next() != 0x3A { return false }
            guard utf8.next() == Hex.digit(b >> 4, uppercase: true), utf8.next() == Hex.digit(b, uppercase: true) else { return false }
        }
        return utf8.next() == nil
    }

    /// The two most significant bits, which classify a random address
    /// (Core Specification Vol 6 Part B 1.3.2).
    public enum RandomAddressType: String, Sendable {
        case nonResolvablePrivate = "non_resolvable_private"  // 0b00
        case resolvablePrivate = "resolvable_private"  // 0b01
        case reserved  // 0b10
        case staticRandom = "static"  // 0b11
    }

    /// What the top two bits say, if this is a random address.
    public var randomAddressType: RandomAddressType {
        switch value >> 46 {
        case 0: return .nonResolvablePrivate
        case 1: return .resolvablePrivate
        case 2: return .reserved
        default: return .staticRandom
        }
    }

    public static func < (a: BluetoothAddress, b: BluetoothAddress) -> Bool { a.value < b.value }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(text) } catch { throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.description)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}
