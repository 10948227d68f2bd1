internal import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The receive side of a bus connection once libdbus has authenticated it:
/// reads the socket in large chunks and cuts the byte stream into whole
/// messages, which the wire decoder then reads in place.
///
/// libdbus reads at most 2 KiB per system call and runs every message
/// through its loader, validator and a `DBusMessage` object before anyone
/// sees it; for a flood of small BlueZ signals that costs more than all of
/// the decoding (docs/PERFORMANCE.md). Loop thread only.
final class WireReceiver {
    /// The longest message the specification allows (2^27 bytes).
    static let maximumMessageLength = 134_217_728
    /// How much one read asks for.
    static let chunk = 64 * 1024

    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private var start = 0
    private var end = 0
    /// Descriptors received but not yet claimed by a message, oldest first.
    private var fds: [Int32] = []
    private var fdHead = 0
    private let scratchFDs = UnsafeMutablePointer<Int32>.allocate(capacity: Int(CDBUS_MAX_FDS_PER_READ))

    init(capacity: Int = 2 * WireReceiver.chunk) {
        self.capacity = max(capacity, 16)
        storage = .allocate(byteCount: self.capacity, alignment: 8)
    }

    deinit {
        for i in fdHead..<fds.count { _ = Glibc.close(fds[i]) }
        storage.deallocate()
        scratchFDs.deallocate()
    }

    enum ReadOutcome: Equatable {
        case received
        case wouldBlock
        case endOfStream
        case failed(String)
    }

    /// One non-blocking read from `socket` into the buffer.
    func read(from socket: Int32) -> ReadOutcome {
        makeRoom(WireReceiver.chunk)
        while true {
            var count: Int32 = 0
            var lost: Int32 = 0
            let n = cdbus_recv_with_fds(socket, storage + end, UInt(capacity - end), scratchFDs, &count, &lost)
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
                return .failed("read from the bus socket failed: \(String(cString: strerror(e)))")
            }
            for i in 0..<Int(count) { fds.append(scratchFDs[i]) }
            if lost != 0 {
                return .failed("file descriptors passed with a message were lost (too many in one read)")
            }
            if n == 0 { return .endOfStream }
            end += n
            return .received
        }
    }

    /// Appends bytes, and the descriptors that came with them, as if one
    /// read had returned them: how the fuzz harness (and tests) drip-feed
    /// a stream without a socket. Takes ownership of `descriptors`.
    func receive(_ bytes: UnsafeRawBufferPointer, descriptors: [Int32] = []) {
        makeRoom(bytes.count)
        if let base = bytes.baseAddress, bytes.count > 0 {
            (storage + end).copyMemory(from: base, byteCount: bytes.count)
            end += bytes.count
        }
        fds.append(contentsOf: descriptors)
    }

    /// The next complete message in the buffer, or nil when more bytes are
    /// needed. Throws when the stream cannot be a D-Bus message stream
    /// (after which no later message can be found either).
    func nextMessage() throws(DBusError) -> UnsafeRawBufferPointer? {
        let available = end - start
        guard available >= 16 else { return nil }
        let p = UnsafeRawPointer(storage + start)
        let big: Bool
        switch p.load(as: UInt8.self) {
        case UInt8(ascii: "l"): big = false
        case UInt8(ascii: "B"): big = true
        default: throw .malformedMessage("unknown byte-order mark 0x\(String(p.load(as: UInt8.self), radix: 16)) in the incoming stream")
        }
        let version = p.load(fromByteOffset: 3, as: UInt8.self)
        guard version == 1 else { throw .malformedMessage("unsupported protocol version \(version) in the incoming stream") }
        func u32(_ offset: Int) -> Int {
            let raw = p.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
            return Int(big ? UInt32(bigEndian: raw) : UInt32(littleEndian: raw))
        }
        let bodyLength = u32(4)
        let fieldsLength = u32(12)
        let total = ((16 + fieldsLength + 7) & ~7) + bodyLength
        guard total <= WireReceiver.maximumMessageLength else {
            throw .malformedMessage("incoming message of \(total) bytes is longer than the protocol allows")
        }
        guard available >= total else {
            makeRoom(total - available)
            return nil
        }
        return UnsafeRawBufferPointer(start: p, count: total)
    }

    /// Drops the message returned by ``nextMessage()``.
    func consume(_ length: Int) {
        start += length
        if start == end {
            start = 0
            end = 0
            // A one-off large message should not pin its buffer.
            if capacity > 4 * WireReceiver.chunk { resize(to: 2 * WireReceiver.chunk) }
        }
    }

    /// Claims the `count` oldest unclaimed descriptors for a message
    /// (the sender attaches them to the message's first bytes, so they
    /// have arrived by the time the message is complete).
    func takeDescriptors(_ count: Int) throws(DBusError) -> [UnixFileDescriptor] {
        guard count <= fds.count - fdHead else {
            throw .malformedMessage("message declares \(count) file descriptors but \(fds.count - fdHead) arrived")
        }
        let taken = (fdHead..<fdHead + count).map { UnixFileDescriptor(owning: fds[$0]) }
        fdHead += count
        if fdHead == fds.count {
            fds.removeAll(keepingCapacity: true)
            fdHead = 0
        }
        return taken
    }

    /// Makes sure `needed` more bytes fit after the buffered ones.
    private func makeRoom(_ needed: Int) {
        if capacity - end >= needed { return }
        let used = end - start
        if start > 0 && capacity - used >= needed {
            memmove(storage, storage + start, used)
            start = 0
            end = used
            return
        }
        var size = capacity
        while size - used < needed { size *= 2 }
        resize(to: size)
    }

    private func resize(to size: Int) {
        let used = end - start
        let fresh = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        fresh.copyMemory(from: storage + start, byteCount: used)
        storage.deallocate()
        storage = fresh
        capacity = size
        start = 0
        end = used
    }
}
