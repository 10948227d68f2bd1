import DBus
import Vocabulary

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
///
/// Kept as the adapter and the address only (24 bytes, no allocation):
/// a device ID is the key of every per-device table and is in every
/// per-device value, so at 10 000 devices each byte of it is tens of
/// kilobytes, and the path — a 37-byte string, 80 bytes of heap when it
/// is not shared — is made when it is asked for (to call bluetoothd, or
/// to store a row), which the per-advertisement path never does.
/// bluetoothd writes device paths as the adapter's path, `/dev_` and the
/// address in upper-case hex (its `src/device.c`: `device_create` writes
/// the address with `ba2str`, `device_new` makes the path of it), and
/// ``init(path:)`` accepts only that form, so ``path`` gives back exactly
/// the path the ID was made from.
public struct DeviceID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let adapter: AdapterID
    public let address: BluetoothAddress

    public init(adapter: AdapterID, address: BluetoothAddress) {
        self.adapter = adapter
        self.address = address
    }

    /// The device's object path.
    public var path: ObjectPath {
        // An adapter path plus dev_ and hex digits is always a valid path.
        (try? adapter.path.appending("dev_" + address.pathComponent)) ?? adapter.path
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
                // Upper case only (bluetoothd's form, which `path` writes).
                guard t[at] < 0x61, t[at + 1] < 0x61, let hi = Hex.value(t[at]), let lo = Hex.value(t[at + 1]) else { ok = false; return }
                if k < 5 && t[at + 2] != 0x5F { ok = false; return }
                value = value << 8 | UInt64(hi << 4 | lo)
            }
        } ?? { ok = false }()
        guard ok, let parent = path.parent, parent != .root else { return nil }
        self.adapter = AdapterID(path: parent)
        self.address = BluetoothAddress(value: value)
    }

    // The address is hashed and compared first: one integer, where the
    // adapter is a string (a small one, stored inline, for `hciN`).
    public static func == (a: DeviceID, b: DeviceID) -> Bool { a.address == b.address && a.adapter == b.adapter }
    public func hash(into hasher: inout Hasher) { hasher.combine(address.value) }

    public var description: String { address.description }
    /// The order of the paths: by adapter, then by address (the path's
    /// fixed-width upper-case hex sorts as the number does).
    public static func < (a: DeviceID, b: DeviceID) -> Bool {
        a.adapter == b.adapter ? a.address.value < b.address.value : a.adapter < b.adapter
    }
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
