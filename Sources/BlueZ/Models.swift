import DBus
import Vocabulary

/// Reads typed properties out of an `a{sv}` dictionary, noting every
/// documented property that arrived with the wrong type instead of
/// failing the whole object (one bad property must not hide a device).
struct PropertyReader {
    let values: [String: DBusValue]
    let interface: String
    private(set) var problems: [String] = []

    init(_ values: [String: DBusValue], interface: String) {
        self.values = values
        self.interface = interface
    }

    mutating func get<T: DBusRepresentable>(_ name: String, as _: T.Type = T.self) -> T? {
        guard let value = values[name] else { return nil }
        do {
            return try T(dbusValue: value.unwrapped)
        } catch {
            problems.append("\(interface).\(name) should be \"\(T.dbusType.signature)\" but is \"\(value.unwrapped.type.signature)\"")
            return nil
        }
    }

    /// `a{qv}` with byte-array values (ManufacturerData).
    mutating func manufacturerData(_ name: String) -> [UInt16: [UInt8]]? {
        guard let value = values[name] else { return nil }
        guard case let .dictionary(.uint16, .variant, entries) = value.unwrapped else {
            problems.append("\(interface).\(name) should be \"a{qv}\" but is \"\(value.unwrapped.type.signature)\"")
            return nil
        }
        var out: [UInt16: [UInt8]] = [:]
        for e in entries {
            guard case let .uint16(k) = e.key, let bytes = Self.bytes(e.value) else {
                problems.append("\(interface).\(name) has a non-byte-array entry")
                continue
            }
            out[k] = bytes
        }
        return out
    }

    /// `a{sv}` with byte-array values (ServiceData), keyed by UUID string.
    mutating func serviceData(_ name: String) -> [String: [UInt8]]? {
        guard let value = values[name] else { return nil }
        guard case let .dictionary(.string, .variant, entries) = value.unwrapped else {
            problems.append("\(interface).\(name) should be \"a{sv}\" but is \"\(value.unwrapped.type.signature)\"")
            return nil
        }
        var out: [String: [UInt8]] = [:]
        for e in entries {
            guard case let .string(k) = e.key, let bytes = Self.bytes(e.value) else {
                problems.append("\(interface).\(name) has a non-byte-array entry")
                continue
            }
            out[k.lowercased()] = bytes
        }
        return out
    }

    /// `a{yv}` with byte-array values (AdvertisingData), keyed by AD type.
    mutating func advertisingData(_ name: String) -> [UInt8: [UInt8]]? {
        guard let value = values[name] else { return nil }
        guard case let .dictionary(.byte, .variant, entries) = value.unwrapped else {
            problems.append("\(interface).\(name) should be \"a{yv}\" but is \"\(value.unwrapped.type.signature)\"")
            return nil
        }
        var out: [UInt8: [UInt8]] = [:]
        for e in entries {
            guard case let .byte(k) = e.key, let bytes = Self.bytes(e.value) else { continue }
            out[k] = bytes
        }
        return out
    }

    /// The object-path keys of an `a{oa{sv}}` (Sets).
    mutating func objectPathKeys(_ name: String) -> [ObjectPath]? {
        guard let value = values[name] else { return nil }
        guard case let .dictionary(.objectPath, _, entries) = value.unwrapped else {
            problems.append("\(interface).\(name) should be \"a{oa{sv}}\" but is \"\(value.unwrapped.type.signature)\"")
            return nil
        }
        return entries.compactMap { if case let .objectPath(p) = $0.key { return p } else { return nil } }
    }

    static func bytes(_ v: DBusValue) -> [UInt8]? {
        switch v.unwrapped {
        case let .bytes(b): return b
        case let .array(.byte, items):
            var out: [UInt8] = []
            for i in items { guard case let .byte(b) = i else { return nil }; out.append(b) }
            return out
        default: return nil
        }
    }
}

/// org.bluez.Adapter1: a local Bluetooth controller.
public struct Adapter: Sendable, Equatable {
    public let id: AdapterID
    /// The controller's public address.
    public var address: String?
    /// "public" or "random".
    public var addressType: String?
    /// The system name (pretty hostname by default).
    public var name: String?
    /// The name shown to other devices; writable.
    public var alias: String?
    /// Class of Device (BR/EDR).
    public var deviceClass: UInt32?
    /// Whether the radio is on; writable.
    public var powered: Bool?
    /// "on", "off", "off-enabling", "on-disabling" or "off-blocked" (rfkill).
    public var powerState: String?
    /// Visible to inquiries; writable.
    public var discoverable: Bool?
    /// Seconds until discoverable turns off (0: never); writable.
    public var discoverableTimeout: UInt32?
    /// Accepts pairing requests; writable.
    public var pairable: Bool?
    /// Seconds until pairable turns off (0: never); writable.
    public var pairableTimeout: UInt32?
    /// A discovery session is running (ours or another client's).
    public var discovering: Bool?
    /// Local service UUIDs.
    public var uuids: [String]
    public var modalias: String?
    /// "central", "peripheral", "central-peripheral".
    public var roles: [String]
    /// Accepts incoming connections; writable.
    public var connectable: Bool?
    /// UUIDs of the experimental features bluetoothd has enabled.
    public var experimentalFeatures: [String]
    /// The controller manufacturer's company identifier.
    public var manufacturer: UInt16?
    /// The Bluetooth core version the controller implements (HCI version code).
    public var version: UInt8?
    /// Properties that arrived with a type the API does not document.
    public var problems: [String]
    /// Every property as received, for display.
    public var raw: [String: DBusValue]

