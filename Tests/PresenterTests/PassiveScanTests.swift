import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
import Domain
import Foundation
import Testing
import TestSupport
import Vocabulary

/// Passive scanning through the adapter repository, against the simulator.
@Suite(.timeLimit(.minutes(1))) struct PassiveScanTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")

    @Test func decodablePatternsCoverEveryDecoder() throws {
        let patterns = PassiveScanPatterns.decodable()
        // Every service-data UUID the decoders know, as AD type 0x16 with the UUID little-endian at 0.
        for uuid in AdvertisementDecoder.knownServiceUUIDs {
            #expect(patterns.contains(.serviceData(uuid16: uuid)), "service data 0x\(String(uuid, radix: 16))")
        }
        // Every company id a manufacturer-data decoder keys on.
        for company in [Ruuvi.companyID, IBeacon.companyID, SwitchBot.companyID] + Govee.companyIDs.sorted() {
            #expect(patterns.contains(.manufacturerData(companyID: company)), "company 0x\(String(company, radix: 16))")
        }
        // Inkbird models are recognised by name only.
        #expect(patterns.contains(.localName(prefix: "sps")))
        #expect(Set(patterns).count == patterns.count, "no duplicates")
        for p in patterns { try p.validate() }
        // Extendable: another format's UUID or company id is one argument away.
        let more = PassiveScanPatterns.decodable(serviceDataUUIDs: [0xFCD2, 0x1234], companyIDs: [0x0059])
        #expect(more.count == patterns.count + 2)
        #expect(more.contains(.serviceData(uuid16: 0x1234)) && more.contains(.manufacturerData(companyID: 0x0059)))
    }

    @Test func passiveScanShowsTheDemoDecodableDevicesWithoutDiscovery() async throws {
        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        let hci0 = self.hci0
        let adapters = BlueZAdapterRepository(client: sim.client)
        let devices = BlueZDeviceRepository(client: sim.client)
        let patterns = PassiveScanPatterns.decodable()

        try await adapters.setPassiveScanning(true, adapter: hci0, patterns: patterns)
        // The snapshot shows it at once: active, with the patterns, and no discovery of ours.
        let started = await first(adapters.snapshots()) { $0.passiveScans[hci0] != nil }
        #expect(started?.passiveScans[hci0] == PassiveScan(patterns: patterns, active: true))
        #expect(started?.discoveryFilters[hci0] == nil)

        let decodable = try ["A4:C1:38:8D:18:B2", "A4:C1:38:5A:1B:2C", "CB:B8:33:4C:88:4F", "D0:3A:1B:2C:3D:4E", "A4:C1:38:12:DB:F8"]
            .map { try BluetoothAddress($0) }
        let heard = await first(devices.snapshots()) { snapshot in
            decodable.allSatisfy { a in snapshot.devices.contains { $0.id.address == a && $0.format != nil && !$0.readings.isEmpty } }
        }
        let list = try #require(heard, "every decodable demo device, decoded")
        #expect(list.scanning == false, "passive scanning is not discovery")
        // Nothing that needs active scanning or a connection shows up (the paired keyboard is known anyway).
        #expect(Set(list.devices.map(\.id.address)).subtracting(decodable) == [try BluetoothAddress("DC:2C:26:01:02:03")])

        // Asking again with the same patterns changes nothing; stopping removes it.
        try await adapters.setPassiveScanning(true, adapter: hci0, patterns: patterns)
        try await adapters.setPassiveScanning(false, adapter: hci0, patterns: [])
        let stopped = await first(adapters.snapshots()) { $0.passiveScans.isEmpty }
        #expect(stopped != nil)
    }

    @Test func passiveScanSurvivesABluetoothdRestart() async throws {
        let sim = try await Simulated.start("test-passive.json")
        defer { sim.bus.stop() }
        let hci0 = self.hci0
        let adapters = BlueZAdapterRepository(client: sim.client)
        try await adapters.setPassiveScanning(true, adapter: hci0, patterns: [.serviceData(uuid16: 0xFCD2)])
        // bluetoothd is restarted (a new process takes org.bluez; not a timed
        // outage, which a loaded machine could reach before registering).
        await sim.simulator.stop()
        // The scan is kept, inactive...
        let gone = await first(adapters.snapshots()) { !$0.bluetoothdAvailable }
        #expect(gone?.passiveScans[hci0]?.active == false)
        let restarted = BlueZSimulator(scenario: sim.scenario)
        try await restarted.start(busAddress: sim.bus.address)
        defer { Task { await restarted.stop() } }
        // ...and active again once bluetoothd is back and has it registered.
        let back = await first(adapters.snapshots()) { $0.bluetoothdAvailable && $0.passiveScans[hci0]?.active == true }
        #expect(back?.passiveScans[hci0]?.patterns == [.serviceData(uuid16: 0xFCD2)])
        let bthome = DeviceID(adapter: hci0, address: try BluetoothAddress("A4:C1:38:8D:18:B2"))
        try await sim.client.mirror.wait(for: "BTHome after the restart", timeout: .seconds(5)) { $0.devices[bthome] != nil }
    }

    @Test func withoutTheManagerTheErrorSaysWhy() async throws {
        let sim = try await Simulated.start("test-basic.json")
        defer { sim.bus.stop() }
        let adapters = BlueZAdapterRepository(client: sim.client)
        await #expect(throws: DomainError.self) {
            try await adapters.setPassiveScanning(true, adapter: hci0, patterns: PassiveScanPatterns.decodable())
        }
        do {
            try await adapters.setPassiveScanning(true, adapter: hci0, patterns: PassiveScanPatterns.decodable())
        } catch {
            #expect(error.description.hasPrefix("cannot start passive scanning on hci0: "), "\(error)")
            #expect(error.description.contains("Experimental = true"), "\(error)")
        }
        let snapshot = await first(adapters.snapshots()) { _ in true }
        #expect(snapshot?.passiveScans.isEmpty == true)
    }
}
