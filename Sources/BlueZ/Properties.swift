import DBus

/// The properties of org.bluez.Device1 (doc/org.bluez.Device.rst), each
/// named once: ``Device`` parses them with an exhaustive switch over this
/// type (a property added here does not compile until it is parsed), and
/// consumers of the mirror's PropertiesChanged events ask for them by case
/// instead of spelling the D-Bus name again.
public enum DeviceProperty: String, CaseIterable, Sendable {
    case address = "Address"
    case addressType = "AddressType"
    case name = "Name"
    case alias = "Alias"
    case appearance = "Appearance"
    case icon = "Icon"
    case deviceClass = "Class"
    case paired = "Paired"
    case bonded = "Bonded"
    case trusted = "Trusted"
    case blocked = "Blocked"
    case connected = "Connected"
    case servicesResolved = "ServicesResolved"
    case legacyPairing = "LegacyPairing"
    case wakeAllowed = "WakeAllowed"
    case rssi = "RSSI"
    case txPower = "TxPower"
    case manufacturerData = "ManufacturerData"
    case serviceData = "ServiceData"
    case uuids = "UUIDs"
    case modalias = "Modalias"
    case adapter = "Adapter"
    case cablePairing = "CablePairing"
    case advertisingFlags = "AdvertisingFlags"
    case advertisingData = "AdvertisingData"
    case sets = "Sets"
    case preferredBearer = "PreferredBearer"

    /// What a received advertisement changes (bluetoothd updates these from
    /// each advertising report; the rest changes with connections, pairing
    /// and names).
    public static let advertisement: Set<DeviceProperty> = [.rssi, .txPower, .manufacturerData, .serviceData]

    /// The property named `name` (nil: not one the API documents), by one
    /// hash lookup: `init(rawValue:)` compares the name with each case in
    /// turn, from an array of the names it builds on every call — and
    /// Device1's changes are parsed for every advertisement.
    public static func named(_ name: String) -> DeviceProperty? { byName[name] }
    private static let byName = Dictionary(uniqueKeysWithValues: allCases.map { ($0.rawValue, $0) })

    /// The D-Bus names of `properties`, for the hot paths that test the
    /// names of a change directly (one hash each, no enum parsing).
    public static func names(_ properties: Set<DeviceProperty>) -> Set<String> { Set(properties.map(\.rawValue)) }
}

/// The properties of org.bluez.Adapter1 (doc/org.bluez.Adapter.rst), each
/// named once: ``Adapter`` parses them with an exhaustive switch over this
/// type, and consumers ask change events for them by case.
public enum AdapterProperty: String, CaseIterable, Sendable {
    case address = "Address"
    case addressType = "AddressType"
    case name = "Name"
    case alias = "Alias"
    case deviceClass = "Class"
    case powered = "Powered"
    case powerState = "PowerState"
    case discoverable = "Discoverable"
    case discoverableTimeout = "DiscoverableTimeout"
    case pairable = "Pairable"
    case pairableTimeout = "PairableTimeout"
    case discovering = "Discovering"
    case uuids = "UUIDs"
    case modalias = "Modalias"
    case roles = "Roles"
    case connectable = "Connectable"
    case experimentalFeatures = "ExperimentalFeatures"
    case manufacturer = "Manufacturer"
    case version = "Version"
}

/// A property enum of one BlueZ interface: its raw value is the D-Bus name.
public protocol BlueZPropertyName: RawRepresentable, Hashable, Sendable where RawValue == String {
    /// Whether a change of the properties `names` is an advertisement only
    /// (see ``PropertyChanges/advertisementOnly``).
    static func advertisementOnly(_ names: Dictionary<String, DBusValue>.Keys) -> Bool
}

extension BlueZPropertyName {
    public static func advertisementOnly(_ names: Dictionary<String, DBusValue>.Keys) -> Bool { false }
}

extension DeviceProperty: BlueZPropertyName {
    /// Only ``advertisement`` properties, and one of them not TxPower.
    public static func advertisementOnly(_ names: Dictionary<String, DBusValue>.Keys) -> Bool {
        var content = false
        for name in names {
            switch named(name) {
            case .rssi, .manufacturerData, .serviceData: content = true
            case .txPower: continue
            default: return false
            }
        }
        return content
    }
}
extension AdapterProperty: BlueZPropertyName {}

/// What one PropertiesChanged signal changed on a Device1 or an Adapter1
/// (``BlueZEvent/deviceChanged(_:_:)``, ``BlueZEvent/adapterChanged(_:_:)``),
/// read by property.
///
/// The values stay keyed by the name bluetoothd sent: a property a newer
/// bluetoothd adds is kept (a capture records it, a replay sends it back)
/// rather than dropped for want of a case, and the flood path tests names
/// against a set without converting each one.
public struct PropertyChanges<Property: BlueZPropertyName>: Sendable, Equatable {
    /// Every changed value (variant unwrapped), by D-Bus name.
    public let values: [String: DBusValue]
    /// Properties whose value bluetoothd no longer has (by D-Bus name).
    public let invalidated: [String]

    /// Whether this is an advertisement only: a Device1 change of
    /// advertisement properties (``DeviceProperty/advertisement``), with RSSI
    /// or the data among them, and nothing invalidated. Worked out once
    /// here: every follower of the mirror asks it of every signal.
    public let advertisementOnly: Bool

    public init(_ values: [String: DBusValue], invalidated: [String] = []) {
        self.values = values
        self.invalidated = invalidated
        advertisementOnly = invalidated.isEmpty && Property.advertisementOnly(values.keys)
    }

    public subscript(_ property: Property) -> DBusValue? { values[property.rawValue] }

    public func contains(_ property: Property) -> Bool { values[property.rawValue] != nil }

    /// The documented properties among the changed ones.
    public var properties: Set<Property> { Set(values.keys.compactMap(Property.init(rawValue:))) }
}

/// A PropertiesChanged's `changed` dictionary read by property rather than
/// by string (the simulator's and the capture's raw events).
extension Dictionary where Key == String, Value == DBusValue {
    public subscript(_ property: DeviceProperty) -> DBusValue? { self[property.rawValue] }
    public subscript(_ property: AdapterProperty) -> DBusValue? { self[property.rawValue] }
}
