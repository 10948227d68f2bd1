import Vocabulary
/// A bounds-checked cursor over a byte buffer. Little-endian by default
/// (Bluetooth byte order), with `…BE` variants for vendor formats.
///
/// Every read checks the remaining length first and throws a
/// ``DecodeError`` of kind `.truncated` that names the reader's ``context``,
/// the offset and the value that was being read:
///
///     var r = ByteReader([0x10, 0x48], context: "heart rate measurement")
///     let flags = try r.u8()            // 0x10
///     let bpm = try r.u16("heart rate") // throws: need 2 bytes for heart rate (uint16) at offset 1, have 1
///
/// Offsets are relative to the start of the buffer given to `init`, also
/// when it is an `ArraySlice` that does not start at index 0.
public struct ByteReader: Sendable {
    @usableFromInline let storage: ArraySlice<UInt8>
    @usableFromInline let base: Int
    /// Name used as `DecodeError.context`.
    public let context: String
    /// Number of bytes consumed so far (offset of the next read).
    @inlinable public var offset: Int { cursor }
    @usableFromInline var cursor: Int

    @inlinable
    public init(_ bytes: [UInt8], context: String) {
        self.storage = bytes[...]
        self.base = 0
        self.context = context
        self.cursor = 0
    }

    @inlinable
    public init(_ bytes: ArraySlice<UInt8>, context: String) {
        self.storage = bytes
        self.base = bytes.startIndex
        self.context = context
        self.cursor = 0
    }

    /// Total length of the buffer.
    @inlinable public var count: Int { storage.count }
    /// Bytes not yet consumed.
    @inlinable public var remaining: Int { storage.count - offset }
    @inlinable public var isAtEnd: Bool { offset >= storage.count }
    /// The whole buffer (consumed and unconsumed).
    @inlinable public var buffer: ArraySlice<UInt8> { storage }

    // MARK: Errors

    /// Throws `.truncated` unless `n` more bytes are available.
    @inlinable
    public func require(_ n: Int, for what: @autoclosure () -> String) throws(DecodeError) {
        if n < 0 || remaining < n {
            throw DecodeError.truncated(
                context: context, offset: offset, needed: n, available: remaining, what: what())
        }
    }

    /// Throws `.trailingBytes` unless every byte was consumed.
    @inlinable
    public func expectEnd() throws(DecodeError) {
        if remaining > 0 {
            throw DecodeError.trailingBytes(context: context, offset: offset, extra: remaining)
        }
    }

    /// An `.invalidValue` error at `offset` (default: the current offset) in this reader's context.
    public func invalid(expected: String, found: String, at offset: Int? = nil) -> DecodeError {
        DecodeError.invalidValue(context: context, offset: offset ?? self.offset, expected: expected, found: found)
    }

    /// A `.reserved` error at `offset` (default: the current offset) in this reader's context.
    public func reserved(_ field: String, found: String, at offset: Int? = nil) -> DecodeError {
        DecodeError.reserved(context: context, offset: offset ?? self.offset, field: field, found: found)
    }

    @usableFromInline
    static func describe(_ field: String?, _ type: String) -> String {
        if let field { return "\(field) (\(type))" }
        return "a \(type) value"
    }

    // MARK: Raw access

    @inlinable
    func byte(_ i: Int) -> UInt8 { storage[base + offset + i] }

    @inlinable
    mutating func readUnsigned(_ size: Int, bigEndian: Bool, _ field: String?, _ type: String) throws(DecodeError) -> UInt64 {
        try require(size, for: ByteReader.describe(field, type))
        var v: UInt64 = 0
        if bigEndian {
            for i in 0..<size { v = v << 8 | UInt64(byte(i)) }
        } else {
            var i = size - 1
            while i >= 0 { v = v << 8 | UInt64(byte(i)); i -= 1 }
        }
        cursor += size
        return v
    }

    @inlinable
    static func signExtend(_ v: UInt64, bits: Int) -> Int64 {
        let shift = 64 - bits
        return Int64(bitPattern: v << UInt64(shift)) >> Int64(shift)
    }

