import DBus
import Foundation
@testable import ScenarioFormat
import Testing
@testable import BlueZSimulator

let heart = "/org/bluez/hci0/dev_A4_C1_38_00_00_02"
let ruuvi = "/org/bluez/hci0/dev_C0_FE_00_00_00_01"
let uuid2a37 = "00002a37-0000-1000-8000-00805f9b34fb"

/// A pairing agent exported by the test, answering as told.
final class TestAgent: Sendable {
    let log = AgentLog()
    func interface(passkey: UInt32 = 0, confirm: Bool = true) -> DBusExportedInterface {
        let log = self.log
        return DBusExportedInterface(DBusInterfaceDescription("org.bluez.Agent1", methods: [
            DBusMethodDescription("Release") { _ in [] },
            DBusMethodDescription("Cancel") { _ in log.add("Cancel"); return [] },
            DBusMethodDescription("RequestConfirmation", inputs: [.init("device", .objectPath), .init("passkey", .uint32)]) { call in
                let key: UInt32 = try call.argument(1)
                log.add("RequestConfirmation \(key)")
                if !confirm { throw DBusError.remote(name: "org.bluez.Error.Rejected", message: "no") }
                return []
            },
            DBusMethodDescription("RequestPasskey", inputs: [.init("device", .objectPath)], outputs: [.init("passkey", .uint32)]) { _ in
                log.add("RequestPasskey")
                return [.uint32(passkey)]
            },
        ]))
    }
}

final class AgentLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.withLock { items.append(s) } }
    var all: [String] { lock.withLock { items } }
}

