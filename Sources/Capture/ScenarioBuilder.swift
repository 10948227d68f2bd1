import BlueZ
import BlueZSimulator
import DBus
import ScenarioFormat
import Vocabulary

/// Which part of bluetoothd's tree a recording keeps.
public struct RecordingFilter: Sendable, Equatable {
    /// Only this adapter (`hci0`) and its devices; nil: every adapter.
    public var adapter: String?
    /// Only these devices; empty: every device.
    public var devices: Set<BluetoothAddress>

    public init(adapter: String? = nil, devices: Set<BluetoothAddress> = []) {
        self.adapter = adapter
        self.devices = devices
    }
}

/// Turns a recorded event log into a scenario the simulator plays back
/// (docs/SCENARIOS.md, "Capture and replay"). Pure: no bus, no clock.
///
/// - The first enumeration gives the adapters and the devices present at
///   the start (`advertisingAtStart` unless a remembered device has no RSSI).
/// - Device1 changes of RSSI, TxPower, ManufacturerData, ServiceData, Name
///   and (while not connected) UUIDs become `advertising.timeline` events; a
///   device that appears later starts with `present: true` at that time; a
///   removed temporary device gets `present: false` early enough that the
///   simulator removes it when bluetoothd did (TemporaryTimeout before the
///   removal, never before its last event).
/// - A characteristic's Value changes while it is notifying become its
///   `notifications.timeline` (times from the first Notifying = true); the
///   first value known otherwise (the tree, or a read) becomes `value`.
/// - Battery1 Percentage changes become the battery timeline.
/// - `org.bluez` losing and regaining an owner become `bluetoothd.outages`;
///   Adapter1 removed and added again become the adapter's `outages`.
/// - Connection, pairing and trust changes, which the format cannot replay
///   (clients make them), are kept as the device's `comment`.
public struct ScenarioBuilder: Sendable {
    public var filter: RecordingFilter
    public var name: String
    /// bluetoothd's TemporaryTimeout (30 s unless main.conf says otherwise).
    public var temporaryDeviceTimeout: Double

    public init(filter: RecordingFilter = RecordingFilter(), name: String = "recording", temporaryDeviceTimeout: Double = 30) {
        self.filter = filter
        self.name = name
        self.temporaryDeviceTimeout = temporaryDeviceTimeout
    }

    public func build(_ events: [RecordedEvent], duration: Double) -> Scenario {
        var state = BuildState(builder: self)
        for e in events { state.apply(e) }
        return state.scenario(duration: max(duration, events.last?.at ?? 0))
    }

    func wants(adapter id: String) -> Bool { filter.adapter == nil || filter.adapter == id }

    func wants(_ device: DeviceID) -> Bool {
        wants(adapter: device.adapter.name) && (filter.devices.isEmpty || filter.devices.contains(device.address))
    }
}

private struct AdapterRecord {
    var spec: AdapterSpec
    var present = true
    var outageStart: Double?
}

private struct CharacteristicRecord {
    var path: ObjectPath
    var service: ObjectPath
    var uuid = ""
    var flags: [String] = []
    var handle: UInt16?
    var value: [UInt8]?
    var mtu: UInt16?
    var notifying = false
    var notifyStart: Double?
    var notifications: [ValueEvent] = []
}

private struct DeviceRecord {
    var id: DeviceID
    var spec: DeviceSpec
    var events: [AdvertisementEvent] = []
    var batteryEvents: [ValueEvent] = []
    var notes: [String] = []
    var present = false
    var connected = false
    var kept = false
    var lastEventAt = 0.0
    var services: [ObjectPath: (uuid: String, primary: Bool, handle: UInt16?)] = [:]
    var characteristics: [ObjectPath: CharacteristicRecord] = [:]
    var descriptors: [ObjectPath: (characteristic: ObjectPath, uuid: String, flags: [String], handle: UInt16?, value: [UInt8]?)] = [:]
}

private struct BuildState {
    let builder: ScenarioBuilder
    var adapters: [String: AdapterRecord] = [:]
    var devices: [DeviceID: DeviceRecord] = [:]
    var order: [DeviceID] = []
    var outages: [Scenario.Outage] = []
    var serviceUp = false
    var sawTree = false
    var lostAt: Double?
    /// Removals since the last other event: bluetoothd removes its objects
    /// as it shuts down, which is the outage, not adapters or devices going.
    var removalBurst: [Undo] = []

