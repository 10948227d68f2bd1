import Foundation
import Locking
import Testing
import TestSupport
import BLEParsing
import BlueZ
import DBus
import Domain
@testable import Presenters
import Vocabulary

/// A fake device control implementing the same protocol as the BlueZ one:
/// the test publishes snapshots; operations are recorded and fail on demand
/// (they never change the snapshot themselves, so every state order is known).
final class FakeDeviceControl: DeviceControl {
    let store: StateStore<DeviceDetailSnapshot>
    let calls = Lock<[String]>([])
    let failures = Lock<[String: DomainError]>([:])
    let readValue = Lock<[UInt8]>([0x01])

    init(_ initial: DeviceDetailSnapshot) { store = StateStore(initial) }

    func details(of id: DeviceID) -> AsyncStream<DeviceDetailSnapshot> { store.states() }
    func emit(_ change: (inout DeviceDetailSnapshot) -> Void) { store.update(change) }
    func fail(_ call: String, _ message: String?) { failures.withLock { $0[call] = message.map { DomainError($0) } } }

    private func record(_ call: String, _ name: String) throws(DomainError) {
        calls.withLock { $0.append(call) }
        if let e = failures.withLock({ $0[name] }) { throw e }
    }
    func connect(_ id: DeviceID) async throws(DomainError) { try record("connect", "connect") }
    func disconnect(_ id: DeviceID) async throws(DomainError) { try record("disconnect", "disconnect") }
    func setTrusted(_ on: Bool, _ id: DeviceID) async throws(DomainError) { try record("trust \(on)", "trust") }
    func forget(_ id: DeviceID) async throws(DomainError) { try record("forget", "forget") }
    func read(_ c: GATTAttributeID) async throws(DomainError) -> [UInt8] {
        try record("read \(c.path.rawValue.suffix(8))", "read")
        // As the real control does: the value read is in the details when this returns.
        let value = readValue.withLock { $0 }
        emit { s in
            for si in s.services.indices {
                for ci in s.services[si].characteristics.indices where s.services[si].characteristics[ci].id == c {
                    s.services[si].characteristics[ci].value = value
                    s.services[si].characteristics[ci].decoded = AttributeDecoding.decode(uuid: s.services[si].characteristics[ci].uuid, value: value)
                }
            }
        }
        return value
    }
    func write(_ c: GATTAttributeID, _ value: [UInt8], withoutResponse: Bool) async throws(DomainError) {
        try record("write \(c.path.rawValue.suffix(8)) \(hexString(bytes: value))\(withoutResponse ? " cmd" : "")", "write")
    }
    func setNotifying(_ on: Bool, _ c: GATTAttributeID) async throws(DomainError) {
        try record("notify \(c.path.rawValue.suffix(8)) \(on)", "notify")
    }
}

final class FakeReadingHistory: ReadingHistory {
    let revision = StateStore<[DeviceID: UInt64]>([:])
    let data = Lock<[ReadingSeries]>([])
    let queries = Lock<[Date]>([])
    let failure = Lock<DomainError?>(nil)
    func revisions() -> AsyncStream<[DeviceID: UInt64]> { revision.states() }
    func series(of device: DeviceID, since: Date) throws(DomainError) -> [ReadingSeries] {
        queries.withLock { $0.append(since) }
        if let e = failure.withLock({ $0 }) { throw e }
        return data.withLock { $0 }
    }
    func publish(_ series: [ReadingSeries], for device: DeviceID) {
        data.withLock { $0 = series }
        revision.update { $0[device, default: 0] += 1 }
    }
}

final class FakeWatchList: WatchList {
    let store = StateStore<[BluetoothAddress: ConnectionStatus]>([:])
    let calls = Lock<[(Bool, BluetoothAddress)]>([])
    func watches() -> AsyncStream<[BluetoothAddress: ConnectionStatus]> { store.states() }
    func setWatched(_ on: Bool, _ address: BluetoothAddress) throws(DomainError) { calls.withLock { $0.append((on, address)) } }
}