@Suite(.serialized) struct ServiceTests {
    @Test func adapterAndAgentManagerAreExported() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            let objects = try await client.managedObjects(destination: "org.bluez")
            #expect(objects["/org/bluez"]?["org.bluez.AgentManager1"] != nil)
            let adapter = try #require(objects["/org/bluez/hci0"]?["org.bluez.Adapter1"])
            #expect(adapter["Address"] == .string("00:1A:7D:DA:71:13"))
            #expect(adapter["Powered"] == .boolean(true))
            #expect(adapter["Discovering"] == .boolean(false))
            #expect(adapter["Class"]?.type == .uint32)
            #expect(adapter["Roles"] == .array(.string, [.string("central"), .string("peripheral")]))
            // Temporary devices exist only once discovered.
            #expect(objects[try ObjectPath(heart)] == nil)
            let filters = try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("GetDiscoveryFilters")
            #expect(filters.first == .array(.string, ["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"].map { .string($0) }))
        }
    }

    @Test func discoveryWithFilterAndAdvertisementUpdates() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            let added = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded"))
            let changes = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                            member: "PropertiesChanged", path: try ObjectPath(ruuvi)))
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            // RSSI filter: the heart strap at -75 dBm stays hidden.
            try await adapter.call("SetDiscoveryFilter", [.propertyMap(["RSSI": .int16(-65), "Transport": .string("le"),
                                                                        "DuplicateData": .boolean(true)])])
            #expect(await errorName { try await adapter.call("SetDiscoveryFilter", [.propertyMap(["RSSI": .int16(-65), "Pathloss": .uint16(10)])]) }
                    == "org.bluez.Error.InvalidArguments")
            #expect(await errorName { try await adapter.call("SetDiscoveryFilter", [.propertyMap(["Bogus": .boolean(true)])]) }
                    == "org.bluez.Error.InvalidArguments")
            try await adapter.call("StartDiscovery")
            #expect(await errorName { try await adapter.call("StartDiscovery") } == "org.bluez.Error.InProgress")
            // bluetoothd replies first; Discovering follows.
            #expect(try await eventually(within: 2) { try await adapter.property("Discovering") == .boolean(true) })
            let first = try await collect(added, count: 1, within: 3)
            #expect(first.first?.body.first == .objectPath(try ObjectPath(ruuvi)))
            let dev = try #require(first.first?.body[1]).unwrapped
            guard case let .dictionary(_, _, ifaces) = dev else { Issue.record("no interfaces"); return }
            let device = try #require(ifaces.first { $0.key == .string("org.bluez.Device1") }?.value)
            let props: [String: DBusValue] = try [String: DBusValue](dbusValue: device)
            #expect(props["RSSI"] != nil)
            #expect(props["AddressType"] == .string("random"))
            #expect(props["Name"] == .string("Ruuvi 0001"))
            // RSSI and ManufacturerData are signalled on every advertisement (DuplicateData asked for).
            let updates = try await collect(changes, count: 4, within: 3)
            let changed = updates.compactMap { m -> [String: DBusValue]? in try? m.argument(1) }
            #expect(changed.contains { $0["ManufacturerData"] != nil })
            // The -70 dBm advertisements fail the RSSI filter and are not reported.
            #expect(!changed.contains { $0["RSSI"] == .int16(-70) })
            #expect(try await proxy(client, ruuvi, "org.bluez.Device1").property("RSSI") == .int16(-55))
            let objects = try await client.managedObjects(destination: "org.bluez")
            #expect(objects[try ObjectPath(heart)] == nil, "the RSSI filter must hide the -75 dBm device")
            // A pattern filter replaces the RSSI filter: now the strap is found.
            try await adapter.call("SetDiscoveryFilter", [.propertyMap(["Pattern": .string("Heart")])])
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            try await adapter.call("StopDiscovery")
            #expect(await errorName { try await adapter.call("StopDiscovery") } == "org.bluez.Error.Failed")
            #expect(try await eventually(within: 2) { try await adapter.property("Discovering") == .boolean(false) })
        }
    }

    @Test func temporaryDevicesVanishAfterDiscoveryAndRemoveDevice() async throws {
        try await withSimulator(try loadScenario("test-basic.json"), speed: 4) { _, _, client in
            let removed = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesRemoved"))
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            try await adapter.call("RemoveDevice", [.objectPath(try ObjectPath(heart))])
            #expect(await errorName { try await adapter.call("RemoveDevice", [.objectPath(try ObjectPath(heart))]) } == "org.bluez.Error.DoesNotExist")
            try await adapter.call("StopDiscovery")
            // temporaryDeviceTimeout 2 s at speed 4 = 0.5 s.
            let gone = try await collect(removed, count: 2, within: 3)
            let ruuviPath = try ObjectPath(ruuvi)
            #expect(gone.contains { $0.body.first == .objectPath(ruuviPath) })
            #expect(try await client.managedObjects(destination: "org.bluez")[try ObjectPath(ruuvi)] == nil)
        }
    }

    /// `bluetoothd.version`: 5.66 (Debian 12, Raspberry Pi OS) by default, as
    /// the real tier saw it; `latest` adds what current BlueZ documents.
    @Test(arguments: [(BluetoothdVersion.v5_66, false), (.v5_66, true), (.latest, false), (.latest, true)])
    func propertySetsFollowTheBluetoothdVersion(_ version: BluetoothdVersion, _ experimental: Bool) async throws {
        var scenario = try loadScenario("test-basic.json")
        scenario.bluetoothdVersion = version
        scenario.experimental = experimental
        let newer = version == .latest
        try await withSimulator(scenario) { _, _, client in
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            let props = try #require(try await client.managedObjects(destination: "org.bluez")["/org/bluez/hci0"]?["org.bluez.Adapter1"])
            #expect((props["Connectable"] != nil) == newer)
            #expect((props["Manufacturer"] != nil) == newer)
            #expect((props["Version"] != nil) == newer)
            #expect((props["PowerState"] != nil) == experimental)
            #expect(props["Pairable"] != nil && props["Powered"] != nil)
            let missing = await errorName { _ = try await adapter.property("Manufacturer") }
            #expect(newer ? missing == nil : missing == "org.freedesktop.DBus.Error.UnknownProperty")
            // Powering off still tells a client through Powered, whatever the set.
            try await adapter.setProperty("Powered", .boolean(false))
            #expect(try await adapter.property("Powered") == .boolean(false))
            try await adapter.setProperty("Powered", .boolean(true))

            try await adapter.call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            let device = try proxy(client, heart, "org.bluez.Device1")
            let deviceProps = try #require(try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)]?["org.bluez.Device1"])
            #expect((deviceProps["AdvertisingFlags"] != nil) == (newer || experimental))
            try await device.call("Connect")
            #expect(try await eventually(within: 2) { try await device.property("ServicesResolved") == .boolean(true) })
            let objects = try await client.managedObjects(destination: "org.bluez")
            let service = try #require(objects[try ObjectPath(heart + "/service000a")]?["org.bluez.GattService1"])
            let characteristic = try #require(objects[try ObjectPath(heart + "/service000a/char000b")]?["org.bluez.GattCharacteristic1"])
            let descriptor = try #require(objects[try ObjectPath(heart + "/service000a/char000b/desc000d")]?["org.bluez.GattDescriptor1"])
            #expect((service["Handle"] != nil) == newer)
            #expect((characteristic["Handle"] != nil) == newer)
            #expect((descriptor["Handle"] != nil) == newer && (descriptor["Flags"] != nil) == newer)
            #expect(characteristic["Flags"] != nil && characteristic["MTU"] != nil && descriptor["UUID"] != nil)
        }
    }

    @Test func connectResolvesGATTAndReadWriteNotify() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            let device = try proxy(client, heart, "org.bluez.Device1")
            // Not connected: bluetoothd answers Disconnect with an empty reply.
            try await device.call("Disconnect")
            try await device.call("Connect")
            #expect(try await device.property("Connected") == .boolean(true))
            // Connect replies at link-up; the services are resolved after.
            #expect(try await eventually(within: 2) { try await device.property("ServicesResolved") == .boolean(true) })
            let objects = try await client.managedObjects(destination: "org.bluez")
            let service = try #require(objects[try ObjectPath(heart + "/service000a")]?["org.bluez.GattService1"])
            #expect(service["UUID"] == .string("0000180d-0000-1000-8000-00805f9b34fb"))
            #expect(service["Primary"] == .boolean(true))
            let hrm = try #require(objects[try ObjectPath(heart + "/service000a/char000b")]?["org.bluez.GattCharacteristic1"])
            #expect(hrm["UUID"] == .string(uuid2a37))
            #expect(hrm["Flags"] == .array(.string, [.string("notify")]))
            #expect(objects[try ObjectPath(heart + "/service000a/char000b/desc000d")]?["org.bluez.GattDescriptor1"] != nil)
            #expect(objects[try ObjectPath(heart)]?["org.bluez.Battery1"]?["Percentage"] == .byte(87))

            let location = try proxy(client, heart + "/service000a/char000e", "org.bluez.GattCharacteristic1")
            #expect(try await location.call("ReadValue", [.propertyMap([:])]) == [.bytes([0x01])])
            #expect(try await location.call("ReadValue", [.propertyMap(["offset": .uint16(1)])]) == [.bytes([])])
            // ATT Invalid Offset, mapped as gatt-client.c does.
            #expect(await errorName { try await location.call("ReadValue", [.propertyMap(["offset": .uint16(5)])]) } == "org.bluez.Error.InvalidArguments")
            // No write flag, no type: nothing for bluetoothd to pick; a request reaches the strict device, which refuses.
            #expect(await errorName { try await location.call("WriteValue", [.bytes([2]), .propertyMap([:])]) } == "org.bluez.Error.NotSupported")
            #expect(await errorName { try await location.call("WriteValue", [.bytes([2]), .propertyMap(["type": .string("request")])]) }
                    == "org.bluez.Error.NotPermitted")
            #expect(await errorName { try await location.call("StartNotify") } == "org.bluez.Error.NotSupported")

            // Notifications: the timeline plays after StartNotify.
            let hrmPath = try ObjectPath(heart + "/service000a/char000b")
            let values = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                           member: "PropertiesChanged", path: hrmPath))
            let measurement = try proxy(client, hrmPath.rawValue, "org.bluez.GattCharacteristic1")
            try await measurement.call("StartNotify")
            // The same client again: bluetoothd succeeds.
            try await measurement.call("StartNotify")
            let got = try await collect(values, count: 4, within: 3)
            let payloads = got.compactMap { m -> DBusValue? in (try? m.argument(1, as: [String: DBusValue].self))?["Value"] }
            #expect(payloads.contains(.bytes([0x00, 0x48])))
            #expect(payloads.contains(.bytes([0x00, 0x4a])))

            // Scripted reply: writing 01 to the control point makes 2a37 notify 00 50.
            let control = try proxy(client, heart + "/service000a/char0010", "org.bluez.GattCharacteristic1")
            try await control.call("WriteValue", [.bytes([0x01]), .propertyMap(["type": .string("request")])])
            // A command goes out as an ATT Write Command whatever the flags: success.
            try await control.call("WriteValue", [.bytes([0x01]), .propertyMap(["type": .string("command")])])
            let after = try await collect(values, count: 20, within: 1)
            #expect(after.contains { m in (try? m.argument(1, as: [String: DBusValue].self))?["Value"] == .bytes([0x00, 0x50]) })
            #expect(await errorName { try await control.call("ReadValue", [.propertyMap([:])]) } == "org.bluez.Error.NotPermitted")
            try await measurement.call("StopNotify")
            #expect(try await measurement.property("Notifying") == .boolean(false))

            // Disconnect as bluetoothd 5.66 does it: Battery1 goes, then
            // ServicesResolved=false and the reply, Connected=false after it;
            // the GATT cache and the UUIDs it added stay ([GATT] Cache=always).
            try await device.call("Disconnect")
            #expect(try await device.property("ServicesResolved") == .boolean(false))
            #expect(try await eventually { try await device.property("Connected") == .boolean(false) })
            let left = try await client.managedObjects(destination: "org.bluez")
            #expect(left[try ObjectPath(heart + "/service000a")] != nil)
            #expect(left[try ObjectPath(heart)]?["org.bluez.Battery1"] == nil)
            #expect(try await device.property("UUIDs", as: [String].self).contains("0000180d-0000-1000-8000-00805f9b34fb"))
            // A cached characteristic of a disconnected device: gatt-client.c's "Not connected".
            #expect(await errorName { try await measurement.call("StartNotify") } == "org.bluez.Error.Failed")
        }
    }

    @Test func pairingAsksTheAgent() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            let agent = TestAgent()
            let reg = try await client.export("/test/agent", interfaces: [agent.interface(confirm: true)])
            let manager = try proxy(client, "/org/bluez", "org.bluez.AgentManager1")
            #expect(await errorName { try await manager.call("RegisterAgent", [.objectPath("/test/agent"), .string("Telepathic")]) } == "org.bluez.Error.InvalidArguments")
            try await manager.call("RegisterAgent", [.objectPath("/test/agent"), .string("KeyboardDisplay")])
            #expect(await errorName { try await manager.call("RegisterAgent", [.objectPath("/test/agent"), .string("KeyboardDisplay")]) } == "org.bluez.Error.AlreadyExists")
            try await manager.call("RequestDefaultAgent", [.objectPath("/test/agent")])
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            let device = try proxy(client, heart, "org.bluez.Device1")
            #expect(await errorName { try await device.call("CancelPairing") } == "org.bluez.Error.DoesNotExist")
            try await device.call("Pair")
            #expect(agent.log.all == ["RequestConfirmation 123456"])
            #expect(try await device.property("Paired") == .boolean(true))
            #expect(try await device.property("Bonded") == .boolean(true))
            #expect(await errorName { try await device.call("Pair") } == "org.bluez.Error.AlreadyExists")
            try await manager.call("UnregisterAgent", [.objectPath("/test/agent")])
            #expect(await errorName { try await manager.call("UnregisterAgent", [.objectPath("/test/agent")]) } == "org.bluez.Error.DoesNotExist")
            _ = reg
        }
    }

    @Test func pairingFaults() async throws {
        try await withSimulator(try loadScenario("test-faults.json"), speed: 2) { _, _, client in
            let agent = TestAgent()
            let reg = try await client.export("/test/agent", interfaces: [agent.interface(passkey: 111111)])
            let manager = try proxy(client, "/org/bluez", "org.bluez.AgentManager1")
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            let base = "/org/bluez/hci0/dev_F0_00_00_00_00_0"
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(base + "4")] != nil })
            // No agent: a passkey request cannot be answered.
            #expect(await errorName { try await proxy(client, base + "2", "org.bluez.Device1").call("Pair") } == "org.bluez.Error.AuthenticationFailed")
            try await manager.call("RegisterAgent", [.objectPath("/test/agent"), .string("KeyboardOnly")])
            // Wrong passkey from the agent.
            #expect(await errorName { try await proxy(client, base + "2", "org.bluez.Device1").call("Pair") } == "org.bluez.Error.AuthenticationFailed")
            #expect(agent.log.all.contains("RequestPasskey"))
            #expect(await errorName { try await proxy(client, base + "3", "org.bluez.Device1").call("Pair") } == "org.bluez.Error.AuthenticationRejected")
            #expect(await errorName { try await proxy(client, base + "4", "org.bluez.Device1").call("Pair") } == "org.bluez.Error.AuthenticationFailed")
            #expect(try await proxy(client, base + "4", "org.bluez.Device1").property("Paired") == .boolean(false))
            _ = reg
        }
    }

    @Test func connectionFaults() async throws {
        // Connecting takes 2 s here (0.2 s in the fixture), so the second Connect below
        // reaches the simulator while the first is pending even on a loaded machine.
        var scenario = try loadScenario("test-faults.json")
        scenario.settings.connectDelay = 2
        try await withSimulator(scenario) { _, _, client in
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            let flaky = "/org/bluez/hci0/dev_F0_00_00_00_00_01"
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(flaky)] != nil })
            let device = try proxy(client, flaky, "org.bluez.Device1")
            do {
                try await device.call("Connect")
                Issue.record("the first Connect must fail")
            } catch let e as DBusError {
                #expect(e == .remote(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local"))
            }
            // A second Connect while one is pending: InProgress.
            async let pending: String? = errorName { try await device.call("Connect") }
            try await Task.sleep(for: .milliseconds(300))
            #expect(await errorName { try await device.call("Connect") } == "org.bluez.Error.InProgress")
            #expect(await pending == "org.bluez.Error.Failed")
            // Third time lucky, then the device drops the link after 0.4 s.
            try await device.call("Connect")
            #expect(try await device.property("Connected") == .boolean(true))
            #expect(try await eventually(within: 3) { try await device.property("Connected") == .boolean(false) })
            // Disconnect during a pending Connect cancels it (device_request_disconnect() in
            // bluetoothd): the Disconnect succeeds, the Connect fails, the device stays disconnected.
            async let canceled: String? = errorName { try await device.call("Connect") }
            try await Task.sleep(for: .milliseconds(300))
            try await device.call("Disconnect")
            #expect(await canceled == "org.bluez.Error.Failed")
            try await Task.sleep(for: .milliseconds(2000))
            #expect(try await device.property("Connected") == .boolean(false))
            // Powered off: NotReady.
            try await adapter.setProperty("Powered", .boolean(false))
            #expect(try await adapter.property("Powered") == .boolean(false))
            #expect(try await adapter.property("Discovering") == .boolean(false))
            #expect(await errorName { try await adapter.call("StartDiscovery") } == "org.bluez.Error.NotReady")
            #expect(await errorName { try await device.call("Connect") } == "org.bluez.Error.NotReady")
            #expect(await errorName { try await adapter.setProperty("Discoverable", .boolean(true)) } == "org.bluez.Error.NotReady")
        }
    }

    @Test func bluetoothdAndAdapterOutages() async throws {
        try await withSimulator(try loadScenario("test-outage.json")) { _, _, client in
            let owners = try await client.nameOwnerChanges(of: "org.bluez")
            var iterator = owners.makeAsyncIterator()
            let initial = try await iterator.next()
            #expect(initial.flatMap { $0 } != nil)
            // The paired device is known from the start, without discovery.
            let objects = try await client.managedObjects(destination: "org.bluez")
            #expect(objects["/org/bluez/hci0/dev_B0_00_00_00_00_01"]?["org.bluez.Device1"]?["Paired"] == .boolean(true))
            #expect(objects["/org/bluez/hci1"] != nil)
            // hci1 is unplugged at 0.3 s and back at 0.8 s.
            #expect(try await eventually(within: 2) { try await client.managedObjects(destination: "org.bluez")["/org/bluez/hci1"] == nil })
            #expect(try await eventually(within: 2) { try await client.managedObjects(destination: "org.bluez")["/org/bluez/hci1"] != nil })
            // bluetoothd leaves the bus at 1.2 s and returns at 1.6 s.
            let gone = try await iterator.next()
            #expect(gone == .some(nil))
            let back = try await iterator.next()
            #expect(back.flatMap { $0 } != nil)
            #expect(try await eventually(within: 2) {
                try await client.managedObjects(destination: "org.bluez")["/org/bluez/hci0/dev_B0_00_00_00_00_01"] != nil
            })
        }
    }

    @Test func clientLeavingEndsItsDiscovery() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { bus, _, client in
            let other = try await DBusConnection.connect(to: .address(bus.address))
            try await proxy(other, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            #expect(try await eventually(within: 2) { try await adapter.property("Discovering") == .boolean(true) })
            other.close()
            #expect(try await eventually(within: 3) { try await adapter.property("Discovering") == .boolean(false) })
        }
    }
}

