#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Cuts a D-Bus byte stream into whole messages, which the wire decoder
/// then reads in place: bytes (and the descriptors that came with them) in,
/// frames out. No I/O — ``SocketReader`` fills it from the bus socket, the
/// fuzz harness and the tests by drip-feeding bytes — so every way a stream
/// can be cut is testable without a socket.
///
/// Why our own receive path at all: libdbus reads at most 2 KiB per system
/// call and runs every message through its loader, validator and a
/// `DBusMessage` object before anyone sees it; for a flood of small BlueZ
/// signals that costs more than all of the decoding (docs/PERFORMANCE.md).
/// Loop thread only.
final class WireFramer {
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

    init(capacity: Int = 2 * WireFramer.chunk) {
        self.capacity = max(capacity, 16)
        storage = .allocate(byteCount: self.capacity, alignment: 8)
    }

    deinit {
        for i in fdHead..<fds.count { _ = Glibc.close(fds[i]) }
        storage.deallocate()
    }

    /// Lets `write` put up to the free space's size of bytes straight
    /// into the buffer (at least `minimum` bytes of room are made first);
    /// `write` returns how many it wrote (≤ 0: none). What the socket reader
    /// uses, so a read costs no copy.
    func fill(minimum: Int = WireFramer.chunk, _ write: (UnsafeMutableRawBufferPointer) -> Int) -> Int {
        makeRoom(minimum)
        let n = write(UnsafeMutableRawBufferPointer(start: storage + end, count: capacity - end))
        if n > 0 { end += min(n, capacity - end) }
        return n
    }

    /// Takes ownership of descriptors received with the bytes (they are
    /// claimed, oldest first, by the messages that declare them).
    func addDescriptors(_ received: UnsafeBufferPointer<Int32>) {
        fds.append(contentsOf: received)
    }

    /// Appends bytes, and the descriptors that came with them, as if one
    /// read had returned them: how the fuzz harness and the tests drip-feed
    /// a stream. Takes ownership of `descriptors`.
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
        guard total <= WireFramer.maximumMessageLength else {
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
        }
        // A one-off large message (GetManagedObjects of thousands of
        // devices: megabytes) should not pin its buffer. Shrink as soon as
        // what is left fits the usual size, not only when the buffer is
        // empty: under a steady flood of signals a read rarely ends on a
        // message boundary, so the buffer was seldom empty, and the reads
        // that followed walked through (made resident) all of the large
        // buffer before wrapping round.
        if capacity > 4 * WireFramer.chunk, end - start <= WireFramer.chunk {
            resize(to: 2 * WireFramer.chunk)
        }
    }

    /// The buffer's size now (for tests).
    var bufferCapacity: Int { capacity }

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
