import Foundation
import Testing
import TestSupport
import BLEParsing
import BlueZ
import Domain
@testable import Presenters
import Vocabulary

@Suite(.timeLimit(.minutes(1))) struct DeviceListPresenterTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    func id(_ address: String) throws -> DeviceID { DeviceID(adapter: hci0, address: try BluetoothAddress(address)) }

    func home(_ clock: TestClock) throws -> [DeviceRecord] {
        [
            DeviceRecord(id: try id("CB:B8:33:4C:88:4F"), name: "Ruuvi 884F", rssi: -65, format: "ruuvi",
                         readings: [Reading(kind: .temperature, value: .number(24.5), unit: "°C")], lastSeen: clock.now),
            DeviceRecord(id: try id("E4:5F:01:AA:10:01"), name: "Polar H10", rssi: -58, lastSeen: clock.now),
            DeviceRecord(id: try id("D0:3A:1B:2C:3D:4E"), name: nil, rssi: -84, format: "ibeacon", lastSeen: clock.now.addingTimeInterval(-300)),
        ]
    }

    typealias P = DeviceListPresenter

    func row(_ d: DeviceRecord, stale: Bool = false, watch: ConnectionStatus? = nil) -> P.Row {
        P.Row(id: d.id, title: d.name ?? d.id.address.description, rssi: d.rssi, format: d.format, readings: d.readings,
              paired: d.paired, trusted: d.trusted, connected: d.connected, lastSeen: d.lastSeen, stale: stale, watch: watch)
    }

    @Test func everyStateInOrderForListingFilteringSortingAndSelecting() async throws {
        let clock = TestClock()
        let repo = FakeDeviceRepository()
        let navigator = Navigator()
        let presenter = P(repository: repo, navigator: navigator, sleeper: ManualSleeper(), now: { clock.now })
        let states = StateRecorder(presenter.states())

        var expected = P.State()
        let initial = expected                               // loading
        expected.devices = .unavailable(.bluetooth(.bluetoothdGone))
        await states.expectStart(initial, then: expected)

        let devices = try home(clock)
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices))
        expected.devices = .loaded([row(devices[1]), row(devices[0]), row(devices[2], stale: true)])   // by RSSI
        expected.formats = ["ibeacon", "ruuvi"]
        await states.expectNext(expected)

        presenter.send(.filterTextChanged("RUU"))
        expected.filter.text = "RUU"
        expected.devices = .loaded([row(devices[0])])
        await states.expectNext(expected)

        presenter.send(.filterTextChanged(""))
        presenter.send(.namedOnlyToggled)
        expected.filter.text = ""
        expected.devices = .loaded([row(devices[1]), row(devices[0]), row(devices[2], stale: true)])
        await states.expectNext(expected)
        expected.filter.namedOnly = true
        expected.devices = .loaded([row(devices[1]), row(devices[0])])
        await states.expectNext(expected)

        presenter.send(.sortChanged(.name))
        expected.sort = .name
        expected.devices = .loaded([row(devices[1]), row(devices[0])])   // "Polar H10" < "Ruuvi 884F"
        await states.expectNext(expected)

        presenter.send(.minimumRSSIChanged(-60))
        expected.filter.minimumRSSI = -60
        expected.devices = .loaded([row(devices[1])])
        await states.expectNext(expected)

        // Selecting navigates; the list state does not change.
        presenter.send(.deviceSelected(devices[1].id))
        try await Task.sleep(for: .milliseconds(50))
        #expect(navigator.stack == [.deviceList, .deviceDetail(devices[1].id)])
        navigator.pop()
        navigator.pop()
        #expect(navigator.stack == [.deviceList])

        // The adapter goes off: the list says so instead of showing stale rows.
        repo.emit(DeviceListSnapshot(availability: .adapterOff(hci0), devices: devices))
        expected.devices = .unavailable(.bluetooth(.adapterOff(AdapterID(path: "/org/bluez/hci0"))))
        expected.formats = []
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func scanToggleGoesThroughStartingAndStopping() async throws {
        let repo = FakeDeviceRepository()
        repo.emit(DeviceListSnapshot(availability: .available))
        let presenter = P(repository: repo, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected
        expected.devices = .loaded([])
        await states.expectStart(initial, then: expected)

        presenter.send(.scanToggled)
        expected.scan = .starting
        await states.expectNext(expected)
        expected.scan = .on
        await states.expectNext(expected)
        // The repository's snapshot (scanning: true) agrees: no new state.
        await states.expectNoMoreStates()
        #expect(repo.scanCalls.withLock { $0 } == [true])

        presenter.send(.scanToggled)
        expected.scan = .stopping
        await states.expectNext(expected)
        expected.scan = .off
        await states.expectNext(expected)

        // A failure is shown with its reason; the next toggle tries again.
        repo.failScanning(with: DomainError("adapter hci0 is powered off"))
        presenter.send(.scanToggled)
        expected.scan = .starting
        await states.expectNext(expected)
        expected.scan = .failed("adapter hci0 is powered off")
        await states.expectNext(expected)
        // A snapshot that changes something else leaves the failure on screen.
        let newcomer = DeviceRecord(id: try id("C0:FE:00:00:00:01"), rssi: -70)
        repo.emit(DeviceListSnapshot(availability: .available, scanning: false, devices: [newcomer]))
        expected.devices = .loaded([row(newcomer)])
        await states.expectNext(expected)
        repo.failScanning(with: nil)
        presenter.send(.scanToggled)
        expected.scan = .starting
        await states.expectNext(expected)
        expected.scan = .on
        await states.expectNext(expected)

        // Another client stopped discovery: the repository says so, the state follows.
        repo.emit(DeviceListSnapshot(availability: .available, scanning: false))
        expected.scan = .off
        expected.devices = .loaded([])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.scanCalls.withLock { $0 } == [true, false, true, true])
    }

    @Test func rowsArePureAndMarkStaleDevices() throws {
        let clock = TestClock()
        let devices = try home(clock)
        #expect(P.rows(devices, filter: P.Filter(text: "ruuvi"), sort: .rssi, now: clock.now).first?.readings.map(\.description) == ["temperature=24.5 °C"])
        let rows = P.rows(devices, filter: P.Filter(), sort: .lastSeen, now: clock.now)
        #expect(rows.map(\.stale) == [false, false, true])
        #expect(rows.last?.title == "D0:3A:1B:2C:3D:4E")
        clock.advance(200)
        let later = P.rows(devices, filter: P.Filter(), sort: .rssi, now: clock.now)
        #expect(later.allSatisfy { $0.stale })
        #expect(P.rows(devices, filter: P.Filter(text: "ibeacon"), sort: .rssi, now: clock.now).map(\.format) == ["ibeacon"])
        // Past removeAfter a device leaves the list unless it is paired, connected or watched.
        clock.advance(700)   // the iBeacon was last heard 1 200 s ago, the others exactly 900 s
        #expect(P.rows(devices, filter: P.Filter(), sort: .rssi, now: clock.now).map(\.title) == ["Polar H10", "Ruuvi 884F"])
        var paired = devices
        paired[2].paired = true
        #expect(P.rows(paired, filter: P.Filter(), sort: .rssi, now: clock.now).count == 3)
        let watched = P.rows(devices, filter: P.Filter(), sort: .rssi, now: clock.now, watches: [devices[2].id.address: .connecting(attempt: 2)])
        #expect(watched.last?.watch == .connecting(attempt: 2))
        #expect(P.rows(devices, filter: P.Filter(), sort: .rssi, now: clock.now, expiry: P.Expiry(staleAfter: 60, removeAfter: nil)).count == 3)
    }

    @Test func staleMarkingAndExpiryFollowTheClockWithoutNewSnapshots() async throws {
        let clock = TestClock()
        let sleeper = ManualSleeper()
        let repo = FakeDeviceRepository()
        let presenter = P(repository: repo, navigator: Navigator(), expiry: P.Expiry(staleAfter: 120, removeAfter: 900),
                          sleeper: sleeper, now: { clock.now })
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected
        expected.devices = .unavailable(.bluetooth(.bluetoothdGone))
        await states.expectStart(initial, then: expected)

        let devices = try home(clock)
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices))
        expected.devices = .loaded([row(devices[1]), row(devices[0]), row(devices[2], stale: true)])
        expected.formats = ["ibeacon", "ruuvi"]
        await states.expectNext(expected)
        // The next transition: the two fresh devices turn stale 120 s from now.
        #expect(await eventually { sleeper.waiting == [.milliseconds(120_001)] }, "\(sleeper.waiting)")

        clock.advance(121)
        sleeper.fireAll()
        expected.devices = .loaded([row(devices[1], stale: true), row(devices[0], stale: true), row(devices[2], stale: true)])
        await states.expectNext(expected)
        // Then the iBeacon (heard 421 s ago) expires at 900 s.
        #expect(await eventually { sleeper.waiting == [.milliseconds(479_001)] }, "\(sleeper.waiting)")
        clock.advance(480)
        sleeper.fireAll()
        expected.devices = .loaded([row(devices[1], stale: true), row(devices[0], stale: true)])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    /// NTP correcting a Raspberry Pi that booted with `fake-hwclock`'s time:
    /// the wall clock jumps a day forward, then an hour back, while the
    /// boot-time clock moves on by seconds. Devices heard this session
    /// (records with `heard`) age by the boot-time clock: a jump neither
    /// marks them stale (forward) nor keeps them fresh for the size of the
    /// jump (back), and their `lastSeen` is shown on the corrected clock.
    @Test func aWallClockJumpNeitherStalesNorKeepsDevices() async throws {
        let wall = TestClock(), boot = TestClock()
        let uptime = { @Sendable in boot.now.timeIntervalSince1970 }
        let sleeper = ManualSleeper()
        let repo = FakeDeviceRepository()
        let presenter = P(repository: repo, navigator: Navigator(), expiry: P.Expiry(staleAfter: 120, removeAfter: 900),
                          sleeper: sleeper, now: { wall.now }, uptime: uptime)
        var devices = try home(wall)
        devices[0].heard = uptime()
        devices[1].heard = uptime()
        devices[2].heard = uptime() - 300   // heard 300 s ago, as its lastSeen says
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices))
        #expect(await waitFor(presenter) { $0.devices.value?.count == 3 })
        #expect(await eventually { sleeper.waiting == [.milliseconds(120_001)] }, "\(sleeper.waiting)")

        // A day forward on the wall clock, 10 s on the boot-time clock.
        wall.advance(86_400)
        boot.advance(10)
        devices[0].rssi = -66   // the next snapshot (any change makes the rows again)
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices))
        #expect(await waitFor(presenter) { s in
            s.devices.value.map { rows in rows.map(\.stale) == [false, false, true] && rows[1].rssi == -66 } ?? false
        })
        var rows = try #require(presenter.state.devices.value)
        // Shown as heard 10 s ago on the new clock, not a day ago.
        #expect(rows[0].lastSeen == wall.now.addingTimeInterval(-10))
        #expect(rows[2].lastSeen == wall.now.addingTimeInterval(-310))

        // An hour back: the fresh devices still turn stale 120 s after they
        // were heard (110 s from now), not an hour later.
        wall.advance(-3_600)
        boot.advance(111)
        sleeper.fireAll()
        #expect(await waitFor(presenter) { s in s.devices.value?.allSatisfy(\.stale) ?? false })
        rows = try #require(presenter.state.devices.value)
        #expect(rows.map(\.title).sorted() == ["D0:3A:1B:2C:3D:4E", "Polar H10", "Ruuvi 884F"])
        // And the iBeacon leaves the list 900 s after it was heard by the boot-time clock.
        boot.advance(900 - 421 + 1)
        sleeper.fireAll()
        #expect(await waitFor(presenter) { $0.devices.value?.count == 2 })
    }

    /// Records with only a wall-clock `lastSeen` (remembered from the
    /// database, or a repository without a boot-time clock) keep aging by the
    /// wall clock, as before.
    @Test func recordsWithoutABootTimeAgeByTheWallClock() throws {
        let wall = TestClock()
        let devices = try home(wall)
        let moment = Moment(date: wall.now.addingTimeInterval(200), uptime: 5)
        #expect(devices.map { moment.age($0) } == [200, 200, 500])
        #expect(moment.seen(devices[0], age: 200) == devices[0].lastSeen)
        var heard = devices[0]
        heard.heard = 2
        #expect(moment.age(heard) == 3)
        #expect(moment.seen(heard, age: 3) == wall.now.addingTimeInterval(197))
    }

    @Test func formatAndWatchedFiltersAndConnectionStatusInRows() async throws {
        let clock = TestClock()
        let repo = FakeDeviceRepository()
        let watches = FakeWatchList()
        let navigator = Navigator()
        let presenter = P(repository: repo, navigator: navigator, watchList: watches, sleeper: ManualSleeper(), now: { clock.now })
        let devices = try home(clock)
        repo.emit(DeviceListSnapshot(availability: .available, devices: devices))
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        expected.devices = .loaded([row(devices[1]), row(devices[0]), row(devices[2], stale: true)])
        expected.formats = ["ibeacon", "ruuvi"]
        await states.expectSettled(at: expected, atMost: 3)

        presenter.send(.formatFilterChanged("ruuvi"))
        expected.filter.format = "ruuvi"
        expected.devices = .loaded([row(devices[0])])
        await states.expectNext(expected)
        presenter.send(.formatFilterChanged(nil))
        expected.filter.format = nil
        expected.devices = .loaded([row(devices[1]), row(devices[0]), row(devices[2], stale: true)])
        await states.expectNext(expected)

        presenter.send(.watchedOnlyToggled)
        expected.filter.watchedOnly = true
        expected.devices = .loaded([])
        await states.expectNext(expected)
        watches.store.update { $0[devices[1].id.address] = .retrying(attempt: 1, delay: .seconds(1), reason: "le-connection-abort-by-local") }
        expected.devices = .loaded([row(devices[1], watch: .retrying(attempt: 1, delay: .seconds(1), reason: "le-connection-abort-by-local"))])
        await states.expectNext(expected)
        watches.store.update { $0[devices[1].id.address] = .connected }
        expected.devices = .loaded([row(devices[1], watch: .connected)])
        await states.expectNext(expected)

        presenter.send(.eventLogRequested)
        #expect(await eventually { navigator.stack == [.deviceList, .eventLog] })
        navigator.pop()
        presenter.send(.adaptersRequested)
        #expect(await eventually { navigator.stack == [.deviceList, .adapters] })
        await states.expectNoMoreStates()
    }
}