@Suite(.serialized) struct AcquireTests {
    @Test func acquireWriteAndNotifyHandOutSockets() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            let device = try proxy(client, heart, "org.bluez.Device1")
            try await device.call("Connect")
            #expect(try await eventually(within: 2) { try await device.property("ServicesResolved") == .boolean(true) })
            let hrm = try proxy(client, heart + "/service000a/char000b", "org.bluez.GattCharacteristic1")
            let rx = try proxy(client, heart + "/service000a/char0012", "org.bluez.GattCharacteristic1")
            #expect(try await rx.property("WriteAcquired") == .boolean(false))
            #expect(try await hrm.property("NotifyAcquired") == .boolean(false))
            #expect(await errorName { try await hrm.call("AcquireWrite", [.propertyMap([:])]) } == "org.bluez.Error.NotSupported")

            // AcquireNotify: notifications arrive as datagrams on the socket.
            let n = try await hrm.call("AcquireNotify", [.propertyMap([:])])
            guard case let .unixFD(notifyFD)? = n.first else { Issue.record("no fd in \(n)"); return }
            #expect(n.last == .uint16(247))
            #expect(try await hrm.property("NotifyAcquired") == .boolean(true))
            #expect(try await hrm.property("Notifying") == .boolean(true))
            #expect(await errorName { try await hrm.call("StartNotify") } == "org.bluez.Error.NotPermitted")
            let first = await readDatagram(notifyFD.rawValue, within: 2)
            #expect(first == [0x00, 0x48] || first == [0x00, 0x4a])

