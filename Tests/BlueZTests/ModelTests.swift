import Testing
import DBus
@testable import BlueZ
import Vocabulary

@Suite struct AddressAndIDTests {
    @Test func aPathsAddressIsTheParsedAddress() throws {
        let c = try BluetoothAddress("c4:7c:8d:6a:12:34")
        // A path's address is the same value as the parsed one (a table key either way).
        let id = try #require(DeviceID(path: "/org/bluez/hci0/dev_C4_7C_8D_6A_12_34"))
        #expect(id.address == c && id.address.hashValue == c.hashValue)
    }

    @Test func idsKnowTheirParents() throws {
        let hci0 = try AdapterID(name: "hci0")
        #expect(hci0.path == "/org/bluez/hci0")
        #expect(throws: BlueZError.self) { try AdapterID(name: "hci0/../x") }
        let dev = DeviceID(adapter: hci0, address: try BluetoothAddress("C4:7C:8D:6A:12:34"))
        #expect(dev.path == "/org/bluez/hci0/dev_C4_7C_8D_6A_12_34")
        #expect(DeviceID(path: dev.path) == dev)
        #expect(DeviceID(path: "/org/bluez/hci0") == nil)
        #expect(DeviceID(path: "/org/bluez/hci0/dev_nothex") == nil)
        let char = GATTAttributeID(path: "/org/bluez/hci0/dev_C4_7C_8D_6A_12_34/service000a/char000b")
        #expect(char?.device == dev)
        #expect(GATTAttributeID(path: "/org/bluez/hci0/service000a") == nil)
    }

    @Test func anIDGivesBackThePathItWasMadeFromAndSortsAsPathsDo() throws {
        // The ID keeps the adapter and the address only; its path is made
        // again when asked for, so only bluetoothd's form (upper-case hex)
        // is a device path: a lower-case one would come back different.
        let path: ObjectPath = "/org/bluez/hci0/dev_0A_1B_2C_3D_4E_5F"
        #expect(DeviceID(path: path)?.path == path)
        #expect(DeviceID(path: "/org/bluez/hci0/dev_0a_1b_2c_3d_4e_5f") == nil)
        #expect(DeviceID(path: "/org/bluez/hci0/dev_0A_1B_2C_3D_4E_5G") == nil)
        #expect(DeviceID(path: "/org/bluez/hci0/dev_0A_1B_2C_3D_4E5F00") == nil)
        #expect(DeviceID(path: "/dev_0A_1B_2C_3D_4E_5F") == nil)
        let paths: [ObjectPath] = [
            "/org/bluez/hci10/dev_00_00_00_00_00_01", "/org/bluez/hci1/dev_FF_00_00_00_00_00",
            "/org/bluez/hci1/dev_0A_00_00_00_00_00", "/org/bluez/hci1/dev_A0_00_00_00_00_00",
            "/org/bluez/hci0/dev_FF_FF_FF_FF_FF_FF", "/org/bluez/hci2/dev_00_00_00_00_00_00",
        ]
        let ids = try paths.map { try #require(DeviceID(path: $0)) }
        #expect(ids.sorted().map(\.path) == paths.sorted())
        #expect(Set(ids).count == paths.count)
        // Same address on two adapters: two devices.
        #expect(DeviceID(path: "/org/bluez/hci0/dev_0A_1B_2C_3D_4E_5F") != DeviceID(path: "/org/bluez/hci1/dev_0A_1B_2C_3D_4E_5F"))
        #expect(MemoryLayout<DeviceID>.size <= 24)
    }
}

@Suite struct SnapshotTests {
    let devPath: ObjectPath = "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"

