import BlueZ
import BlueZSimulator
import Capture
import DBus
import ScenarioFormat
import Testing
import Vocabulary

/// The mapping from bluetoothd's signals to the scenario format, without a bus.
@Suite struct ScenarioBuilderTests {
    let hci0: ObjectPath = "/org/bluez/hci0"
    let keyboard: ObjectPath = "/org/bluez/hci0/dev_DC_2C_26_01_02_03"
    let thermometer: ObjectPath = "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2"
    let ruuvi: ObjectPath = "/org/bluez/hci0/dev_CB_B8_33_4C_88_4F"

    var adapter: [String: [String: DBusValue]] {
        ["org.bluez.Adapter1": ["Address": .string("00:1A:7D:DA:71:13"), "Name": .string("lab"), "Powered": .boolean(true)]]
    }

    func device(_ address: String, _ props: [String: DBusValue]) -> [String: [String: DBusValue]] {
        var p = props
        p["Address"] = .string(address)
        p["Adapter"] = .objectPath("/org/bluez/hci0")
        return ["org.bluez.Device1": p]
    }

    @Test func treeAppearanceChangesAndRemovalBecomeTimelines() throws {
        let events: [RecordedEvent] = [
            RecordedEvent(at: 0, .tree([
                hci0: adapter,
                keyboard: device("DC:2C:26:01:02:03", ["Name": .string("MX Keys"), "Paired": .boolean(true), "Trusted": .boolean(true)]),
                thermometer: device("A4:C1:38:8D:18:B2", ["Name": .string("SBHT-003C"), "RSSI": .int16(-67),
                                                          "ServiceData": serviceDataValue([uuid("fcd2"): bytes("400009015d025d0903b718")])]),
            ])),
            RecordedEvent(at: 1.25, .propertiesChanged(thermometer, interface: "org.bluez.Device1", changed: [
                "RSSI": .int16(-69), "ServiceData": serviceDataValue([uuid("fcd2"): bytes("40000a015d02690903b718")]),
            ], invalidated: [])),
            RecordedEvent(at: 2, .interfacesAdded(ruuvi, device("CB:B8:33:4C:88:4F", [
                "AddressType": .string("random"), "RSSI": .int16(-63),
                "ManufacturerData": manufacturerDataValue([0x0499: bytes("0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F")]),
            ]))),
            // RSSI invalidated when discovery stops: nothing to replay.
            RecordedEvent(at: 3, .propertiesChanged(thermometer, interface: "org.bluez.Device1", changed: [:], invalidated: ["RSSI"])),
            RecordedEvent(at: 40, .interfacesRemoved(ruuvi, ["org.bluez.Device1"])),
            RecordedEvent(at: 41, .propertiesChanged(thermometer, interface: "org.bluez.Device1",
                                                     changed: ["UUIDs": .array(.string, [.string(uuid("181a"))])], invalidated: [])),
        ]
        let s = ScenarioBuilder(name: "unit").build(events, duration: 45)
        #expect(s.name == "unit")
        #expect(s.duration == 45)
        #expect(s.adapters.map(\.id) == ["hci0"])
        #expect(s.adapters.first?.address == "00:1A:7D:DA:71:13")
        #expect(s.adapters.first?.name == "lab")
        #expect(s.outages.isEmpty)
        // Devices: the tree's (sorted by path), then the one that appeared.
        #expect(s.devices.map(\.address) == ["A4:C1:38:8D:18:B2", "DC:2C:26:01:02:03", "CB:B8:33:4C:88:4F"])
        let kb = try #require(s.devices.first { $0.address == "DC:2C:26:01:02:03" })
        #expect(kb.paired && kb.trusted)
        #expect(kb.advertisingAtStart == false, "a remembered device without RSSI is not in range")
        #expect(kb.advertising == nil)

        let th = try #require(s.devices.first { $0.address == "A4:C1:38:8D:18:B2" })
        #expect(th.advertisingAtStart)
        #expect(th.rssi == -67)
        #expect(th.serviceData == [uuid("fcd2"): bytes("400009015d025d0903b718")])
        let thEvents = try #require(th.advertising?.events)
        #expect(thEvents.map(\.at) == [1.25, 41])
        #expect(thEvents[0].rssi == -69 && thEvents[0].serviceData == [uuid("fcd2"): bytes("40000a015d02690903b718")])
        #expect(thEvents[0].present == nil && thEvents[0].uuids == nil)
        #expect(thEvents[1].uuids == [uuid("181a")])

        let rv = try #require(s.devices.first { $0.address == "CB:B8:33:4C:88:4F" })
        #expect(rv.addressType == "random")
        #expect(rv.advertisingAtStart == false)
        let rvEvents = try #require(rv.advertising?.events)
        #expect(rvEvents.map(\.at) == [2, 10], "removed at 40 = stopped advertising TemporaryTimeout (30 s) before")
        #expect(rvEvents.map(\.present) == [true, false])
        #expect(rvEvents[0].manufacturerData?[0x0499]?.count == 24)

        // The simulator's loader takes it as written.
        let loaded = try Scenario.parse(s.jsonText())
        #expect(loaded.devices.map { $0.advertising?.events.count ?? 0 } == [2, 0, 2])
        #expect(loaded.duration == 45)
    }