            // AcquireWrite: a datagram is a write without response; the rule fires.
            let w = try await rx.call("AcquireWrite", [.propertyMap([:])])
            guard case let .unixFD(writeFD)? = w.first else { Issue.record("no fd in \(w)"); return }
            #expect(try await rx.property("WriteAcquired") == .boolean(true))
            #expect(await errorName { try await rx.call("WriteValue", [.bytes([0xff]), .propertyMap([:])]) } == "org.bluez.Error.NotPermitted")
            let sent = [UInt8(0xff)].withUnsafeBytes { send(writeFD.rawValue, $0.baseAddress, 1, 0) }
            #expect(sent == 1)
            // The heart rate's own notifications (about 7 a second) have been
            // queueing on the socket since AcquireNotify: read past however
            // many there are, for up to 5 s, not a fixed number of them.
            var sawReply = false
            let deadline = ContinuousClock.now + .seconds(5)
            while !sawReply, ContinuousClock.now < deadline {
                sawReply = await readDatagram(notifyFD.rawValue, within: 1) == [0x00, 0xff]
            }
            #expect(sawReply)

            // Closing our ends releases the locks.
            close(writeFD.take())
            close(notifyFD.take())
            #expect(try await eventually { try await rx.property("WriteAcquired") == .boolean(false) })
            #expect(try await eventually { try await hrm.property("NotifyAcquired") == .boolean(false) })
            #expect(try await hrm.property("Notifying") == .boolean(false))
        }
    }
}