    // MARK: Little-endian integers

    @inlinable public mutating func u8(_ field: String? = nil) throws(DecodeError) -> UInt8 {
        try require(1, for: ByteReader.describe(field, "uint8"))
        let v = byte(0); cursor += 1; return v
    }
    @inlinable public mutating func i8(_ field: String? = nil) throws(DecodeError) -> Int8 {
        try require(1, for: ByteReader.describe(field, "sint8"))
        let v = Int8(bitPattern: byte(0)); cursor += 1; return v
    }
    @inlinable public mutating func u16(_ field: String? = nil) throws(DecodeError) -> UInt16 {
        UInt16(truncatingIfNeeded: try readUnsigned(2, bigEndian: false, field, "uint16"))
    }
    @inlinable public mutating func i16(_ field: String? = nil) throws(DecodeError) -> Int16 {
        Int16(truncatingIfNeeded: try readUnsigned(2, bigEndian: false, field, "sint16"))
    }
    @inlinable public mutating func u24(_ field: String? = nil) throws(DecodeError) -> UInt32 {
        UInt32(truncatingIfNeeded: try readUnsigned(3, bigEndian: false, field, "uint24"))
    }
    @inlinable public mutating func i24(_ field: String? = nil) throws(DecodeError) -> Int32 {
        Int32(truncatingIfNeeded: ByteReader.signExtend(try readUnsigned(3, bigEndian: false, field, "sint24"), bits: 24))
    }
    @inlinable public mutating func u32(_ field: String? = nil) throws(DecodeError) -> UInt32 {
        UInt32(truncatingIfNeeded: try readUnsigned(4, bigEndian: false, field, "uint32"))
    }
    @inlinable public mutating func i32(_ field: String? = nil) throws(DecodeError) -> Int32 {
        Int32(truncatingIfNeeded: try readUnsigned(4, bigEndian: false, field, "sint32"))
    }
    @inlinable public mutating func u48(_ field: String? = nil) throws(DecodeError) -> UInt64 {
        try readUnsigned(6, bigEndian: false, field, "uint48")
    }
    @inlinable public mutating func u64(_ field: String? = nil) throws(DecodeError) -> UInt64 {
        try readUnsigned(8, bigEndian: false, field, "uint64")
    }
    @inlinable public mutating func i64(_ field: String? = nil) throws(DecodeError) -> Int64 {
        Int64(bitPattern: try readUnsigned(8, bigEndian: false, field, "sint64"))
    }
    /// Unsigned little-endian integer of 1...8 bytes.
    @inlinable public mutating func uint(size: Int, _ field: String? = nil) throws(DecodeError) -> UInt64 {
        if size < 1 || size > 8 {
            throw invalid(expected: "an integer size of 1...8 bytes", found: "\(size)")
        }
        return try readUnsigned(size, bigEndian: false, field, "uint\(size * 8)")
    }
    /// Signed (two's complement) little-endian integer of 1...8 bytes.
    @inlinable public mutating func int(size: Int, _ field: String? = nil) throws(DecodeError) -> Int64 {
        if size < 1 || size > 8 {
            throw invalid(expected: "an integer size of 1...8 bytes", found: "\(size)")
        }
        return ByteReader.signExtend(try readUnsigned(size, bigEndian: false, field, "sint\(size * 8)"), bits: size * 8)
    }

    // MARK: Big-endian integers

