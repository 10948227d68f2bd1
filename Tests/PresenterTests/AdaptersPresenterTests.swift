import Foundation
import Locking
import Testing
import BlueZ
import Domain
@testable import Presenters

/// A fake adapter repository implementing the same protocol as the real one:
/// tests push snapshots, choose which operations fail, and whether a
/// successful operation shows up in the snapshot before it returns (as the
/// real repository guarantees) or only when the test emits it.
final class FakeAdapterRepository: AdapterRepository {
    enum Call: Sendable, Equatable {
        case powered(Bool, AdapterID)
        case discoverable(Bool, AdapterID)
        case pairable(Bool, AdapterID)
        case scanning(Bool, AdapterID, DiscoveryFilter)
    }
    enum Operation: Sendable, Hashable { case power, discoverable, pairable, scan }

    let store = StateStore(AdapterListSnapshot(bluetoothdAvailable: false))
    let calls = Lock<[Call]>([])
    private let failures = Lock<[Operation: DomainError]>([:])
    private let publishes = Lock(true)

    func snapshots() -> AsyncStream<AdapterListSnapshot> { store.states() }

    func setPowered(_ on: Bool, adapter: AdapterID) async throws(DomainError) {
        try perform(.powered(on, adapter), .power) { s in
            s.change(adapter) { $0.powered = on; $0.powerState = on ? "on" : "off" }
            // As bluetoothd does: powering off ends every discovery.
            if !on { s.discoveryFilters[adapter] = nil }
        }
    }

    func setDiscoverable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {
        try perform(.discoverable(on, adapter), .discoverable) { s in s.change(adapter) { $0.discoverable = on } }
    }

    func setPairable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {
        try perform(.pairable(on, adapter), .pairable) { s in s.change(adapter) { $0.pairable = on } }
    }

    func setScanning(_ on: Bool, adapter: AdapterID, filter: DiscoveryFilter) async throws(DomainError) {
        try perform(.scanning(on, adapter, filter), .scan) { s in
            s.discoveryFilters[adapter] = on ? filter : nil
            s.change(adapter) { $0.discovering = on }
        }
    }

    private func perform(_ call: Call, _ operation: Operation, _ effect: (inout AdapterListSnapshot) -> Void) throws(DomainError) {
        calls.withLock { $0.append(call) }
        if let e = failures.withLock({ $0[operation] }) { throw e }
        if publishes.withLock({ $0 }) { store.update(effect) }
    }

    func fail(_ operation: Operation, with error: DomainError?) { failures.withLock { $0[operation] = error } }
    /// false: successful operations leave the snapshot alone (bluetoothd slow to show them).
    func publishOnSuccess(_ on: Bool) { publishes.withLock { $0 = on } }
    func emit(_ snapshot: AdapterListSnapshot) { store.update { $0 = snapshot } }
    var snapshot: AdapterListSnapshot { store.state }
}

extension AdapterListSnapshot {
    mutating func change(_ id: AdapterID, _ body: (inout AdapterRecord) -> Void) {
        if let i = adapters.firstIndex(where: { $0.id == id }) { body(&adapters[i]) }
    }
}