    @Test func gattValuesNotificationsBatteryAndConnections() throws {
        let dev: ObjectPath = "/org/bluez/hci0/dev_E4_5F_01_AA_10_01"
        let service: ObjectPath = "/org/bluez/hci0/dev_E4_5F_01_AA_10_01/service000a"
        let hr: ObjectPath = "/org/bluez/hci0/dev_E4_5F_01_AA_10_01/service000a/char000b"
        let cccd: ObjectPath = "/org/bluez/hci0/dev_E4_5F_01_AA_10_01/service000a/char000b/desc000d"
        let location: ObjectPath = "/org/bluez/hci0/dev_E4_5F_01_AA_10_01/service000a/char000e"
        let gatt = "org.bluez.GattCharacteristic1"
        let events: [RecordedEvent] = [
            RecordedEvent(at: 0, .tree([hci0: adapter, dev: device("E4:5F:01:AA:10:01", ["RSSI": .int16(-58), "Name": .string("Polar H10")])])),
            RecordedEvent(at: 1, .propertiesChanged(dev, interface: "org.bluez.Device1", changed: ["Connected": .boolean(true)], invalidated: [])),
            RecordedEvent(at: 1.1, .interfacesAdded(service, ["org.bluez.GattService1": [
                "UUID": .string(uuid("180d")), "Primary": .boolean(true), "Handle": .uint16(10), "Device": .objectPath(dev)]])),
            RecordedEvent(at: 1.1, .interfacesAdded(hr, [gatt: [
                "UUID": .string(uuid("2a37")), "Service": .objectPath(service), "Flags": .array(.string, [.string("notify")]),
                "Handle": .uint16(11), "Value": .bytes([]), "MTU": .uint16(185), "Notifying": .boolean(false)]])),
            RecordedEvent(at: 1.1, .interfacesAdded(cccd, ["org.bluez.GattDescriptor1": [
                "UUID": .string(uuid("2902")), "Characteristic": .objectPath(hr), "Handle": .uint16(13)]])),
            RecordedEvent(at: 1.1, .interfacesAdded(location, [gatt: [
                "UUID": .string(uuid("2a38")), "Service": .objectPath(service), "Flags": .array(.string, [.string("read"), .string("x-unknown")]),
                "Handle": .uint16(14)]])),
            RecordedEvent(at: 1.1, .interfacesAdded(dev, ["org.bluez.Battery1": ["Percentage": .byte(90)]])),
            // Resolving services changes UUIDs: GATT services, not advertisement.
            RecordedEvent(at: 1.2, .propertiesChanged(dev, interface: "org.bluez.Device1", changed: [
                "ServicesResolved": .boolean(true), "UUIDs": .array(.string, [.string(uuid("180d"))])], invalidated: [])),
            RecordedEvent(at: 1.5, .propertiesChanged(location, interface: gatt, changed: ["Value": .bytes([0x01])], invalidated: [])),
            RecordedEvent(at: 2, .propertiesChanged(hr, interface: gatt, changed: ["Notifying": .boolean(true)], invalidated: [])),
            RecordedEvent(at: 2.5, .propertiesChanged(hr, interface: gatt, changed: ["Value": .bytes(bytes("10485503"))], invalidated: [])),
            RecordedEvent(at: 3, .propertiesChanged(hr, interface: gatt, changed: ["Value": .bytes(bytes("104a3e03"))], invalidated: [])),
            RecordedEvent(at: 3.5, .propertiesChanged(dev, interface: "org.bluez.Battery1", changed: ["Percentage": .byte(85)], invalidated: [])),
            RecordedEvent(at: 4, .propertiesChanged(dev, interface: "org.bluez.Device1", changed: ["Connected": .boolean(false)], invalidated: [])),
        ]
        let s = ScenarioBuilder().build(events, duration: 5)
        let d = try #require(s.devices.first)
        #expect(d.advertising == nil, "connection changes are not advertisements")
        #expect(d.comment == "Recorded: connected at 1 s; disconnected at 4 s")
        #expect(d.battery == 90)
        #expect(d.batteryTimeline?.events.map(\.at) == [3.5])
        #expect(d.batteryTimeline?.events.map(\.value) == [[85]])
        #expect(d.mtu == 185)
        let svc = try #require(d.gatt.first)
        #expect(d.gatt.count == 1 && svc.uuid == uuid("180d"))
        #expect(svc.characteristics.map(\.uuid) == [uuid("2a37"), uuid("2a38")])
        let measurement = svc.characteristics[0]
        #expect(measurement.descriptors.isEmpty, "bluetoothd's CCCD is left to the simulator")
        #expect(measurement.notifications?.events.map(\.at) == [0.5, 1.0], "from the first Notifying = true")
        #expect(measurement.notifications?.events.map(\.value) == [bytes("10485503"), bytes("104a3e03")])
        #expect(svc.characteristics[1].value == [0x01], "a value read while not notifying")
        #expect(svc.characteristics[1].flags == ["read"], "flags the format does not know are dropped")
        let loaded = try Scenario.parse(s.jsonText())
        #expect(loaded.devices.first?.gatt.first?.characteristics.first?.notifications?.events.count == 2)
    }

