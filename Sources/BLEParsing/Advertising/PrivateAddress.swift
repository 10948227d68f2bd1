import Vocabulary
internal import CLibCrypto

/// An Identity Resolving Key (Core Specification Vol 3 Part H 2.4.2.1): the
/// 128-bit key a phone, watch or tag shares when it bonds, with which a
/// resolvable private address it advertises can be traced to its identity.
///
/// Two byte orders meet here. The Core Specification's sample data, and
/// every tool that takes the key as an AES-128 key directly, write it most
/// significant byte first; that is ``bytes`` and ``init(hex:)``. bluetoothd
/// stores it as it came over SMP, least significant byte first, in the
/// `[IdentityResolvingKey] Key=` line of
/// `/var/lib/bluetooth/<adapter>/<device>/info`; that is
/// ``init(bluetoothdStorage:)``.
public struct IdentityResolvingKey: Sendable, Hashable, CustomStringConvertible {
    /// The key, most significant byte first (the AES-128 key as it is used).
    public let bytes: [UInt8]

    /// The key from 16 bytes, most significant first.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// The key as the Core Specification writes it (most significant byte
    /// first): 32 hex digits, separators as ``Hex/bytes(_:)`` accepts them.
    public init(hex: String) throws(SpellingError) {
        let b = try Hex.bytes(hex)
        guard b.count == 16 else {
            throw SpellingError(.hex, hex, expected: "an identity resolving key of 16 bytes (32 hex digits), got \(b.count) bytes")
        }
        bytes = b
    }

    /// The key as bluetoothd stores it (least significant byte first).
    public init(bluetoothdStorage hex: String) throws(SpellingError) {
        let k = try IdentityResolvingKey(hex: hex)
        bytes = k.bytes.reversed()
    }

    /// The key in the text of a bluetoothd `info` file (a GLib key file): the
    /// `Key=` entry of its `[IdentityResolvingKey]` group. Nil if the file has
    /// none; an error if it has one that is not a key.
    public init?(bluetoothdInfo text: String) throws(SpellingError) {
        var inGroup = false
        for raw in text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let line = raw.drop(while: { $0 == " " || $0 == "\t" })
            if line.hasPrefix("[") {
                inGroup = line.hasPrefix("[IdentityResolvingKey]")
            } else if inGroup, line.hasPrefix("Key=") {
                try self.init(bluetoothdStorage: String(line.dropFirst(4)).trimmingSuffixSpaces())
                return
            }
        }
        return nil
    }

    /// The key as bluetoothd would store it.
    public var bluetoothdStorage: String { Hex.string(bytes.reversed(), uppercase: true) }

    /// Never the key itself: it would end in logs. Its first two bytes
    /// are enough to tell configured keys apart.
    public var description: String { "IRK \(Hex.string(bytes.prefix(2)))…" }

    /// The random address hash function `ah` (Vol 3 Part H 2.2.2):
    /// `ah(k, r) = e(k, r') mod 2^24`, where `r'` is the 24-bit `r` padded
    /// with zeros to 128 bits (r in the least significant bits). Nil only if
    /// libcrypto refuses the key set-up.
    public func hash(_ r: UInt32) -> UInt32? {
        guard let ctx = BlockCipherCache.context(for: bytes) else {
            BlockCipherCache.forgetKey()
            return nil
        }
        var block: (UInt64, UInt64) = (0, 0)
        let ok = withUnsafeMutableBytes(of: &block) { (p) -> Bool in
            p[13] = UInt8(truncatingIfNeeded: r >> 16)
            p[14] = UInt8(truncatingIfNeeded: r >> 8)
            p[15] = UInt8(truncatingIfNeeded: r)
            guard let base = p.baseAddress else { return false }
            do { try AESCCM.ecb(ctx, base, base, 16) } catch { return false }
            return true
        }
        guard ok else { return nil }
        return withUnsafeBytes(of: &block) { p in UInt32(p[13]) << 16 | UInt32(p[14]) << 8 | UInt32(p[15]) }
    }

    /// Whether `address` is a resolvable private address made with this key:
    /// its top 24 bits are `prand` (whose two most significant bits are 0b01),
    /// its low 24 bits `ah(k, prand)` (Vol 6 Part B 1.3.2.2, Vol 3 Part H 2.2.2).
    public func resolves(_ address: BluetoothAddress) -> Bool {
        guard address.randomAddressType == .resolvablePrivate else { return false }
        let prand = UInt32(truncatingIfNeeded: address.value >> 24)
        return hash(prand) == UInt32(truncatingIfNeeded: address.value & 0xFF_FFFF)
    }

    /// The resolvable private address this key makes from `prand` (its top
    /// two bits are forced to 0b01). What a phone does every ~15 minutes;
    /// here for the simulator and tests. Nil only if libcrypto fails.
    public func resolvablePrivateAddress(prand: UInt32) -> BluetoothAddress? {
        let p = (prand & 0x3F_FFFF) | 0x40_0000
        guard let h = hash(p) else { return nil }
        return BluetoothAddress(value: UInt64(p) << 24 | UInt64(h))
    }
}

extension String {
    fileprivate func trimmingSuffixSpaces() -> String {
        var s = Substring(self)
        while let last = s.last, last == " " || last == "\t" || last == "\r" { s = s.dropLast() }
        return String(s)
    }
}

/// Resolves advertised addresses to configured identities: "this RPA is
/// Alice's phone". Trying a new address costs one AES block per key; the
/// answer, hit or miss, is remembered for the next advertisement from that
/// address, in a table of at most `capacity` addresses (the oldest half is
/// forgotten when it is full, so a flood of random addresses costs bounded
/// memory and every address at most one try per key while remembered).
public struct IdentityResolver: Sendable {
    /// A named identity and its key.
    public struct Identity: Sendable, Hashable {
        public let name: String
        public let key: IdentityResolvingKey
        public init(name: String, key: IdentityResolvingKey) {
            self.name = name
            self.key = key
        }
    }

    public let identities: [Identity]
    public let capacity: Int
    /// Address → index into ``identities`` (-1: resolves to none).
    private var remembered: [UInt64: Int] = [:]
    /// Insertion order of `remembered`, for forgetting the oldest.
    private var order: [UInt64] = []
    /// Addresses tried against the keys (misses of the table), for metrics.
    public private(set) var attempts = 0

    public init(identities: [Identity], capacity: Int = 4096) {
        self.identities = identities
        self.capacity = max(2, capacity)
    }

    /// The identity `address` belongs to, if any. Public and static random
    /// addresses never resolve (only resolvable private ones carry a hash).
    public mutating func identity(for address: BluetoothAddress) -> Identity? {
        guard !identities.isEmpty, address.randomAddressType == .resolvablePrivate else { return nil }
        if let i = remembered[address.value] { return i >= 0 ? identities[i] : nil }
        attempts &+= 1
        let found = identities.firstIndex { $0.key.resolves(address) } ?? -1
        remember(address.value, found)
        return found >= 0 ? identities[found] : nil
    }

    /// How many addresses are remembered now (≤ ``capacity``).
    public var rememberedCount: Int { remembered.count }

    private mutating func remember(_ address: UInt64, _ index: Int) {
        if remembered.count >= capacity {
            let drop = capacity / 2
            for a in order.prefix(drop) { remembered[a] = nil }
            order.removeFirst(drop)
        }
        remembered[address] = index
        order.append(address)
    }
}
