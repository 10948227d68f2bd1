import Foundation
import GRDB
import Synchronization
import Testing
import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters
import Vocabulary

/// Waits (up to `seconds`) until `log` holds at least `count` entries and
/// returns their kinds.
private func kinds(of log: EventLog, atLeast count: Int, within seconds: Double = 10) async -> [LogEvent.Kind] {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while log.current.entries.count < count && ContinuousClock.now < deadline {
        try? await Task.sleep(for: .milliseconds(5))
    }
    return log.current.entries.map(\.kind)
}

/// Waits (up to `seconds`) until the newest entry of `log` is of `kind`.
private func newest(of log: EventLog, is kind: LogEvent.Kind, within seconds: Double = 10) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while log.current.entries.last?.kind != kind && ContinuousClock.now < deadline {
        try? await Task.sleep(for: .milliseconds(5))
    }
    return log.current.entries.last?.kind == kind
}

@Suite(.timeLimit(.minutes(1))) struct EventLogTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    func id(_ n: UInt8) throws -> DeviceID { DeviceID(adapter: hci0, address: try #require(BluetoothAddress(bytes: [0xF0, 0, 0, 0, 0, n]))) }

    // MARK: The log itself

    @Test func idsIncreaseTimesComeFromTheClockAndSeveritiesDefaultByKind() throws {
        let clock = TestClock()
        let named = try id(1), unnamed = try id(2)
        let log = EventLog(now: { clock.now }, names: { $0 == named ? "Heart Strap" : nil })
        let start = clock.now
        let a = log.append(.deviceConnected(named))
        clock.advance(2)
        let b = log.append(.connectionFailed(unnamed, reason: "le-connection-abort-by-local"))
        clock.advance(1)
        let c = log.append(.error("something odd"), severity: .warning)
        let d = log.append(.deviceDisconnected(named), deviceName: "Polar H10")
        #expect(log.current.entries == [
            LogEvent(id: 1, at: start, severity: .info, kind: .deviceConnected(named), message: "Heart Strap connected"),
            LogEvent(id: 2, at: start + 2, severity: .warning, kind: .connectionFailed(unnamed, reason: "le-connection-abort-by-local"),
                     message: "connecting to F0:00:00:00:00:02 failed: le-connection-abort-by-local"),
            LogEvent(id: 3, at: start + 3, severity: .warning, kind: .error("something odd"), message: "something odd"),
            LogEvent(id: 4, at: start + 3, severity: .info, kind: .deviceDisconnected(named), message: "Polar H10 disconnected"),
        ])
        #expect([a, b, c, d] == log.current.entries)
        #expect(log.current.dropped == 0)
        #expect(log.capacity == EventLog.defaultCapacity)
    }

    @Test func everyKindHasItsMessageDeviceAndSeverity() throws {
        let dev = try id(3)
        let hci1 = AdapterID(path: "/org/bluez/hci1")
        let table: [(LogEvent.Kind, String, DeviceID?, LogEvent.Severity)] = [
            (.bluetoothdAppeared, "bluetoothd is running", nil, .info),
            (.bluetoothdVanished, "bluetoothd is not running", nil, .warning),
            (.adapterAdded(hci1), "adapter hci1 added", nil, .info),
            (.adapterRemoved(hci1), "adapter hci1 removed", nil, .warning),
            (.adapterPowered(hci0, true), "adapter hci0 powered on", nil, .info),
            (.adapterPowered(hci0, false), "adapter hci0 powered off", nil, .warning),
            (.deviceConnected(dev), "Lock connected", dev, .info),
            (.deviceDisconnected(dev), "Lock disconnected", dev, .info),
            (.connectionFailed(dev, reason: "timeout"), "connecting to Lock failed: timeout", dev, .warning),
            (.pairingSucceeded(dev), "paired with Lock", dev, .info),
            (.pairingFailed(dev, reason: "AuthenticationFailed"), "pairing with Lock failed: AuthenticationFailed", dev, .error),
            (.storageFailed(reason: "disk full"), "storing readings failed: disk full", nil, .error),
            (.error("boom"), "boom", nil, .error),
        ]
        for (kind, message, device, severity) in table {
            #expect(kind.message(deviceName: "Lock") == message)
            #expect(kind.device == device)
            #expect(kind.defaultSeverity == severity)
        }
        // No name (or an empty one): the address.
        #expect(LogEvent.Kind.pairingSucceeded(dev).message(deviceName: nil) == "paired with F0:00:00:00:00:03")
        #expect(LogEvent.Kind.pairingSucceeded(dev).message(deviceName: "") == "paired with F0:00:00:00:00:03")
        #expect(LogEvent.Severity.allCases.sorted() == [.info, .warning, .error])
    }

    @Test func theOldestAreDroppedAndCountedAndClearKeepsIdsIncreasing() {
        let log = EventLog(capacity: 3)
        for n in 1...5 { log.append(.error("e\(n)")) }
        #expect(log.current.entries.map(\.id) == [3, 4, 5])
        #expect(log.current.entries.map(\.message) == ["e3", "e4", "e5"])
        #expect(log.current.dropped == 2)
        log.clear()
        #expect(log.current == EventLogSnapshot())
        log.append(.error("after"))
        #expect(log.current.entries.map(\.id) == [6])
        #expect(log.current.dropped == 0)
        #expect(EventLog(capacity: 0).capacity == 1)
    }

    @Test func entriesPublishesTheCurrentLogFirstThenEveryChange() async {
        let clock = TestClock()
        let log = EventLog(capacity: 2, now: { clock.now })
        log.append(.bluetoothdAppeared)
        let states = StateRecorder(log.entries())
        let first = LogEvent(id: 1, at: clock.now, severity: .info, kind: .bluetoothdAppeared, message: "bluetoothd is running")
        await states.expectNext(EventLogSnapshot(entries: [first]))
        log.append(.bluetoothdVanished)
        let second = LogEvent(id: 2, at: clock.now, severity: .warning, kind: .bluetoothdVanished, message: "bluetoothd is not running")
        await states.expectNext(EventLogSnapshot(entries: [first, second]))
        log.append(.error("x"))
        let third = LogEvent(id: 3, at: clock.now, severity: .error, kind: .error("x"), message: "x")
        await states.expectNext(EventLogSnapshot(entries: [second, third], dropped: 1))
        log.clear()
        await states.expectNext(EventLogSnapshot())
        log.clear()                                             // nothing changes, nothing published
        await states.expectNoMoreStates()
    }

    // MARK: Feeds

    @Test func connectionFailuresAreLoggedOnceEach() async throws {
        let backend = FakeConnectionBackend()
        let flaky = try id(1)
        backend.set(flaky) { $0.failuresLeft = 2 }
        let manager = ConnectionManager(backend: backend, sleeper: RecordingSleeper(), random: { 0.5 })
        let log = EventLog(names: { $0 == flaky ? "Flaky" : nil })
        let feed = log.feed(from: manager)
        manager.watch(flaky)
        let failure = LogEvent.Kind.connectionFailed(flaky, reason: "Failed: le-connection-abort-by-local")
        #expect(await kinds(of: log, atLeast: 2) == [failure, failure])   // attempts 1 and 2
        #expect(log.current.entries.map(\.message) == Array(repeating: "connecting to Flaky failed: Failed: le-connection-abort-by-local", count: 2))
        #expect(log.current.entries.map(\.severity) == [.warning, .warning])
        let deadline = ContinuousClock.now + .seconds(5)
        while manager.current[flaky] != .connected && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(manager.current[flaky] == .connected)
        try await Task.sleep(for: .milliseconds(50))
        #expect(log.current.entries.count == 2, "connecting and connected are not failures")
        feed.cancel()
    }

    @Test func aStatusRepublishedWithOtherDevicesChangesIsLoggedOnce() async throws {
        let backend = FakeConnectionBackend()
        let stuck = try id(1), steady = try id(2)
        backend.set(stuck) { $0.failuresLeft = 1 }
        // A long backoff keeps `stuck` in .retrying while `steady` changes the dictionary.
        let manager = ConnectionManager(backend: backend, policy: BackoffPolicy(initial: .seconds(30), jitter: 0))
        let log = EventLog()
        let feed = log.feed(from: manager)
        manager.watch(stuck)
        let failure = LogEvent.Kind.connectionFailed(stuck, reason: "Failed: le-connection-abort-by-local")
        #expect(await kinds(of: log, atLeast: 1) == [failure])
        backend.set(steady) { $0.present = false }
        manager.watch(steady)                                   // waitingForDevice
        let deadline = ContinuousClock.now + .seconds(5)
        while manager.current[steady] != .waitingForDevice && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        backend.set(steady) { $0.present = true }               // connecting, connected
        while manager.current[steady] != .connected && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(manager.current[steady] == .connected)
        #expect(manager.current[stuck] == .retrying(attempt: 1, delay: .seconds(30), reason: "Failed: le-connection-abort-by-local"))
        try await Task.sleep(for: .milliseconds(50))
        #expect(log.current.entries.map(\.kind) == [failure])
        // A new failure of the other device is a new status: logged.
        backend.set(steady) { $0.connected = false; $0.failuresLeft = 1 }
        #expect(await kinds(of: log, atLeast: 2) == [failure, .connectionFailed(steady, reason: "Failed: le-connection-abort-by-local")])
        manager.unwatch(stuck)
        manager.unwatch(steady)
        feed.cancel()
    }

    @Test func pairingOutcomesAreLoggedAndAFeedStopsWhenReleased() async throws {
        let service = FakePairingService()
        let lock = try id(2), grumpy = try id(3)
        let log = EventLog(names: { $0 == lock ? "Keypad Lock" : nil })
        var feed: EventLogFeed? = log.feed(from: service)
        let pairing = Task { try? await service.pair(lock) }
        await service.end(with: nil)
        await pairing.value
        let failing = Task { try? await service.pair(grumpy) }
        await service.end(with: DomainError("AuthenticationRejected"))
        await failing.value
        #expect(await kinds(of: log, atLeast: 2) == [.pairingSucceeded(lock), .pairingFailed(grumpy, reason: "AuthenticationRejected")])
        #expect(log.current.entries.map(\.message) == ["paired with Keypad Lock", "pairing with F0:00:00:00:00:03 failed: AuthenticationRejected"])
        #expect(log.current.entries.map(\.severity) == [.info, .error])

        #expect(feed != nil)
        feed = nil
        let again = Task { try? await service.pair(lock) }
        await service.end(with: nil)
        await again.value
        try await Task.sleep(for: .milliseconds(150))
        #expect(log.current.entries.count == 2, "a released feed logs nothing more")
    }

    @Test func aCancelledFeedLogsNothingMore() async throws {
        let service = FakePairingService()
        let log = EventLog()
        let feed = log.feed(from: service)
        feed.cancel()
        let lock = try id(2)
        let pairing = Task { try? await service.pair(lock) }
        await service.end(with: nil)
        await pairing.value
        try await Task.sleep(for: .milliseconds(150))
        #expect(log.current.entries.isEmpty)
    }

    @Test func storageFailuresOfTheRecorderAreLogged() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-log-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("readings.sqlite").path
        var policy = RetentionPolicy()
        policy.minimumInterval = 0
        let store = try ReadingStore(path: path, policy: policy)
        // Another connection takes the readings table away: storing fails.
        try await DatabaseQueue(path: path).write { try $0.execute(sql: "DROP TABLE reading") }
        let repository = FakeDeviceRepository()
        let recorder = ReadingRecorder(repository: repository, store: store)
        let log = EventLog()
        let feed = log.feed(from: recorder)
        let device = DeviceRecord(id: try id(4), name: "Ruuvi", readings: [Reading(kind: .temperature, value: .number(21.5), unit: "°C")])
        repository.emit(DeviceListSnapshot(availability: .available, devices: [device]))
        let logged = await kinds(of: log, atLeast: 1)
        #expect(logged.count == 1)
        guard case let .storageFailed(reason)? = logged.first else {
            Issue.record("expected a storage failure, got \(logged)")
            return
        }
        #expect(reason.contains("cannot store readings of F0:00:00:00:00:04") && reason.contains("no such table"), "\(reason)")
        #expect(log.current.entries.first?.severity == .error)
        #expect(recorder.lastFailure == reason)
        feed.cancel()
    }

    // MARK: Against the simulator

    /// The mirror feed and the real pairing service: power off and on, a
    /// failed pairing, a connection and a disconnection, bluetoothd
    /// vanishing and returning — each logged once, in order, with names.
    @Test func whatBluetoothdDoesIsLoggedInOrder() async throws {
        let sim = try await Simulated.start("test-faults.json")
        defer { sim.bus.stop() }
        var simulator = sim.simulator
        let client = sim.client
        let pairing = BlueZPairingService(client: client)
        let log = EventLog(names: EventLog.deviceNames(in: client.mirror))
        let mirrorFeed = log.feed(from: client.mirror)
        let pairingFeed = log.feed(from: pairing)
        let brokenBond = try id(4)

        try await client.setPowered(false, adapter: hci0)
        #expect(await kinds(of: log, atLeast: 1) == [.adapterPowered(hci0, false)])
        try await client.setPowered(true, adapter: hci0)
        #expect(await kinds(of: log, atLeast: 2) == [.adapterPowered(hci0, false), .adapterPowered(hci0, true)])

        let session = try await client.discover(adapter: hci0)
        try await client.mirror.wait(for: "Broken Bond", timeout: .seconds(5)) { $0.devices[brokenBond] != nil }
        try await client.connect(brokenBond)
        #expect(await kinds(of: log, atLeast: 3).last == .deviceConnected(brokenBond))
        #expect(log.current.entries.last?.message == "Broken Bond connected")

        await #expect(throws: DomainError.self) { try await pairing.pair(brokenBond) }
        let afterPairing = await kinds(of: log, atLeast: 4)
        guard case let .pairingFailed(d, reason)? = afterPairing.last, d == brokenBond, reason.contains("AuthenticationFailed") else {
            Issue.record("expected Broken Bond's pairing to fail, got \(afterPairing)")
            return
        }
        #expect(log.current.entries.last?.message.hasPrefix("pairing with Broken Bond failed: ") == true)

        try await client.disconnect(brokenBond)
        #expect(await kinds(of: log, atLeast: 5).last == .deviceDisconnected(brokenBond))
        #expect(log.current.entries.last?.message == "Broken Bond disconnected")
        await session.stop()

        await simulator.stop()
        #expect(await newest(of: log, is: .bluetoothdVanished), "\(log.current.entries.map(\.kind))")
        simulator = BlueZSimulator(scenario: sim.scenario)
        try await simulator.start(busAddress: sim.bus.address)
        #expect(await newest(of: log, is: .bluetoothdAppeared), "\(log.current.entries.map(\.kind))")
        try await Task.sleep(for: .milliseconds(200))
        // The simulator, like bluetoothd, unexports its adapter before it
        // leaves the bus; whether the mirror hears that before the owner
        // change is a race, so "adapter hci0 removed" may come first.
        var all = log.current.entries.map(\.kind)
        if all.count == 8 && all[5] == .adapterRemoved(hci0) { all.remove(at: 5) }
        #expect(all == [.adapterPowered(hci0, false), .adapterPowered(hci0, true), .deviceConnected(brokenBond),
                        .pairingFailed(brokenBond, reason: reason), .deviceDisconnected(brokenBond),
                        .bluetoothdVanished, .bluetoothdAppeared],
                "nothing else: the returning bluetoothd's tree is the new starting point")
        #expect(log.current.entries.map(\.id) == Array(1...UInt64(log.current.entries.count)))
        mirrorFeed.cancel()
        pairingFeed.cancel()
        await simulator.stop()
    }
}