    enum Undo {
        case adapter(String)
        case device(DeviceID, events: Int, notes: Int, lastEventAt: Double)
    }

    init(builder: ScenarioBuilder) { self.builder = builder }

    mutating func apply(_ e: RecordedEvent) {
        switch e.change {
        case .interfacesRemoved: break
        case .serviceLost: undoRemovalBurst()
        default: removalBurst = []
        }
        switch e.change {
        case let .tree(objects):
            let initial = !sawTree && outages.isEmpty && lostAt == nil
            if let start = lostAt {
                outages.append(Scenario.Outage(at: start, returnAt: e.at))
                lostAt = nil
            } else if !sawTree && e.at > 0 {
                // bluetoothd was not there when the recording started.
                outages.append(Scenario.Outage(at: 0, returnAt: e.at))
            }
            sawTree = true
            serviceUp = true
            // Adapters first, then devices, then what hangs below them.
            let paths = objects.keys.sorted { ($0.rawValue.count, $0) < ($1.rawValue.count, $1) }
            for path in paths {
                guard let interfaces = objects[path] else { continue }
                added(path, interfaces, at: e.at, initial: initial)
            }
        case .serviceLost:
            guard serviceUp else { return }
            serviceUp = false
            lostAt = e.at
            for id in order {
                devices[id]?.present = false
                if devices[id]?.connected == true {
                    devices[id]?.connected = false
                    devices[id]?.notes.append("disconnected at \(millisText(e.at)) s (bluetoothd stopped)")
                }
            }
            for (id, _) in adapters { adapters[id]?.present = false }
        case let .interfacesAdded(path, interfaces):
            guard serviceUp else { return }
            added(path, interfaces, at: e.at, initial: false)
        case let .interfacesRemoved(path, names):
            guard serviceUp else { return }
            removed(path, names, at: e.at)
        case let .propertiesChanged(path, interface, changed, invalidated):
            guard serviceUp else { return }
            propertiesChanged(path, interface, changed, invalidated, at: e.at)
        }
    }

    mutating func undoRemovalBurst() {
        for undo in removalBurst.reversed() {
            switch undo {
            case let .adapter(id):
                adapters[id]?.outageStart = nil
            case let .device(id, events, notes, last):
                guard var d = devices[id] else { continue }
                d.events = Array(d.events.prefix(events))
                d.notes = Array(d.notes.prefix(notes))
                d.lastEventAt = last
                devices[id] = d
            }
        }
        removalBurst = []
    }

    // MARK: Objects appearing

    mutating func added(_ path: ObjectPath, _ interfaces: [String: [String: DBusValue]], at t: Double, initial: Bool) {
        if let props = interfaces[BlueZInterface.adapter] { adapterAdded(path, props, at: t, initial: initial) }
        if let id = DeviceID(path: path) {
            guard builder.wants(id) else { return }
            if let props = interfaces[BlueZInterface.device] { deviceAdded(id, props, at: t, initial: initial) }
            if let props = interfaces[BlueZInterface.battery], case let .byte(p)? = props["Percentage"]?.unwrapped {
                battery(id, p, at: t)
            }
            return
        }
        guard let attribute = GATTAttributeID(path: path), builder.wants(attribute.device), devices[attribute.device] != nil else { return }
        let device = attribute.device
        if let props = interfaces[BlueZInterface.gattService] {
            let s = GATTService(id: attribute, properties: props)
            if devices[device]?.services[path] == nil {
                devices[device]?.services[path] = (s.uuid, s.primary, s.handle)
            }
        }
        if let props = interfaces[BlueZInterface.gattCharacteristic] {
            let c = GATTCharacteristic(id: attribute, properties: props)
            var record = devices[device]?.characteristics[path]
                ?? CharacteristicRecord(path: path, service: c.service ?? path.parent ?? path)
            record.uuid = c.uuid
            record.flags = props["Flags"].flatMap { try? [String](dbusValue: $0.unwrapped) } ?? record.flags
            record.handle = c.handle ?? record.handle
            record.mtu = c.mtu ?? record.mtu
            // bluetoothd's cached Value is empty until someone reads or is
            // notified: empty says nothing about the device's value.
            if record.value == nil, let v = c.value, !v.isEmpty { record.value = v }
            if c.notifying {
                record.notifying = true
                if record.notifyStart == nil { record.notifyStart = t }
            }
            devices[device]?.characteristics[path] = record
        }
        if let props = interfaces[BlueZInterface.gattDescriptor] {
            let d = GATTDescriptor(id: attribute, properties: props)
            let flags = props["Flags"].flatMap { try? [String](dbusValue: $0.unwrapped) } ?? []
            let known = devices[device]?.descriptors[path]
            let cached = d.value.flatMap { $0.isEmpty ? nil : $0 }
            devices[device]?.descriptors[path] = (d.characteristic ?? path.parent ?? path, d.uuid, flags, d.handle, known?.value ?? cached)
        }
    }

