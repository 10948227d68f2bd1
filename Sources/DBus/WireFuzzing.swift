internal import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The receive path without a socket, for the fuzz harness (`Sources/Fuzz`,
/// `scripts/fuzz-all`). Not API: reachable only with `@_spi(Fuzzing)`.
///
/// One input is a byte stream as the bus would send it, cut at points the
/// input chooses, run through what the connection's loop thread does with
/// each read: ``WireFramer`` frames it, ``WireDecoder`` reads each frame's
/// header (one ``DecodeCache`` for the whole stream, as on a connection),
/// claims its descriptors, decodes the body (or keeps it for on-demand
/// decoding and then decodes and walks it), and stops where the connection
/// would give up (a frame whose header cannot be read, or a stream that
/// cannot be D-Bus).
///
/// Layout: byte 0, bits 0–1: descriptors that arrive with the first bytes
/// (0–3, duplicates of /dev/null); bit 2: bodies of signals decoded on
/// demand; bit 3: every frame libdbus accepts is also decoded by libdbus
/// (`dbus_message_demarshal` and its iterators) and the two results must
/// agree. Byte 1 seeds the cut points. The rest is the stream.
///
/// What traps, so that libFuzzer reports it: a frame libdbus accepts that
/// we refuse or read differently, and a descriptor left open after the
/// stream and its messages are gone.
@_spi(Fuzzing) public enum DBusWireFuzzing {
    nonisolated(unsafe) private static var devNull: Int32 = -1

    /// `checkDescriptors`: trap when a descriptor is left open (the lowest
    /// free number differs after the input); only for a process that opens
    /// no descriptors on other threads meanwhile, as the fuzzer.
    @discardableResult
    public static func run(_ input: [UInt8], checkDescriptors: Bool = true) -> Int {
        guard input.count >= 2 else { return 0 }
        if devNull < 0 { devNull = open("/dev/null", O_RDONLY | O_CLOEXEC) }
        let lowestFree = dup(devNull)
        close(lowestFree)
        let total = input.withUnsafeBytes { raw in stream(raw, options: input[0], seed: input[1]) }
        if checkDescriptors {
            // Every descriptor that arrived was claimed by a message (and closed
            // with it) or closed by the receiver: the lowest free number is back.
            let probe = dup(devNull)
            close(probe)
            precondition(probe == lowestFree, "a received descriptor was left open (lowest free fd \(probe), was \(lowestFree))")
        }
        return total
    }

    private static func stream(_ raw: UnsafeRawBufferPointer, options: UInt8, seed: UInt8) -> Int {
        let receiver = WireFramer(capacity: 4096)   // not the connection's 128 KiB: one mmap per input otherwise
        let cache = DecodeCache(names: 16)
        let onDemand = options & 0x04 != 0
        let compare = options & 0x08 != 0
        var state = UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 | 1
        func nextCut() -> Int {
            // xorshift: mostly short reads (1…64 bytes), now and then a long one.
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state % 8 == 0 ? 1 + Int((state >> 8) % 4096) : 1 + Int((state >> 8) % 64)
        }
        // The descriptors arrive with the first read (or alone, before an empty stream).
        receiver.receive(UnsafeRawBufferPointer(start: nil, count: 0), descriptors: (0..<Int(options & 0x03)).map { _ in dup(devNull) })
        var offset = 2
        var total = 0
        while offset < raw.count {
            let n = min(raw.count - offset, nextCut())
            receiver.receive(UnsafeRawBufferPointer(rebasing: raw[offset..<offset + n]))
            offset += n
            while true {
                let frame: UnsafeRawBufferPointer
                do {
                    guard let next = try receiver.nextMessage() else { break }
                    frame = next
                } catch {
                    return total   // the connection would end here
                }
                guard let used = dispatch(frame, receiver, cache, onDemand: onDemand, compare: compare) else { return total }
                total &+= used
                receiver.consume(frame.count)
            }
        }
        return total
    }

    /// What the loop does with one frame; nil where the connection gives up.
    private static func dispatch(_ frame: UnsafeRawBufferPointer, _ receiver: WireFramer, _ cache: DecodeCache,
                                 onDemand: Bool, compare: Bool) -> Int? {
        let header: WireHeader
        do {
            header = try WireDecoder.decodeHeader(frame, cache: cache)
        } catch {
            if compare { expectRefusedByLibDBus(frame, ours: error) }
            return nil
        }
        let message: DBusMessage
        do {
            let fds = header.unixFDCount > 0 ? try receiver.takeDescriptors(header.unixFDCount) : []
            message = try WireDecoder.decodeBody(of: header, in: frame, cache: cache,
                                                 lazyBody: onDemand && header.kind == .signal, fds: fds)
        } catch {
            if compare && header.unixFDCount == 0 { expectRefusedByLibDBus(frame, ours: error) }
            return 1
        }
        var used = message.signature.rawValue.utf8.count
        if message.isBodyDeferred {
            // What an on-demand consumer does: decode it all, or walk it in place.
            if let values = try? message.decodedBody() { used &+= values.count }
            _ = try? message.withBodyReader { (reader: inout DBusBodyReader) throws(DBusError) in
                for type in message.signature.types { try reader.skip(type) }
                return reader.isAtEnd
            }
        } else {
            used &+= message.body.count
        }
        if compare && header.unixFDCount == 0 { expectSameAsLibDBus(frame, ours: message) }
        return used
    }

    private enum LibDBusReading {
        /// dbus_message_demarshal refused the bytes.
        case refused
        /// It accepted them, but its iterators could not read the body into
        /// our values (a type nesting deeper than we allow, say).
        case unreadable
        case message(DBusMessage)
    }

    private static func libdbusDecode(_ frame: UnsafeRawBufferPointer) -> LibDBusReading {
        guard let base = frame.baseAddress, frame.count <= Int(Int32.max) else { return .refused }
        var err = DBusError_C()
        dbus_error_init(&err)
        defer { dbus_error_free(&err) }
        guard let c = dbus_message_demarshal(base.assumingMemoryBound(to: CChar.self), Int32(frame.count), &err) else { return .refused }
        defer { dbus_message_unref(c) }
        guard let m = try? LibDBusCodec.decodeWithIterators(c) else { return .unreadable }
        return .message(m)
    }

    /// libdbus's loader does not check that a `h` value indexes a descriptor
    /// the message carries (its iterator later reads -1 for it); we refuse
    /// such a body. Stricter than libdbus is fine; a different reading is not.
    private static func carriesDescriptorIndexes(_ message: DBusMessage) -> Bool {
        message.body.contains(where: \.containsUnixFD)
    }

    private static func expectRefusedByLibDBus(_ frame: UnsafeRawBufferPointer, ours: DBusError) {
        guard case let .message(theirs) = libdbusDecode(frame), !carriesDescriptorIndexes(theirs) else { return }
        preconditionFailure("libdbus accepts a message the wire decoder refuses (\(ours)): \(theirs)")
    }

    private static func expectSameAsLibDBus(_ frame: UnsafeRawBufferPointer, ours: DBusMessage) {
        guard case let .message(theirs) = libdbusDecode(frame), !carriesDescriptorIndexes(theirs) else { return }
        let mask: DBusMessage.Flags = [.noReplyExpected, .noAutoStart]
        let oursBody = (try? ours.decodedBody()) ?? []
        let same = ours.kind == theirs.kind && ours.flags.intersection(mask) == theirs.flags
            && ours.serial == theirs.serial && ours.replySerial == theirs.replySerial
            && ours.path == theirs.path && ours.interface == theirs.interface && ours.member == theirs.member
            && ours.errorName == theirs.errorName && ours.destination == theirs.destination && ours.sender == theirs.sender
            && ours.signature == theirs.signature
            && (oursBody == theirs.body || oursBody.description == theirs.body.description)   // NaN ≠ NaN
        precondition(same, "the wire decoder and libdbus read a message differently:\n ours   \(ours) \(oursBody)\n libdbus \(theirs)")
    }
}