/// Reads one datagram, waiting at most `seconds`. The wait (poll with a
/// timeout) runs on a thread of its own, never on the cooperative pool the
/// simulator needs.
func readDatagram(_ fd: Int32, within seconds: Double) async -> [UInt8]? {
    await withCheckedContinuation { (c: CheckedContinuation<[UInt8]?, Never>) in
        Thread {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, Int32(seconds * 1000)) == 1 else { return c.resume(returning: nil) }
            var buffer = [UInt8](repeating: 0, count: 600)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            c.resume(returning: n > 0 ? Array(buffer[0..<n]) : nil)
        }.start()
    }
}

/// An agent whose RequestPasskey never answers in time (to be cancelled).
func slowAgent(_ log: AgentLog) -> DBusExportedInterface {
    DBusExportedInterface(DBusInterfaceDescription("org.bluez.Agent1", methods: [
        DBusMethodDescription("Cancel") { _ in log.add("Cancel"); return [] },
        DBusMethodDescription("RequestPasskey", inputs: [.init("device", .objectPath)], outputs: [.init("passkey", .uint32)]) { _ in
            log.add("RequestPasskey")
            try await Task.sleep(for: .seconds(30))
            return [.uint32(0)]
        },
    ]))
}

@Suite(.serialized) struct MoreServiceTests {
    @Test func cancelPairingInterruptsTheAgent() async throws {
        try await withSimulator(try loadScenario("test-faults.json")) { _, _, client in
            let log = AgentLog()
            let reg = try await client.export("/test/slow", interfaces: [slowAgent(log)])
            try await proxy(client, "/org/bluez", "org.bluez.AgentManager1").call("RegisterAgent", [.objectPath("/test/slow"), .string("KeyboardDisplay")])
            try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            let lock = "/org/bluez/hci0/dev_F0_00_00_00_00_02"
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(lock)] != nil })
            let device = try proxy(client, lock, "org.bluez.Device1")
            async let pairing: String? = errorName { try await device.call("Pair") }
            #expect(try await eventually { log.all.contains("RequestPasskey") })
            #expect(await errorName { try await device.call("Pair") } == "org.bluez.Error.InProgress")
            try await device.call("CancelPairing")
            #expect(await pairing == "org.bluez.Error.AuthenticationCanceled")
            #expect(try await eventually { log.all.contains("Cancel") })
            #expect(try await device.property("Paired") == .boolean(false))
            _ = reg
        }
    }

    @Test func discoverableTimeoutAndAliasReset() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.setProperty("DiscoverableTimeout", .uint32(1))
            try await adapter.setProperty("Discoverable", .boolean(true))
            #expect(try await adapter.property("Discoverable") == .boolean(true))
            #expect(try await eventually(within: 3) { try await adapter.property("Discoverable") == .boolean(false) })
            try await adapter.setProperty("Alias", .string("bench"))
            #expect(try await adapter.property("Alias") == .string("bench"))
            try await adapter.setProperty("Alias", .string(""))
            #expect(try await eventually { try await adapter.property("Alias") == .string("sim-host") })
            #expect(await errorName { try await adapter.setProperty("Discovering", .boolean(true)) } == "org.freedesktop.DBus.Error.PropertyReadOnly")
        }
    }

    /// bluetoothd's RSSI rule without a filter (device_set_rssi): announced
    /// only once it moves by 8 dBm from the value last announced.
    @Test func withoutAFilterRSSIIsAnnouncedOnlyWhenItMovesBy8dBm() async throws {
        let scenario = try Scenario.parse("""
        { "devices": [ { "address": "11:22:33:44:55:67", "name": "Drifting", "rssi": -60,
            "advertising": { "timeline": [ { "at": 8.3, "rssi": -63 }, { "at": 8.6, "rssi": -67 }, { "at": 8.9, "rssi": -68 },
                                            { "at": 9.2, "rssi": -62 }, { "at": 9.5, "rssi": -59 } ] } } ] }
        """)
        try await withSimulator(scenario) { _, _, client in
            let path: ObjectPath = "/org/bluez/hci0/dev_11_22_33_44_55_67"
            let changes = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                            member: "PropertiesChanged", path: path))
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[path] != nil })
            let rssiOf = { @Sendable (messages: [DBusMessage]) -> [DBusValue] in
                messages.compactMap { m -> DBusValue? in (try? m.argument(1, as: [String: DBusValue].self))?["RSSI"] }
            }
            // The timeline runs from the simulator's start, not from discovery's:
            // it starts at 8.3 s so that discovery is on by then even on a loaded
            // machine (at 0.3 s, a full-suite run in CI set up too late and heard
            // nothing). It ends at 9.5 s; the limit is generous.
            let got = try await collect(changes, within: 30) { rssiOf($0).contains(.int16(-59)) }
            let rssi = rssiOf(got)
            // From the -60 it was exported with: -63, -67 stay below 8 dB; -68 is 8 away;
            // -62 is 6 from -68; -59 is 9 from -68.
            #expect(rssi == [.int16(-68), .int16(-59)], "\(rssi)")
            #expect(try await proxy(client, path.rawValue, "org.bluez.Device1").property("RSSI") == .int16(-59))
        }
    }

    @Test func withoutDuplicateDataOnlyChangesAreReported() async throws {
        let scenario = try Scenario.parse("""
        { "devices": [ { "address": "11:22:33:44:55:66", "name": "Steady", "rssi": -40,
            "manufacturerData": { "0xffff": "0102" },
            "advertising": { "timeline": [ { "at": 0.05 } ], "repeatEvery": 0.1 } } ] }
        """)
        try await withSimulator(scenario) { _, _, client in
            let path: ObjectPath = "/org/bluez/hci0/dev_11_22_33_44_55_66"
            let changes = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                            member: "PropertiesChanged", path: path))
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("SetDiscoveryFilter", [.propertyMap(["DuplicateData": .boolean(false)])])
            try await adapter.call("StartDiscovery")
            // A filter is set, so bluetoothd announces RSSI on every advertisement,
            // unchanged values included; the data itself only when it changes.
            let quiet = try await collect(changes, count: 3, within: 2)
            let props = quiet.compactMap { try? $0.argument(1, as: [String: DBusValue].self) }
            #expect(props.count == 3 && props.allSatisfy { $0 == ["RSSI": .int16(-40)] },
                    "identical advertisements: RSSI again, no ManufacturerData without DuplicateData: \(props)")
            try await adapter.call("SetDiscoveryFilter", [.propertyMap(["DuplicateData": .boolean(true)])])
            // (An RSSI-only signal of an advertisement before the change may come first.)
            let repeated = try await collect(changes, count: 6, within: 5)
            #expect(repeated.count == 6)
            #expect(repeated.filter { (try? $0.argument(1, as: [String: DBusValue].self))?["ManufacturerData"] != nil }.count >= 4)
        }
    }
}
