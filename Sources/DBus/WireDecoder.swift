#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Decodes marshalled D-Bus messages (the wire format) straight into Swift
/// values, without one libdbus iterator call per value.
///
/// Every read is bounds-checked; a message that does not fit its own
/// lengths raises ``DBusError/malformedMessage(_:)`` rather than trapping.
struct WireDecoder {
    let base: UnsafeRawPointer
    let count: Int
    let bigEndian: Bool
    var position: Int
    let cache: DecodeCache?
    /// The message's Unix fds, which `h` values index.
    var fds: [UnixFileDescriptor] = []
    static let maximumDepth = 64

    init(base: UnsafeRawPointer, count: Int, bigEndian: Bool, position: Int = 0, cache: DecodeCache? = nil) {
        self.base = base
        self.count = count
        self.bigEndian = bigEndian
        self.position = position
        self.cache = cache
    }

    /// Decodes a whole marshalled message. Fails for messages that carry
    /// Unix file descriptors (their values are indices into a side table
    /// that bytes alone do not have).
    static func decodeMessage(_ bytes: UnsafeRawBufferPointer, cache: DecodeCache? = nil, lazyBody: Bool = false) throws(DBusError) -> DBusMessage {
        let header = try decodeHeader(bytes, cache: cache)
        guard header.unixFDCount == 0 else {
            throw .notSupported("a message carrying \(header.unixFDCount) Unix fds cannot be decoded from its bytes alone")
        }
        return try decodeBody(of: header, in: bytes, cache: cache, lazyBody: lazyBody)
    }

    /// Reads and checks the fixed header and the header fields.
    static func decodeHeader(_ bytes: UnsafeRawBufferPointer, cache: DecodeCache? = nil) throws(DBusError) -> WireHeader {
        guard bytes.count >= 16, let base = bytes.baseAddress else {
            throw .malformedMessage("message shorter than its 16-byte fixed header")
        }
        let endian = bytes[0]
        let big: Bool
        switch endian {
        case UInt8(ascii: "l"): big = false
        case UInt8(ascii: "B"): big = true
        default: throw .malformedMessage("unknown byte-order mark 0x\(String(endian, radix: 16))")
        }
        guard let kind = DBusMessage.Kind(rawValue: bytes[1]) else {
            throw .malformedMessage("unknown message type \(bytes[1])")
        }
        guard bytes[3] == 1 else { throw .malformedMessage("unsupported protocol version \(bytes[3])") }
        var h = WireHeader(kind: kind, flags: DBusMessage.Flags(rawValue: bytes[2]), bigEndian: big)
        var d = WireDecoder(base: base, count: bytes.count, bigEndian: big, position: 4, cache: cache)
        let bodyLength = Int(try d.readUInt32())
        h.serial = try d.readUInt32()
        guard h.serial != 0 else { throw .malformedMessage("message serial is 0") }
        let fieldsLength = Int(try d.readUInt32())
        let fieldsEnd = 16 + fieldsLength
        guard fieldsEnd <= bytes.count else { throw .malformedMessage("header fields run past the end of the message") }

        while d.position < fieldsEnd {
            try d.align(8)
            guard d.position < fieldsEnd else { break }
            let code = try d.readByte()
            let sigLength = Int(try d.readByte())
            guard d.position + sigLength + 1 <= fieldsEnd else { throw .malformedMessage("header field \(code) signature runs past the header") }
            let sigByte = sigLength == 1 ? d.base.load(fromByteOffset: d.position, as: UInt8.self) : 0
            d.position += sigLength + 1
            switch (code, sigByte) {
            case (1, UInt8(ascii: "o")): h.path = try d.readObjectPath(intern: true)
            case (2, UInt8(ascii: "s")): h.interface = try d.readStringValue(intern: true)
            case (3, UInt8(ascii: "s")): h.member = try d.readStringValue(intern: true)
            case (4, UInt8(ascii: "s")): h.errorName = try d.readStringValue(intern: true)
            case (5, UInt8(ascii: "u")): h.replySerial = try d.readUInt32()
            case (6, UInt8(ascii: "s")): h.destination = try d.readStringValue(intern: true)
            case (7, UInt8(ascii: "s")): h.sender = try d.readStringValue(intern: true)
            case (8, UInt8(ascii: "g")): h.signature = try d.readSignatureValue()
            case (9, UInt8(ascii: "u")): h.unixFDCount = Int(try d.readUInt32())
            case (1...9, _):
                throw .malformedMessage("header field \(code) has the wrong type")
            default:
                // Unknown header fields must be ignored (specification).
                let type = try SignatureParser.parseSingle(
                    bytes: ArraySlice(UnsafeRawBufferPointer(start: d.base + d.position - sigLength - 1, count: sigLength)),
                    original: "header field")
                _ = try d.decode(type, depth: 1)
            }
        }
        guard d.position <= fieldsEnd else { throw .malformedMessage("header fields overrun their length") }
        switch kind {
        case .methodCall:
            guard h.path != nil, h.member != nil else { throw .malformedMessage("method call without a path or member") }
        case .signal:
            guard h.path != nil, h.interface != nil, h.member != nil else {
                throw .malformedMessage("signal without a path, interface or member")
            }
        case .methodReturn:
            guard h.replySerial != nil else { throw .malformedMessage("method return without a reply serial") }
        case .error:
            guard h.replySerial != nil, h.errorName != nil else { throw .malformedMessage("error without a reply serial or error name") }
        }
        d.position = fieldsEnd
        try d.align(8)
        guard bodyLength <= bytes.count - d.position else { throw .malformedMessage("body runs past the end of the message") }
        guard bodyLength == 0 || !h.signature.types.isEmpty else {
            throw .malformedMessage("a body of \(bodyLength) bytes without a signature")
        }
        h.bodyStart = d.position
        h.bodyLength = bodyLength
        return h
    }

