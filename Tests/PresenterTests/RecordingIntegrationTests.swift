import Foundation
import Testing
import TestSupport
import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
@testable import Domain
import Vocabulary

/// Readings flow from the simulator through the client, the repository and
/// the recorder into a real SQLite file; bluetoothd vanishing and returning
/// loses nothing that was stored and recording resumes.
@Suite(.timeLimit(.minutes(1))) struct RecordingIntegrationTests {
    @Test func bluetoothdVanishingLosesNothingAndRecordingResumes() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-rec-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var policy = RetentionPolicy()
        policy.minimumInterval = 0
        let store = try ReadingStore(path: dir.appendingPathComponent("readings.sqlite").path, policy: policy)
        let ruuvi = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("CB:B8:33:4C:88:4F"))

        let sim = try await Simulated.start("demo-home.json")
        let bus = sim.bus, scenario = sim.scenario, client = sim.client
        defer { bus.stop() }
        var simulator = sim.simulator
        let repository = BlueZDeviceRepository(client: client)
        let recorder = ReadingRecorder(repository: repository, store: store, watched: { [ruuvi.address] })
        try await repository.setScanning(true)

        func temperatures() throws -> [ReadingPoint] { try store.history(of: ruuvi, kind: .temperature) }
        func eventually(_ condition: () throws -> Bool) async throws -> Bool {
            let deadline = ContinuousClock.now + .seconds(15)
            while ContinuousClock.now < deadline {
                if try condition() { return true }
                try await Task.sleep(for: .milliseconds(50))
            }
            return try condition()
        }
        // The RuuviTag's data alternates every second in the scenario.
        #expect(try await eventually { try temperatures().count >= 2 })
        await simulator.stop()
        try await client.mirror.wait(for: "bluetoothd gone", timeout: .seconds(5)) { !$0.available }
        let before = try temperatures()
        try await Task.sleep(for: .milliseconds(300))
        #expect(try temperatures() == before, "nothing is recorded or lost while bluetoothd is away")

        simulator = BlueZSimulator(scenario: scenario)
        try await simulator.start(busAddress: bus.address)
        // Discovery is restarted by the repository's session; recording resumes.
        #expect(try await eventually { try temperatures().count >= before.count + 2 })
        let after = try temperatures()
        #expect(Array(after.prefix(before.count)) == before)
        #expect(recorder.lastFailure == nil)
        try await repository.setScanning(false)
        await simulator.stop()
    }

    @Test func aRememberedDeviceShowsItsLastReadingsUntilHeardAgainAndIsNotReRecorded() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-mem-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("readings.sqlite").path
        let keyboard = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("DC:2C:26:01:02:03"))
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let latest = [Reading(.battery, 80, unit: "%"), Reading(.temperature, true, label: "flag")]
        do {
            // A previous run stored the keyboard's readings.
            let earlier = try ReadingStore(path: path)
            try earlier.record(DeviceRecord(id: keyboard, name: "MX Keys", format: "bthome", readings: latest), at: t0)
        }
        let store = try ReadingStore(path: path)
        let remembered = try store.rememberedDevices()
        #expect(remembered == [RememberedDevice(id: keyboard, name: "MX Keys", format: "bthome", firstSeen: t0, lastSeen: t0, latest: latest)])

        // bluetoothd knows the paired keyboard from the start; nothing scans, so it is not heard.
        // (demo-home, not test-outage: that scenario's bluetoothd leaves at 1.2 s, which a loaded
        // machine reaches before the client has enumerated.)
        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        // Wired as the dashboard wires it.
        let domain = DomainServices.open(client: sim.client, store: store, configuration: .init())
        let repository = domain.devices, recorder = domain.recorder
        var record: DeviceRecord?
        for await snapshot in repository.snapshots() {
            record = snapshot.devices.first { $0.id == keyboard }
            if record != nil { break }
        }
        #expect(record?.remembered == true)
        #expect(record?.readings == latest && record?.format == "bthome")
        #expect(record?.lastSeen == t0 && record?.firstSeen == t0)
        try await Task.sleep(for: .milliseconds(200))
        #expect(try store.history(of: keyboard, kind: .battery).count == 1, "remembered readings are not stored again")
        #expect(recorder.lastFailure == nil)
        await sim.simulator.stop()
    }

    /// The gateway's wiring shows nothing remembered: it would publish a
    /// remembered reading as if it had just been heard.
    @Test func theGatewaysWiringShowsNoRememberedReadings() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-mem-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try ReadingStore(path: dir.appendingPathComponent("readings.sqlite").path)
        let keyboard = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("DC:2C:26:01:02:03"))
        try store.record(DeviceRecord(id: keyboard, name: "MX Keys", format: "bthome", readings: [Reading(.battery, 80, unit: "%")]),
                         at: Date(timeIntervalSince1970: 1_800_000_000))
        #expect(try store.rememberedDevices().count == 1)

        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        let domain = DomainServices.open(client: sim.client, store: store, configuration: .init(showRemembered: false, rssiHistory: 0))
        var record: DeviceRecord?
        for await snapshot in domain.devices.snapshots() {
            record = snapshot.devices.first { $0.id == keyboard }
            if record != nil { break }
        }
        #expect(record?.remembered == false)
        #expect(record?.readings.isEmpty == true && record?.lastSeen == nil)
        await sim.simulator.stop()
    }
}