    @inlinable public mutating func u16BE(_ field: String? = nil) throws(DecodeError) -> UInt16 {
        UInt16(truncatingIfNeeded: try readUnsigned(2, bigEndian: true, field, "uint16 big-endian"))
    }
    @inlinable public mutating func i16BE(_ field: String? = nil) throws(DecodeError) -> Int16 {
        Int16(truncatingIfNeeded: try readUnsigned(2, bigEndian: true, field, "sint16 big-endian"))
    }
    @inlinable public mutating func u24BE(_ field: String? = nil) throws(DecodeError) -> UInt32 {
        UInt32(truncatingIfNeeded: try readUnsigned(3, bigEndian: true, field, "uint24 big-endian"))
    }
    @inlinable public mutating func i24BE(_ field: String? = nil) throws(DecodeError) -> Int32 {
        Int32(truncatingIfNeeded: ByteReader.signExtend(try readUnsigned(3, bigEndian: true, field, "sint24 big-endian"), bits: 24))
    }
    @inlinable public mutating func u32BE(_ field: String? = nil) throws(DecodeError) -> UInt32 {
        UInt32(truncatingIfNeeded: try readUnsigned(4, bigEndian: true, field, "uint32 big-endian"))
    }
    @inlinable public mutating func i32BE(_ field: String? = nil) throws(DecodeError) -> Int32 {
        Int32(truncatingIfNeeded: try readUnsigned(4, bigEndian: true, field, "sint32 big-endian"))
    }
    @inlinable public mutating func u48BE(_ field: String? = nil) throws(DecodeError) -> UInt64 {
        try readUnsigned(6, bigEndian: true, field, "uint48 big-endian")
    }
    @inlinable public mutating func u64BE(_ field: String? = nil) throws(DecodeError) -> UInt64 {
        try readUnsigned(8, bigEndian: true, field, "uint64 big-endian")
    }

    // MARK: Floating point

    /// IEEE 11073 16-bit SFLOAT (little-endian).
    @inlinable public mutating func sfloat(_ field: String? = nil) throws(DecodeError) -> MedicalFloat {
        MedicalFloat(sfloat: UInt16(truncatingIfNeeded: try readUnsigned(2, bigEndian: false, field, "SFLOAT")))
    }
    /// IEEE 11073 32-bit FLOAT (little-endian).
    @inlinable public mutating func medfloat32(_ field: String? = nil) throws(DecodeError) -> MedicalFloat {
        MedicalFloat(float: UInt32(truncatingIfNeeded: try readUnsigned(4, bigEndian: false, field, "FLOAT")))
    }
    /// IEEE 754 binary32, little-endian.
    @inlinable public mutating func f32(_ field: String? = nil) throws(DecodeError) -> Float {
        Float(bitPattern: UInt32(truncatingIfNeeded: try readUnsigned(4, bigEndian: false, field, "float32")))
    }
    /// IEEE 754 binary32, big-endian.
    @inlinable public mutating func f32BE(_ field: String? = nil) throws(DecodeError) -> Float {
        Float(bitPattern: UInt32(truncatingIfNeeded: try readUnsigned(4, bigEndian: true, field, "float32 big-endian")))
    }
    /// IEEE 754 binary64, little-endian.
    @inlinable public mutating func f64(_ field: String? = nil) throws(DecodeError) -> Double {
        Double(bitPattern: try readUnsigned(8, bigEndian: false, field, "float64"))
    }
    /// IEEE 754 binary16 (half precision), little-endian, widened to Float.
    public mutating func f16(_ field: String? = nil) throws(DecodeError) -> Float {
        let raw = UInt16(truncatingIfNeeded: try readUnsigned(2, bigEndian: false, field, "float16"))
        return halfToFloat(raw)
    }

    // MARK: Byte runs

    /// The next `n` bytes (a slice of the underlying buffer; no copy).
    @inlinable public mutating func bytes(_ n: Int, _ field: String? = nil) throws(DecodeError) -> ArraySlice<UInt8> {
        try require(n, for: field.map { "\($0)" } ?? "a \(n)-byte field")
        let start = base + offset
        cursor += n
        return storage[start..<(start + n)]
    }
    /// All remaining bytes (possibly empty).
    @inlinable public mutating func rest() -> ArraySlice<UInt8> {
        let start = base + offset
        cursor = storage.count
        return storage[start..<(base + storage.count)]
    }
    /// Skips `n` bytes.
    @inlinable public mutating func skip(_ n: Int, _ field: String? = nil) throws(DecodeError) {
        try require(n, for: field ?? "\(n) skipped byte\(n == 1 ? "" : "s")")
        cursor += n
    }
    /// The next byte without consuming it, or `nil` at the end.
    @inlinable public func peek() -> UInt8? { isAtEnd ? nil : byte(0) }

