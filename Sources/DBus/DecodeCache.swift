#if canImport(Glibc)
import Glibc
#endif

/// Per-connection memo tables for the wire decoder, used only on the
/// connection's I/O thread.
///
/// A flood of BlueZ signals repeats the same few signatures, paths,
/// interface, member and property names over and over; decoding them once
/// and sharing the resulting Swift values removes most of the per-message
/// allocations (see docs/PERFORMANCE.md). Every table is bounded: once full
/// it stops learning, whatever a peer sends.
final class DecodeCache {
    private let signatures: BytesTable<DBusSignature>
    private let variantTypes: BytesTable<DBusType>
    private let paths: BytesTable<ObjectPath>
    private let strings: BytesTable<String>

    /// `names`: how many paths and how many strings are remembered (an
    /// eighth as many signatures and variant types). The fuzz harness uses
    /// small tables: cheap to make per input, and full (so no longer
    /// learning) after a few messages.
    init(names: Int = 4096) {
        signatures = BytesTable(capacity: max(names / 8, 1))
        variantTypes = BytesTable(capacity: max(names / 8, 1))
        paths = BytesTable(capacity: names)
        strings = BytesTable(capacity: names)
    }

    /// A parsed signature for the raw bytes, parsing only on first sight.
    func signature(_ raw: UnsafeRawBufferPointer) throws(DBusError) -> DBusSignature {
        if raw.count <= 64, let hit = signatures.lookup(raw) { return hit }
        let text = String(decoding: raw, as: UTF8.self)
        let parsed = DBusSignature(validated: try SignatureParser.parse(bytes: ArraySlice(raw), original: text), raw: text)
        if raw.count <= 64 { signatures.insert(raw, key: text, value: parsed) }
        return parsed
    }

    func variantType(_ raw: UnsafeRawBufferPointer) throws(DBusError) -> DBusType {
        if raw.count <= 64, let hit = variantTypes.lookup(raw) { return hit }
        let text = String(decoding: raw, as: UTF8.self)
        let parsed = try SignatureParser.parseSingle(bytes: ArraySlice(raw), original: text)
        if raw.count <= 64 { variantTypes.insert(raw, key: text, value: parsed) }
        return parsed
    }

    /// A validated object path for the raw bytes (every BlueZ signal names
    /// one of a few hundred device paths).
    func objectPath(_ raw: UnsafeRawBufferPointer) throws(DBusError) -> ObjectPath {
        let cacheable = raw.count <= 128
        if cacheable, let hit = paths.lookup(raw) { return hit }
        guard let text = WireDecoder.validatedString(raw) else {
            throw .malformedMessage("object path is not valid UTF-8 or contains a NUL byte")
        }
        let path: ObjectPath
        do {
            path = try ObjectPath(text)
        } catch {
            throw .malformedMessage("invalid object path: \(error)")
        }
        if cacheable { paths.insert(raw, key: text, value: path) }
        return path
    }

    /// A shared String for short, frequently repeated text seen before
    /// (validated when it was first remembered), or nil.
    @inline(__always) func string(_ raw: UnsafeRawBufferPointer) -> String? {
        // Up to 15 UTF-8 bytes Swift stores inline: nothing to share.
        if raw.count <= 15 || raw.count > 96 { return nil }
        return strings.lookup(raw)
    }

    /// Remembers validated text for ``string(_:)``.
    func remember(_ raw: UnsafeRawBufferPointer, _ s: String) {
        if raw.count <= 15 || raw.count > 96 { return }
        strings.insert(raw, key: s, value: s)
    }
}

/// A bounded open-addressing hash table keyed by UTF-8 bytes. Storage is
/// manually allocated so lookups pay no exclusivity or copy-on-write checks.
///
/// It starts small and doubles while it learns, up to twice `capacity`
/// slots: a connection that sees a few dozen paths (a gateway with a handful
/// of devices, a command-line call) keeps a few dozen slots, not the full
/// table (8 192 slots of 48 bytes for paths and as many for strings, all
/// written when the table was made, so all resident).
final class BytesTable<Value> {
    private struct Slot {
        var hash: UInt64
        var key: String
        var value: Value
    }
    private var slots: UnsafeMutablePointer<Slot?>
    private var size: Int
    private var mask: Int
    private var count = 0
    private let limit: Int
    private let maximumSize: Int

    init(capacity: Int) {
        var maximumSize = 16
        while maximumSize < capacity * 2 { maximumSize <<= 1 }
        self.maximumSize = maximumSize
        size = min(16, maximumSize)
        mask = size - 1
        limit = capacity
        slots = .allocate(capacity: size)
        slots.initialize(repeating: nil, count: size)
    }

    deinit {
        slots.deinitialize(count: size)
        slots.deallocate()
    }

    @inline(__always) func lookup(_ raw: UnsafeRawBufferPointer) -> Value? {
        let h = BytesTable.hash(raw)
        var i = Int(truncatingIfNeeded: h) & mask
        while let slot = slots[i] {
            if slot.hash == h, BytesTable.equal(slot.key, raw) { return slot.value }
            i = (i + 1) & mask
        }
        return nil
    }

    func insert(_ raw: UnsafeRawBufferPointer, key: String, value: Value) {
        guard count < limit else { return }
        // At most half full, as the full-size table was at its limit.
        if (count + 1) * 2 > size, size < maximumSize { grow() }
        place(Slot(hash: BytesTable.hash(raw), key: key, value: value))
        count += 1
    }

    /// Slots in use and slots allocated, for tests.
    var occupancy: (count: Int, size: Int) { (count, size) }

    private func place(_ slot: Slot) {
        var i = Int(truncatingIfNeeded: slot.hash) & mask
        while slots[i] != nil { i = (i + 1) & mask }
        slots[i] = slot
    }

    /// Twice the slots; every entry placed again by the hash it keeps.
    private func grow() {
        let old = slots, oldSize = size
        size = oldSize * 2
        mask = size - 1
        slots = .allocate(capacity: size)
        slots.initialize(repeating: nil, count: size)
        for i in 0..<oldSize {
            if let slot = (old + i).move() { place(slot) }
        }
        old.deallocate()
    }

    /// A fast non-cryptographic hash, eight bytes at a time.
    @inline(__always) static func hash(_ raw: UnsafeRawBufferPointer) -> UInt64 {
        var h: UInt64 = 0x9E3779B97F4A7C15 ^ UInt64(raw.count)
        guard let base = raw.baseAddress else { return h }
        var i = 0
        while i + 8 <= raw.count {
            let w = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            h = (h ^ w) &* 0xFF51AFD7ED558CCD
            h ^= h >> 32
            i += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while i < raw.count {
            tail |= UInt64(base.load(fromByteOffset: i, as: UInt8.self)) << shift
            shift += 8
            i += 1
        }
        h = (h ^ tail) &* 0xC4CEB9FE1A85EC53
        return h ^ (h >> 29)
    }

    @inline(__always) private static func equal(_ s: String, _ raw: UnsafeRawBufferPointer) -> Bool {
        let utf8 = s.utf8
        guard utf8.count == raw.count else { return false }
        return utf8.withContiguousStorageIfAvailable { buf -> Bool in
            guard let a = buf.baseAddress, let b = raw.baseAddress else { return raw.count == 0 }
            return memcmp(a, b, raw.count) == 0
        } ?? utf8.elementsEqual(raw)
    }
}