@Suite(.timeLimit(.minutes(1))) struct EventLogPresenterTests {
    typealias P = EventLogPresenter
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    func id(_ n: UInt8) throws -> DeviceID { DeviceID(adapter: hci0, address: try #require(BluetoothAddress(bytes: [0xF0, 0, 0, 0, 0, n]))) }

    func row(_ e: LogEvent) -> P.Row { P.Row(id: e.id, at: e.at, severity: e.severity, message: e.message, device: e.device) }

    /// A log with one entry of each severity and two devices.
    func sample(_ clock: TestClock) throws -> (EventLog, [LogEvent], DeviceID, DeviceID) {
        let strap = try id(1), lock = try id(2)
        let log = EventLog(now: { clock.now }, names: { $0 == strap ? "Heart Strap" : "Keypad Lock" })
        var events: [LogEvent] = []
        events.append(log.append(.bluetoothdAppeared))
        clock.advance(1)
        events.append(log.append(.deviceConnected(strap)))
        events.append(log.append(.connectionFailed(lock, reason: "le-connection-abort-by-local")))
        events.append(log.append(.pairingFailed(lock, reason: "AuthenticationFailed")))
        events.append(log.append(.deviceDisconnected(strap)))
        return (log, events, strap, lock)
    }

    @Test func everyStateInOrderForTheSeverityTextAndDeviceFilters() async throws {
        let clock = TestClock()
        let (log, e, strap, lock) = try sample(clock)
        let presenter = P(log: log, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected                                                   // loading
        expected.entries = .loaded(e.map(row))
        await states.expectStart(initial, then: expected)

        presenter.send(.severityFilterChanged(.warning))
        expected.filter.minimumSeverity = .warning
        expected.entries = .loaded([row(e[2]), row(e[3])])
        await states.expectNext(expected)
        presenter.send(.severityFilterChanged(.error))
        expected.filter.minimumSeverity = .error
        expected.entries = .loaded([row(e[3])])
        await states.expectNext(expected)
        presenter.send(.severityFilterChanged(.error))                            // the same: no new state
        presenter.send(.severityFilterChanged(.info))
        expected.filter.minimumSeverity = .info
        expected.entries = .loaded(e.map(row))
        await states.expectNext(expected)

        presenter.send(.textFilterChanged("HEART"))                               // case-insensitive, on the message
        expected.filter.text = "HEART"
        expected.entries = .loaded([row(e[1]), row(e[4])])
        await states.expectNext(expected)
        presenter.send(.textFilterChanged("nothing like this"))
        expected.filter.text = "nothing like this"
        expected.entries = .loaded([])
        await states.expectNext(expected)
        presenter.send(.textFilterChanged(""))
        expected.filter.text = ""
        expected.entries = .loaded(e.map(row))
        await states.expectNext(expected)

        presenter.send(.deviceFilterChanged(lock))
        expected.filter.device = lock
        expected.entries = .loaded([row(e[2]), row(e[3])])
        await states.expectNext(expected)
        // Filters combine.
        presenter.send(.severityFilterChanged(.error))
        expected.filter.minimumSeverity = .error
        expected.entries = .loaded([row(e[3])])
        await states.expectNext(expected)
        presenter.send(.deviceFilterChanged(strap))
        expected.filter.device = strap
        expected.entries = .loaded([])
        await states.expectNext(expected)
        // A new entry passing the filters shows up; one that does not changes nothing.
        let failed = log.append(.pairingFailed(strap, reason: "AuthenticationRejected"))
        expected.entries = .loaded([row(failed)])
        await states.expectNext(expected)
        log.append(.deviceConnected(strap))
        await states.expectNoMoreStates()
        presenter.send(.deviceFilterChanged(nil))
        presenter.send(.severityFilterChanged(.info))
        expected.filter.device = nil
        expected.entries = .loaded([row(e[3]), row(failed)])
        await states.expectNext(expected)
        expected.filter.minimumSeverity = .info
        expected.entries = .loaded((e + [failed, log.current.entries[6]]).map(row))
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(P.rows(log.current.entries, filter: P.Filter(text: "keypad"), follow: .following).map(\.id) == [3, 4])
    }

    @Test func followToggledFreezesTheListAndFollowingAgainCatchesUp() async throws {
        let clock = TestClock()
        let (log, e, _, _) = try sample(clock)
        let presenter = P(log: log, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected                                                   // loading
        expected.entries = .loaded(e.map(row))
        await states.expectStart(initial, then: expected)

        presenter.send(.followToggled)
        expected.follow = .frozen(at: 5)
        await states.expectNext(expected)
        let later = log.append(.bluetoothdVanished)                             // not shown while frozen
        await states.expectNoMoreStates()
        presenter.send(.severityFilterChanged(.warning))                         // filters still apply to what is frozen
        expected.filter.minimumSeverity = .warning
        expected.entries = .loaded([row(e[2]), row(e[3])])
        await states.expectNext(expected)

        presenter.send(.followToggled)
        expected.follow = .following
        expected.entries = .loaded([row(e[2]), row(e[3]), row(later)])
        await states.expectNext(expected)
        let latest = log.append(.error("late"))
        expected.entries = .loaded([row(e[2]), row(e[3]), row(later), row(latest)])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func clearRequestedEmptiesTheLogAndTheDroppedCount() async throws {
        let log = EventLog(capacity: 2, now: { Date(timeIntervalSince1970: 0) })
        let gone = log.append(.error("first"))
        let kept = [log.append(.error("second")), log.append(.error("third"))]
        #expect(gone.id == 1)
        let presenter = P(log: log, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected                                                   // loading
        expected.entries = .loaded(kept.map(row))
        expected.dropped = 1
        await states.expectStart(initial, then: expected)

        presenter.send(.clearRequested)
        expected.entries = .loaded([])
        expected.dropped = 0
        await states.expectNext(expected)
        #expect(log.current == EventLogSnapshot())
        let next = log.append(.bluetoothdAppeared)
        #expect(next.id == 4)
        expected.entries = .loaded([row(next)])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func entrySelectedOpensTheEntrysDeviceAndNothingElse() async throws {
        let clock = TestClock()
        let (log, e, strap, lock) = try sample(clock)
        let navigator = Navigator()
        let presenter = P(log: log, navigator: navigator)
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected                                                   // loading
        expected.entries = .loaded(e.map(row))
        await states.expectStart(initial, then: expected)

        presenter.send(.entrySelected(e[0].id))                                   // bluetoothd: no device
        presenter.send(.entrySelected(999))                                       // not in the log
        presenter.send(.entrySelected(e[1].id))
        // Actions run in order: once the strap is open, the first two were handled.
        for await stack in navigator.changes() where stack.count > 1 { break }
        #expect(navigator.stack == [.deviceList, .deviceDetail(strap)])
        presenter.send(.entrySelected(e[3].id))
        for await stack in navigator.changes() where stack.count > 2 { break }
        #expect(navigator.stack == [.deviceList, .deviceDetail(strap), .deviceDetail(lock)])
        presenter.send(.backRequested)
        for await stack in navigator.changes() where stack.count == 2 { break }
        #expect(navigator.stack == [.deviceList, .deviceDetail(strap)])
        await states.expectNoMoreStates()                                          // selecting and going back change no state
    }
}
