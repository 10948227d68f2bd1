import DBus
import Vocabulary

/// A change to bluetoothd's object tree, as the mirror applied it.
public enum BlueZEvent: Sendable, Equatable {
    /// bluetoothd appeared (true, after a full enumeration) or vanished (false).
    case availability(Bool)
    /// The tree was replaced by a fresh enumeration: re-read the snapshot.
    case resynchronized
    case interfacesAdded(ObjectPath, [String])
    case interfacesRemoved(ObjectPath, [String])
    /// A device's Device1 properties changed: an advertisement (RSSI, data),
    /// a connection, pairing, a name.
    case deviceChanged(DeviceID, PropertyChanges<DeviceProperty>)
    /// An adapter's Adapter1 properties changed: power, discovery, pairing mode.
    case adapterChanged(AdapterID, PropertyChanges<AdapterProperty>)
    /// Any other interface's properties (GATT characteristics, batteries, …),
    /// by D-Bus name.
    case propertiesChanged(ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String])

    /// The event a PropertiesChanged signal of `interface` on `path` means:
    /// typed for Device1 (on a device path) and Adapter1, by name otherwise.
    public static func changed(
        _ path: ObjectPath, interface: String, _ changed: [String: DBusValue], invalidated: [String]
    ) -> BlueZEvent {
        if interface == BlueZInterface.device, let id = DeviceID(path: path) {
            return .deviceChanged(id, PropertyChanges(changed, invalidated: invalidated))
        }
        if interface == BlueZInterface.adapter {
            return .adapterChanged(AdapterID(path: path), PropertyChanges(changed, invalidated: invalidated))
        }
        return .propertiesChanged(path, interface: interface, changed: changed, invalidated: invalidated)
    }

    /// bluetoothd came or went, or objects were added: what a watcher that
    /// registers something with bluetoothd again waits for (as a filter, it
    /// spares that watcher a wake-up per advertisement).
    @Sendable public static func isAvailabilityOrAddition(_ event: BlueZEvent) -> Bool {
        switch event {
        case .availability, .interfacesAdded: return true
        default: return false
        }
    }

    /// Any property change as bluetoothd sent it (object, interface, values
    /// by name, invalidated names), whichever case carries it: for what
    /// records or replays signals rather than reacting to them.
    public var propertiesSignal: (path: ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String])? {
        switch self {
        case let .deviceChanged(id, c): return (id.path, BlueZInterface.device, c.values, c.invalidated)
        case let .adapterChanged(id, c): return (id.path, BlueZInterface.adapter, c.values, c.invalidated)
        case let .propertiesChanged(path, interface, changed, invalidated): return (path, interface, changed, invalidated)
        case .availability, .resynchronized, .interfacesAdded, .interfacesRemoved: return nil
        }
    }
}

extension DBusValue {
    /// The value inside one variant wrapper (how `a{sv}` values are stored).
    var unwrappingOneVariant: DBusValue {
        if case let .variant(inner) = self { return inner }
        return self
    }
}

/// bluetoothd's object tree at one moment, typed. A value: safe to keep and
/// compare; the mirror hands out a new one whenever asked.
public struct BlueZSnapshot: Sendable, Equatable {
    /// Whether bluetoothd is on the bus. When false everything below is empty
    /// (never stale data from a previous bluetoothd).
    public internal(set) var available = false
    /// Every object's interfaces and properties, as last received — except
    /// a device's Device1 and the standard interfaces without properties
    /// (Properties, Introspectable) on its path: a device lives only in
    /// ``devices``, and its path is here only while another interface
    /// (Battery1, MediaControl1, …) is on it. One representation per
    /// device, not the received dictionaries next to the typed model (an
    /// interfaces dictionary per device path was ~400 bytes a device,
    /// heaptrack 2026-11-29). Read them whole with Properties.GetAll when
    /// needed (`blecompanion info`).
    public internal(set) var objects: [ObjectPath: [String: [String: DBusValue]]] = [:]
    public internal(set) var adapters: [AdapterID: Adapter] = [:]
    public internal(set) var devices: [DeviceID: Device] = [:]
    public internal(set) var services: [ObjectPath: GATTService] = [:]
    public internal(set) var characteristics: [ObjectPath: GATTCharacteristic] = [:]
    public internal(set) var descriptors: [ObjectPath: GATTDescriptor] = [:]
    /// Battery1 Percentage per device.
    public internal(set) var batteries: [DeviceID: UInt8] = [:]

    public init() {}

    /// Adapters sorted by name.
    public var sortedAdapters: [Adapter] { adapters.values.sorted { $0.id < $1.id } }

