internal import CDBus

/// Type codes as libdbus wants them (the C macros are casts Swift cannot import).
enum TypeCode {
    static let invalid: Int32 = 0
    static let byte = Int32(UInt8(ascii: "y"))
    static let boolean = Int32(UInt8(ascii: "b"))
    static let int16 = Int32(UInt8(ascii: "n"))
    static let uint16 = Int32(UInt8(ascii: "q"))
    static let int32 = Int32(UInt8(ascii: "i"))
    static let uint32 = Int32(UInt8(ascii: "u"))
    static let int64 = Int32(UInt8(ascii: "x"))
    static let uint64 = Int32(UInt8(ascii: "t"))
    static let double = Int32(UInt8(ascii: "d"))
    static let string = Int32(UInt8(ascii: "s"))
    static let objectPath = Int32(UInt8(ascii: "o"))
    static let signature = Int32(UInt8(ascii: "g"))
    static let unixFD = Int32(UInt8(ascii: "h"))
    static let array = Int32(UInt8(ascii: "a"))
    static let variant = Int32(UInt8(ascii: "v"))
    static let structure = Int32(UInt8(ascii: "r"))
    static let dictEntry = Int32(UInt8(ascii: "e"))
}

/// Builds libdbus messages from Swift values and, for messages carrying
/// Unix fds, decodes them through libdbus iterators.
enum LibDBusCodec {
    /// A new libdbus message for `message` (the caller owns one reference).
    /// Everything libdbus would reject with an abort is validated first.
    static func makeCMessage(_ message: DBusMessage) throws(DBusError) -> OpaquePointer {
        if let d = message.destination { try NameValidation.validateBusName(d) }
        if let i = message.interface { try NameValidation.validateInterface(i) }
        if let m = message.member { try NameValidation.validateMember(m) }
        if let e = message.errorName { try NameValidation.validateErrorName(e) }
        for v in message.body { try v.validate() }

        let created: OpaquePointer?
        switch message.kind {
        case .methodCall:
            guard let path = message.path, let member = message.member else {
                throw .invalidValue("a method call needs a path and a member")
            }
            created = dbus_message_new_method_call(message.destination, path.rawValue, message.interface, member)
        case .signal:
            guard let path = message.path, let interface = message.interface, let member = message.member else {
                throw .invalidValue("a signal needs a path, an interface and a member")
            }
            created = dbus_message_new_signal(path.rawValue, interface, member)
        case .methodReturn:
            created = dbus_message_new(Int32(DBUS_MESSAGE_TYPE_METHOD_RETURN))
        case .error:
            guard message.errorName != nil else { throw .invalidValue("an error message needs an error name") }
            created = dbus_message_new(Int32(DBUS_MESSAGE_TYPE_ERROR))
        }
        guard let msg = created else { throw .outOfMemory }
        var ok: dbus_bool_t = 1
        if message.kind == .methodReturn || message.kind == .error {
            if let rs = message.replySerial { ok &= dbus_message_set_reply_serial(msg, rs) }
            if let d = message.destination { ok &= dbus_message_set_destination(msg, d) }
            if let e = message.errorName { ok &= dbus_message_set_error_name(msg, e) }
            if let p = message.path { ok &= dbus_message_set_path(msg, p.rawValue) }
        } else if message.kind == .signal, let d = message.destination {
            ok &= dbus_message_set_destination(msg, d)
        }
        if message.flags.contains(.noReplyExpected) || message.kind != .methodCall {
            dbus_message_set_no_reply(msg, 1)
        }
        if message.flags.contains(.noAutoStart) { dbus_message_set_auto_start(msg, 0) }
        if message.flags.contains(.allowInteractiveAuthorization) {
            dbus_message_set_allow_interactive_authorization(msg, 1)
        }
        guard ok != 0 else {
            dbus_message_unref(msg)
            throw .outOfMemory
        }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(msg, &iter)
        do {
            for value in message.body { try append(value, to: &iter) }
        } catch {
            dbus_message_unref(msg)
            throw error
        }
        return msg
    }

    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) throws(DBusError) {
        var ok: dbus_bool_t = 1
        switch value {
        case var .byte(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.byte, &v)
        case let .boolean(b):
            var v: dbus_bool_t = b ? 1 : 0
            ok = dbus_message_iter_append_basic(&iter, TypeCode.boolean, &v)
        case var .int16(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.int16, &v)
        case var .uint16(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.uint16, &v)
        case var .int32(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.int32, &v)
        case var .uint32(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.uint32, &v)
        case var .int64(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.int64, &v)
        case var .uint64(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.uint64, &v)
        case var .double(v): ok = dbus_message_iter_append_basic(&iter, TypeCode.double, &v)
        case let .string(s): ok = appendString(s, code: TypeCode.string, to: &iter)
        case let .objectPath(p): ok = appendString(p.rawValue, code: TypeCode.objectPath, to: &iter)
        case let .signature(g): ok = appendString(g.rawValue, code: TypeCode.signature, to: &iter)
        case let .unixFD(fd):
            var raw = fd.rawValue
            guard raw >= 0 else { throw .invalidValue("file descriptor was already taken") }
            ok = dbus_message_iter_append_basic(&iter, TypeCode.unixFD, &raw)
        case let .bytes(bytes):
            try container(TypeCode.array, "y", &iter) { (sub: inout DBusMessageIter) throws(DBusError) in
                let r: dbus_bool_t = bytes.withUnsafeBufferPointer { buf in
                    var p = buf.baseAddress
                    if p == nil { return 1 }
                    return dbus_message_iter_append_fixed_array(&sub, TypeCode.byte, &p, Int32(buf.count))
                }
                guard r != 0 else { throw .outOfMemory }
            }
        case let .array(element, items):
            try container(TypeCode.array, element.signature, &iter) { (sub: inout DBusMessageIter) throws(DBusError) in
                for item in items { try append(item, to: &sub) }
            }
        case let .dictionary(key, valueType, entries):
            let entrySig = "{" + key.signature + valueType.signature + "}"
            try container(TypeCode.array, entrySig, &iter) { (sub: inout DBusMessageIter) throws(DBusError) in
                for entry in entries {
                    try container(TypeCode.dictEntry, nil, &sub) { (e: inout DBusMessageIter) throws(DBusError) in
                        try append(entry.key, to: &e)
                        try append(entry.value, to: &e)
                    }
                }
            }
        case let .structure(fields):
            try container(TypeCode.structure, nil, &iter) { (sub: inout DBusMessageIter) throws(DBusError) in
                for f in fields { try append(f, to: &sub) }
            }
        case let .variant(inner):
            try container(TypeCode.variant, inner.type.signature, &iter) { (sub: inout DBusMessageIter) throws(DBusError) in
                try append(inner, to: &sub)
            }
        }
        guard ok != 0 else { throw .outOfMemory }
    }

    private static func appendString(_ s: String, code: Int32, to iter: inout DBusMessageIter) -> dbus_bool_t {
        s.withCString { cstr in
            var p: UnsafePointer<CChar>? = cstr
            return dbus_message_iter_append_basic(&iter, code, &p)
        }
    }

    private static func container(
        _ code: Int32, _ signature: String?, _ iter: inout DBusMessageIter,
        _ body: (inout DBusMessageIter) throws(DBusError) -> Void
    ) throws(DBusError) {
        var sub = DBusMessageIter()
        let opened: dbus_bool_t
        if let signature {
            opened = signature.withCString { dbus_message_iter_open_container(&iter, code, $0, &sub) }
        } else {
            opened = dbus_message_iter_open_container(&iter, code, nil, &sub)
        }
        guard opened != 0 else { throw .outOfMemory }
        do {
            try body(&sub)
        } catch {
            dbus_message_iter_abandon_container(&iter, &sub)
            throw error
        }
        guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw .outOfMemory }
    }

    /// The wire bytes of `message` (serial set to `serial`), as libdbus
    /// marshals them. Used by tests and benchmarks of the wire decoder.
    static func marshal(_ message: DBusMessage, serial: UInt32 = 1) throws(DBusError) -> [UInt8] {
        let c = try makeCMessage(message)
        defer { dbus_message_unref(c) }
        dbus_message_set_serial(c, serial)
        var buffer: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        guard dbus_message_marshal(c, &buffer, &length) != 0, let buffer else { throw .outOfMemory }
        defer { dbus_free(buffer) }
        return [UInt8](UnsafeRawBufferPointer(start: buffer, count: Int(length)))
    }

    /// Decodes `message` after a trip through libdbus, with both decoders.
    static func roundTrip(_ message: DBusMessage) throws(DBusError) -> (wire: DBusMessage, iterators: DBusMessage) {
        let c = try makeCMessage(message)
        defer { dbus_message_unref(c) }
        dbus_message_set_serial(c, 7)
        let iter = try decodeWithIterators(c)
        var buffer: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        guard dbus_message_marshal(c, &buffer, &length) != 0, let buffer else { throw .outOfMemory }
        defer { dbus_free(buffer) }
        let wire: DBusMessage
        if message.body.contains(where: { $0.containsUnixFD }) {
            wire = iter
        } else {
            wire = try WireDecoder.decodeMessage(UnsafeRawBufferPointer(start: buffer, count: Int(length)))
        }
        return (wire, iter)
    }

    static func releaseCMessage(_ pointer: OpaquePointer) {
        dbus_message_unref(pointer)
    }

    // MARK: Decoding

    /// Decodes a received libdbus message. Uses the fast wire decoder unless
    /// the message carries Unix fds.
    static func decode(_ msg: OpaquePointer, cache: DecodeCache? = nil, lazyBody: Bool = false) throws(DBusError) -> DBusMessage {
        if dbus_message_contains_unix_fds(msg) == 0 {
            var buffer: UnsafeMutablePointer<CChar>?
            var length: Int32 = 0
            guard dbus_message_marshal(msg, &buffer, &length) != 0, let buffer else { throw .outOfMemory }
            defer { dbus_free(buffer) }
            return try WireDecoder.decodeMessage(UnsafeRawBufferPointer(start: buffer, count: Int(length)), cache: cache, lazyBody: lazyBody)
        }
        return try decodeWithIterators(msg)
    }

    static func decodeWithIterators(_ msg: OpaquePointer) throws(DBusError) -> DBusMessage {
        guard let kind = DBusMessage.Kind(rawValue: UInt8(truncatingIfNeeded: dbus_message_get_type(msg))) else {
            throw .malformedMessage("unknown message type \(dbus_message_get_type(msg))")
        }
        var flags: DBusMessage.Flags = []
        if dbus_message_get_no_reply(msg) != 0 { flags.insert(.noReplyExpected) }
        if dbus_message_get_auto_start(msg) == 0 { flags.insert(.noAutoStart) }
        let rs = dbus_message_get_reply_serial(msg)
        let sigString = dbus_message_get_signature(msg).map { String(cString: $0) } ?? ""
        let signature = try DBusSignature(sigString)
        var body: [DBusValue] = []
        var iter = DBusMessageIter()
        if dbus_message_iter_init(msg, &iter) != 0 {
            for type in signature.types {
                body.append(try read(type, &iter, depth: 0))
                _ = dbus_message_iter_next(&iter)
            }
        }
        return DBusMessage(
            kind: kind, flags: flags, serial: dbus_message_get_serial(msg),
            replySerial: rs == 0 ? nil : rs,
            path: dbus_message_get_path(msg).map { ObjectPath(unchecked: String(cString: $0)) },
            interface: dbus_message_get_interface(msg).map { String(cString: $0) },
            member: dbus_message_get_member(msg).map { String(cString: $0) },
            errorName: dbus_message_get_error_name(msg).map { String(cString: $0) },
            destination: dbus_message_get_destination(msg).map { String(cString: $0) },
            sender: dbus_message_get_sender(msg).map { String(cString: $0) },
            signature: signature, body: body)
    }

    private static func read(_ type: DBusType, _ iter: inout DBusMessageIter, depth: Int) throws(DBusError) -> DBusValue {
        guard depth <= WireDecoder.maximumDepth else { throw .malformedMessage("values nested too deeply") }
        var basic = DBusBasicValue()
        switch type {
        case .byte:
            dbus_message_iter_get_basic(&iter, &basic)
            return .byte(basic.byt)
        case .boolean:
            dbus_message_iter_get_basic(&iter, &basic)
            return .boolean(basic.bool_val != 0)
        case .int16:
            dbus_message_iter_get_basic(&iter, &basic)
            return .int16(basic.i16)
        case .uint16:
            dbus_message_iter_get_basic(&iter, &basic)
            return .uint16(basic.u16)
        case .int32:
            dbus_message_iter_get_basic(&iter, &basic)
            return .int32(basic.i32)
        case .uint32:
            dbus_message_iter_get_basic(&iter, &basic)
            return .uint32(basic.u32)
        case .int64:
            dbus_message_iter_get_basic(&iter, &basic)
            return .int64(Int64(basic.i64))
        case .uint64:
            dbus_message_iter_get_basic(&iter, &basic)
            return .uint64(UInt64(basic.u64))
        case .double:
            dbus_message_iter_get_basic(&iter, &basic)
            return .double(basic.dbl)
        case .string, .objectPath, .signature:
            dbus_message_iter_get_basic(&iter, &basic)
            guard let p = basic.str else { throw .malformedMessage("missing string value") }
            let s = String(cString: p)
            if type == .string { return .string(s) }
            if type == .objectPath { return .objectPath(ObjectPath(unchecked: s)) }
            return .signature(try DBusSignature(s))
        case .unixFD:
            dbus_message_iter_get_basic(&iter, &basic)
            // libdbus hands out a new descriptor that the caller owns.
            return .unixFD(UnixFileDescriptor(owning: basic.fd))
        case .variant:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            guard let cs = dbus_message_iter_get_signature(&sub) else { throw .outOfMemory }
            let sig = String(cString: cs)
            dbus_free(cs)
            let inner = try SignatureParser.parseSingle(bytes: ArraySlice(Array(sig.utf8)), original: sig)
            return .variant(try read(inner, &sub, depth: depth + 1))
        case let .structure(fields):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var values: [DBusValue] = []
            for f in fields {
                values.append(try read(f, &sub, depth: depth + 1))
                _ = dbus_message_iter_next(&sub)
            }
            return .structure(values)
        case let .array(element):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if element == .byte {
                var p: UnsafeMutableRawPointer?
                var n: Int32 = 0
                withUnsafeMutablePointer(to: &p) { pp in
                    dbus_message_iter_get_fixed_array(&sub, pp, &n)
                }
                guard n > 0, let p else { return .bytes([]) }
                return .bytes([UInt8](UnsafeRawBufferPointer(start: p, count: Int(n))))
            }
            var items: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != TypeCode.invalid {
                items.append(try read(element, &sub, depth: depth + 1))
                _ = dbus_message_iter_next(&sub)
            }
            return .array(element, items)
        case let .dictionary(key, value):
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var entries: [DBusDictEntry] = []
            while dbus_message_iter_get_arg_type(&sub) == TypeCode.dictEntry {
                var e = DBusMessageIter()
                dbus_message_iter_recurse(&sub, &e)
                let k = try read(key, &e, depth: depth + 2)
                _ = dbus_message_iter_next(&e)
                let v = try read(value, &e, depth: depth + 2)
                entries.append(DBusDictEntry(k, v))
                _ = dbus_message_iter_next(&sub)
            }
            return .dictionary(key: key, value: value, entries)
        }
    }
}