    mutating func adapterAdded(_ path: ObjectPath, _ props: [String: DBusValue], at t: Double, initial: Bool) {
        let id = String(path.lastElement)
        guard builder.wants(adapter: id), id.hasPrefix("hci"), Int(id.dropFirst(3)) != nil else { return }
        if var known = adapters[id] {
            if !known.present, let start = known.outageStart {
                known.spec.outages.append(Scenario.Outage(at: start, returnAt: t))
                known.outageStart = nil
            }
            known.present = true
            adapters[id] = known
            return
        }
        let a = Adapter(id: AdapterID(path: path), properties: props)
        var spec = AdapterSpec(id: id, address: validAddress(a.address) ?? fallbackAddress(adapters.count))
        spec.addressType = a.addressType == "random" ? "random" : "public"
        if let n = a.name { spec.name = n }
        if let alias = a.alias, alias != spec.name { spec.alias = alias }
        if let c = a.deviceClass { spec.classOfDevice = min(c, 0xFFFFFF) }
        if let p = a.powered { spec.powered = p }
        if let d = a.discoverable { spec.discoverable = d }
        if let d = a.discoverableTimeout { spec.discoverableTimeout = d }
        if let p = a.pairable { spec.pairable = p }
        if let p = a.pairableTimeout { spec.pairableTimeout = p }
        spec.modalias = a.modalias
        let roles = a.roles.filter { ["central", "peripheral", "central-peripheral"].contains($0) }
        if !roles.isEmpty { spec.roles = roles }
        spec.uuids = a.uuids.compactMap(BluetoothUUID.canonical)
        if let m = a.manufacturer { spec.manufacturer = m }
        if let v = a.version { spec.version = v }
        if !initial && t > 0 {
            // Plugged in while recording: absent from the start until now.
            spec.outages = [Scenario.Outage(at: 0, returnAt: t)]
        }
        adapters[id] = AdapterRecord(spec: spec)
    }

    mutating func deviceAdded(_ id: DeviceID, _ props: [String: DBusValue], at t: Double, initial: Bool) {
        let d = Device(id: id, properties: props)
        if var known = devices[id] {
            // Seen again (discovered again, or bluetoothd came back).
            known.kept = d.paired || d.trusted
            if !known.present && !(d.paired || d.trusted) {
                var e = advertisement(from: d, at: t)
                e.present = true
                known.events.append(e)
                known.lastEventAt = t
            }
            known.present = true
            devices[id] = known
            return
        }
        var spec = DeviceSpec(address: id.address.description, addressType: d.addressType == "random" ? "random" : "public",
                              adapter: id.adapter.name)
        spec.name = d.name
        if let alias = d.alias, alias != d.name, alias != id.address.description.replacingColons() { spec.alias = alias }
        spec.appearance = d.appearance
        spec.classOfDevice = d.deviceClass.map { min($0, 0xFFFFFF) }
        spec.icon = d.icon
        spec.paired = d.paired
        spec.trusted = d.trusted
        spec.blocked = d.blocked
        spec.legacyPairing = d.legacyPairing ?? false
        if let r = d.rssi { spec.rssi = clampPower(r) }
        spec.txPower = d.txPower.map(clampPower)
        spec.manufacturerData = d.manufacturerData
        spec.serviceData = serviceData(d.serviceData)
        if !d.connected { spec.uuids = d.uuids.compactMap(BluetoothUUID.canonical) }
        var record = DeviceRecord(id: id, spec: spec)
        record.present = true
        record.kept = d.paired || d.trusted
        record.connected = d.connected
        if initial {
            // Remembered (paired/trusted) devices without an RSSI are not in range.
            spec.advertisingAtStart = d.rssi != nil || !(d.paired || d.trusted)
            if d.connected { record.notes.append("connected at the start") }
        } else {
            spec.advertisingAtStart = false
            var e = advertisement(from: d, at: t)
            e.present = true
            record.events.append(e)
            record.lastEventAt = t
        }
        record.spec = spec
        devices[id] = record
        order.append(id)
    }