    /// Devices of one adapter (or all), sorted by address.
    public func devices(on adapter: AdapterID? = nil) -> [Device] {
        // The ids are sorted, not the devices: an array of large device
        // values is made once, at its final size. Filtering the values
        // grew one by doubling and the sort took a buffer of half of it —
        // at 10 000 devices about 4 MB more for a moment, in the middle of
        // a gateway's start-up peak (perf page-fault profile, 2026-11-29).
        var ids = devices.keys.filter { adapter == nil || $0.adapter == adapter }
        ids.sort()
        var out: [Device] = []
        out.reserveCapacity(ids.count)
        for id in ids { if let device = devices[id] { out.append(device) } }
        return out
    }

    /// The device with `address` on `adapter` (or on any adapter).
    public func device(_ address: BluetoothAddress, on adapter: AdapterID? = nil) -> Device? {
        devices.values.filter { $0.address == address && (adapter == nil || $0.id.adapter == adapter) }.min { $0.id < $1.id }
    }

    /// A device's GATT services, each with its characteristics and their
    /// descriptors, in handle order.
    public func gattTree(of device: DeviceID) -> [(service: GATTService, characteristics: [(GATTCharacteristic, [GATTDescriptor])])] {
        let svcs = services.values.filter { $0.id.device == device }.sorted { ($0.handle ?? 0, $0.id) < ($1.handle ?? 0, $1.id) }
        return svcs.map { s in
            let chars = characteristics.values.filter { $0.id.path.parent == s.id.path }.sorted { ($0.handle ?? 0, $0.id) < ($1.handle ?? 0, $1.id) }
            return (s, chars.map { c in
                (c, descriptors.values.filter { $0.id.path.parent == c.id.path }.sorted { ($0.handle ?? 0, $0.id) < ($1.handle ?? 0, $1.id) })
            })
        }
    }

    /// The characteristic with `uuid` on `device` (lower-case, full 128-bit or 16-bit short form).
    public func characteristic(_ uuid: String, on device: DeviceID) -> GATTCharacteristic? {
        let wanted = BlueZSnapshot.normalizeUUID(uuid)
        return characteristics.values.filter { $0.id.device == device && $0.uuid == wanted }.min { $0.id < $1.id }
    }

    /// The characteristic `characteristic` of the service `service` on `device`
    /// (a device may offer one characteristic UUID in several services).
    public func characteristic(_ characteristic: BluetoothUUID, inService service: BluetoothUUID, on device: DeviceID) -> GATTCharacteristic? {
        let wantedService = service.string, wanted = characteristic.string
        return characteristics.values.filter { c in
            guard c.id.device == device, BlueZSnapshot.normalizeUUID(c.uuid) == wanted, let parent = c.id.path.parent else { return false }
            return services[parent].map { BlueZSnapshot.normalizeUUID($0.uuid) == wantedService } ?? false
        }.min { $0.id < $1.id }
    }

    /// `180d`, `0x180D` or the full form → the full lower-case 128-bit UUID.
    /// Text that is not a UUID comes back lower-cased (it then matches nothing).
    public static func normalizeUUID(_ text: String) -> String {
        BluetoothUUID.canonical(text) ?? text.lowercased()
    }

    // MARK: Applying changes

    /// What one org.bluez signal changed, as ``apply(_:)`` applied it.
    @_spi(Benchmarks) public enum AppliedSignal: Sendable {
        case interfacesAdded(ObjectPath, [String: [String: DBusValue]])
        case interfacesRemoved(ObjectPath, [String])
        /// `entries`: PropertiesChanged's `a{sv}` as received (a listener
        /// builds a dictionary from them only if it wants one).
        case propertiesChanged(ObjectPath, interface: String, entries: [DBusDictEntry], invalidated: [String])
        /// Device1's PropertiesChanged: the changed values by name, the one
        /// dictionary the device's model read them from and the event carries.
        case deviceChanged(DeviceID, changed: [String: DBusValue], invalidated: [String])
    }