    public init(id: AdapterID, properties: [String: DBusValue]) {
        self.id = id
        var r = PropertyReader(properties, interface: BlueZInterface.adapter)
        uuids = []
        roles = []
        experimentalFeatures = []
        for property in AdapterProperty.allCases {
            let key = property.rawValue
            switch property {
            case .address: address = r.get(key)
            case .addressType: addressType = r.get(key)
            case .name: name = r.get(key)
            case .alias: alias = r.get(key)
            case .deviceClass: deviceClass = r.get(key)
            case .powered: powered = r.get(key)
            case .powerState: powerState = r.get(key)
            case .discoverable: discoverable = r.get(key)
            case .discoverableTimeout: discoverableTimeout = r.get(key)
            case .pairable: pairable = r.get(key)
            case .pairableTimeout: pairableTimeout = r.get(key)
            case .discovering: discovering = r.get(key)
            case .uuids: uuids = r.get(key, as: [String].self) ?? []
            case .modalias: modalias = r.get(key)
            case .roles: roles = r.get(key, as: [String].self) ?? []
            case .connectable: connectable = r.get(key)
            case .experimentalFeatures: experimentalFeatures = r.get(key, as: [String].self) ?? []
            case .manufacturer: manufacturer = r.get(key)
            case .version: version = r.get(key)
            }
        }
        problems = r.problems
        raw = properties
    }
}

/// org.bluez.Device1: a remote device as one adapter knows it.
public struct Device: Sendable, Equatable {
    public let id: DeviceID
    public var address: BluetoothAddress { id.address }
    /// "public" or "random".
    public var addressType: String?
    /// The remote name (from advertising or the GAP service).
    public var name: String?
    /// A user-set name, or the remote name, or the address; writable.
    public var alias: String?
    /// GAP appearance (category and subcategory).
    public var appearance: UInt16?
    /// Suggested icon name (freedesktop naming).
    public var icon: String?
    public var deviceClass: UInt32?
    public var paired: Bool
    public var bonded: Bool
    public var trusted: Bool
    public var blocked: Bool
    public var connected: Bool
    /// The GATT database has been discovered (attributes exported).
    public var servicesResolved: Bool
    public var legacyPairing: Bool?
    public var wakeAllowed: Bool?
    /// Signal strength of the last advertisement; only present while discovering.
    public var rssi: Int16?
    /// Advertised TX power.
    public var txPower: Int16?
    /// Manufacturer-specific data keyed by company identifier.
    public var manufacturerData: [UInt16: [UInt8]]
    /// Service data keyed by (lower-case, 128-bit) UUID.
    public var serviceData: [String: [UInt8]]
    /// Advertised or discovered service UUIDs.
    public var uuids: [String]
    public var modalias: String?
    public var adapterPath: ObjectPath?
    /// Paired over a cable (e.g. a game controller's USB pairing).
    public var cablePairing: Bool?
    /// The Flags AD type of the last advertisement.
    public var advertisingFlags: [UInt8]
    /// Advertising data types bluetoothd passes through, keyed by AD type.
    public var advertisingData: [UInt8: [UInt8]]
    /// Coordinated sets (e.g. a pair of earbuds) the device belongs to.
    public var sets: [ObjectPath]
    /// For dual-mode devices: "last-used", "bredr", "le" or "last-seen"; writable.
    public var preferredBearer: String?
    /// Properties that arrived with a type the API does not document.
    public var problems: [String] { problemsByKey.keys.sorted().compactMap { problemsByKey[$0] } }
    private var problemsByKey: [String: String] = [:]

    public init(id: DeviceID, properties: [String: DBusValue]) {
        self.id = id
        paired = false
        bonded = false
        trusted = false
        blocked = false
        connected = false
        servicesResolved = false
        manufacturerData = [:]
        serviceData = [:]
        uuids = []
        advertisingFlags = []
        advertisingData = [:]
        sets = []
        update(DeviceProperty.allCases, from: properties)
    }

    /// Applies a PropertiesChanged: only the named keys are read again
    /// (`properties` is the merged set, as the mirror keeps it); names the
    /// API does not document are ignored.
    mutating func update<Keys: Sequence<String>>(_ keys: Keys, from properties: [String: DBusValue]) {
        update(keys.lazy.compactMap(DeviceProperty.named), from: properties)
    }