@Suite(.timeLimit(.minutes(1))) struct DeviceDetailPresenterTests {
    typealias P = DeviceDetailPresenter
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    let device: DeviceID
    let location: GATTAttributeID      // 2a38, read
    let control: GATTAttributeID       // 2a39, write
    let heartRate: GATTAttributeID     // 2a37, notify

    init() throws {
        device = DeviceID(adapter: hci0, address: try BluetoothAddress("A4:C1:38:00:00:02"))
        let base = device.path.rawValue + "/service0010"
        func attr(_ p: String) throws -> GATTAttributeID {
            guard let a = GATTAttributeID(path: try ObjectPath(p)) else { throw DomainError("bad path \(p)") }
            return a
        }
        location = try attr(base + "/char0014")
        control = try attr(base + "/char0016")
        heartRate = try attr(base + "/char0011")
    }

    func details(connected: Bool = false, trusted: Bool = false) -> DeviceDetails {
        var d = DeviceDetails(id: device)
        d.name = "Heart Strap"
        d.rssi = -75
        d.battery = 87
        d.connected = connected
        d.servicesResolved = connected
        d.trusted = trusted
        return d
    }

    func services(notifying: Bool = false) throws -> [GATTServiceNode] {
        guard let service = GATTAttributeID(path: try ObjectPath(device.path.rawValue + "/service0010")) else { return [] }
        func node(_ id: GATTAttributeID, _ uuid: String, _ flags: [String], value: [UInt8]?) -> GATTCharacteristicNode {
            GATTCharacteristicNode(id: id, uuid: uuid, name: AttributeDecoding.name(of: uuid), flags: flags,
                                   canRead: flags.contains("read"), canWrite: flags.contains("write"),
                                   canWriteWithoutResponse: false, canNotify: flags.contains("notify"),
                                   notifying: uuid == "2a37" && notifying, value: value,
                                   decoded: AttributeDecoding.decode(uuid: uuid, value: value), descriptors: [])
        }
        return [GATTServiceNode(id: service, uuid: "180d", name: "Heart Rate", primary: true, characteristics: [
            node(heartRate, "2a37", ["notify"], value: [0x00, 0x48]),
            node(location, "2a38", ["read"], value: [0x01]),
            node(control, "2a39", ["write"], value: nil),
        ])]
    }

    struct Harness {
        let presenter: DeviceDetailPresenter
        let control: FakeDeviceControl
        let history: FakeReadingHistory
        let watches: FakeWatchList
        let navigator: Navigator
        let states: StateRecorder<DeviceDetailPresenter.State>
        let clock: TestClock
    }

    /// A presenter on a known, disconnected device, settled (every source has
    /// delivered its first value).
    func start() async throws -> (Harness, P.State) {
        let clock = TestClock()
        let control = FakeDeviceControl(DeviceDetailSnapshot(availability: .available, device: details()))
        let history = FakeReadingHistory()
        let watches = FakeWatchList()
        let navigator = Navigator()
        navigator.push(.deviceDetail(device))
        let presenter = P(device: device, control: control, history: history, watchList: watches, navigator: navigator, now: { clock.now })
        let states = StateRecorder(presenter.states())
        var expected = P.State(id: device)
        expected.device = .loaded(details())
        expected.services = .unavailable(.notConnected)
        expected.history = .loaded([])
        expected.watch = .notWatched
        // The initial state, then each source's first value in any order; the
        // presenter may have settled in part before the recorder subscribed
        // (its first state is the current one), as a loaded CI run showed.
        await states.expectSettled(at: expected, atMost: 4)
        return (Harness(presenter: presenter, control: control, history: history, watches: watches, navigator: navigator,
                        states: states, clock: clock), expected)
    }

    @Test func connectingShowsServicesThenDisconnecting() async throws {
        let (h, start) = try await start()
        var expected = start
        h.presenter.send(.connectRequested)
        expected.command = .running(.connect)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        #expect(h.control.calls.withLock { $0 } == ["connect"])

        // bluetoothd reports the connection: connected but not resolved → services loading; then the tree.
        h.control.emit { $0.device?.connected = true }
        var d = details()
        d.connected = true
        expected.device = .loaded(d)
        expected.services = .loading
        await h.states.expectNext(expected)
        let tree = try services()
        h.control.emit { s in
            s.device?.servicesResolved = true
            s.services = tree
        }
        expected.device = .loaded(details(connected: true))
        expected.services = .loaded(tree)
        await h.states.expectNext(expected)
        // The decoded values are in the tree: 2a37 0x0048 is 72 bpm.
        #expect(tree[0].characteristics[0].decoded == .readings([Reading(.heartRate, 72, unit: "bpm")]))

        // A second connect while one runs is ignored; a failing disconnect keeps its reason until dismissed.
        h.control.fail("disconnect", "disconnecting from A4:C1:38:00:00:02 failed: org.bluez.Error.NotConnected")
        h.presenter.send(.disconnectRequested)
        expected.command = .running(.disconnect)
        await h.states.expectNext(expected)
        expected.command = .failed(.disconnect, "disconnecting from A4:C1:38:00:00:02 failed: org.bluez.Error.NotConnected")
        await h.states.expectNext(expected)
        h.presenter.send(.errorDismissed)
        expected.command = .idle
        await h.states.expectNext(expected)
        await h.states.expectNoMoreStates()
    }

    @Test func connectFailureSaysWhy() async throws {
        let (h, start) = try await start()
        var expected = start
        h.control.fail("connect", "connecting to A4:C1:38:00:00:02 failed: le-connection-abort-by-local")
        h.presenter.send(.connectRequested)
        expected.command = .running(.connect)
        await h.states.expectNext(expected)
        expected.command = .failed(.connect, "connecting to A4:C1:38:00:00:02 failed: le-connection-abort-by-local")
        await h.states.expectNext(expected)
        // Retrying clears the failure as it starts.
        h.control.fail("connect", nil)
        h.presenter.send(.connectRequested)
        expected.command = .running(.connect)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        await h.states.expectNoMoreStates()
    }

    @Test func trustFollowsTheDeviceAndForgetAsksFirst() async throws {
        let (h, start) = try await start()
        var expected = start
        h.presenter.send(.trustToggled)
        expected.command = .running(.trust)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        h.control.emit { $0.device?.trusted = true }
        expected.device = .loaded(details(trusted: true))
        await h.states.expectNext(expected)
        h.presenter.send(.trustToggled)
        expected.command = .running(.untrust)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        #expect(h.control.calls.withLock { $0 } == ["trust true", "trust false"])

        // Forget: asked, dismissed, asked again, confirmed → removed and the screen closes.
        h.presenter.send(.forgetRequested)
        expected.confirming = .forget
        await h.states.expectNext(expected)
        h.presenter.send(.confirmationDismissed)
        expected.confirming = nil
        await h.states.expectNext(expected)
        h.presenter.send(.forgetConfirmed)        // nothing to confirm: ignored
        h.presenter.send(.forgetRequested)
        expected.confirming = .forget
        await h.states.expectNext(expected)
        h.presenter.send(.forgetConfirmed)
        expected.confirming = nil
        expected.command = .running(.forget)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        #expect(h.control.calls.withLock { $0.last } == "forget")
        #expect(h.navigator.stack == [.deviceList])
        await h.states.expectNoMoreStates()
    }

    @Test func readWriteAndNotifyPerCharacteristicWithEveryFailure() async throws {
        let tree = try services()
        let (h, start) = try await start()
        h.control.emit { s in
            s.device = details(connected: true)
            s.services = tree
        }
        var expected = start
        expected.device = .loaded(details(connected: true))
        expected.services = .loaded(tree)
        await h.states.expectNext(expected)

        h.presenter.send(.readRequested(location))
        expected.operations[location] = .reading
        await h.states.expectNext(expected)
        expected.operations[location] = nil
        await h.states.expectNext(expected)

        h.presenter.send(.readRequested(control))       // write-only
        expected.operations[control] = .failed("this characteristic cannot be read")
        await h.states.expectNext(expected)
        h.presenter.send(.writeRequested(control, hex: "0g", withoutResponse: false))
        expected.operations[control] = .failed("value: expected a hex digit at offset 1, found 'g'")
        await h.states.expectNext { $0.operations[control].map { if case let .failed(m) = $0 { m.hasPrefix("value:") && m.contains("hex digit") } else { false } } == true }
        h.presenter.send(.writeRequested(control, hex: "", withoutResponse: false))
        expected.operations[control] = .failed("value: nothing to write")
        await h.states.expectNext(expected)
        h.presenter.send(.writeRequested(control, hex: "01", withoutResponse: true))
        expected.operations[control] = .failed("this characteristic cannot be written without response")
        await h.states.expectNext(expected)
        h.presenter.send(.writeRequested(control, hex: "0x01", withoutResponse: false))
        expected.operations[control] = .writing
        await h.states.expectNext(expected)
        expected.operations[control] = nil
        await h.states.expectNext(expected)

        h.control.fail("notify", "starting notifications of char0011 on A4:C1:38:00:00:02 failed: org.bluez.Error.Failed")
        h.presenter.send(.notifyToggled(heartRate))
        expected.operations[heartRate] = .startingNotifications
        await h.states.expectNext(expected)
        expected.operations[heartRate] = .failed("starting notifications of char0011 on A4:C1:38:00:00:02 failed: org.bluez.Error.Failed")
        await h.states.expectNext(expected)
        h.control.fail("notify", nil)
        h.presenter.send(.notifyToggled(heartRate))
        expected.operations[heartRate] = .startingNotifications
        await h.states.expectNext(expected)
        expected.operations[heartRate] = nil
        await h.states.expectNext(expected)
        // bluetoothd says it notifies: the next toggle stops.
        let notifying = try services(notifying: true)
        h.control.emit { $0.services = notifying }
        expected.services = .loaded(notifying)
        await h.states.expectNext(expected)
        h.presenter.send(.notifyToggled(heartRate))
        expected.operations[heartRate] = .stoppingNotifications
        await h.states.expectNext(expected)
        expected.operations[heartRate] = nil
        await h.states.expectNext(expected)
        h.presenter.send(.notifyToggled(location))     // read-only
        expected.operations[location] = .failed("this characteristic does not notify")
        await h.states.expectNext(expected)
        h.presenter.send(.errorDismissed)
        expected.operations = [:]
        await h.states.expectNext(expected)

        #expect(h.control.calls.withLock { $0 } == ["read char0014", "write char0016 01", "notify char0011 true", "notify char0011 true", "notify char0011 false"])
        await h.states.expectNoMoreStates()
    }

    @Test func historyReloadsOnItsDevicesRevisionAndWindow() async throws {
        let (h, start) = try await start()
        var expected = start
        let series = [ReadingSeries(kind: .heartRate, label: "", points: [ReadingPoint(at: h.clock.now, value: 72)])]
        h.history.publish(series, for: device)
        expected.history = .loaded(series)
        await h.states.expectNext(expected)
        // Another device's revision changes nothing.
        let other = DeviceID(adapter: hci0, address: try BluetoothAddress("C0:FE:00:00:00:01"))
        h.history.revision.update { $0[other] = 1 }
        h.presenter.send(.historyWindowChanged(3_600))
        expected.historyWindow = 3_600
        await h.states.expectNext(expected)
        #expect(h.history.queries.withLock { $0.last } == h.clock.now.addingTimeInterval(-3_600))
        h.history.failure.withLock { $0 = DomainError("cannot read the history of A4:C1:38:00:00:02: disk I/O error") }
        h.presenter.send(.historyWindowChanged(7_200))
        expected.historyWindow = 7_200
        expected.history = .failed("cannot read the history of A4:C1:38:00:00:02: disk I/O error")
        await h.states.expectNext(expected)
        h.presenter.send(.historyWindowChanged(0))     // not a window: ignored
        await h.states.expectNoMoreStates()
        #expect(h.history.queries.withLock { $0.count } == 4)
    }

    @Test func watchingGoesThroughTheWatchListAndShowsTheConnection() async throws {
        let (h, start) = try await start()
        var expected = start
        h.presenter.send(.watchToggled)
        expected.command = .running(.watch)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        #expect(h.watches.calls.withLock { $0.map(\.0) } == [true])
        h.watches.store.update { $0[device.address] = .connecting(attempt: 1) }
        expected.watch = .watched(.connecting(attempt: 1))
        await h.states.expectNext(expected)
        h.watches.store.update { $0[device.address] = .connected }
        expected.watch = .watched(.connected)
        await h.states.expectNext(expected)
        h.presenter.send(.watchToggled)
        expected.command = .running(.unwatch)
        await h.states.expectNext(expected)
        expected.command = .idle
        await h.states.expectNext(expected)
        #expect(h.watches.calls.withLock { $0.map(\.0) } == [true, false])
        await h.states.expectNoMoreStates()
    }

    @Test func unavailableRemovedPairAndBack() async throws {
        let (h, start) = try await start()
        var expected = start
        h.presenter.send(.pairRequested)
        #expect(await eventually { h.navigator.stack == [.deviceList, .deviceDetail(device), .pairing(device)] })
        h.navigator.pop()
        h.control.emit { $0 = DeviceDetailSnapshot(availability: .bluetoothdGone) }
        expected.device = .unavailable(.bluetooth(.bluetoothdGone))
        expected.services = .unavailable(.bluetooth(.bluetoothdGone))
        await h.states.expectNext(expected)
        h.presenter.send(.pairRequested)       // nothing to pair: ignored
        h.presenter.send(.trustToggled)        // ignored
        h.control.emit { $0 = DeviceDetailSnapshot(availability: .available) }
        let reason = "bluetoothd does not know A4:C1:38:00:00:02 (removed, or not seen since it started)"
        expected.device = .failed(reason)
        expected.services = .failed(reason)
        await h.states.expectNext(expected)
        h.control.emit { $0 = DeviceDetailSnapshot(availability: .adapterOff(hci0), device: details()) }
        expected.device = .unavailable(.bluetooth(.adapterOff(AdapterID(path: "/org/bluez/hci0"))))
        expected.services = .unavailable(.bluetooth(.adapterOff(AdapterID(path: "/org/bluez/hci0"))))
        await h.states.expectNext(expected)
        h.presenter.send(.backRequested)
        #expect(await eventually { h.navigator.stack == [.deviceList] })
        await h.states.expectNoMoreStates()
        #expect(h.control.calls.withLock { $0 }.isEmpty)
    }

    @Test func withoutDatabaseOrWatchListBothSaySo() async throws {
        let control = FakeDeviceControl(DeviceDetailSnapshot(availability: .available, device: details()))
        let presenter = P(device: device, control: control, history: nil, watchList: nil, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State(id: device)
        expected.history = .unavailable(.noHistory)
        expected.watch = .notWatched
        let initial = expected
        expected.device = .loaded(details())
        expected.services = .unavailable(.notConnected)
        await states.expectStart(initial, then: expected)
        presenter.send(.watchToggled)
        await states.expectNoMoreStates()
    }
}

