import Foundation
import GRDB
import Testing
import BLEParsing
import BlueZ
@testable import Domain
import Vocabulary

/// The readings store on a real SQLite file in a temporary directory.
@Suite final class ReadingStoreTests {
    let dir: URL
    let device: DeviceID

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-db-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        device = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("CB:B8:33:4C:88:4F"))
    }

    // Every test's directory goes when the test ends, whichever way (a
    // `defer` in each test had been forgotten in three of them).
    deinit { try? FileManager.default.removeItem(at: dir) }

    func record(_ temperature: Double, humidity: Double = 50) -> DeviceRecord {
        DeviceRecord(id: device, name: "Ruuvi 884F", format: "ruuvi", readings: [
            Reading(kind: .temperature, value: .number(temperature), unit: "°C"),
            Reading(kind: .humidity, value: .number(humidity), unit: "%"),
            Reading(kind: .temperature, value: .bool(true), unit: nil, label: "not numeric"),
        ])
    }

    /// A device's row (last seen, latest readings) is written at most once
    /// per `rowInterval` while nothing else changes; in between the latest
    /// waits in memory, and reaches the file when the interval ends (with
    /// the next call), before `rememberedDevices()` reads, and at close.
    @Test func deviceRowsAreWrittenOncePerIntervalAndTheLatestIsNeverLost() throws {
        let path = dir.appendingPathComponent("rows.sqlite").path
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        func inFile() throws -> RememberedDevice? {
            // Another connection, as after a crash: only what was written.
            let other = try ReadingStore(path: path)
            defer { _ = other }
            return try other.rememberedDevices().first { $0.id == device }
        }
        do {
            let store = try ReadingStore(path: path)
            #expect(store.rowInterval == 60)
            try store.record(record(21.0), at: t0)
            try store.record(record(21.5), at: t0.addingTimeInterval(10))
            try store.record(record(21.6), at: t0.addingTimeInterval(20))
            #expect(store.pendingRows == 1)
            #expect(try inFile()?.lastSeen == t0, "written once, then waiting")
            // A new name is written at once.
            var renamed = record(21.7)
            renamed.name = "Kitchen"
            try store.record(renamed, at: t0.addingTimeInterval(30))
            #expect(store.pendingRows == 0)
            #expect(try inFile()?.name == "Kitchen")
            try store.record(record(22.0), at: t0.addingTimeInterval(40))
            // The interval ends: what waited is written with the next call, whoever it is for.
            let other = DeviceRecord(id: DeviceID(adapter: device.adapter, address: try BluetoothAddress("C0:00:00:00:00:01")), name: "x", readings: [])
            try store.record(other, at: t0.addingTimeInterval(95))
            let written = try inFile()
            #expect(written?.lastSeen == t0.addingTimeInterval(40))
            #expect(written?.latest.first?.value == .number(22.0))
            try store.record(record(23.0), at: t0.addingTimeInterval(100))
            // Read through the store itself: what waits is written first.
            #expect(try store.rememberedDevices().first { $0.id == device }?.lastSeen == t0.addingTimeInterval(100))
            try store.record(record(24.0), at: t0.addingTimeInterval(110))
        }
        // Closed: the latest is in the file.
        let closed = try ReadingStore(path: path).rememberedDevices().first { $0.id == device }
        #expect(closed?.lastSeen == t0.addingTimeInterval(110))
        #expect(closed?.latest.first?.value == .number(24.0))
    }

    @Test func storesAtMostOneValuePerSeriesPerIntervalAndReadsHistoryBack() throws {
        let path = dir.appendingPathComponent("db.sqlite").path
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        do {
            let store = try ReadingStore(path: path)
            #expect(try store.record(record(21.0), at: t0) == 2)
            #expect(try store.record(record(21.5), at: t0.addingTimeInterval(30)) == 0)   // within a minute
            #expect(try store.record(record(22.0), at: t0.addingTimeInterval(61)) == 2)
        }
        // Reopened: everything is still there.
        let store = try ReadingStore(path: path)
        let history = try store.history(of: device, kind: .temperature)
        #expect(history.map(\.value) == [21.0, 22.0])
        #expect(history.map(\.samples) == [1, 1])
        #expect(try store.history(of: device, kind: .humidity, since: t0.addingTimeInterval(1)).count == 1)
        let remembered = try store.rememberedDevices()
        #expect(remembered.count == 1)
        #expect(remembered.first?.name == "Ruuvi 884F" && remembered.first?.format == "ruuvi")
        #expect(remembered.first?.firstSeen == t0 && remembered.first?.lastSeen == t0.addingTimeInterval(61))
    }

    @Test func aBatchStoresEveryDeviceInOneGoAndBumpsOnlyTheirRevisions() async throws {
        let store = try ReadingStore(path: dir.appendingPathComponent("db.sqlite").path)
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let other = DeviceID(adapter: device.adapter, address: try BluetoothAddress("A4:C1:38:8D:18:B2"))
        let second = DeviceRecord(id: other, name: "LYWSD03MMC", format: "pvvx", readings: [
            Reading(kind: .temperature, value: .number(19.5), unit: "°C"),
        ])
        #expect(try store.record([record(21.0), second], at: t0) == 3)
        #expect(try store.history(of: device, kind: .temperature).map(\.value) == [21.0])
        #expect(try store.history(of: other, kind: .temperature).map(\.value) == [19.5])
        // Within the interval the first device stores nothing; only the one that stored moves.
        /// The revisions now: a new stream yields the current ones first.
        func current() async -> [DeviceID: UInt64] {
            var it = store.revisions().makeAsyncIterator()
            return await it.next() ?? [:]
        }
        let before = await current()
        let third = DeviceRecord(id: other, name: nil, format: "pvvx", readings: [Reading(kind: .humidity, value: .number(40), unit: "%")])
        #expect(try store.record([record(21.5), third], at: t0.addingTimeInterval(10)) == 1)
        let after = await current()
        #expect(after[device] == before[device], "nothing stored for it: its revision stays")
        #expect(after[other] == (before[other] ?? 0) + 1)
        #expect(try store.record([], at: t0) == 0)
    }

    @Test func retentionAveragesHourlyThenDailyThenForgets() async throws {
        var policy = RetentionPolicy()
        policy.minimumInterval = 0
        let store = try ReadingStore(path: dir.appendingPathComponent("db.sqlite").path, policy: policy)
        // 3 days of one value every 10 minutes, starting on an hour boundary.
        let start = Date(timeIntervalSince1970: 1_800_000_000 - 1_800_000_000.truncatingRemainder(dividingBy: 86_400))
        for i in 0..<(3 * 144) {
            try store.record(record(Double(i % 6)), at: start.addingTimeInterval(Double(i) * 600))
        }
        #expect(try store.history(of: device, kind: .temperature).count == 432)
        // One day later than the last value: the first 3 days become hourly averages, the rest stays raw.
        let now = start.addingTimeInterval(3 * 86_400 + 86_400)
        let before = await revision(store)
        try store.compact(now: now)
        // Whoever shows the device's history hears that it changed.
        #expect(await revision(store) == before + 1)
        let hourly = try store.history(of: device, kind: .temperature)
        #expect(hourly.count == 72)
        #expect(hourly.allSatisfy { $0.samples == 6 && abs($0.value - 2.5) < 1e-9 })
        #expect(hourly.first?.at == start)
        // Compacting again changes nothing, and says so.
        try store.compact(now: now)
        #expect(try store.history(of: device, kind: .temperature) == hourly)
        #expect(await revision(store) == before + 1)
        // 100 days on: daily averages of 24 hourly buckets (144 samples).
        try store.compact(now: start.addingTimeInterval(100 * 86_400))
        let daily = try store.history(of: device, kind: .temperature)
        #expect(daily.count == 3)
        #expect(daily.allSatisfy { $0.samples == 144 && abs($0.value - 2.5) < 1e-9 })
        // Past the keep-for limit nothing is left.
        #expect(try store.compact(now: start.addingTimeInterval(3 * 365 * 86_400)) == 0)
    }

    /// The device's history revision now (the stream starts with the current one).
    func revision(_ store: ReadingStore) async -> UInt64 {
        var revisions = store.revisions().makeAsyncIterator()
        return await revisions.next()?[device] ?? 0
    }

    /// The latest readings column: written without JSONEncoder, read back
    /// by JSONDecoder, the same as what JSONEncoder wrote for earlier versions.
    @Test func latestReadingsRoundTripAndMatchTheEncoderFormat() throws {
        let readings = [
            Reading(.temperature, 21.5, unit: "°C"),
            Reading(.humidity, 45.25, unit: "%", label: "in \"quotes\"\n"),
            Reading(kind: .temperature, value: .number(.nan), unit: "°C", label: "probe"),
            Reading(.moving, true),
            Reading(kind: .button, value: .text("long_press ✓"), unit: nil),
        ]
        let text = try #require(StoredReading.encode(readings))
        let decoded = StoredReading.decode(text)
        #expect(decoded.count == 4)   // the NaN one has no value: left out on reading back
        #expect(decoded[0] == readings[0] && decoded[1] == readings[1] && decoded[2] == readings[3] && decoded[3] == readings[4])
        // What JSONEncoder writes for the same values decodes to the same readings.
        let stored = try JSONDecoder().decode([StoredReading].self, from: Data(text.utf8))
        let viaEncoder = String(decoding: try JSONEncoder().encode(stored), as: UTF8.self)
        #expect(StoredReading.decode(viaEncoder) == decoded)
        #expect(StoredReading.encode([]) == nil)
    }

    /// Devices that come and go (phones with changing addresses) do not grow
    /// the per-series write times for ever, and pruning keeps the interval.
    @Test func theSeriesTimesStayBoundedAndStillHoldTheInterval() throws {
        let store = try ReadingStore(path: dir.appendingPathComponent("db.sqlite").path)
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let adapter = AdapterID(path: "/org/bluez/hci0")
        let passersBy = try (0..<3_000).map { i in
            DeviceRecord(id: DeviceID(adapter: adapter, address: try BluetoothAddress(String(format: "C0:00:00:00:%02X:%02X", i / 256, i % 256))),
                         readings: [Reading(.temperature, 20, unit: "°C")])
        }
        for (i, chunk) in stride(from: 0, to: passersBy.count, by: 500).enumerated() {
            #expect(try store.record(Array(passersBy[chunk..<chunk + 500]), at: t0.addingTimeInterval(Double(i) * 120)) == 500)
        }
        // Each batch came two minutes after the one before: the older ones were pruned on the way.
        #expect(store.rememberedSeries < 2_048)
        #expect(try store.record(record(21.0), at: t0.addingTimeInterval(1_000)) == 2)
        #expect(try store.record(record(21.5), at: t0.addingTimeInterval(1_030)) == 0)   // still within a minute
        #expect(try store.record(record(22.0), at: t0.addingTimeInterval(1_061)) == 2)
    }

    /// A series is its kind and its label: two labelled temperatures of one
    /// device and the unlabelled one each get a value per interval, and a
    /// series heard for the first time later is stored at once.
    @Test func labelledSeriesOfOneKindAreLimitedEachOnTheirOwn() throws {
        let store = try ReadingStore(path: dir.appendingPathComponent("labels.sqlite").path)
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        func probes(_ readings: [Reading]) -> DeviceRecord { DeviceRecord(id: device, name: "Probe", format: "x", readings: readings) }
        let two = [Reading(.temperature, 20), Reading(.temperature, 60, label: "probe 1"), Reading(.temperature, 80, label: "probe 2")]
        #expect(try store.record(probes(two), at: t0) == 3)
        #expect(try store.record(probes(two), at: t0.addingTimeInterval(30)) == 0)
        // A third probe appears: its own series, stored at once; the others still wait.
        let three = two + [Reading(.temperature, 90, label: "probe 3")]
        #expect(try store.record(probes(three), at: t0.addingTimeInterval(40)) == 1)
        #expect(try store.record(probes(three), at: t0.addingTimeInterval(61)) == 3)
        let series = try store.series(of: device, since: t0)
        #expect(series.map(\.label) == ["", "probe 1", "probe 2", "probe 3"])
        #expect(series.map(\.points.count) == [2, 2, 2, 1])
    }

    @Test func aBadPathSaysWhichFile() {
        #expect(throws: DomainError.self) { try ReadingStore(path: "/nonexistent-dir/x/db.sqlite") }
        do {
            _ = try ReadingStore(path: "/nonexistent-dir/x/db.sqlite")
        } catch {
            #expect(error.description.hasPrefix("cannot open the database /nonexistent-dir/x/db.sqlite"))
            // The SQLite error underneath is kept, not only its text.
            let cause = error.cause as? DatabaseError
            #expect(cause?.resultCode == .SQLITE_CANTOPEN, "\(String(describing: error.cause))")
        }
    }
}
