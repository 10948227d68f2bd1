import DBus

/// A Bluetooth device address (BD_ADDR), written most significant byte
/// first as bluetoothd shows it: `AA:BB:CC:DD:EE:FF`.
public struct BluetoothAddress: Sendable, Hashable, Comparable, CustomStringConvertible, Codable {
    /// The 48 bits, the first-written byte (AA in AA:BB:…) most significant.
    /// An integer rather than an array of bytes: an address is a key in
    /// every table a gateway keeps per device, and parsing one (for every
    /// PropertiesChanged) allocated an array each time.
    public let value: UInt64

    /// The six bytes, most significant first.
    public var bytes: [UInt8] { (0..<6).map { byte($0) } }

    /// Byte `i` (0…5) as written, most significant first.
    @inline(__always) func byte(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: value >> (8 * (5 - i))) }

    public init(bytes: [UInt8]) throws(BlueZError) {
        guard bytes.count == 6 else {
            throw .invalidArgument("a Bluetooth address has 6 bytes, got \(bytes.count)")
        }
        value = bytes.reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// From its 48-bit value (the upper 16 bits must be zero).
    init(value: UInt64) {
        self.value = value & 0xFFFF_FFFF_FFFF
    }

    /// Parses `AA:BB:CC:DD:EE:FF` (or with `-` or `_` separators, any case),
    /// or the 12 hex digits alone (`e45f01aa1001`, as in MQTT topics and
    /// the HTTP API).
    public init(_ text: String) throws(BlueZError) {
        let utf8 = Array(text.utf8)
        var v: UInt64 = 0
        if utf8.count == 12 {
            for c in utf8 {
                guard let d = hexValue(c) else {
                    throw .invalidArgument("\"\(text)\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF)")
                }
                v = v << 4 | UInt64(d)
            }
            value = v
            return
        }
        guard utf8.count == 17 else {
            throw .invalidArgument("\"\(text)\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF)")
        }
        for k in 0..<6 {
            let at = k * 3
            if k < 5, ![UInt8(ascii: ":"), UInt8(ascii: "-"), UInt8(ascii: "_")].contains(utf8[at + 2]) {
                throw .invalidArgument("\"\(text)\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF)")
            }
            guard let hi = hexValue(utf8[at]), let lo = hexValue(utf8[at + 1]) else {
                let part = String(decoding: utf8[at..<at + 2], as: UTF8.self)
                throw .invalidArgument("\"\(text)\" is not a Bluetooth address: \"\(part)\" is not a hex byte")
            }
            v = v << 8 | UInt64(hi << 4 | lo)
        }
        value = v
    }

    public var description: String { joinedHex(separator: UInt8(ascii: ":")) }

    /// The form bluetoothd uses in object paths: `AA_BB_CC_DD_EE_FF`.
    public var pathComponent: String { joinedHex(separator: UInt8(ascii: "_")) }

    /// "AA:BB:…" in one allocation (the dashboard writes every visible
    /// row's address on every frame).
    private func joinedHex(separator: UInt8) -> String {
        String(unsafeUninitializedCapacity: 17) { out in
            var at = 0
            for i in 0..<6 {
                let b = byte(i)
                if i > 0 { out[at] = separator; at += 1 }
                out[at] = hexDigit(b >> 4)
                out[at + 1] = hexDigit(b & 0xF)
                at += 2
            }
            return at
        }
    }

    /// Whether `text` is this address as ``description`` writes it, without
    /// making that string.
    public func isWritten(as text: String) -> Bool {
        var utf8 = text.utf8.makeIterator()
        for i in 0..<6 {
            let b = byte(i)
            if i > 0, utf8.next() != UInt8(ascii: ":") { return false }
            guard utf8.next() == hexDigit(b >> 4), utf8.next() == hexDigit(b & 0xF) else { return false }
        }
        return utf8.next() == nil
    }

    public static func < (a: BluetoothAddress, b: BluetoothAddress) -> Bool { a.value < b.value }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(text) } catch { throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\(error)")) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}

@inline(__always) func hexValue(_ c: UInt8) -> UInt8? {
    switch c {
    case 0x30...0x39: return c - 0x30
    case 0x41...0x46: return c - 0x41 + 10
    case 0x61...0x66: return c - 0x61 + 10
    default: return nil
    }
}

/// The upper-case hex digit of `nibble` (0…15) as an ASCII byte.
@inline(__always) func hexDigit(_ nibble: UInt8) -> UInt8 {
    nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
}

/// An adapter, e.g. `hci0` at `/org/bluez/hci0`.
public struct AdapterID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let path: ObjectPath
    /// The adapter's name, `hci0`.
    public var name: String { String(path.lastElement) }

    public init(path: ObjectPath) { self.path = path }

    /// `hci0` → `/org/bluez/hci0`.
    public init(name: String) throws(BlueZError) {
        guard !name.isEmpty, name.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A) || $0 == 0x5F }) else {
            throw .invalidArgument("\"\(name)\" is not an adapter name (expected something like hci0)")
        }
        do {
            path = try ObjectPath("/org/bluez/\(name)")
        } catch {
            throw .invalidArgument("\"\(name)\" is not an adapter name: \(error)")
        }
    }

    public var description: String { name }
    public static func < (a: AdapterID, b: AdapterID) -> Bool { a.path < b.path }
}

