/// Per-connection memo tables for the wire decoder, used only on the
/// connection's I/O thread.
///
/// A flood of BlueZ signals repeats the same few signatures, paths,
/// interface, member and property names over and over; decoding them once
/// and sharing the resulting Swift values removes most of the per-message
/// allocations (see docs/PERFORMANCE.md).
final class DecodeCache {
    private var signatures: [String: DBusSignature] = [:]
    private var variantTypes: [String: DBusType] = [:]
    private let strings = StringInterner(capacity: 4096)

    /// A parsed signature for the raw bytes, parsing only on first sight.
    func signature(_ raw: UnsafeRawBufferPointer) throws(DBusError) -> DBusSignature {
        let key = strings.intern(raw, maxLength: 64) ?? String(decoding: raw, as: UTF8.self)
        if let hit = signatures[key] { return hit }
        let parsed = DBusSignature(validated: try SignatureParser.parse(bytes: ArraySlice(raw), original: key), raw: key)
        if signatures.count < 1024 { signatures[key] = parsed }
        return parsed
    }

    func variantType(_ raw: UnsafeRawBufferPointer) throws(DBusError) -> DBusType {
        let key = strings.intern(raw, maxLength: 64) ?? String(decoding: raw, as: UTF8.self)
        if let hit = variantTypes[key] { return hit }
        let parsed = try SignatureParser.parseSingle(bytes: ArraySlice(raw), original: key)
        if variantTypes.count < 1024 { variantTypes[key] = parsed }
        return parsed
    }

    /// A shared String for short, frequently repeated text.
    @inline(__always) func string(_ raw: UnsafeRawBufferPointer) -> String {
        strings.intern(raw, maxLength: 96) ?? String(decoding: raw, as: UTF8.self)
    }
}

/// A bounded open-addressing table from UTF-8 bytes to a shared String.
/// Once full it stops adding (returns nil for unknown text) so memory stays
/// bounded whatever the peer sends.
final class StringInterner {
    private var hashes: [UInt64]
    private var values: [String?]
    private let mask: Int
    private var count = 0
    private let limit: Int

    init(capacity: Int) {
        var size = 16
        while size < capacity * 2 { size <<= 1 }
        hashes = Array(repeating: 0, count: size)
        values = Array(repeating: nil, count: size)
        mask = size - 1
        limit = capacity
    }

    func intern(_ raw: UnsafeRawBufferPointer, maxLength: Int) -> String? {
        guard raw.count <= maxLength else { return nil }
        let h = StringInterner.hash(raw) | 1 // 0 marks an empty slot
        var i = Int(truncatingIfNeeded: h) & mask
        while true {
            let slot = hashes[i]
            if slot == 0 { break }
            if slot == h, let s = values[i], StringInterner.equal(s, raw) { return s }
            i = (i + 1) & mask
        }
        guard count < limit else { return nil }
        let s = String(decoding: raw, as: UTF8.self)
        hashes[i] = h
        values[i] = s
        count += 1
        return s
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

    private static func equal(_ s: String, _ raw: UnsafeRawBufferPointer) -> Bool {
        var s = s
        return s.withUTF8 { utf8 in
            guard utf8.count == raw.count else { return false }
            guard let a = utf8.baseAddress, let b = raw.baseAddress else { return raw.count == 0 }
            return memcmp(a, b, raw.count) == 0
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
