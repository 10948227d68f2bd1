/// A 48-bit Bluetooth device address, displayed most significant byte first
/// ("AA:BB:CC:DD:EE:FF") and sent least significant byte first on air.
public struct DeviceAddress: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The address as a number; `0xAABBCCDDEEFF` for "AA:BB:CC:DD:EE:FF".
    public let rawValue: UInt64

    /// Keeps only the low 48 bits.
    public init(rawValue: UInt64) {
        self.rawValue = rawValue & 0xFFFF_FFFF_FFFF
    }

    /// From 6 bytes in display order (`bytes[0]` is "AA").
    public init<C: Collection>(bytes: C) throws(DecodeError) where C.Element == UInt8 {
        guard bytes.count == 6 else {
            throw DecodeError.invalidValue(context: "device address", offset: nil, expected: "6 bytes", found: "\(bytes.count) bytes")
        }
        self.init(rawValue: bytes.reduce(0) { $0 << 8 | UInt64($1) })
    }

    /// From 6 bytes in air order (`bytes[0]` is "FF").
    public init<C: Collection>(littleEndianBytes bytes: C) throws(DecodeError) where C.Element == UInt8 {
        try self.init(bytes: bytes.reversed())
    }

    /// Parses "AA:BB:CC:DD:EE:FF" (also "-" separators, any case) or 12 hex digits.
    public init(parsing text: String) throws(DecodeError) {
        let ctx = "device address \"\(text)\""
        var value: UInt64 = 0
        var digits = 0
        var groupDigits = 0
        var separators = 0
        for (i, c) in text.utf8.enumerated() {
            let nibble: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = c - UInt8(ascii: "A") + 10
            case UInt8(ascii: ":"), UInt8(ascii: "-"):
                if groupDigits != 2 {
                    throw DecodeError.invalidValue(context: ctx, offset: i, expected: "two hex digits before a separator", found: "\(groupDigits)")
                }
                groupDigits = 0
                separators += 1
                continue
            default:
                throw DecodeError.invalidValue(
                    context: ctx, offset: i, expected: "a hex digit or ':'", found: "'\(String(decoding: [c], as: UTF8.self))'")
            }
            digits += 1
            groupDigits += 1
            if digits > 12 { break }
            value = value << 4 | UInt64(nibble)
        }
        guard digits == 12, separators == 0 || (separators == 5 && groupDigits == 2) else {
            throw DecodeError.invalidValue(
                context: ctx, offset: nil, expected: "6 bytes as AA:BB:CC:DD:EE:FF", found: "\(digits) hex digits")
        }
        self.init(rawValue: value)
    }

    /// Display-order bytes.
    public var bytes: [UInt8] { (0..<6).map { UInt8(truncatingIfNeeded: rawValue >> (40 - 8 * UInt64($0))) } }
    /// Air-order bytes.
    public var littleEndianBytes: [UInt8] { bytes.reversed() }

    /// "AA:BB:CC:DD:EE:FF" (upper case, as BlueZ prints it).
    public var description: String {
        // Written straight into the string's storage: no digit table or byte array per call.
        let v = rawValue
        return String(unsafeUninitializedCapacity: 17) { buf in
            @inline(__always) func digit(_ n: UInt64) -> UInt8 {
                let d = UInt8(truncatingIfNeeded: n & 0xF)
                return d < 10 ? d &+ 0x30 : d &+ 0x37
            }
            var j = 0
            for i in 0..<6 {
                if i > 0 { buf[j] = UInt8(ascii: ":"); j += 1 }
                let shift = UInt64(40 - 8 * i)
                buf[j] = digit(v >> (shift + 4))
                buf[j + 1] = digit(v >> shift)
                j += 2
            }
            return j
        }
    }

    /// The two most significant bits, which classify a random address.
    public enum RandomAddressType: String, Sendable {
        case nonResolvablePrivate = "non_resolvable_private"  // 0b00
        case resolvablePrivate = "resolvable_private"  // 0b01
        case reserved  // 0b10
        case staticRandom = "static"  // 0b11
    }

    /// Interpretation of the top two bits if this is a random address.
    public var randomAddressType: RandomAddressType {
        switch rawValue >> 46 {
        case 0: return .nonResolvablePrivate
        case 1: return .resolvablePrivate
        case 2: return .reserved
        default: return .staticRandom
        }
    }

    public static func < (a: DeviceAddress, b: DeviceAddress) -> Bool { a.rawValue < b.rawValue }
}