    /// Applies one ObjectManager or PropertiesChanged signal from bluetoothd
    /// to the tree: what ``BlueZMirror`` does for every signal it receives
    /// (visible to the allocation benchmarks, a package of their own, as
    /// SPI: they measure this step alone; not API for anyone else).
    /// Nil when the signal is not one of those, is malformed, or names an
    /// object or interface the tree does not hold (a late signal for a
    /// removed object is ignored).
    @_spi(Benchmarks) public mutating func apply(_ m: DBusMessage) -> AppliedSignal? {
        guard let path = m.path else { return nil }
        switch (m.interface, m.member) {
        case (BlueZInterface.objectManager, "InterfacesAdded"):
            guard m.body.count == 2, case let .objectPath(object) = m.body[0],
                  let interfaces = try? m.body[1].decode(as: [String: [String: DBusValue]].self) else { return nil }
            add(object, interfaces)
            return .interfacesAdded(object, interfaces)
        case (BlueZInterface.objectManager, "InterfacesRemoved"):
            guard m.body.count == 2, case let .objectPath(object) = m.body[0],
                  let names = try? m.body[1].decode(as: [String].self) else { return nil }
            remove(object, names)
            return .interfacesRemoved(object, names)
        case (BlueZInterface.properties, "PropertiesChanged"):
            // The flood case: the a{sv} entries go straight into the tree.
            guard m.body.count == 3, case let .string(interface) = m.body[0],
                  case let .dictionary(.string, .variant, entries) = m.body[1],
                  let invalidated = try? m.body[2].decode(as: [String].self) else { return nil }
            if interface == BlueZInterface.device {
                guard let (id, changed) = changeDevice(path, entries: entries, invalidated) else { return nil }
                return .deviceChanged(id, changed: changed, invalidated: invalidated)
            }
            guard change(path, interface, entries: entries, invalidated) else { return nil }
            return .propertiesChanged(path, interface: interface, entries: entries, invalidated: invalidated)
        default:
            return nil
        }
    }

    mutating func reset(to managed: [ObjectPath: [String: [String: DBusValue]]]) {
        self = BlueZSnapshot()
        available = true
        for (path, interfaces) in managed { add(path, interfaces) }
    }

    /// The tree GetManagedObjects describes (`a{oa{sa{sv}}}`), built one
    /// object at a time from the reply: no dictionary of every object's
    /// interfaces beside the reply and the tree (at 10 000 devices that
    /// third copy was 20 MB at the gateway's start).
    init(managedObjects body: DBusValue) throws(DBusError) {
        guard case let .dictionary(key: .objectPath, value: _, entries) = body else {
            throw DBusError.typeMismatch(expected: "a{oa{sa{sv}}}", actual: body.type.signature, context: "GetManagedObjects")
        }
        self.init()
        available = true
        for entry in entries {
            guard case let .objectPath(path) = entry.key else {
                throw DBusError.typeMismatch(expected: "o", actual: entry.key.type.signature, context: "GetManagedObjects")
            }
            let interfaces: [String: [String: DBusValue]] = try entry.value.decode()
            add(path, interfaces)
        }
    }

    /// The same tree read in place from the reply's body in wire form
    /// (``DBus/DBusConnection/call(destination:path:interface:member:arguments:timeout:flags:replyDecoding:)``
    /// with `.onDemand`): one object's interfaces are decoded, added and
    /// released before the next is read, so the only copy of the whole
    /// reply is its bytes. The tree of `DBusValue`s the eager decoder built
    /// for all objects at once was the gateway's start-up peak (a few KB per
    /// device, gone a moment later but leaving the heap that large).
    init(managedObjects reader: inout DBusBodyReader) throws(DBusError) {
        self.init()
        available = true
        let end = try reader.beginArray(elementAlignment: 8)
        while reader.hasElement(before: end) {
            try reader.beginStruct()
            let path = try ObjectPath(reader.readString())
            let interfaces: [String: [String: DBusValue]] = try reader.readValue(Self.interfacesType).decode()
            add(path, interfaces)
        }
        try reader.endArray(end)
        guard reader.isAtEnd else { throw DBusError.malformedMessage("GetManagedObjects: bytes after its one argument") }
    }

    /// `a{sa{sv}}`: one object's interfaces and their properties.
    static let interfacesType: DBusType = .dictionary(key: .string, value: .dictionary(key: .string, value: .variant))

    mutating func markUnavailable() {
        self = BlueZSnapshot()
    }

    /// Interfaces whose entry a device's path does not need in ``objects``.
    private static func keptInDevice(_ interface: String) -> Bool {
        interface == BlueZInterface.device || interface == BlueZInterface.properties || interface == BlueZInterface.introspectable
    }

    mutating func add(_ path: ObjectPath, _ interfaces: [String: [String: DBusValue]]) {
        var others = interfaces
        if let id = DeviceID(path: path) {
            if let properties = interfaces[BlueZInterface.device] { devices[id] = Device(id: id, properties: properties) }
            if interfaces.keys.contains(where: Self.keptInDevice) { others = interfaces.filter { !Self.keptInDevice($0.key) } }
            if others.isEmpty { return }
        }
        if objects[path] == nil {
            objects[path] = others
        } else {
            objects[path]?.merge(others) { _, new in new }
        }
        rebuild(path, only: Set(others.keys))
    }