    mutating func update<Properties: Sequence<DeviceProperty>>(_ properties: Properties, from values: [String: DBusValue]) {
        var r = PropertyReader(values, interface: BlueZInterface.device)
        for property in properties {
            let key = property.rawValue
            let before = r.problems.count
            switch property {
            case .address: continue  // the object path's, which names the device
            case .addressType: addressType = r.get(key)
            case .name: name = r.get(key)
            case .alias: alias = r.get(key)
            case .appearance: appearance = r.get(key)
            case .icon: icon = r.get(key)
            case .deviceClass: deviceClass = r.get(key)
            case .paired: paired = r.get(key) ?? false
            case .bonded: bonded = r.get(key) ?? false
            case .trusted: trusted = r.get(key) ?? false
            case .blocked: blocked = r.get(key) ?? false
            case .connected: connected = r.get(key) ?? false
            case .servicesResolved: servicesResolved = r.get(key) ?? false
            case .legacyPairing: legacyPairing = r.get(key)
            case .wakeAllowed: wakeAllowed = r.get(key)
            case .rssi: rssi = r.get(key)
            case .txPower: txPower = r.get(key)
            case .manufacturerData: manufacturerData = r.manufacturerData(key) ?? [:]
            case .serviceData: serviceData = r.serviceData(key) ?? [:]
            case .uuids: uuids = r.get(key, as: [String].self) ?? []
            case .modalias: modalias = r.get(key)
            case .adapter: adapterPath = r.get(key)
            case .cablePairing: cablePairing = r.get(key)
            case .advertisingFlags: advertisingFlags = r.get(key, as: [UInt8].self) ?? []
            case .advertisingData: advertisingData = r.advertisingData(key) ?? [:]
            case .sets: sets = r.objectPathKeys(key) ?? []
            case .preferredBearer: preferredBearer = r.get(key)
            }
            // (Nothing to clear while the device has no problem: no hash then.)
            if r.problems.count > before {
                problemsByKey[key] = r.problems.last
            } else if !problemsByKey.isEmpty {
                problemsByKey[key] = nil
            }
        }
    }

    /// The name to show: alias, else name, else the address.
    public var displayName: String { alias ?? name ?? address.description }
}

/// org.bluez.GattService1.
public struct GATTService: Sendable, Equatable {
    public let id: GATTAttributeID
    public var uuid: String
    public var primary: Bool
    public var handle: UInt16?
    public var includes: [ObjectPath]
    public var problems: [String]

    public init(id: GATTAttributeID, properties: [String: DBusValue]) {
        self.id = id
        var r = PropertyReader(properties, interface: BlueZInterface.gattService)
        uuid = (r.get("UUID", as: String.self) ?? "").lowercased()
        primary = r.get("Primary") ?? true
        handle = r.get("Handle")
        includes = r.get("Includes", as: [ObjectPath].self) ?? []
        problems = r.problems
    }
}

/// org.bluez.GattCharacteristic1.
public struct GATTCharacteristic: Sendable, Equatable {
    public let id: GATTAttributeID
    public var uuid: String
    public var service: ObjectPath?
    /// The cached value: updated by reads and notifications.
    public var value: [UInt8]?
    /// "read", "write", "write-without-response", "notify", "indicate", ...
    public var flags: Set<String>
    public var notifying: Bool
    public var notifyAcquired: Bool?
    public var writeAcquired: Bool?
    public var handle: UInt16?
    public var mtu: UInt16?
    public var problems: [String]

    public init(id: GATTAttributeID, properties: [String: DBusValue]) {
        self.id = id
        var r = PropertyReader(properties, interface: BlueZInterface.gattCharacteristic)
        uuid = (r.get("UUID", as: String.self) ?? "").lowercased()
        service = r.get("Service")
        value = r.get("Value", as: [UInt8].self)
        flags = Set(r.get("Flags", as: [String].self) ?? [])
        notifying = r.get("Notifying") ?? false
        notifyAcquired = r.get("NotifyAcquired")
        writeAcquired = r.get("WriteAcquired")
        handle = r.get("Handle")
        mtu = r.get("MTU")
        problems = r.problems
    }

    public var canRead: Bool { flags.contains("read") || flags.contains("encrypt-read") || flags.contains("encrypt-authenticated-read") }
    public var canWrite: Bool { flags.contains("write") || flags.contains("encrypt-write") || flags.contains("encrypt-authenticated-write") }
    public var canWriteWithoutResponse: Bool { flags.contains("write-without-response") }
    public var canNotify: Bool { flags.contains("notify") || flags.contains("indicate") }
}

/// org.bluez.GattDescriptor1.
public struct GATTDescriptor: Sendable, Equatable {
    public let id: GATTAttributeID
    public var uuid: String
    public var characteristic: ObjectPath?
    public var value: [UInt8]?
    public var flags: Set<String>
    public var handle: UInt16?
    public var problems: [String]

    public init(id: GATTAttributeID, properties: [String: DBusValue]) {
        self.id = id
        var r = PropertyReader(properties, interface: BlueZInterface.gattDescriptor)
        uuid = (r.get("UUID", as: String.self) ?? "").lowercased()
        characteristic = r.get("Characteristic")
        value = r.get("Value", as: [UInt8].self)
        flags = Set(r.get("Flags", as: [String].self) ?? [])
        handle = r.get("Handle")
        problems = r.problems
    }
}