    /// The advertised state of a device as one timeline event.
    func advertisement(from d: Device, at t: Double) -> AdvertisementEvent {
        var e = AdvertisementEvent(at: t)
        e.rssi = d.rssi.map(clampPower)
        e.txPower = d.txPower.map(clampPower)
        e.name = d.name
        if !d.manufacturerData.isEmpty { e.manufacturerData = d.manufacturerData }
        if !d.serviceData.isEmpty { e.serviceData = serviceData(d.serviceData) }
        return e
    }

    mutating func battery(_ id: DeviceID, _ percentage: UInt8, at t: Double) {
        guard var d = devices[id] else { return }
        let p = min(percentage, 100)
        if d.spec.battery == nil {
            d.spec.battery = p
        } else if d.batteryEvents.last?.value != [p] {
            d.batteryEvents.append(ValueEvent(at: t, value: [p]))
        }
        devices[id] = d
    }

    // MARK: Objects going

    mutating func removed(_ path: ObjectPath, _ names: [String], at t: Double) {
        if names.contains(BlueZInterface.adapter) {
            let id = String(path.lastElement)
            guard var a = adapters[id], a.present else { return }
            a.present = false
            a.outageStart = t
            adapters[id] = a
            removalBurst.append(.adapter(id))
            for did in order where did.adapter.path == path { devices[did]?.present = false; devices[did]?.connected = false }
            return
        }
        guard names.contains(BlueZInterface.device), let id = DeviceID(path: path), var d = devices[id], d.present else { return }
        removalBurst.append(.device(id, events: d.events.count, notes: d.notes.count, lastEventAt: d.lastEventAt))
        d.present = false
        d.connected = false
        if d.kept {
            d.notes.append("removed at \(millisText(t)) s (forgotten)")
        } else {
            // bluetoothd removes a temporary device TemporaryTimeout after it was last seen.
            let stop = max(d.lastEventAt, t - builder.temporaryDeviceTimeout)
            var e = AdvertisementEvent(at: stop)
            e.present = false
            d.events.append(e)
            d.lastEventAt = stop
        }
        devices[id] = d
    }

    // MARK: Changes

