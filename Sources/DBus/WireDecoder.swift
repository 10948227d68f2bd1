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
    static let maximumDepth = 64

    init(base: UnsafeRawPointer, count: Int, bigEndian: Bool, position: Int = 0, cache: DecodeCache? = nil) {
        self.base = base
        self.count = count
        self.bigEndian = bigEndian
        self.position = position
        self.cache = cache
    }

    /// Decodes a whole marshalled message. Fails for messages that carry
    /// Unix file descriptors (their values are indices into a side table),
    /// which the caller decodes through libdbus instead.
    static func decodeMessage(_ bytes: UnsafeRawBufferPointer, cache: DecodeCache? = nil, lazyBody: Bool = false) throws(DBusError) -> DBusMessage {
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
        let flags = DBusMessage.Flags(rawValue: bytes[2])
        var d = WireDecoder(base: base, count: bytes.count, bigEndian: big, position: 4, cache: cache)
        let bodyLength = Int(try d.readUInt32())
        let serial = try d.readUInt32()
        let fieldsLength = Int(try d.readUInt32())
        let fieldsEnd = 16 + fieldsLength
        guard fieldsEnd <= bytes.count else { throw .malformedMessage("header fields run past the end of the message") }

        var path: ObjectPath?
        var interface: String?
        var member: String?
        var errorName: String?
        var replySerial: UInt32?
        var destination: String?
        var sender: String?
        var signature = DBusSignature.empty
        while d.position < fieldsEnd {
            try d.align(8)
            guard d.position < fieldsEnd else { break }
            let code = try d.readByte()
            let sigLength = Int(try d.readByte())
            guard d.position + sigLength + 1 <= fieldsEnd else { throw .malformedMessage("header field \(code) signature runs past the header") }
            let sigByte = sigLength == 1 ? d.base.load(fromByteOffset: d.position, as: UInt8.self) : 0
            d.position += sigLength + 1
            switch (code, sigByte) {
            case (1, UInt8(ascii: "o")): path = ObjectPath(unchecked: try d.readStringValue(intern: true))
            case (2, UInt8(ascii: "s")): interface = try d.readStringValue(intern: true)
            case (3, UInt8(ascii: "s")): member = try d.readStringValue(intern: true)
            case (4, UInt8(ascii: "s")): errorName = try d.readStringValue(intern: true)
            case (5, UInt8(ascii: "u")): replySerial = try d.readUInt32()
            case (6, UInt8(ascii: "s")): destination = try d.readStringValue(intern: true)
            case (7, UInt8(ascii: "s")): sender = try d.readStringValue(intern: true)
            case (8, UInt8(ascii: "g")): signature = try d.readSignatureValue()
            case (9, UInt8(ascii: "u")):
                if try d.readUInt32() > 0 {
                    throw .notSupported("unix fds in the wire decoder")
                }
            default:
                // Unknown header fields must be ignored (specification).
                let type = try SignatureParser.parseSingle(
                    bytes: ArraySlice(UnsafeRawBufferPointer(start: d.base + d.position - sigLength - 1, count: sigLength)),
                    original: "header field")
                _ = try d.decode(type, depth: 1)
            }
        }
        d.position = fieldsEnd
        try d.align(8)
        guard d.position + bodyLength <= bytes.count else { throw .malformedMessage("body runs past the end of the message") }
        let bodyEnd = d.position + bodyLength
        if lazyBody {
            // Keep the body bytes; the consumer decodes them (or reads them
            // in place with DBusBodyReader) on its own thread.
            let raw = DBusRawBody(bytes: [UInt8](UnsafeRawBufferPointer(start: base + d.position, count: bodyLength)),
                                  bigEndian: big, signature: signature)
            var m = DBusMessage(
                kind: kind, flags: flags, serial: serial, replySerial: replySerial, path: path,
                interface: interface, member: member, errorName: errorName, destination: destination,
                sender: sender, signature: signature, body: [])
            m.rawBody = raw
            return m
        }
        var body: [DBusValue] = []
        body.reserveCapacity(signature.types.count)
        for type in signature.types {
            if case .string = type {
                body.append(.string(try d.readStringValue(intern: true)))
            } else {
                body.append(try d.decode(type, depth: 0))
            }
        }
        guard d.position == bodyEnd else {
            throw .malformedMessage("body length \(bodyLength) does not match its signature \"\(signature)\"")
        }
        return DBusMessage(
            kind: kind, flags: flags, serial: serial, replySerial: replySerial, path: path,
            interface: interface, member: member, errorName: errorName, destination: destination,
            sender: sender, signature: signature, body: body)
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
        position += length + 1
        let raw = UnsafeRawBufferPointer(start: start, count: length)
        if intern, let cache { return cache.string(raw) }
        return String(decoding: raw, as: UTF8.self)
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
        case .objectPath: return .objectPath(ObjectPath(unchecked: try readStringValue()))
        case .signature: return .signature(try readSignatureValue())
        case .unixFD: throw .notSupported("unix fds in the wire decoder")
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