    /// Decodes the body described by `header` (from ``decodeHeader(_:cache:)``
    /// on the same bytes); `fds` are the message's Unix fds in order.
    static func decodeBody(
        of header: WireHeader, in bytes: UnsafeRawBufferPointer, cache: DecodeCache? = nil,
        lazyBody: Bool = false, fds: [UnixFileDescriptor] = []
    ) throws(DBusError) -> DBusMessage {
        guard let base = bytes.baseAddress else { throw .malformedMessage("message shorter than its 16-byte fixed header") }
        if lazyBody && header.unixFDCount == 0 {
            // Keep the body bytes; the consumer decodes them (or reads them
            // in place with DBusBodyReader) on its own thread.
            var m = header.message(body: [])
            m.rawBody = DBusRawBody(bytes: [UInt8](UnsafeRawBufferPointer(start: base + header.bodyStart, count: header.bodyLength)),
                                    bigEndian: header.bigEndian, signature: header.signature)
            return m
        }
        let bodyEnd = header.bodyStart + header.bodyLength
        var d = WireDecoder(base: base, count: bodyEnd, bigEndian: header.bigEndian, position: header.bodyStart, cache: cache)
        d.fds = fds
        var body: [DBusValue] = []
        body.reserveCapacity(header.signature.types.count)
        for type in header.signature.types {
            if case .string = type {
                body.append(.string(try d.readStringValue(intern: true)))
            } else {
                body.append(try d.decode(type, depth: 0))
            }
        }
        guard d.position == bodyEnd else {
            throw .malformedMessage("body length \(header.bodyLength) does not match its signature \"\(header.signature)\"")
        }
        return header.message(body: body)
    }

    @inline(__always) mutating func align(_ n: Int) throws(DBusError) {
        let aligned = (position + n - 1) & ~(n - 1)
        guard aligned <= count else { throw .malformedMessage("padding runs past the end at offset \(position)") }
        position = aligned
    }

    @inline(__always) mutating func need(_ n: Int) throws(DBusError) {
        guard n >= 0, position + n <= count else {
            throw .malformedMessage("need \(n) bytes at offset \(position), have \(count - position)")
        }
    }

    @inline(__always) mutating func readByte() throws(DBusError) -> UInt8 {
        try need(1)
        let v = base.load(fromByteOffset: position, as: UInt8.self)
        position += 1
        return v
    }

    /// A naturally aligned integer in the message's byte order.
    @inline(__always) mutating func readInteger<T: FixedWidthInteger & UnsignedInteger>(_: T.Type) throws(DBusError) -> T {
        let size = MemoryLayout<T>.size
        try align(size)
        try need(size)
        let v = base.loadUnaligned(fromByteOffset: position, as: T.self)
        position += size
        return bigEndian ? T(bigEndian: v) : T(littleEndian: v)
    }