    @Test func bluetoothdAndAdapterOutages() throws {
        let hci1: ObjectPath = "/org/bluez/hci1"
        var second = adapter
        second["org.bluez.Adapter1"]?["Address"] = .string("00:1A:7D:DA:71:14")
        let tree: [ObjectPath: [String: [String: DBusValue]]] = [
            hci0: adapter, hci1: second, keyboard: device("DC:2C:26:01:02:03", ["Paired": .boolean(true)]),
        ]
        let events: [RecordedEvent] = [
            RecordedEvent(at: 0, .tree(tree)),
            RecordedEvent(at: 0.3, .interfacesRemoved(hci1, ["org.bluez.Adapter1"])),
            RecordedEvent(at: 0.8, .interfacesAdded(hci1, second)),
            // bluetoothd removes its objects as it stops: part of the outage.
            RecordedEvent(at: 1.19, .interfacesRemoved(keyboard, ["org.bluez.Device1"])),
            RecordedEvent(at: 1.19, .interfacesRemoved(hci0, ["org.bluez.Adapter1"])),
            RecordedEvent(at: 1.19, .interfacesRemoved(hci1, ["org.bluez.Adapter1"])),
            RecordedEvent(at: 1.2, .serviceLost),
            // Signals while bluetoothd is away cannot exist; a stray one is ignored.
            RecordedEvent(at: 1.3, .interfacesRemoved(hci0, ["org.bluez.Adapter1"])),
            RecordedEvent(at: 1.6, .tree(tree)),
            RecordedEvent(at: 3, .serviceLost),
        ]
        let s = ScenarioBuilder().build(events, duration: 4)
        #expect(s.outages.map(\.at) == [1.2, 3])
        #expect(s.outages.map(\.returnAt) == [1.6, nil])
        #expect(s.adapters.map(\.id) == ["hci0", "hci1"])
        #expect(s.adapters[0].outages.isEmpty)
        #expect(s.adapters[1].outages.map(\.at) == [0.3])
        #expect(s.adapters[1].outages.map(\.returnAt) == [0.8])
        #expect(s.devices.map(\.address) == ["DC:2C:26:01:02:03"])
        #expect(s.devices.first?.comment == nil, "not forgotten: bluetoothd stopped")
        let loaded = try Scenario.parse(s.jsonText())
        #expect(loaded.outages.count == 2)
        #expect(loaded.adapters[1].outages.first?.returnAt == 0.8)
    }

    @Test func filterKeepsTheChosenAdapterAndDevices() throws {
        let other: ObjectPath = "/org/bluez/hci1/dev_DC_2C_26_01_02_03"
        let events: [RecordedEvent] = [
            RecordedEvent(at: 0, .tree([
                hci0: adapter, "/org/bluez/hci1": adapter,
                keyboard: device("DC:2C:26:01:02:03", ["RSSI": .int16(-50)]),
                thermometer: device("A4:C1:38:8D:18:B2", ["RSSI": .int16(-60)]),
                other: device("DC:2C:26:01:02:03", ["RSSI": .int16(-40)]),
            ])),
            RecordedEvent(at: 1, .propertiesChanged(thermometer, interface: "org.bluez.Device1", changed: ["RSSI": .int16(-61)], invalidated: [])),
        ]
        let filter = RecordingFilter(adapter: "hci0", devices: [try BluetoothAddress("DC:2C:26:01:02:03")])
        let s = ScenarioBuilder(filter: filter).build(events, duration: 2)
        #expect(s.adapters.map(\.id) == ["hci0"])
        #expect(s.devices.map(\.address) == ["DC:2C:26:01:02:03"])
        #expect(s.devices.map(\.adapter) == ["hci0"])
        #expect(s.devices.first?.rssi == -50)
    }
}