    func deviceProps(rssi: Int16) -> [String: DBusValue] {
        ["Address": .string("AA:BB:CC:DD:EE:FF"), "AddressType": .string("random"), "Name": .string("ATC_DDEEFF"),
         "RSSI": .int16(rssi), "Paired": .boolean(false),
         "ManufacturerData": .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(0x0499), .variant(.bytes([5, 1, 2])))]),
         "ServiceData": .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("0000181A-0000-1000-8000-00805F9B34FB"), .variant(.bytes([9])))])]
    }

    @Test func applyingSignalsKeepsTypedModelsCurrent() throws {
        var snap = BlueZSnapshot()
        snap.reset(to: ["/org/bluez/hci0": ["org.bluez.Adapter1": ["Address": .string("00:11:22:33:44:55"), "Powered": .boolean(true)]]])
        #expect(snap.available)
        #expect(snap.sortedAdapters.map(\.id.name) == ["hci0"])
        #expect(snap.sortedAdapters.first?.powered == true)

        snap.add(devPath, ["org.bluez.Device1": deviceProps(rssi: -60), "org.bluez.Battery1": ["Percentage": .byte(87)]])
        let id = try #require(DeviceID(path: devPath))
        #expect(snap.devices[id]?.rssi == -60)
        #expect(snap.devices[id]?.manufacturerData == [0x0499: [5, 1, 2]])
        #expect(snap.devices[id]?.serviceData == ["0000181a-0000-1000-8000-00805f9b34fb": [9]])
        #expect(snap.batteries[id] == 87)
        #expect(snap.devices[id]?.displayName == "ATC_DDEEFF")

        let applied = snap.change(devPath, "org.bluez.Device1", ["RSSI": .int16(-42)], [])
        #expect(applied)
        #expect(snap.devices[id]?.rssi == -42)
        let invalidated = snap.change(devPath, "org.bluez.Device1", [:], ["RSSI"])
        #expect(invalidated)
        #expect(snap.devices[id]?.rssi == nil)
        // A change of other keys keeps the rest of the typed model (the
        // received dictionary is not kept: Device1's entry is an empty marker).
        let manufacturer = snap.change(devPath, "org.bluez.Device1", ["ManufacturerData": .dictionary(key: .uint16, value: .variant,
            [DBusDictEntry(.uint16(0x0499), .variant(.bytes([5, 9])))])], [])
        #expect(manufacturer)
        #expect(snap.devices[id]?.manufacturerData == [0x0499: [5, 9]])
        #expect(snap.devices[id]?.name == "ATC_DDEEFF" && snap.devices[id]?.addressType == "random")
        #expect(snap.devices[id]?.serviceData == ["0000181a-0000-1000-8000-00805f9b34fb": [9]])
        #expect(snap.objects[devPath]?["org.bluez.Device1"] == nil)
        #expect(snap.objects[devPath]?.keys.sorted() == ["org.bluez.Battery1"])
        // Another interface added to the device's path leaves its model alone.
        snap.add(devPath, ["org.bluez.MediaControl1": ["Connected": .boolean(false)]])
        #expect(snap.devices[id]?.manufacturerData == [0x0499: [5, 9]] && snap.devices[id]?.name == "ATC_DDEEFF")

        snap.remove(devPath, ["org.bluez.Battery1"])
        #expect(snap.batteries[id] == nil)
        #expect(snap.devices[id] != nil)
        #expect(snap.objects[devPath]?.keys.sorted() == ["org.bluez.MediaControl1"])
        snap.remove(devPath, ["org.bluez.Device1", "org.bluez.MediaControl1"])
        #expect(snap.devices[id] == nil)
        #expect(snap.objects[devPath] == nil)
        // A late PropertiesChanged for a removed object is ignored, not resurrected.
        let late = snap.change(devPath, "org.bluez.Device1", ["RSSI": .int16(-1)], [])
        #expect(!late)
        #expect(snap.devices[id] == nil)

        snap.markUnavailable()
        #expect(!snap.available && snap.adapters.isEmpty)
    }

    /// A device path with only Device1 and the standard interfaces is kept
    /// once, as the typed device: no interfaces dictionary next to it, and
    /// changes and removal still reach the device.
    @Test func aDeviceIsKeptOnlyAsItsTypedModel() throws {
        var snap = BlueZSnapshot()
        snap.reset(to: ["/org/bluez/hci0": ["org.bluez.Adapter1": ["Address": .string("00:11:22:33:44:55")],
                                             "org.freedesktop.DBus.Introspectable": [:]]])
        snap.add(devPath, ["org.bluez.Device1": deviceProps(rssi: -60), "org.freedesktop.DBus.Properties": [:],
                           "org.freedesktop.DBus.Introspectable": [:]])
        let id = try #require(DeviceID(path: devPath))
        #expect(snap.objects[devPath] == nil)
        #expect(snap.objects["/org/bluez/hci0"]?.keys.sorted() == ["org.bluez.Adapter1", "org.freedesktop.DBus.Introspectable"])
        let changed = snap.change(devPath, "org.bluez.Device1", ["RSSI": .int16(-41)], [])
        #expect(changed && snap.devices[id]?.rssi == -41)
        // A property of an interface the path does not have is not applied.
        let battery = snap.change(devPath, "org.bluez.Battery1", ["Percentage": .byte(5)], [])
        #expect(!battery)
        #expect(snap.batteries[id] == nil)
        snap.remove(devPath, ["org.bluez.Device1", "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable"])
        #expect(snap.devices[id] == nil && snap.objects[devPath] == nil)
        let late = snap.change(devPath, "org.bluez.Device1", ["RSSI": .int16(-1)], [])
        #expect(!late)
    }

    @Test func propertiesWithTheWrongTypeAreReportedNotFatal() throws {
        var props = deviceProps(rssi: -60)
        props["RSSI"] = .string("-60")
        let d = Device(id: try #require(DeviceID(path: devPath)), properties: props)
        #expect(d.rssi == nil)
        #expect(d.name == "ATC_DDEEFF")
        #expect(d.problems == ["org.bluez.Device1.RSSI should be \"n\" but is \"s\""])
    }

    @Test func everyDocumentedDevicePropertyIsTyped() throws {
        var props = deviceProps(rssi: -60)
        props["AdvertisingFlags"] = .bytes([0x06])
        props["AdvertisingData"] = .dictionary(key: .byte, value: .variant, [DBusDictEntry(.byte(0x2b), .variant(.bytes([1, 2])))])
        props["Sets"] = .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .variant), [
            DBusDictEntry(.objectPath("/org/bluez/hci0/set_1"), .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("Rank"), .variant(.byte(1)))])),
        ])
        props["PreferredBearer"] = .string("le")
        props["CablePairing"] = .boolean(false)
        props["TxPower"] = .int16(4)
        props["Appearance"] = .uint16(0x0341)
        let d = Device(id: try #require(DeviceID(path: devPath)), properties: props)
        #expect(d.advertisingFlags == [0x06])
        #expect(d.advertisingData == [0x2b: [1, 2]])
        #expect(d.sets == ["/org/bluez/hci0/set_1"])
        #expect(d.preferredBearer == "le" && d.cablePairing == false && d.txPower == 4 && d.appearance == 0x0341)
        #expect(d.problems.isEmpty)
        var updated = d
        updated.update(["AdvertisingData"], from: props.merging(["AdvertisingData": .string("oops")]) { $1 })
        #expect(updated.advertisingData.isEmpty)
        #expect(updated.problems == ["org.bluez.Device1.AdvertisingData should be \"a{yv}\" but is \"s\""])
        let a = Adapter(id: try AdapterID(name: "hci0"), properties: [
            "Manufacturer": .uint16(2), "Version": .byte(12), "Connectable": .boolean(true),
            "ExperimentalFeatures": .array(.string, [.string("d4992530-b9ec-469f-ab01-6c481c47da1c")]),
        ])
        #expect(a.manufacturer == 2 && a.version == 12 && a.connectable == true && a.experimentalFeatures.count == 1)
    }

    /// Each case of the property enums is parsed: a value no documented
    /// property has (a double) is reported under that case's D-Bus name.
    /// (Address is the exception: a device's address is its path's.)
    @Test func everyPropertyCaseIsParsed() throws {
        for property in DeviceProperty.allCases where property != .address {
            let d = Device(id: try #require(DeviceID(path: devPath)), properties: [property.rawValue: .double(1.5)])
            #expect(d.problems.count == 1 && d.problems.first?.hasPrefix("org.bluez.Device1.\(property.rawValue) should be") == true,
                    "\(property): \(d.problems)")
        }
        for property in AdapterProperty.allCases {
            let a = Adapter(id: try AdapterID(name: "hci0"), properties: [property.rawValue: .double(1.5)])
            #expect(a.problems.count == 1 && a.problems.first?.hasPrefix("org.bluez.Adapter1.\(property.rawValue) should be") == true,
                    "\(property): \(a.problems)")
        }
        let changed: [String: DBusValue] = ["RSSI": .int16(-40), "Powered": .boolean(true)]
        #expect(changed[DeviceProperty.rssi] == .int16(-40) && changed[AdapterProperty.powered] == .boolean(true))
        #expect(changed[DeviceProperty.connected] == nil)
        #expect(DeviceProperty.names(DeviceProperty.advertisement) == ["RSSI", "TxPower", "ManufacturerData", "ServiceData"])
    }

    @Test func gattTreeIsOrderedByHandle() throws {
        var snap = BlueZSnapshot()
        snap.reset(to: [:])
        let s = devPath.rawValue + "/service0010"
        snap.add(try ObjectPath(s), ["org.bluez.GattService1": ["UUID": .string("0000180D-0000-1000-8000-00805f9b34fb"), "Primary": .boolean(true), "Handle": .uint16(0x10)]])
        snap.add(try ObjectPath(s + "/char0014"), ["org.bluez.GattCharacteristic1": ["UUID": .string("00002a38-0000-1000-8000-00805f9b34fb"), "Flags": .array(.string, [.string("read")]), "Handle": .uint16(0x14)]])
        snap.add(try ObjectPath(s + "/char0011"), ["org.bluez.GattCharacteristic1": ["UUID": .string("00002a37-0000-1000-8000-00805f9b34fb"), "Flags": .array(.string, [.string("notify")]), "Handle": .uint16(0x11)]])
        snap.add(try ObjectPath(s + "/char0011/desc0013"), ["org.bluez.GattDescriptor1": ["UUID": .string("00002902-0000-1000-8000-00805f9b34fb"), "Handle": .uint16(0x13)]])
        let tree = snap.gattTree(of: try #require(DeviceID(path: devPath)))
        #expect(tree.count == 1)
        #expect(tree[0].characteristics.map(\.0.uuid) == ["00002a37-0000-1000-8000-00805f9b34fb", "00002a38-0000-1000-8000-00805f9b34fb"])
        #expect(tree[0].characteristics[0].0.canNotify && !tree[0].characteristics[0].0.canRead)
        #expect(tree[0].characteristics[0].1.map(\.uuid) == ["00002902-0000-1000-8000-00805f9b34fb"])
        #expect(snap.characteristic("2A38", on: try #require(DeviceID(path: devPath)))?.handle == 0x14)
    }
}

