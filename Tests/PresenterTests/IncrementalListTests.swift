import Foundation
import Locking
import TestSupport
import Testing
import BLEParsing
import BlueZ
import BlueZSimulator
import Domain
@testable import Presenters
import Vocabulary

/// The device list updated per changed device must be exactly what a full
/// filter and sort of the snapshot gives: checked after every one of many
/// random keyed changes, under every sort order and with a filter.
@Suite(.timeLimit(.minutes(2))) struct IncrementalListTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    typealias P = DeviceListPresenter

    /// The same run every time.
    struct Random {
        var generator = SeededGenerator(seed: 42)
        mutating func below(_ n: Int) -> Int { Int.random(in: 0..<n, using: &generator) }
    }

    func device(_ n: Int, _ random: inout Random, at now: Date) -> DeviceRecord {
        let address = try! BluetoothAddress(String(format: "AA:BB:CC:%02X:%02X:%02X", (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF))
        let names = [nil, "Ruuvi", "ruuvi", "Polar H10", "ATC_1234", "Z"]
        let formats = [nil, "ruuvi", "bthome", "ibeacon"]
        return DeviceRecord(id: DeviceID(adapter: hci0, address: address), name: names[random.below(names.count)],
                            rssi: random.below(8) == 0 ? nil : Int16(-100 + random.below(70)),
                            format: formats[random.below(formats.count)],
                            readings: [Reading(kind: .temperature, value: .number(Double(random.below(400)) / 10), unit: "°C")],
                            lastSeen: now.addingTimeInterval(-Double(random.below(200))))
    }

    @Test(arguments: [P.Sort.rssi, .name, .lastSeen], [P.Filter(), P.Filter(text: "ruuvi"), P.Filter(minimumRSSI: -70, format: "bthome")])
    func keyedChangesGiveTheSameRowsAsAFullRebuild(sort: P.Sort, filter: P.Filter) async throws {
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        var random = Random()
        var devices = (0..<120).map { device($0, &random, at: start) }
        let positions = Dictionary(uniqueKeysWithValues: devices.enumerated().map { ($1.id, $0) })
        let repo = FakeDeviceRepository()
        let presenter = P(repository: repo, navigator: Navigator(), sleeper: ManualSleeper(), now: { start })
        let expiry = P.Expiry()
        var version: UInt64 = 1
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices, version: version, positions: positions))
        presenter.send(.sortChanged(sort))
        if filter.text != "" { presenter.send(.filterTextChanged(filter.text)) }
        if filter.minimumRSSI != nil { presenter.send(.minimumRSSIChanged(filter.minimumRSSI)) }
        if filter.format != nil { presenter.send(.formatFilterChanged(filter.format)) }
        #expect(await waitFor(presenter) { $0.sort == sort && $0.filter == filter && $0.devices != .loading })

        var incremental = 0
        for round in 0..<150 {
            // 1 to 5 devices change: signal, name, format or when they were seen.
            var changed: Set<DeviceID> = []
            for _ in 0..<(1 + random.below(5)) {
                let i = random.below(devices.count)
                var fresh = device(i, &random, at: start)
                if random.below(3) == 0 { fresh.rssi = devices[i].rssi }   // also changes that keep the order
                devices[i] = fresh
                changed.insert(fresh.id)
            }
            version += 1
            repo.emit(DeviceListSnapshot(availability: .available, devices: devices, version: version, changed: changed, positions: positions))
            let expected = P.rows(devices, filter: filter, sort: sort, now: start, expiry: expiry)
            let formats = Array(Set(devices.compactMap(\.format))).sorted()
            let settled = await waitFor(presenter) { $0.devices == .loaded(ChunkedArray(expected)) && $0.formats == formats }
            #expect(settled, "round \(round): rows differ from a full rebuild")
            if !settled { return }
            if presenter.state.changes?.ids == changed { incremental += 1 }
        }
        #expect(incremental > 100, "most rounds were applied per device (\(incremental) of 150)")

        // A missed snapshot (version jumps) is rebuilt whole, and says so.
        // The device changed is one the list shows, so that the rebuilt rows
        // differ from the last ones (waiting for rows equal to the last ones
        // would end before the rebuild).
        version += 2
        let shown = Set(P.rows(devices, filter: filter, sort: sort, now: start, expiry: expiry).map(\.id))
        let k = try #require(devices.firstIndex { shown.contains($0.id) })
        devices[k].rssi = 10
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices, version: version, changed: [devices[k].id], positions: positions))
        let expected = P.rows(devices, filter: filter, sort: sort, now: start, expiry: expiry)
        #expect(await waitFor(presenter) { $0.devices == .loaded(ChunkedArray(expected)) })
        #expect(presenter.state.changes == nil)
    }
}

