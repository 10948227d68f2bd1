/// An IEEE 11073-20601 "medical" floating point number: either the 16-bit
/// SFLOAT (4-bit exponent, 12-bit mantissa) or the 32-bit FLOAT (8-bit exponent,
/// 24-bit mantissa), both base 10 and two's complement.
///
/// The special values (NaN, NRes, ±INFINITY, reserved) are kept as cases
/// instead of being folded into a `Double`, so a decoder can tell "not a number"
/// from "not at this resolution" and report both faithfully.
public enum MedicalFloat: Equatable, Hashable, Sendable, CustomStringConvertible {
    /// `mantissa × 10^exponent`.
    case finite(mantissa: Int32, exponent: Int8)
    /// Not a number (SFLOAT 0x07FF, FLOAT 0x007FFFFF).
    case nan
    /// Not at this resolution (SFLOAT 0x0800, FLOAT 0x00800000).
    case nres
    /// SFLOAT 0x07FE, FLOAT 0x007FFFFE.
    case positiveInfinity
    /// SFLOAT 0x0802, FLOAT 0x00800002.
    case negativeInfinity
    /// Reserved for future use (SFLOAT 0x0801, FLOAT 0x00800001).
    case reserved

    /// Decodes a 16-bit SFLOAT from its raw (already byte-swapped) value.
    public init(sfloat raw: UInt16) {
        switch raw {
        case 0x07FF: self = .nan
        case 0x0800: self = .nres
        case 0x07FE: self = .positiveInfinity
        case 0x0802: self = .negativeInfinity
        case 0x0801: self = .reserved
        default:
            let mantissa = Int32(Int16(bitPattern: raw << 4) >> 4)
            let exponent = Int8(Int16(bitPattern: raw) >> 12)
            self = .finite(mantissa: mantissa, exponent: exponent)
        }
    }

    /// Decodes a 32-bit FLOAT from its raw (already byte-swapped) value.
    public init(float raw: UInt32) {
        switch raw {
        case 0x007F_FFFF: self = .nan
        case 0x0080_0000: self = .nres
        case 0x007F_FFFE: self = .positiveInfinity
        case 0x0080_0002: self = .negativeInfinity
        case 0x0080_0001: self = .reserved
        default:
            let mantissa = Int32(bitPattern: raw << 8) >> 8
            let exponent = Int8(truncatingIfNeeded: Int32(bitPattern: raw) >> 24)
            self = .finite(mantissa: mantissa, exponent: exponent)
        }
    }

    /// The numeric value, or `nil` for NaN, NRes and reserved.
    /// Infinities map to `±Double.infinity`.
    public var doubleValue: Double? {
        switch self {
        case let .finite(m, e): return scaledDecimal(Int64(m), exponent: Int(e))
        case .positiveInfinity: return .infinity
        case .negativeInfinity: return -.infinity
        case .nan, .nres, .reserved: return nil
        }
    }

    /// `true` for everything except `.finite`.
    public var isSpecial: Bool {
        if case .finite = self { return false }
        return true
    }

    /// Short name of a special value ("nan", "nres", "+inf", "-inf",
    /// "reserved"), `nil` for finite values.
    public var specialName: String? {
        switch self {
        case .finite: return nil
        case .nan: return "nan"
        case .nres: return "nres"
        case .positiveInfinity: return "+inf"
        case .negativeInfinity: return "-inf"
        case .reserved: return "reserved"
        }
    }

    /// A finite value as `.number`, a special value as `.string(specialName)`.
    public var fieldValue: FieldValue {
        if let name = specialName { return .string(name) }
        return .number(doubleValue ?? 0)
    }

    public var description: String {
        if let name = specialName { return name }
        return doubleValue.map { formatNumber($0) } ?? "nan"
    }
}

/// Exact powers of ten representable in a Double (10^0 ... 10^22).
@usableFromInline
let exactPowersOfTen: [Double] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
]

/// `value × 10^exponent`, correctly rounded for |exponent| ≤ 22 and |value| < 2^53
/// (a single IEEE division or multiplication of exact operands), so `364 × 10^-1`
/// gives exactly the Double nearest to 36.4.
@inlinable
public func scaledDecimal(_ value: Int64, exponent: Int) -> Double {
    let v = Double(value)
    if exponent == 0 { return v }
    if exponent > 0 {
        var result = v
        var e = exponent
        while e > 22 { result *= 1e22; e -= 22 }
        return result * exactPowersOfTen[e]
    }
    var result = v
    var e = -exponent
    while e > 22 { result /= 1e22; e -= 22 }
    return result / exactPowersOfTen[e]
}

/// `value × 2^binaryExponent × 10^decimalExponent` where the binary scale is
/// applied first (exact), e.g. a uint16 with resolution 1/1024 s.
@inlinable
public func scaled(_ value: Int64, decimalExponent: Int = 0, binaryExponent: Int = 0) -> Double {
    var v = scaledDecimal(value, exponent: decimalExponent)
    if binaryExponent != 0 {
        var e = binaryExponent
        while e > 0 { v *= 2; e -= 1 }
        while e < 0 { v /= 2; e += 1 }
    }
    return v
}