    mutating func propertiesChanged(_ path: ObjectPath, _ interface: String, _ changed: [String: DBusValue], _ invalidated: [String],
                                     at t: Double) {
        switch interface {
        case BlueZInterface.device:
            guard let id = DeviceID(path: path), var d = devices[id] else { return }
            var props: [String: DBusValue] = [:]
            for (k, v) in changed { props[k] = v }
            let partial = Device(id: id, properties: props)
            for (key, what) in [(DeviceProperty.connected, "connected"), (.paired, "paired"), (.trusted, "trusted"), (.blocked, "blocked")] {
                guard case let .boolean(on)? = changed[key]?.unwrapped else { continue }
                if key == .connected {
                    guard on != d.connected else { continue }
                    d.connected = on
                }
                let word = on ? what : (key == .connected ? "disconnected" : "un" + what)
                d.notes.append("\(word) at \(millisText(t)) s")
                if key == .paired || key == .trusted { d.kept = on || (key == .paired ? d.spec.trusted : d.spec.paired) }
            }
            var e = AdvertisementEvent(at: t)
            var any = false
            if changed[DeviceProperty.rssi] != nil, let r = partial.rssi { e.rssi = clampPower(r); any = true }
            if changed[DeviceProperty.txPower] != nil, let p = partial.txPower { e.txPower = clampPower(p); any = true }
            if changed[DeviceProperty.name] != nil, let n = partial.name { e.name = n; any = true }
            if changed[DeviceProperty.manufacturerData] != nil { e.manufacturerData = partial.manufacturerData; any = true }
            if changed[DeviceProperty.serviceData] != nil { e.serviceData = serviceData(partial.serviceData); any = true }
            // With a connection, UUIDs list the GATT services: not advertised.
            if changed[DeviceProperty.uuids] != nil, !d.connected, changed[DeviceProperty.servicesResolved] == nil, changed[DeviceProperty.connected] == nil {
                e.uuids = partial.uuids.compactMap(BluetoothUUID.canonical)
                any = true
            }
            if any {
                if !d.present {
                    // A change for a device we believed gone: it is back.
                    e.present = true
                    d.present = true
                }
                d.events.append(e)
                d.lastEventAt = t
            }
            devices[id] = d
        case BlueZInterface.battery:
            guard let id = DeviceID(path: path), case let .byte(p)? = changed["Percentage"]?.unwrapped else { return }
            battery(id, p, at: t)
        case BlueZInterface.gattCharacteristic:
            guard let attribute = GATTAttributeID(path: path), var c = devices[attribute.device]?.characteristics[path] else { return }
            if case let .boolean(on)? = changed["Notifying"]?.unwrapped {
                c.notifying = on
                if on && c.notifyStart == nil { c.notifyStart = t }
            }
            if let v = changed["Value"], let bytes = try? [UInt8](dbusValue: v.unwrapped) {
                if c.notifying, let start = c.notifyStart {
                    c.notifications.append(ValueEvent(at: max(0, t - start), value: bytes))
                } else if c.value == nil {
                    c.value = bytes
                }
            }
            devices[attribute.device]?.characteristics[path] = c
        case BlueZInterface.gattDescriptor:
            guard let attribute = GATTAttributeID(path: path), var d = devices[attribute.device]?.descriptors[path],
                  let v = changed["Value"], let bytes = try? [UInt8](dbusValue: v.unwrapped) else { return }
            if d.value == nil { d.value = bytes }
            devices[attribute.device]?.descriptors[path] = d
        default:
            return
        }
    }

    // MARK: Output

    func scenario(duration: Double) -> Scenario {
        var s = Scenario(name: builder.name)
        s.settings.temporaryDeviceTimeout = builder.temporaryDeviceTimeout
        s.duration = max(0.001, duration)
        s.outages = outages.map(Self.fixed)
        if let start = lostAt { s.outages.append(Scenario.Outage(at: start, returnAt: nil)) }
        var adapterSpecs = adapters.values.map { a -> AdapterSpec in
            var spec = a.spec
            if let start = a.outageStart { spec.outages.append(Scenario.Outage(at: start, returnAt: nil)) }
            spec.outages = spec.outages.map(Self.fixed)
            return spec
        }
        for id in order where !adapterSpecs.contains(where: { $0.id == id.adapter.name }) {
            adapterSpecs.append(AdapterSpec(id: id.adapter.name, address: fallbackAddress(adapterSpecs.count)))
        }
        s.adapters = adapterSpecs.sorted { ($0.id.count, $0.id) < ($1.id.count, $1.id) }
        s.devices = order.compactMap { devices[$0].map(deviceSpec) }
        s.description = "Recorded from org.bluez: \(s.adapters.count) adapter(s), \(s.devices.count) device(s), \(millisText(s.duration ?? 0)) s"
        return s
    }

    /// returnAt after at, also once both are rounded to the millisecond.
    static func fixed(_ o: Scenario.Outage) -> Scenario.Outage {
        guard let r = o.returnAt else { return o }
        return Scenario.Outage(at: o.at, returnAt: max(r, o.at + 0.002))
    }