    mutating func remove(_ path: ObjectPath, _ interfaces: [String]) {
        if interfaces.contains(BlueZInterface.device), let id = DeviceID(path: path) { devices[id] = nil }
        for i in interfaces { objects[path]?[i] = nil }
        if objects[path]?.isEmpty == true { objects[path] = nil }
        rebuild(path, only: Set(interfaces).subtracting([BlueZInterface.device]))
    }

    /// Returns false when the object or interface is unknown (the change is
    /// then ignored, as a late signal for a removed object must be).
    @discardableResult
    mutating func change(_ path: ObjectPath, _ interface: String, _ changed: [String: DBusValue], _ invalidated: [String]) -> Bool {
        change(path, interface, entries: changed.map { DBusDictEntry(.string($0.key), .variant($0.value)) }, invalidated)
    }

    /// Applies PropertiesChanged's `a{sv}` entries as they arrived.
    mutating func change(_ path: ObjectPath, _ interface: String, entries: [DBusDictEntry], _ invalidated: [String]) -> Bool {
        // One hash lookup per table, then in-place updates: this runs for
        // every RSSI/advertising change of every device.
        if interface == BlueZInterface.device { return changeDevice(path, entries: entries, invalidated) != nil }
        // Other interfaces keep their received properties.
        guard let at = objects.index(forKey: path), objects.values[at][interface] != nil else { return false }
        for e in entries {
            guard case let .string(k) = e.key else { continue }
            objects.values[at][interface]?[k] = e.value.unwrappingOneVariant
        }
        for name in invalidated { objects.values[at][interface]?[name] = nil }
        rebuild(path, only: [interface])
        return true
    }

    /// Device1's typed model is its only copy: it reads the changed keys from
    /// the changed values (an invalidated key is absent: its default). Nil
    /// when `path` is no device this tree has; else the device and the
    /// changed values by name (variants unwrapped).
    private mutating func changeDevice(_ path: ObjectPath, entries: [DBusDictEntry], _ invalidated: [String]) -> (DeviceID, [String: DBusValue])? {
        guard let id = DeviceID(path: path), let d = devices.index(forKey: id) else { return nil }
        var changed = [String: DBusValue](minimumCapacity: entries.count)
        var keys: [String] = []
        keys.reserveCapacity(entries.count + invalidated.count)
        for e in entries {
            guard case let .string(k) = e.key else { continue }
            changed[k] = e.value.unwrappingOneVariant
            keys.append(k)
        }
        keys.append(contentsOf: invalidated)
        devices.values[d].update(keys, from: changed)
        return (id, changed)
    }

    /// The typed models of `only`'s interfaces at `path`, from `objects`
    /// (not Device1: its model is built in `add`, removed in `remove`).
    private mutating func rebuild(_ path: ObjectPath, only: Set<String>) {
        let ifaces = objects[path] ?? [:]
        func wants(_ i: String) -> Bool { only.contains(i) }
        if wants(BlueZInterface.adapter) {
            let id = AdapterID(path: path)
            adapters[id] = ifaces[BlueZInterface.adapter].map { Adapter(id: id, properties: $0) }
        }
        if let id = DeviceID(path: path) {
            if wants(BlueZInterface.battery) {
                batteries[id] = ifaces[BlueZInterface.battery].flatMap { props -> UInt8? in
                    if case let .byte(p)? = props["Percentage"]?.unwrapped { return p }
                    return nil
                }
            }
        }
        if let id = GATTAttributeID(path: path) {
            if wants(BlueZInterface.gattService) {
                services[path] = ifaces[BlueZInterface.gattService].map { GATTService(id: id, properties: $0) }
            }
            if wants(BlueZInterface.gattCharacteristic) {
                characteristics[path] = ifaces[BlueZInterface.gattCharacteristic].map { GATTCharacteristic(id: id, properties: $0) }
            }
            if wants(BlueZInterface.gattDescriptor) {
                descriptors[path] = ifaces[BlueZInterface.gattDescriptor].map { GATTDescriptor(id: id, properties: $0) }
            }
        }
    }
}

extension BlueZEvent {
    /// The characteristic and the Value a PropertiesChanged of a GATT
    /// characteristic carries (a notification, or a read's result); nil for
    /// any other event.
    public var characteristicValue: (path: ObjectPath, value: [UInt8])? {
        guard case let .propertiesChanged(path, interface, changed, _) = self, interface == BlueZInterface.gattCharacteristic,
              let v = changed["Value"], let bytes = PropertyReader.bytes(v) else { return nil }
        return (path, bytes)
    }
}
