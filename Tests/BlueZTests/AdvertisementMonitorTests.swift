import DBus
import Foundation
import ScenarioFormat
import Testing
import TestSupport
import BlueZSimulator
@testable import BlueZ
import Vocabulary

/// Waits (on the mirror's signals, no polling) until `condition` holds.
private func waitFor(_ client: BlueZClient, _ what: String, seconds: Double = 5,
                     _ condition: @escaping @Sendable (BlueZSnapshot) -> Bool) async throws {
    try await client.mirror.wait(for: what, timeout: .seconds(seconds), until: condition)
}

/// The error a registration fails with (nil, after unregistering, when it succeeds).
private func registrationError(_ body: () async throws(BlueZError) -> AdvertisementMonitor) async -> BlueZError? {
    do {
        let monitor = try await body()
        await monitor.unregister()
        return nil
    } catch {
        return error
    }
}

@Suite(.serialized, .timeLimit(.minutes(1))) struct AdvertisementMonitorTests {
    func id(_ client: BlueZClient, _ address: String) throws -> DeviceID {
        DeviceID(adapter: try client.adapter().id, address: try BluetoothAddress(address))
    }

    @Test func patternsAreBuiltAsTheADStructuresTheyMatch() throws {
        // Service data: AD type 0x16, the 16-bit UUID little-endian at position 0.
        #expect(AdvertisementPattern.serviceData(uuid16: 0xFCD2) == AdvertisementPattern(startPosition: 0, adType: 0x16, content: [0xD2, 0xFC]))
        // Manufacturer data: AD type 0xFF, the company id little-endian at position 0.
        #expect(AdvertisementPattern.manufacturerData(companyID: 0x004C) == AdvertisementPattern(adType: 0xFF, content: [0x4C, 0x00]))
        #expect(AdvertisementPattern.localName(prefix: "sps") == AdvertisementPattern(adType: 0x09, content: [0x73, 0x70, 0x73]))
        let list = AdvertisementPattern.matching(serviceDataUUIDs: [0x181A, 0xFCD2, 0x181A], companyIDs: [0x0499], localNamePrefixes: ["tps"])
        #expect(list.map(\.description) == ["type 0x16 at 0: 1a18", "type 0x16 at 0: d2fc", "type 0xff at 0: 9904", "type 0x09 at 0: 747073"])

        #expect(throws: BlueZError.invalidArgument("pattern type 0x16 at 0:  has no content")) {
            try AdvertisementPattern(adType: 0x16, content: []).validate()
        }
        #expect(throws: BlueZError.self) { try AdvertisementPattern(startPosition: 30, adType: 0x16, content: [1, 2]).validate() }
        #expect(throws: BlueZError.self) { try AdvertisementPattern(adType: 0x50, content: [1]).validate() }
        try AdvertisementPattern(startPosition: 29, adType: 0x3D, content: [1, 2]).validate()
        #expect(throws: BlueZError.self) { try AdvertisementMonitorRSSI(lowThreshold: -60, highThreshold: -70).validate() }
        #expect(throws: BlueZError.self) { try AdvertisementMonitorRSSI(lowTimeout: 0).validate() }
        try AdvertisementMonitorRSSI(lowThreshold: -90, highThreshold: -80, lowTimeout: 5, highTimeout: 1, samplingPeriod: 255).validate()
    }

    @Test func monitorShowsTheDemoDecodableDevicesWithoutDiscovery() async throws {
        try await withSimulator("demo-home.json") { bus, client in
            let hci0 = try client.adapter().id
            // BTHome, Xiaomi, pvvx/ATC service data; Ruuvi, Govee, Apple (iBeacon) manufacturer data.
            let patterns = AdvertisementPattern.matching(serviceDataUUIDs: [0xFCD2, 0xFE95, 0x181A], companyIDs: [0x0499, 0xEC88, 0x004C])
            let monitor = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: patterns)
            #expect(monitor.isActive)
            #expect(monitor.monitorPaths == ["/com/blecompanion/monitor/hci0/monitor0"])

            let decodable = try ["A4:C1:38:8D:18:B2", "A4:C1:38:5A:1B:2C", "CB:B8:33:4C:88:4F", "D0:3A:1B:2C:3D:4E", "A4:C1:38:12:DB:F8"]
                .map { try id(client, $0) }
            try await waitFor(client, "the decodable devices") { s in decodable.allSatisfy { s.devices[$0] != nil } }
            // Without discovery: the adapter is not discovering, yet the devices carry data and RSSI.
            let snapshot = client.mirror.snapshot()
            #expect(snapshot.adapters[hci0]?.discovering == false)
            let bthome = try #require(snapshot.devices[decodable[0]])
            #expect(bthome.serviceData["0000fcd2-0000-1000-8000-00805f9b34fb"] != nil)
            #expect(bthome.rssi != nil)
            // DeviceFound for each of them.
            #expect(await eventually { monitor.foundDevices == Set(decodable) }, "\(monitor.foundDevices)")

            // The heart-rate strap, the ESS sensor (0x181A in its UUID list, no service data)
            // and the lock match no pattern; the paired keyboard is known anyway.
            try await Task.sleep(for: .milliseconds(300))
            let devices = Set(client.mirror.snapshot().devices.keys)
            for address in ["E4:5F:01:AA:10:01", "C4:7C:8D:6A:3E:01", "F4:12:FA:33:44:55"] {
                #expect(!devices.contains(try id(client, address)), "\(address) must not appear")
            }
            #expect(devices.subtracting(decodable) == [try id(client, "DC:2C:26:01:02:03")])

            // Only bluetoothd may call the monitor: another bus client is refused.
            let stranger = try await DBusConnection.connect(to: .address(bus.address))
            defer { stranger.close() }
            await #expect(throws: DBusError.self) {
                _ = try await stranger.call(destination: client.connection.uniqueName, path: monitor.monitorPaths[0],
                                            interface: "org.bluez.AdvertisementMonitor1", member: "DeviceLost",
                                            arguments: [.objectPath(decodable[0].path)])
            }
            #expect(monitor.foundDevices == Set(decodable))
            await monitor.unregister()
            // Whether or not bluetoothd's Release came before UnregisterMonitor returned.
            #expect(!monitor.isActive)
            #expect(monitor.foundDevices.isEmpty)
        }
    }

    @Test func foundLostAndUnregisterStopsUpdates() async throws {
        // The pvvx thermometer stops at 8 s here (3 s in the fixture): a loaded
        // machine registered the monitor after 3 s, and DeviceFound never came.
        var scenario = try loadFixture("test-passive.json")
        scenario.stopAdvertising("A4:C1:38:5A:1B:2C", at: 8)
        try await withSimulator(loaded: scenario) { _, client in
            let hci0 = try client.adapter().id
            let bthome = try id(client, "A4:C1:38:8D:18:B2"), atc = try id(client, "A4:C1:38:5A:1B:2C")
            let monitor = try await AdvertisementMonitor.register(
                client: client, adapter: hci0,
                patterns: [.serviceData(uuid16: 0xFCD2), .serviceData(uuid16: 0x181A)])
            let events = monitor.events()
            try await waitFor(client, "BTHome and pvvx") { $0.devices[bthome] != nil && $0.devices[atc] != nil }
            #expect(await eventually { monitor.foundDevices == [bthome, atc] })
            // The pvvx thermometer stops advertising at 8 s: DeviceLost.
            let lost = await first(events, within: 15) { if case .deviceLost = $0 { return true } else { return false } }
            #expect(lost == .deviceLost(atc, monitor: monitor.monitorPaths[0]))
            #expect(monitor.foundDevices == [bthome])

            await monitor.unregister()
            // No advertisement reaches us any more: the BTHome data (changing every 0.2 s) stays put...
            let changes = client.mirror.events()
            let update = try await next(changes, within: 0.8) { event in
                guard case let .deviceChanged(id, changed) = event, id == bthome else { return false }
                return changed.contains(.serviceData) || changed.contains(.rssi)
            }
            #expect(update == nil, "\(String(describing: update))")
            // ...and the device ages out as after discovery.
            try await waitFor(client, "BTHome to age out") { $0.devices[bthome] == nil }
            // The root can be registered again once unregistered.
            let again = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [.serviceData(uuid16: 0xFCD2)])
            try await waitFor(client, "BTHome again") { $0.devices[bthome] != nil }
            await again.unregister()
        }
    }

    @Test func manyPatternsAreSplitIntoMonitorsBlueZ566Accepts() async throws {
        try await withSimulator("test-passive.json") { _, client in
            let hci0 = try client.adapter().id
            let bthome = try id(client, "A4:C1:38:8D:18:B2")
            // 20 distinct patterns, BTHome's last: bluetoothd 5.66 corrupts its
            // heap on a monitor of 8 or more (the simulator releases those).
            let others = (0..<19).map { AdvertisementPattern.manufacturerData(companyID: UInt16(0x1000 + $0)) }
            let monitor = try await AdvertisementMonitor.register(client: client, adapter: hci0,
                                                                  patterns: others + [.serviceData(uuid16: 0xFCD2)])
            #expect(monitor.monitorPaths.count == 3)
            #expect(monitor.isActive)
            #expect(await eventually { monitor.foundDevices == [bthome] })
            await monitor.unregister()
        }
    }

    @Test func refusedPatternsFailTheRegistration() async throws {
        try await withSimulator("test-passive.json") { _, client in
            let hci0 = try client.adapter().id
            // Checked here, nothing sent.
            await #expect(throws: BlueZError.invalidArgument("an advertisement monitor needs at least one pattern")) {
                _ = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [])
            }
            await #expect(throws: BlueZError.invalidArgument("pattern type 0x50 at 0: 01: AD type 0x50 is not an assigned AD type (0x01…0x3D, 0xFF)")) {
                _ = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [AdvertisementPattern(adType: 0x50, content: [1])])
            }
            // Sent anyway: bluetoothd releases the monitor instead of activating it.
            let refused = await registrationError {
                () async throws(BlueZError) -> AdvertisementMonitor in
                try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [AdvertisementPattern(adType: 0x50, content: [1])],
                                                        path: nil, rssi: nil, activationTimeout: .seconds(5), checkLocally: false)
            }
            let message: String? = if case let .bluez(.invalidArguments, text)? = refused { text } else { nil }
            #expect(message?.contains("released the advertisement monitor /com/blecompanion/monitor/hci0/monitor0") == true,
                    "\(String(describing: refused))")
            // Everything was cleaned up: the same root registers fine afterwards.
            let monitor = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [.manufacturerData(companyID: 0x0499)])
            #expect(monitor.isActive)
            // Two registrations of one root cannot coexist on one connection.
            await #expect(throws: BlueZError.self) {
                _ = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [.manufacturerData(companyID: 0x0499)])
            }
            #expect(monitor.isActive, "the failed second registration must leave the first alone")
            let ruuvi = try id(client, "CB:B8:33:4C:88:4F")
            try await waitFor(client, "Ruuvi") { $0.devices[ruuvi] != nil }
            await monitor.unregister()
        }
    }

    @Test func withoutExperimentalInterfacesTheErrorSaysSo() async throws {
        try await withSimulator("test-basic.json") { _, client in
            let hci0 = try client.adapter().id
            let error = await registrationError {
                () async throws(BlueZError) -> AdvertisementMonitor in
                try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [.serviceData(uuid16: 0xFCD2)])
            }
            guard case let .notFound(text)? = error else {
                Issue.record("expected notFound, got \(String(describing: error))")
                return
            }
            #expect(text.contains("org.bluez.AdvertisementMonitorManager1") && text.contains("--experimental"), "\(text)")
        }
    }

    @Test func releasedWithItsAdapterAndRegisteredWhenItReturns() async throws {
        let scenario = try Scenario.parse("""
        { "bluetoothd": { "experimental": true },
          "adapters": [ { "id": "hci0", "address": "00:1A:7D:DA:71:13", "name": "dongle", "outages": [ { "at": 1.0, "returnAt": 1.5 } ] } ],
          "devices": [ { "address": "A4:C1:38:8D:18:B2", "serviceData": { "fcd2": "4000" },
                         "advertising": { "timeline": [ { "at": 0.2, "rssi": -50 } ], "repeatEvery": 0.3 } } ] }
        """)
        try await withSimulator(loaded: scenario) { _, client in
            let hci0 = try client.adapter().id
            let bthome = try id(client, "A4:C1:38:8D:18:B2")
            let monitor = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [.serviceData(uuid16: 0xFCD2)])
            let events = monitor.events()
            // Unplugged at 1 s: bluetoothd releases the monitor with the adapter.
            let released = await first(events, within: 5) { if case .released = $0 { return true } else { return false } }
            #expect(released == .released(monitor: monitor.monitorPaths[0]))
            #expect(!monitor.isActive)
            // Plugged back in at 1.5 s: registered and activated again.
            let activated = await first(events, within: 5) { if case .activated = $0 { return true } else { return false } }
            #expect(activated == .activated(monitor: monitor.monitorPaths[0]))
            #expect(monitor.isActive)
            try await waitFor(client, "BTHome on the returned adapter") { $0.devices[bthome] != nil }
            await monitor.unregister()
        }
    }

    @Test func registeredAgainAfterBluetoothdRestarts() async throws {
        try await withSimulator("test-passive-outage.json") { _, client in
            let hci0 = try client.adapter().id
            let bthome = try id(client, "A4:C1:38:8D:18:B2")
            let monitor = try await AdvertisementMonitor.register(client: client, adapter: hci0, patterns: [.serviceData(uuid16: 0xFCD2)])
            try await waitFor(client, "BTHome") { $0.devices[bthome] != nil }
            let before = try #require(client.mirror.serviceOwner)
            // bluetoothd leaves at 4 s: nothing is active, nothing is found.
            try await waitFor(client, "bluetoothd to leave", seconds: 10) { !$0.available }
            #expect(!monitor.isActive)
            #expect(monitor.foundDevices.isEmpty)
            // It returns at 4.5 s: the monitor is registered and activated again, and the device comes back.
            try await waitFor(client, "BTHome after the restart") { $0.available && $0.devices[bthome] != nil }
            #expect(await eventually { monitor.isActive && monitor.foundDevices == [bthome] })
            #expect(client.mirror.serviceOwner != before)
            #expect(client.mirror.snapshot().devices[try id(client, "E4:5F:01:AA:10:01")] == nil)
            await monitor.unregister()
        }
    }
}
