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

/// A PropertiesChanged's `changed` dictionary (as the mirror's events carry
/// it), read by property rather than by string.
extension Dictionary where Key == String, Value == DBusValue {
    public subscript(_ property: DeviceProperty) -> DBusValue? { self[property.rawValue] }
    public subscript(_ property: AdapterProperty) -> DBusValue? { self[property.rawValue] }
}