/// The real repository over the simulator: a flood of advertisements becomes
/// a few snapshots (at most one per publish interval), each naming what
/// changed, the last one holding every device's latest advertisement.
@Suite(.timeLimit(.minutes(1))) struct RepositoryCoalescingTests {
    final class Snapshots: Sendable {
        let all = Lock<[DeviceListSnapshot]>([])
    }

    /// A flood goes on from where the one before it stopped, device and
    /// frame. One that started again at change 0 sent the first devices the
    /// frames the flood before had given them, which bluetoothd does not
    /// signal: with more devices than changes per flood, a benchmark's second
    /// round had nothing to publish.
    @Test func aSecondFloodSendsNewFramesNotTheFirstOnesAgain() async throws {
        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        let n = sim.scenario.devices.count
        let repository = BlueZDeviceRepository(client: sim.client, publishInterval: .milliseconds(50))
        try await repository.setScanning(true)
        #expect(await first(repository.snapshots(), within: 15) { $0.devices.count >= 9 } != nil)
        let mirror = sim.client.mirror
        func frames() -> Set<[UInt8]> { Set(mirror.snapshot().devices.values.compactMap { $0.manufacturerData[0x0499] }) }
        func frames(_ changes: Range<Int>) -> Set<[UInt8]> { Set(changes.map { BlueZSimulator.floodManufacturerData(change: $0) }) }

        // Every device once: device i has the frame of change i.
        await sim.simulator.floodAdvertisements(count: n)
        let firstSeen = await eventually(10) { frames().isSuperset(of: frames(0..<3)) }
        #expect(firstSeen, "the first flood's frames reached the mirror")
        // Three more: devices 0–2 again, with the frames of changes n…n+2.
        await sim.simulator.floodAdvertisements(count: 3)
        let secondSeen = await eventually(10) { frames().isSuperset(of: frames(n..<n + 3)) }
        #expect(secondSeen, "the second flood went on at change \(n)")
        #expect(frames().isDisjoint(with: frames(0..<3)), "devices 0–2 no longer have their first frames")
    }

    /// The last changes of a burst are published when their snapshot is
    /// due, though nothing comes after them: the feed holds them until then
    /// and the mirror's connection thread, not a timer, ends the hold. (In
    /// the demo scenario devices advertise on their own, which would hide a
    /// hold that waits for the next change: here none does.)
    @Test func theLastChangesOfABurstArePublishedWithNothingAfterThem() async throws {
        let sim = try await Simulated.start("demo-home.json") { s in
            for i in s.devices.indices { s.devices[i].advertising = nil }
        }
        defer { sim.bus.stop() }
        let repository = BlueZDeviceRepository(client: sim.client, publishInterval: .seconds(1))
        try await repository.setScanning(true)
        let n = sim.scenario.devices.count
        #expect(await first(repository.snapshots(), within: 15) { $0.devices.count >= n } != nil)
        let mirror = sim.client.mirror
        for round in 0..<3 {
            // Twice every device, as fast as the simulator sends: the first
            // change goes out at once, the rest within the interval are held
            // (each device's two changes differ in RSSI).
            await sim.simulator.floodAdvertisements(count: 2 * n)
            // Every change of the burst is in the mirror (the last ones
            // arrive after the call returns): no change for 150 ms, well
            // within the interval.
            var applied = mirror.appliedChanges
            while true {
                try await Task.sleep(for: .milliseconds(150))
                let now = mirror.appliedChanges
                if now == applied { break }
                applied = now
            }
            let start = ContinuousClock.now
            let caughtUp = await first(repository.snapshots(), within: 10) { snapshot in
                let latest = mirror.snapshot()
                return snapshot.devices.count >= n
                    && snapshot.devices.allSatisfy { d in latest.devices[d.id].map { $0.rssi == d.rssi } ?? false }
            }
            #expect(caughtUp != nil, "round \(round): the burst's last frames were published")
            #expect(ContinuousClock.now - start < .seconds(5))
            #expect(mirror.appliedChanges == applied, "round \(round): nothing came after the burst")
        }
    }

    @Test func aFloodIsCoalescedPerDeviceAndTheLatestWins() async throws {
        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        let repository = BlueZDeviceRepository(client: sim.client, publishInterval: .milliseconds(200))
        try await repository.setScanning(true)
        let listed = await first(repository.snapshots(), within: 15) { $0.devices.count >= 9 }
        #expect(listed != nil)

        let seen = Snapshots()
        let stream = repository.snapshots()
        let collector = Task { for await s in stream { seen.all.withLock { $0.append(s) } } }
        let before = repository.statistics
        await sim.simulator.floodAdvertisements(count: 2_000)
        // Every device's record catches up with what the mirror holds now (the trailing snapshot).
        let mirror = sim.client.mirror
        let caughtUp = await first(repository.snapshots(), within: 10) { snapshot in
            let latest = mirror.snapshot()
            return snapshot.devices.allSatisfy { d in latest.devices[d.id].map { $0.rssi == d.rssi } ?? true }
                && sim.client.mirror.appliedChanges > 0
        }
        #expect(caughtUp != nil, "the last advertisement of every device was published")
        try await Task.sleep(for: .milliseconds(300))
        collector.cancel()

        let after = repository.statistics
        let snapshots = seen.all.withLock { $0 }
        let advertisements = after.advertisements - before.advertisements
        #expect(advertisements >= 1_000, "the repository saw the flood (\(advertisements))")
        #expect(snapshots.count < 200, "\(snapshots.count) snapshots for \(advertisements) advertisements: coalesced")
        #expect(after.coalesced > before.coalesced, "coalescing is counted")
        let versions = snapshots.map(\.version)
        #expect(versions == versions.sorted() && Set(versions).count == versions.count, "versions only increase")
        // Consecutive snapshots name what changed between them.
        for (a, b) in zip(snapshots, snapshots.dropFirst()) where b.version == a.version + 1 {
            guard let changed = b.changed else { continue }
            for d in b.devices where !changed.contains(d.id) {
                #expect(a.record(d.id) == d, "\(d.id.address) changed without being named")
            }
        }
    }
}