    @inline(__always) mutating func readUInt16() throws(DBusError) -> UInt16 { try readInteger(UInt16.self) }
    @inline(__always) mutating func readUInt32() throws(DBusError) -> UInt32 { try readInteger(UInt32.self) }
    @inline(__always) mutating func readUInt64() throws(DBusError) -> UInt64 { try readInteger(UInt64.self) }

    mutating func readStringValue(intern: Bool = false) throws(DBusError) -> String {
        let length = Int(try readUInt32())
        try need(length + 1)
        let start = base + position
        guard start.load(fromByteOffset: length, as: UInt8.self) == 0 else {
            throw .malformedMessage("string at offset \(position) is not NUL-terminated")
        }
        let raw = UnsafeRawBufferPointer(start: start, count: length)
        if intern, let cache, let shared = cache.string(raw) {
            position += length + 1
            return shared
        }
        guard let s = WireDecoder.validatedString(raw) else {
            throw .malformedMessage("string at offset \(position) is not valid UTF-8 or contains a NUL byte")
        }
        position += length + 1
        if intern, let cache { cache.remember(raw, s) }
        return s
    }

    /// The text of `raw` if it is valid UTF-8 without NUL bytes (the rule
    /// for every D-Bus string), else nil.
    static func validatedString(_ raw: UnsafeRawBufferPointer) -> String? {
        guard let p = raw.baseAddress, raw.count > 0 else { return "" }
        // ASCII fast path, eight bytes at a time: no byte >= 0x80 and no 0.
        var i = 0
        var ascii = true
        while i + 8 <= raw.count {
            let w = p.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            if w & 0x8080_8080_8080_8080 != 0 || (w &- 0x0101_0101_0101_0101) & ~w & 0x8080_8080_8080_8080 != 0 {
                ascii = false
                break
            }
            i += 8
        }
        if ascii {
            while i < raw.count {
                let b = p.load(fromByteOffset: i, as: UInt8.self)
                if b == 0 || b >= 0x80 { ascii = false; break }
                i += 1
            }
        }
        if ascii { return String(decoding: raw, as: UTF8.self) }
        guard memchr(p, 0, raw.count) == nil else { return nil }
        return String(validating: raw, as: UTF8.self)
    }

    mutating func readObjectPath(intern: Bool = false) throws(DBusError) -> ObjectPath {
        let at = position
        if intern, let cache {
            let length = Int(try readUInt32())
            try need(length + 1)
            let start = base + position
            guard start.load(fromByteOffset: length, as: UInt8.self) == 0 else {
                throw .malformedMessage("object path at offset \(position) is not NUL-terminated")
            }
            let path = try cache.objectPath(UnsafeRawBufferPointer(start: start, count: length))
            position += length + 1
            return path
        }
        let s = try readStringValue()
        do {
            return try ObjectPath(s)
        } catch {
            throw .malformedMessage("invalid object path at offset \(at): \(error)")
        }
    }

    mutating func readSignatureBytes() throws(DBusError) -> UnsafeRawBufferPointer {
        let length = Int(try readByte())
        try need(length + 1)
        let start = base + position
        guard start.load(fromByteOffset: length, as: UInt8.self) == 0 else {
            throw .malformedMessage("signature at offset \(position) is not NUL-terminated")
        }
        position += length + 1
        return UnsafeRawBufferPointer(start: start, count: length)
    }

    mutating func readSignatureValue() throws(DBusError) -> DBusSignature {
        let raw = try readSignatureBytes()
        if let cache { return try cache.signature(raw) }
        let string = String(decoding: raw, as: UTF8.self)
        return DBusSignature(validated: try SignatureParser.parse(bytes: ArraySlice(raw), original: string), raw: string)
    }

    /// The type named by a variant's signature, with a fast path for the
    /// common single-character and short array signatures.
    mutating func readVariantType() throws(DBusError) -> DBusType {
        let raw = try readSignatureBytes()
        if raw.count == 1, let basic = DBusType.singleCharacter(raw[0]) { return basic }
        if raw.count == 2, raw[0] == UInt8(ascii: "a"), let basic = DBusType.singleCharacter(raw[1]) {
            return .array(basic)
        }
        if let cache { return try cache.variantType(raw) }
        return try SignatureParser.parseSingle(bytes: ArraySlice(raw), original: String(decoding: raw, as: UTF8.self))
    }