@Suite(.timeLimit(.minutes(1))) struct AdaptersPresenterTests {
    typealias P = AdaptersPresenter
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    let hci1 = AdapterID(path: "/org/bluez/hci1")

    var host: AdapterRecord {
        AdapterRecord(id: hci0, address: "00:1A:7D:DA:71:13", addressType: "public", name: "sim-host", alias: "sim-host",
                      powered: true, powerState: "on", discoverable: false, discoverableTimeout: 180, pairable: true,
                      roles: ["central", "peripheral"])
    }
    var dongle: AdapterRecord {
        AdapterRecord(id: hci1, address: "00:1A:7D:DA:71:14", name: "usb-dongle", alias: nil, powered: true, powerState: "on",
                      pairable: false, roles: ["central"])
    }

    /// The row of `r` with every switch following the record unless given.
    func row(_ r: AdapterRecord, power: P.Toggle? = nil, discoverable: P.Toggle? = nil, pairable: P.Toggle? = nil,
             scan: P.Toggle = .off, scanFilter: DiscoveryFilter? = nil) -> P.Row {
        P.Row(id: r.id, title: r.alias ?? r.name ?? r.id.name, address: r.address, powerState: r.powerState, roles: r.roles,
              power: power ?? (r.powered ? .on : .off), discoverable: discoverable ?? (r.discoverable ? .on : .off),
              pairable: pairable ?? (r.pairable ? .on : .off), scan: scan, scanFilter: scanFilter, discovering: r.discovering)
    }

    /// A presenter over `repo` whose first two states (loading, then the
    /// repository's current snapshot) have been checked.
    func started(_ repo: FakeAdapterRepository, rows: [P.Row], sourceLocation: SourceLocation = #_sourceLocation)
        async -> (P, StateRecorder<P.State>, P.State) {
        let presenter = P(repository: repo)
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected
        expected.adapters = .loaded(rows)
        expected.selected = rows.first?.id
        await states.expectStart(initial, then: expected, sourceLocation: sourceLocation)
        return (presenter, states, expected)
    }

    @Test func unavailableUntilBluetoothdHasAnAdapterAndAgainWhenItLeaves() async throws {
        let repo = FakeAdapterRepository()
        let presenter = P(repository: repo)
        let states = StateRecorder(presenter.states())
        var expected = P.State()
        let initial = expected                                              // loading
        expected.adapters = .unavailable(.bluetooth(.bluetoothdGone))
        await states.expectStart(initial, then: expected)

        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true))
        expected.adapters = .unavailable(.bluetooth(.noAdapter))
        await states.expectNext(expected)

        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        expected.adapters = .loaded([row(host)])
        expected.selected = hci0                                            // the first adapter, until the user picks one
        await states.expectNext(expected)
        #expect(expected.adapters.value?.first?.title == "sim-host")

        repo.emit(AdapterListSnapshot(bluetoothdAvailable: false))
        expected.adapters = .unavailable(.bluetooth(.bluetoothdGone))       // selection kept for its return
        await states.expectNext(expected)

        // Nothing to act on: the switches do nothing and ask nothing.
        presenter.send(.powerToggled)
        presenter.send(.discoverableToggled)
        presenter.send(.pairableToggled)
        presenter.send(.scanToggled)
        presenter.send(.adapterSelected(hci1))
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 }.isEmpty)

        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        expected.adapters = .loaded([row(host)])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func powerTogglesOffThenOnThroughTheTransitions() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        let (presenter, states, start) = await started(repo, rows: [row(host)])
        var expected = start

        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(false))
        expected.adapters = .loaded([row(host, power: .turningOff)])
        await states.expectNext(expected)
        var off = host
        off.powered = false
        off.powerState = "off"
        expected.pending = nil
        expected.adapters = .loaded([row(off)])
        await states.expectNext(expected)

        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(true))
        expected.adapters = .loaded([row(off, power: .turningOn)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(host)])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.powered(false, hci0), .powered(true, hci0)])
    }

    @Test func aFailedPowerOnShowsWhyUntilDismissedOrTheNextAttempt() async throws {
        var off = host
        off.powered = false
        off.powerState = "off-blocked"
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [off]))
        let (presenter, states, start) = await started(repo, rows: [row(off)])
        var expected = start
        #expect(start.adapters.value?.first?.powerState == "off-blocked")

        let reason = "cannot power on hci0: NotReady: Resource Not Ready"
        repo.fail(.power, with: DomainError(reason))
        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(true))
        expected.adapters = .loaded([row(off, power: .turningOn)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(off)])                             // back to what bluetoothd says
        expected.error = reason
        await states.expectNext(expected)

        presenter.send(.errorDismissed)
        expected.error = nil
        await states.expectNext(expected)

        // Fails again; the next attempt (which works) clears the error as it starts.
        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(true))
        expected.adapters = .loaded([row(off, power: .turningOn)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(off)])
        expected.error = reason
        await states.expectNext(expected)
        repo.fail(.power, with: nil)
        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(true))
        expected.adapters = .loaded([row(off, power: .turningOn)])
        expected.error = nil
        await states.expectNext(expected)
        var on = off
        on.powered = true
        on.powerState = "on"
        expected.pending = nil
        expected.adapters = .loaded([row(on)])
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.powered(true, hci0), .powered(true, hci0), .powered(true, hci0)])
    }

    @Test func discoverableAndPairableToggleAndFail() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        let (presenter, states, start) = await started(repo, rows: [row(host)])
        var expected = start
        var current = host

        presenter.send(.discoverableToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .discoverable(true))
        expected.adapters = .loaded([row(current, discoverable: .turningOn)])
        await states.expectNext(expected)
        current.discoverable = true
        expected.pending = nil
        expected.adapters = .loaded([row(current)])
        await states.expectNext(expected)

        presenter.send(.pairableToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .pairable(false))
        expected.adapters = .loaded([row(current, pairable: .turningOff)])
        await states.expectNext(expected)
        current.pairable = false
        expected.pending = nil
        expected.adapters = .loaded([row(current)])
        await states.expectNext(expected)

        repo.fail(.discoverable, with: DomainError("cannot make hci0 non-discoverable: Failed: busy"))
        presenter.send(.discoverableToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .discoverable(false))
        expected.adapters = .loaded([row(current, discoverable: .turningOff)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(current)])
        expected.error = "cannot make hci0 non-discoverable: Failed: busy"
        await states.expectNext(expected)

        repo.fail(.pairable, with: DomainError("cannot make hci0 pairable: bluetoothd is not running"))
        presenter.send(.pairableToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .pairable(true))
        expected.adapters = .loaded([row(current, pairable: .turningOn)])
        expected.error = nil
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(current)])
        expected.error = "cannot make hci0 pairable: bluetoothd is not running"
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.discoverable(true, hci0), .pairable(false, hci0), .discoverable(false, hci0), .pairable(true, hci0)])
    }

    @Test func scanStartsWithTheAppliedFilterStopsAndFails() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        let (presenter, states, start) = await started(repo, rows: [row(host)])
        var expected = start

        presenter.send(.filterRSSIChanged(-65))
        expected.filter.rssiThreshold = -65
        await states.expectNext(expected)
        presenter.send(.filterApplied)
        expected.appliedFilter = expected.filter
        await states.expectNext(expected)
        let filter = DiscoveryFilter(rssi: -65, transport: .le, duplicateData: false)
        #expect(expected.appliedFilter.filter == filter)

        presenter.send(.scanToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .scan(filter))
        expected.adapters = .loaded([row(host, scan: .turningOn)])
        await states.expectNext(expected)
        var discovering = host
        discovering.discovering = true
        expected.pending = nil
        expected.adapters = .loaded([row(discovering, scan: .on, scanFilter: filter)])
        await states.expectNext(expected)
        #expect(expected.adapters.value?.first?.discovering == true)

        presenter.send(.scanToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .scan(nil))
        expected.adapters = .loaded([row(discovering, scan: .turningOff, scanFilter: filter)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(host)])
        await states.expectNext(expected)

        repo.fail(.scan, with: DomainError("cannot start scanning on hci0: NotReady: Resource Not Ready"))
        presenter.send(.scanToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .scan(filter))
        expected.adapters = .loaded([row(host, scan: .turningOn)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(host)])
        expected.error = "cannot start scanning on hci0: NotReady: Resource Not Ready"
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.scanning(true, hci0, filter), .scanning(false, hci0, DiscoveryFilter()),
                                                 .scanning(true, hci0, filter)])
    }

    @Test func poweringOffEndsOurScan() async throws {
        let repo = FakeAdapterRepository()
        var discovering = host
        discovering.discovering = true
        let filter = DiscoveryFilter(transport: .le, duplicateData: false)
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [discovering], discoveryFilters: [hci0: filter]))
        let (presenter, states, start) = await started(repo, rows: [row(discovering, scan: .on, scanFilter: filter)])
        var expected = start

        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(false))
        expected.adapters = .loaded([row(discovering, power: .turningOff, scan: .on, scanFilter: filter)])
        await states.expectNext(expected)
        var off = host
        off.powered = false
        off.powerState = "off"
        off.discovering = true                                              // the fake leaves Discovering alone
        expected.pending = nil
        expected.adapters = .loaded([row(off)])                             // our scan is over
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func editingTheFilterValidatesItAndApplyingTakesOnlyAValidOne() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        let (presenter, states, start) = await started(repo, rows: [row(host)])
        var expected = start
        #expect(!expected.filterEdited)

        presenter.send(.filterTransportChanged(.auto))
        expected.filter.transport = .auto
        await states.expectNext(expected)
        #expect(presenter.state.filterEdited)
        presenter.send(.filterRSSIChanged(-70))
        expected.filter.rssiThreshold = -70
        await states.expectNext(expected)
        presenter.send(.filterDuplicateDataToggled)
        expected.filter.duplicateData = true
        await states.expectNext(expected)
        presenter.send(.filterPatternChanged("Ruuvi"))
        expected.filter.pattern = "Ruuvi"
        await states.expectNext(expected)

        // A bad UUID: kept as typed, with a reason, and not applicable.
        presenter.send(.filterUUIDsChanged(["180d", "heart rate"]))
        expected.filter.uuids = ["180d", "heart rate"]
        await states.expectNext(expected)
        #expect(presenter.state.filter.problem
                == "\"heart rate\" is not a UUID (write it like 180d, 0x180D or 0000180d-0000-1000-8000-00805f9b34fb)")
        #expect(presenter.state.filter.filter == nil)
        presenter.send(.filterApplied)
        await states.expectNoMoreStates()
        #expect(presenter.state.appliedFilter == DiscoveryFilterDraft())

        presenter.send(.filterUUIDsChanged(["180d", " 0x2A37 ", "", "6e400001-b5a3-f393-e0a9-e50e24dcca9e"]))
        expected.filter.uuids = ["180d", " 0x2A37 ", "", "6e400001-b5a3-f393-e0a9-e50e24dcca9e"]
        await states.expectNext(expected)
        #expect(presenter.state.filter.problem == nil)

        // An RSSI bluetoothd would refuse.
        presenter.send(.filterRSSIChanged(40))
        expected.filter.rssiThreshold = 40
        await states.expectNext(expected)
        #expect(presenter.state.filter.problem == "the RSSI threshold must be between -127 and 20 dBm, not 40")
        presenter.send(.filterApplied)
        await states.expectNoMoreStates()
        presenter.send(.filterRSSIChanged(nil))
        expected.filter.rssiThreshold = nil
        await states.expectNext(expected)

        presenter.send(.filterApplied)
        expected.appliedFilter = expected.filter
        await states.expectNext(expected)
        #expect(!presenter.state.filterEdited)
        #expect(presenter.state.appliedFilter.filter == DiscoveryFilter(
            uuids: ["0000180d-0000-1000-8000-00805f9b34fb", "00002a37-0000-1000-8000-00805f9b34fb", "6e400001-b5a3-f393-e0a9-e50e24dcca9e"],
            transport: .auto, duplicateData: true, pattern: "Ruuvi"))

        // Reset edits only: the applied filter stays until applied again.
        presenter.send(.filterReset)
        expected.filter = DiscoveryFilterDraft()
        await states.expectNext(expected)
        #expect(presenter.state.filterEdited)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 }.isEmpty)                         // not scanning: nothing to restart
    }

    @Test func applyingAFilterWhileScanningRestartsTheScanWithIt() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        let (presenter, states, start) = await started(repo, rows: [row(host)])
        var expected = start
        let le = DiscoveryFilter(transport: .le, duplicateData: false)
        var discovering = host
        discovering.discovering = true

        presenter.send(.scanToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .scan(le))
        expected.adapters = .loaded([row(host, scan: .turningOn)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(discovering, scan: .on, scanFilter: le)])
        await states.expectNext(expected)

        presenter.send(.filterPatternChanged("C0:FE"))
        expected.filter.pattern = "C0:FE"
        await states.expectNext(expected)
        presenter.send(.filterApplied)
        expected.appliedFilter = expected.filter
        await states.expectNext(expected)
        let pattern = DiscoveryFilter(transport: .le, duplicateData: false, pattern: "C0:FE")
        expected.pending = P.Pending(adapter: hci0, operation: .scan(pattern))
        expected.adapters = .loaded([row(discovering, scan: .turningOn, scanFilter: le)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(discovering, scan: .on, scanFilter: pattern)])
        await states.expectNext(expected)

        // Applying the filter that already runs restarts nothing.
        presenter.send(.filterApplied)
        await states.expectNoMoreStates()

        // A restart that fails keeps what the repository says runs, and says why.
        repo.fail(.scan, with: DomainError("cannot start scanning on hci0: InvalidArguments: Invalid Transport"))
        presenter.send(.filterTransportChanged(.bredr))
        expected.filter.transport = .bredr
        await states.expectNext(expected)
        presenter.send(.filterApplied)
        expected.appliedFilter = expected.filter
        await states.expectNext(expected)
        let bredr = DiscoveryFilter(transport: .bredr, duplicateData: false, pattern: "C0:FE")
        expected.pending = P.Pending(adapter: hci0, operation: .scan(bredr))
        expected.adapters = .loaded([row(discovering, scan: .turningOn, scanFilter: pattern)])
        await states.expectNext(expected)
        expected.pending = nil
        expected.adapters = .loaded([row(discovering, scan: .on, scanFilter: pattern)])
        expected.error = "cannot start scanning on hci0: InvalidArguments: Invalid Transport"
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.scanning(true, hci0, le), .scanning(true, hci0, pattern), .scanning(true, hci0, bredr)])
    }

    @Test func switchesWaitUntilBluetoothdShowsThePendingChange() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host]))
        let (presenter, states, start) = await started(repo, rows: [row(host)])
        var expected = start
        repo.publishOnSuccess(false)

        presenter.send(.powerToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .power(false))
        expected.adapters = .loaded([row(host, power: .turningOff)])
        await states.expectNext(expected)
        // The request succeeded but bluetoothd has not shown it yet: still
        // turning off, and the other switches wait.
        presenter.send(.pairableToggled)
        presenter.send(.discoverableToggled)
        presenter.send(.scanToggled)
        presenter.send(.powerToggled)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.powered(false, hci0)])

        // Unrelated changes keep it pending.
        var changed = host
        changed.alias = "desk"
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [changed]))
        expected.adapters = .loaded([row(changed, power: .turningOff)])
        await states.expectNext(expected)

        changed.powered = false
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [changed]))
        expected.pending = nil
        expected.adapters = .loaded([row(changed)])
        await states.expectNext(expected)
        #expect(presenter.state.adapters.value?.first?.title == "desk")

        presenter.send(.pairableToggled)
        expected.pending = P.Pending(adapter: hci0, operation: .pairable(false))
        expected.adapters = .loaded([row(changed, pairable: .turningOff)])
        await states.expectNext(expected)
        // The adapter goes away (unplugged): nothing is pending any more.
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: []))
        expected.pending = nil
        expected.adapters = .unavailable(.bluetooth(.noAdapter))
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.powered(false, hci0), .pairable(false, hci0)])
    }

    @Test func selectingAnotherAdapterPointsTheSwitchesAtIt() async throws {
        let repo = FakeAdapterRepository()
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [host, dongle]))
        let (presenter, states, start) = await started(repo, rows: [row(host), row(dongle)])
        var expected = start
        #expect(start.adapters.value?.map(\.title) == ["sim-host", "usb-dongle"])

        presenter.send(.adapterSelected(AdapterID(path: "/org/bluez/hci7")))    // not there: ignored
        await states.expectNoMoreStates()
        presenter.send(.adapterSelected(hci1))
        expected.selected = hci1
        await states.expectNext(expected)

        presenter.send(.pairableToggled)
        expected.pending = P.Pending(adapter: hci1, operation: .pairable(true))
        expected.adapters = .loaded([row(host), row(dongle, pairable: .turningOn)])
        await states.expectNext(expected)
        var d = dongle
        d.pairable = true
        expected.pending = nil
        expected.adapters = .loaded([row(host), row(d)])
        await states.expectNext(expected)

        // Another client scans on hci0: bluetoothd discovers, but not for us.
        var h = host
        h.discovering = true
        repo.emit(AdapterListSnapshot(bluetoothdAvailable: true, adapters: [h, d]))
        expected.adapters = .loaded([row(h), row(d)])
        await states.expectNext(expected)
        #expect(presenter.state.adapters.value?.first?.discovering == true)
        #expect(presenter.state.adapters.value?.first?.scan == .off)
        await states.expectNoMoreStates()
        #expect(repo.calls.withLock { $0 } == [.pairable(true, hci1)])
    }

    @Test func theAdaptersScreenCanBePushedAndTheDraftMapsToBlueZsFilter() async {
        let navigator = Navigator()
        navigator.push(.adapters)
        #expect(navigator.stack == [.deviceList, .adapters])
        let presenter = AdaptersPresenter(repository: FakeAdapterRepository(), navigator: navigator)
        presenter.send(.backRequested)
        for await stack in navigator.changes() where stack.count == 1 { break }
        #expect(navigator.stack == [.deviceList])

        #expect(DiscoveryFilterDraft().filter == DiscoveryFilter(transport: .le, duplicateData: false))
        #expect(DiscoveryFilterDraft(rssiThreshold: -127).problem == nil)
        #expect(DiscoveryFilterDraft(rssiThreshold: -128).problem == "the RSSI threshold must be between -127 and 20 dBm, not -128")
        #expect(DiscoveryFilterDraft(uuids: ["180"]).problem
                == "\"180\" is not a UUID (write it like 180d, 0x180D or 0000180d-0000-1000-8000-00805f9b34fb)")
        #expect(DiscoveryFilterDraft(uuids: ["0000180D"]).filter?.uuids == ["0000180d-0000-1000-8000-00805f9b34fb"])
    }
}