    /// `n` bytes decoded as UTF-8 (invalid sequences throw `.invalidValue`).
    public mutating func utf8(_ n: Int, _ field: String? = nil) throws(DecodeError) -> String {
        let start = offset
        let raw = try bytes(n, field)
        return try ByteReader.decodeUTF8(raw, context: context, offset: start)
    }
    /// All remaining bytes decoded as UTF-8. Trailing NUL bytes are dropped
    /// (several devices pad string characteristics with zeros).
    public mutating func utf8Rest() throws(DecodeError) -> String {
        let start = offset
        var raw = rest()
        while let last = raw.last, last == 0 { raw = raw.dropLast() }
        return try ByteReader.decodeUTF8(raw, context: context, offset: start)
    }

    static func decodeUTF8(_ raw: ArraySlice<UInt8>, context: String, offset: Int) throws(DecodeError) -> String {
        if let s = String(validating: raw, as: UTF8.self) { return s }
        throw DecodeError.invalidValue(
            context: context, offset: offset, expected: "UTF-8 text", found: "invalid UTF-8 bytes \(hexString(bytes: raw))")
    }

    // MARK: Bluetooth types

    /// A 16-bit UUID in air (little-endian) order.
    public mutating func uuid16(_ field: String? = nil) throws(DecodeError) -> BluetoothUUID {
        BluetoothUUID(uuid16: try u16(field ?? "16-bit UUID"))
    }
    /// A 32-bit UUID in air (little-endian) order.
    public mutating func uuid32(_ field: String? = nil) throws(DecodeError) -> BluetoothUUID {
        BluetoothUUID(uuid32: try u32(field ?? "32-bit UUID"))
    }
    /// A 128-bit UUID in air (little-endian) order.
    public mutating func uuid128(_ field: String? = nil) throws(DecodeError) -> BluetoothUUID {
        let lo = try u64(field ?? "128-bit UUID (low half)")
        let hi = try u64(field ?? "128-bit UUID (high half)")
        return BluetoothUUID(high: hi, low: lo)
    }
    /// A 6-byte device address in air (little-endian) order.
    public mutating func address(_ field: String? = nil) throws(DecodeError) -> BluetoothAddress {
        BluetoothAddress(value: try readUnsigned(6, bigEndian: false, field ?? "device address", "48-bit address"))
    }
    /// A 6-byte address as written (most significant byte first), as some
    /// vendors put the device's MAC in their payload.
    public mutating func addressAsWritten(_ field: String? = nil) throws(DecodeError) -> BluetoothAddress {
        BluetoothAddress(value: try readUnsigned(6, bigEndian: true, field ?? "device address", "48-bit address"))
    }
}

/// IEEE 754 half → single precision.
public func halfToFloat(_ h: UInt16) -> Float {
    let sign = UInt32(h >> 15) << 31
    let exp = Int((h >> 10) & 0x1F)
    let frac = UInt32(h & 0x3FF)
    if exp == 0 {
        // zero or subnormal: frac × 2^-24
        let mag = Float(frac) * (1.0 / 16_777_216.0)
        return sign != 0 ? -mag : mag
    }
    if exp == 31 {
        return Float(bitPattern: sign | 0x7F80_0000 | (frac << 13))
    }
    return Float(bitPattern: sign | UInt32(exp - 15 + 127) << 23 | (frac << 13))
}

extension ByteReader {
    /// `bytes(n, field())`, building the (interpolated) field name only when
    /// the read fails, so the error text is unchanged and successful reads
    /// do not format strings.
    @inline(__always)
    mutating func bytes(_ n: Int, lazyField field: () -> String) throws(DecodeError) -> ArraySlice<UInt8> {
        if n >= 0 && remaining >= n { return try bytes(n, nil) }
        return try bytes(n, field())
    }

    /// `u8(field())`, building the field name only when the read fails.
    @inline(__always)
    mutating func u8(lazyField field: () -> String) throws(DecodeError) -> UInt8 {
        if remaining >= 1 { return try u8(nil) }
        return try u8(field())
    }
}