    mutating func decode(_ type: DBusType, depth: Int) throws(DBusError) -> DBusValue {
        guard depth <= WireDecoder.maximumDepth else {
            throw .malformedMessage("values nested deeper than \(WireDecoder.maximumDepth) levels")
        }
        switch type {
        case .byte: return .byte(try readByte())
        case .boolean:
            let v = try readUInt32()
            guard v <= 1 else { throw .malformedMessage("boolean with value \(v) at offset \(position - 4)") }
            return .boolean(v == 1)
        case .int16: return .int16(Int16(bitPattern: try readUInt16()))
        case .uint16: return .uint16(try readUInt16())
        case .int32: return .int32(Int32(bitPattern: try readUInt32()))
        case .uint32: return .uint32(try readUInt32())
        case .int64: return .int64(Int64(bitPattern: try readUInt64()))
        case .uint64: return .uint64(try readUInt64())
        case .double: return .double(Double(bitPattern: try readUInt64()))
        case .string: return .string(try readStringValue())
        case .objectPath: return .objectPath(try readObjectPath())
        case .signature: return .signature(try readSignatureValue())
        case .unixFD:
            let index = Int(try readUInt32())
            guard index < fds.count else {
                throw .malformedMessage("fd index \(index) but the message carries \(fds.count) fds")
            }
            return .unixFD(fds[index])
        case .variant:
            let inner = try readVariantType()
            return .variant(try decode(inner, depth: depth + 1))
        case let .structure(fields):
            try align(8)
            var values: [DBusValue] = []
            values.reserveCapacity(fields.count)
            for f in fields { values.append(try decode(f, depth: depth + 1)) }
            return .structure(values)
        case let .array(element):
            let length = Int(try readUInt32())
            try align(element.alignment)
            try need(length)
            let end = position + length
            if case .byte = element {
                let bytes = [UInt8](UnsafeRawBufferPointer(start: base + position, count: length))
                position = end
                return .bytes(bytes)
            }
            var items: [DBusValue] = []
            while position < end {
                items.append(try decode(element, depth: depth + 1))
            }
            guard position == end else { throw .malformedMessage("array elements overrun the array length at offset \(position)") }
            return .array(element, items)
        case let .dictionary(key, value):
            let length = Int(try readUInt32())
            try align(8)
            try need(length)
            let end = position + length
            var entries: [DBusDictEntry] = []
            entries.reserveCapacity(4)
            while position < end {
                try align(8)
                let k: DBusValue
                if case .string = key {
                    k = .string(try readStringValue(intern: true))
                } else {
                    k = try decode(key, depth: depth + 2)
                }
                let v = try decode(value, depth: depth + 2)
                entries.append(DBusDictEntry(k, v))
            }
            guard position == end else { throw .malformedMessage("dictionary entries overrun the array length at offset \(position)") }
            return .dictionary(key: key, value: value, entries)
        }
    }
}

/// A message's fixed header and header fields, as ``WireDecoder`` reads
/// them before the body.
struct WireHeader {
    var kind: DBusMessage.Kind
    var flags: DBusMessage.Flags
    var bigEndian: Bool
    var serial: UInt32 = 0
    var replySerial: UInt32?
    var path: ObjectPath?
    var interface: String?
    var member: String?
    var errorName: String?
    var destination: String?
    var sender: String?
    var signature = DBusSignature.empty
    var unixFDCount = 0
    var bodyStart = 0
    var bodyLength = 0

    init(kind: DBusMessage.Kind, flags: DBusMessage.Flags, bigEndian: Bool) {
        self.kind = kind
        self.flags = flags
        self.bigEndian = bigEndian
    }

    func message(body: [DBusValue]) -> DBusMessage {
        DBusMessage(
            kind: kind, flags: flags, serial: serial, replySerial: replySerial, path: path,
            interface: interface, member: member, errorName: errorName, destination: destination,
            sender: sender, signature: signature, body: body)
    }
}