@Suite struct ErrorMappingTests {
    @Test func bluezErrorsKeepNameAndReason() {
        let e = BlueZError(.remote(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local"))
        #expect(e == .bluez(.failed, message: "le-connection-abort-by-local"))
        #expect(e.connectionFailure == .leAbortByLocal)
        #expect(e.description.hasPrefix("Failed: le-connection-abort-by-local (the local adapter gave up"))
        #expect(BlueZError(.remote(name: "org.bluez.Error.InProgress", message: "In Progress")) == .bluez(.inProgress, message: "In Progress"))
        #expect(BlueZError(.remote(name: "org.bluez.Error.Brandnew", message: "x")) == .bluez(.unknown, message: "org.bluez.Error.Brandnew: x"))
        #expect(BlueZError(.remote(name: "org.freedesktop.DBus.Error.ServiceUnknown", message: "x")) == .unavailable)
        #expect(BlueZError(.remote(name: "org.freedesktop.DBus.Error.AccessDenied", message: "policy")) == .permissionDenied("policy"))
        #expect(BlueZError(.timedOut(member: "Connect", milliseconds: 100)) == .dbus(.timedOut(member: "Connect", milliseconds: 100)))
        #expect(BlueZError.from(CancellationError()) == .cancelled)
        // Every documented name round-trips.
        for name in BlueZError.Name.allCases where name != .unknown {
            #expect(BlueZError(.remote(name: name.rawValue, message: "m")) == .bluez(name, message: "m"))
        }
    }

    @Test func discoveryFilterEncodesOnlyWhatIsSet() {
        let f = DiscoveryFilter(uuids: ["0000fcd2-0000-1000-8000-00805f9b34fb"], rssi: -80, transport: .le, duplicateData: false)
        guard case let .dictionary(.string, .variant, entries) = f.dictionary else {
            Issue.record("not a{sv}")
            return
        }
        let keys = entries.compactMap { if case let .string(k) = $0.key { return k } else { return nil } }
        #expect(keys == ["UUIDs", "RSSI", "Transport", "DuplicateData"])
        #expect(f.dictionary.type.signature == "a{sv}")
    }
}

/// The mirror's change events: typed for devices and adapters, by name for
/// the rest, and nothing bluetoothd sent lost on the way.
@Suite struct ChangeEventTests {
    let device = ObjectPath(stringLiteral: "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2")

    @Test func deviceAndAdapterChangesAreTyped() throws {
        let event = BlueZEvent.changed(device, interface: "org.bluez.Device1",
                                       ["RSSI": .int16(-60), "FutureProperty": .boolean(true)], invalidated: ["TxPower"])
        guard case let .deviceChanged(id, changes) = event else {
            Issue.record("a Device1 change on a device path should be .deviceChanged: \(event)")
            return
        }
        #expect(id.address == (try BluetoothAddress("A4:C1:38:8D:18:B2")) && id.adapter.name == "hci0")
        #expect(changes[.rssi] == .int16(-60))
        #expect(changes.contains(.rssi) && !changes.contains(.name))
        #expect(changes.properties == [.rssi], "a name this build does not know is not a property…")
        #expect(changes.values["FutureProperty"] == .boolean(true), "…but it is kept")
        #expect(changes.invalidated == ["TxPower"])

        let hci0 = ObjectPath(stringLiteral: "/org/bluez/hci0")
        guard case let .adapterChanged(adapter, power) = BlueZEvent.changed(hci0, interface: "org.bluez.Adapter1",
                                                                            ["Powered": .boolean(false)], invalidated: []) else {
            Issue.record("an Adapter1 change should be .adapterChanged")
            return
        }
        #expect(adapter.name == "hci0" && power[.powered] == .boolean(false))
    }

    @Test func otherInterfacesAndOddPathsStayByName() {
        let characteristic = ObjectPath(stringLiteral: "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2/service000c/char000d")
        let value = BlueZEvent.changed(characteristic, interface: "org.bluez.GattCharacteristic1", ["Value": .bytes([1])], invalidated: [])
        #expect(value == .propertiesChanged(characteristic, interface: "org.bluez.GattCharacteristic1", changed: ["Value": .bytes([1])], invalidated: []))
        // Device1 on a path that is not a device's (no address in it): kept, by name.
        let odd = ObjectPath(stringLiteral: "/org/bluez/hci0/something")
        if case .propertiesChanged = BlueZEvent.changed(odd, interface: "org.bluez.Device1", ["RSSI": .int16(-1)], invalidated: []) {} else {
            Issue.record("a Device1 change on a path without an address should stay by name")
        }
    }

    @Test func everyChangeReadsBackAsTheSignalItCameFrom() {
        let cases: [(ObjectPath, String)] = [
            (device, "org.bluez.Device1"), (ObjectPath(stringLiteral: "/org/bluez/hci1"), "org.bluez.Adapter1"),
            (device, "org.bluez.Battery1"),
        ]
        for (path, interface) in cases {
            let signal = BlueZEvent.changed(path, interface: interface, ["X": .uint32(7)], invalidated: ["Y"]).propertiesSignal
            #expect(signal?.path == path && signal?.interface == interface)
            #expect(signal?.changed == ["X": .uint32(7)] && signal?.invalidated == ["Y"])
        }
        #expect(BlueZEvent.resynchronized.propertiesSignal == nil)
    }
}