    func deviceSpec(_ d: DeviceRecord) -> DeviceSpec {
        var spec = d.spec
        if !d.events.isEmpty { spec.advertising = Timeline(events: d.events) }
        if !d.batteryEvents.isEmpty, spec.battery != nil { spec.batteryTimeline = Timeline(events: d.batteryEvents) }
        if !d.notes.isEmpty { spec.comment = "Recorded: " + d.notes.joined(separator: "; ") }
        let services = d.services.sorted { ($0.value.handle ?? 0, $0.key) < ($1.value.handle ?? 0, $1.key) }
        var mtu: UInt16?
        for (path, s) in services {
            guard let uuid = BluetoothUUID.canonical(s.uuid) else { continue }
            var service = ServiceSpec(uuid: uuid, primary: s.primary)
            let chars = d.characteristics.values.filter { $0.service == path }.sorted { ($0.handle ?? 0, $0.path) < ($1.handle ?? 0, $1.path) }
            for c in chars {
                guard let cu = BluetoothUUID.canonical(c.uuid) else { continue }
                var flags = c.flags.filter { characteristicFlagNames.contains($0) }
                if flags.isEmpty { flags = ["read"] }
                var spec = CharacteristicSpec(uuid: cu, flags: flags, value: c.value ?? [])
                if !c.notifications.isEmpty, flags.contains("notify") || flags.contains("indicate") {
                    spec.notifications = Timeline(events: c.notifications)
                }
                let descs = d.descriptors.filter { $0.value.characteristic == c.path }
                    .sorted { ($0.value.handle ?? 0, $0.key) < ($1.value.handle ?? 0, $1.key) }
                for (_, desc) in descs {
                    // bluetoothd keeps the CCCD to itself; the simulator adds its own.
                    guard let du = BluetoothUUID.canonical(desc.uuid), du != cccdUUID else { continue }
                    let dflags = desc.flags.filter { descriptorFlagNames.contains($0) }
                    spec.descriptors.append(DescriptorSpec(uuid: du, flags: dflags.isEmpty ? ["read"] : dflags, value: desc.value ?? []))
                }
                if mtu == nil, let m = c.mtu, (23...517).contains(m) { mtu = m }
                service.characteristics.append(spec)
            }
            spec.gatt.append(service)
        }
        if let mtu { spec.mtu = mtu }
        return spec
    }
}

// MARK: Helpers

let cccdUUID = "00002902-0000-1000-8000-00805f9b34fb"

let characteristicFlagNames: Set<String> = [
    "broadcast", "read", "write-without-response", "write", "notify", "indicate",
    "authenticated-signed-writes", "extended-properties", "reliable-write", "writable-auxiliaries",
    "encrypt-read", "encrypt-write", "encrypt-notify", "encrypt-indicate",
    "encrypt-authenticated-read", "encrypt-authenticated-write", "encrypt-authenticated-notify",
    "encrypt-authenticated-indicate", "secure-read", "secure-write", "secure-notify", "secure-indicate", "authorize",
]

let descriptorFlagNames: Set<String> = [
    "read", "write", "encrypt-read", "encrypt-write", "encrypt-authenticated-read",
    "encrypt-authenticated-write", "secure-read", "secure-write", "authorize",
]

/// Service data with UUID keys the scenario format accepts.
func serviceData(_ data: [String: [UInt8]]) -> [String: [UInt8]] {
    var out: [String: [UInt8]] = [:]
    for (k, v) in data { if let u = BluetoothUUID.canonical(k) { out[u] = v } }
    return out
}

/// The range the scenario format allows for RSSI and TxPower (dBm).
func clampPower(_ v: Int16) -> Int16 { min(20, max(-127, v)) }

func validAddress(_ text: String?) -> String? {
    guard let text, let a = try? BluetoothAddress(text) else { return nil }
    return a.description
}

func fallbackAddress(_ index: Int) -> String {
    BluetoothAddress(value: UInt64(index + 1) & 0xFF).description
}

/// Seconds with millisecond precision, for notes: 1.5 → "1.5".
func millisText(_ t: Double) -> String {
    let ms = Int((max(0, t) * 1000).rounded())
    let frac = ms % 1000
    if frac == 0 { return String(ms / 1000) }
    var f = String(frac)
    f = String(repeating: "0", count: 3 - f.count) + f
    while f.hasSuffix("0") { f.removeLast() }
    return "\(ms / 1000).\(f)"
}

extension String {
    /// "AA:BB" → "AA-BB" (BlueZ's alias for a device without a name).
    func replacingColons() -> String { String(map { $0 == ":" ? "-" : $0 }) }
}
