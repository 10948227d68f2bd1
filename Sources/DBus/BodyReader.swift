/// The body of a message kept in wire form (on-demand decoding).
final class DBusRawBody: Sendable {
    let bytes: [UInt8]
    let bigEndian: Bool
    let signature: DBusSignature
    // A non-null base for empty bodies; never dereferenced (count is 0).
    nonisolated(unsafe) static let emptyBase: UnsafeRawPointer? = UnsafeRawPointer(bitPattern: 0x10)

    init(bytes: [UInt8], bigEndian: Bool, signature: DBusSignature) {
        self.bytes = bytes
        self.bigEndian = bigEndian
        self.signature = signature
    }

    func decodeAll() throws(DBusError) -> [DBusValue] {
        let result: Result<[DBusValue], DBusError> = bytes.withUnsafeBytes { raw in
            guard let base = raw.baseAddress ?? DBusRawBody.emptyBase else { return .failure(.malformedMessage("no body")) }
            var d = WireDecoder(base: base, count: raw.count, bigEndian: bigEndian)
            var values: [DBusValue] = []
            do throws(DBusError) {
                for type in signature.types { values.append(try d.decode(type, depth: 0)) }
                guard d.position == raw.count else {
                    return .failure(.malformedMessage("body length \(raw.count) does not match its signature \"\(signature)\""))
                }
                return .success(values)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}

/// A cursor over a message body in wire form, in the spirit of libdbus's
/// iterators but without a call per value: strings and byte arrays are
/// lent as buffers instead of being copied. Every read is bounds-checked
/// and a type error or truncation throws; nothing traps.
///
/// Reading follows the signature: the caller knows (or checks with
/// ``readVariantSignature()``) what comes next.
public struct DBusBodyReader {
    var decoder: WireDecoder

    init(decoder: WireDecoder) { self.decoder = decoder }

    /// True when every byte of the body has been read.
    public var isAtEnd: Bool { decoder.position >= decoder.count }

    public mutating func readByte() throws(DBusError) -> UInt8 { try decoder.readByte() }
    public mutating func readBool() throws(DBusError) -> Bool {
        let v = try decoder.readUInt32()
        guard v <= 1 else { throw .malformedMessage("boolean with value \(v)") }
        return v == 1
    }
    public mutating func readInt16() throws(DBusError) -> Int16 { Int16(bitPattern: try decoder.readUInt16()) }
    public mutating func readUInt16() throws(DBusError) -> UInt16 { try decoder.readUInt16() }
    public mutating func readInt32() throws(DBusError) -> Int32 { Int32(bitPattern: try decoder.readUInt32()) }
    public mutating func readUInt32() throws(DBusError) -> UInt32 { try decoder.readUInt32() }
    public mutating func readInt64() throws(DBusError) -> Int64 { Int64(bitPattern: try decoder.readUInt64()) }
    public mutating func readUInt64() throws(DBusError) -> UInt64 { try decoder.readUInt64() }
    public mutating func readDouble() throws(DBusError) -> Double { Double(bitPattern: try decoder.readUInt64()) }

    /// A string or object path, lent as its UTF-8 bytes (no NUL).
    public mutating func withString<T>(_ body: (UnsafeRawBufferPointer) -> T) throws(DBusError) -> T {
        let length = Int(try decoder.readUInt32())
        try decoder.need(length + 1)
        let start = decoder.base + decoder.position
        guard start.load(fromByteOffset: length, as: UInt8.self) == 0 else {
            throw .malformedMessage("string at offset \(decoder.position) is not NUL-terminated")
        }
        decoder.position += length + 1
        return body(UnsafeRawBufferPointer(start: start, count: length))
    }

    /// A string or object path as a Swift String (allocates for long text).
    public mutating func readString() throws(DBusError) -> String {
        try decoder.readStringValue()
    }

    /// An `ay`, lent in place.
    public mutating func withBytes<T>(_ body: (UnsafeRawBufferPointer) -> T) throws(DBusError) -> T {
        let length = Int(try decoder.readUInt32())
        try decoder.need(length)
        let start = decoder.base + decoder.position
        decoder.position += length
        return body(UnsafeRawBufferPointer(start: start, count: length))
    }

    /// A variant's signature, lent as bytes (e.g. "n", "a{qv}"); the value
    /// follows and is read next.
    public mutating func readVariantSignature() throws(DBusError) -> UnsafeRawBufferPointer {
        try decoder.readSignatureBytes()
    }

    /// Starts an array whose elements have `alignment` (8 for dictionary
    /// entries and structs); returns where it ends.
    public mutating func beginArray(elementAlignment: Int) throws(DBusError) -> Int {
        let length = Int(try decoder.readUInt32())
        try decoder.align(elementAlignment)
        try decoder.need(length)
        return decoder.position + length
    }

    /// Whether the array ending at `end` has another element.
    public func hasElement(before end: Int) -> Bool { decoder.position < end }

    /// After the last element of the array ending at `end`: throws unless
    /// that element ended exactly there (it ran past the array's length).
    public mutating func endArray(_ end: Int) throws(DBusError) {
        guard decoder.position == end else {
            throw .malformedMessage("an array element runs past the array's end at offset \(end)")
        }
    }

    /// Aligns to the start of a dictionary entry or struct.
    public mutating func beginStruct() throws(DBusError) { try decoder.align(8) }

    /// Reads one complete value of `type` as a ``DBusValue``.
    public mutating func readValue(_ type: DBusType) throws(DBusError) -> DBusValue {
        try decoder.decode(type, depth: 0)
    }

    /// Skips one complete value of `type`.
    public mutating func skip(_ type: DBusType) throws(DBusError) {
        _ = try decoder.decode(type, depth: 0)
    }

    /// Skips the value of a variant whose signature was just read.
    public mutating func skipVariantValue(signature: UnsafeRawBufferPointer) throws(DBusError) {
        let type = try SignatureParser.parseSingle(bytes: ArraySlice(signature), original: String(decoding: signature, as: UTF8.self))
        try skip(type)
    }
}