/// A remote device as one adapter knows it: `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF`.
public struct DeviceID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let path: ObjectPath
    public let adapter: AdapterID
    public let address: BluetoothAddress

    public init(adapter: AdapterID, address: BluetoothAddress) {
        self.adapter = adapter
        self.address = address
        // An adapter path plus dev_ and hex digits is always a valid path.
        self.path = (try? adapter.path.appending("dev_" + address.pathComponent)) ?? adapter.path
    }

    /// Recognises a device path (`…/dev_AA_BB_CC_DD_EE_FF`); nil for anything
    /// else. Runs for every PropertiesChanged, so it parses bytes directly.
    public init?(path: ObjectPath) {
        let utf8 = path.rawValue.utf8
        guard utf8.count > 22 else { return nil }
        let tail = utf8.suffix(22)   // "/dev_" + 17
        var value: UInt64 = 0
        var ok = true
        tail.withContiguousStorageIfAvailable { t in
            guard t[0] == 0x2F, t[1] == 0x64, t[2] == 0x65, t[3] == 0x76, t[4] == 0x5F else { ok = false; return }
            for k in 0..<6 {
                let at = 5 + k * 3
                guard let hi = hexValue(t[at]), let lo = hexValue(t[at + 1]) else { ok = false; return }
                if k < 5 && t[at + 2] != 0x5F { ok = false; return }
                value = value << 8 | UInt64(hi << 4 | lo)
            }
        } ?? { ok = false }()
        guard ok, let parent = path.parent, parent != .root else { return nil }
        self.path = path
        self.adapter = AdapterID(path: parent)
        self.address = BluetoothAddress(value: value)
    }

    // The path determines the adapter and the address: equal paths have
    // equal addresses, so the address (one integer, where the path is a
    // 37-byte string) is what is hashed, and compared first. A device ID is
    // the key of every per-device table.
    public static func == (a: DeviceID, b: DeviceID) -> Bool { a.address == b.address && a.path == b.path }
    public func hash(into hasher: inout Hasher) { hasher.combine(address.value) }

    public var description: String { address.description }
    public static func < (a: DeviceID, b: DeviceID) -> Bool { a.path < b.path }
}

/// A GATT attribute below a device (service, characteristic or descriptor):
/// the path names its parents, so each ID knows its device.
public struct GATTAttributeID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let path: ObjectPath
    public let device: DeviceID

    public init?(path: ObjectPath) {
        var cursor: ObjectPath? = path.parent
        while let p = cursor, p != .root {
            if let device = DeviceID(path: p) {
                self.path = path
                self.device = device
                return
            }
            cursor = p.parent
        }
        return nil
    }

    public var description: String { path.rawValue }
    public static func < (a: GATTAttributeID, b: GATTAttributeID) -> Bool { a.path < b.path }
}
