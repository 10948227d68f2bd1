import BLEParsing
import BlueZ
import Foundation
import Testing
@testable import Domain
import Vocabulary

/// The recorder remembers the readings it last stored per device only for
/// devices that are in the list: devices with random addresses come and go
/// for as long as the gateway runs, and that table must not grow with them.
@Suite(.timeLimit(.minutes(1))) struct ReadingRecorderTests {
    /// A recorder over a fake repository and a real store in a new directory
    /// (every value stored: no minimum interval); the caller removes `dir`.
    static func recorderOverAFreshStore() throws -> (dir: URL, store: ReadingStore, repository: FakeDeviceRepository, recorder: ReadingRecorder) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-recorder-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var policy = RetentionPolicy()
        policy.minimumInterval = 0
        let store = try ReadingStore(path: dir.appendingPathComponent("r.sqlite").path, policy: policy)
        let repository = FakeDeviceRepository()
        return (dir, store, repository, ReadingRecorder(repository: repository, store: store))
    }

    @Test func devicesThatLeaveTheListAreForgotten() async throws {
        let (dir, store, repository, recorder) = try Self.recorderOverAFreshStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let hci0 = AdapterID(path: "/org/bluez/hci0")
        func device(_ n: UInt8, _ t: Double) throws -> DeviceRecord {
            DeviceRecord(id: DeviceID(adapter: hci0, address: try #require(BluetoothAddress(bytes: [0xF0, 0, 0, 0, 0, n]))), name: "Tag \(n)",
                         readings: [Reading(.temperature, t)])
        }
        func settle(_ condition: @escaping () -> Bool) async -> Bool {
            let deadline = ContinuousClock.now + .seconds(10)
            while !condition(), ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
            return condition()
        }
        // Ten phones' worth of addresses, one after the other, each list holding two.
        for round in 0..<10 {
            let devices = try [device(UInt8(2 * round), 20), device(UInt8(2 * round + 1), 21)]
            repository.emit(DeviceListSnapshot(availability: .available, devices: devices))
            // This round's readings stored (so this snapshot was seen), and only its two devices remembered.
            #expect(await settle { (try? store.rememberedDevices().count) == 2 * (round + 1) && recorder.rememberedDevices == 2 },
                    "round \(round): \(recorder.rememberedDevices), stored \(String(describing: try? store.rememberedDevices().map(\.name))), failure \(String(describing: recorder.lastFailure))")
        }
        #expect(try store.rememberedDevices().count == 20, "every device's readings were stored")
        #expect(recorder.lastFailure == nil)
    }

    /// A list larger than one transaction's batch (a gateway's first list at
    /// 10 000 devices) is stored whole, in several transactions, and every
    /// device in it is remembered as stored: none is cut off at a batch edge.
    @Test func aListLargerThanOneBatchIsStoredWhole() async throws {
        let (dir, store, repository, recorder) = try Self.recorderOverAFreshStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let hci0 = AdapterID(path: "/org/bluez/hci0")
        let count = 2 * ReadingRecorder.batchLimit + 7
        let devices = try (0..<count).map { n in
            DeviceRecord(id: DeviceID(adapter: hci0, address: try #require(BluetoothAddress(bytes: [0xF0, 0, 0, 0, UInt8(n >> 8), UInt8(n & 0xFF)]))),
                         name: "Tag \(n)", readings: [Reading(.temperature, Double(n))])
        }
        repository.emit(DeviceListSnapshot(availability: .available, devices: devices))
        let deadline = ContinuousClock.now + .seconds(20)
        while recorder.rememberedDevices < count || (try? store.rememberedDevices().count) ?? 0 < count, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(recorder.rememberedDevices == count)
        let stored = try store.rememberedDevices()
        #expect(stored.count == count)
        // The last device of the last, partial batch, with its own value.
        let last = devices[count - 1]
        #expect(stored.first { $0.id == last.id }?.latest == last.readings)
        #expect(recorder.lastFailure == nil)
    }
}
