import Foundation
import Locking
import Testing
import TestSupport
import BlueZ
import BlueZSimulator
import DBus
@testable import Domain
import Vocabulary

/// A backend the test controls: presence, connection outcomes, and a
/// change signal.
final class FakeConnectionBackend: ConnectionBackend {
    struct DeviceState { var present = true; var connected = false; var failuresLeft = 0; var block = false }
    let devices = Lock<[DeviceID: DeviceState]>([:])
    let attempts = Lock<[DeviceID]>([])
    let notified = Lock<[(DeviceID, [String])]>([])
    let concurrent = Lock<(now: Int, peak: Int)>((0, 0))
    private let change = StateStore(0, bufferLimit: 8)

    func set(_ id: DeviceID, _ change: (inout DeviceState) -> Void) {
        devices.withLock { change(&$0[id, default: DeviceState()]) }
        self.change.update { $0 += 1 }
    }

    func isPresent(_ id: DeviceID) -> Bool { devices.withLock { $0[id]?.present ?? false } }
    func isConnected(_ id: DeviceID) -> Bool { devices.withLock { $0[id]?.connected ?? false } }
    func changes() -> AsyncStream<Void> {
        let values = change.states()
        return AsyncStream { c in
            let t = Task { for await _ in values { c.yield(()) }; c.finish() }
            c.onTermination = { _ in t.cancel() }
        }
    }
    func connect(_ id: DeviceID) async throws(DomainError) {
        attempts.withLock { $0.append(id) }
        concurrent.withLock { $0.now += 1; $0.peak = max($0.peak, $0.now) }
        defer { concurrent.withLock { $0.now -= 1 } }
        while devices.withLock({ $0[id]?.block ?? false }) { try? await Task.sleep(for: .milliseconds(5)) }
        let fail = devices.withLock { d -> Bool in
            if d[id, default: DeviceState()].failuresLeft > 0 { d[id]?.failuresLeft -= 1; return true }
            d[id]?.connected = true
            return false
        }
        if fail { throw DomainError("Failed: le-connection-abort-by-local") }
        change.update { $0 += 1 }
    }
    func enableNotifications(_ id: DeviceID, uuids: [String]) async { notified.withLock { $0.append((id, uuids)) } }
}

/// Records the delays asked for and returns at once (a hand-driven clock).
final class RecordingSleeper: Sleeper {
    let delays = Lock<[Duration]>([])
    func sleep(for duration: Duration) async throws {
        delays.withLock { $0.append(duration) }
        try await Task.sleep(for: .milliseconds(1))
    }
}

@Suite(.timeLimit(.minutes(1))) struct ConnectionManagerTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")
    func id(_ n: UInt8) throws -> DeviceID { DeviceID(adapter: hci0, address: try #require(BluetoothAddress(bytes: [0xF0, 0, 0, 0, 0, n]))) }

    @Test func backoffDoublesWithJitterThenConnectsAndReenablesNotifications() async throws {
        let backend = FakeConnectionBackend()
        let sleeper = RecordingSleeper()
        let device = try id(1)
        backend.set(device) { $0.failuresLeft = 4 }
        let manager = ConnectionManager(backend: backend, policy: BackoffPolicy(initial: .seconds(1), maximum: .seconds(5), jitter: 0.2),
                                        sleeper: sleeper, random: { 0.75 })
        manager.watch(device, notify: ["2a37"])
        // Generous: five attempts are only milliseconds apart, but the full
        // suite's flood tests can keep both cores busy for seconds.
        #expect(await eventually(30) { manager.current[device] == .connected })
        // 1, 2, 4, then capped at 5 s; random 0.75 adds +10 %.
        #expect(sleeper.delays.withLock { $0 } == [.milliseconds(1100), .milliseconds(2200), .milliseconds(4400), .milliseconds(5500)])
        #expect(backend.attempts.withLock { $0.count } == 5)
        #expect(backend.notified.withLock { $0.map(\.1) } == [["2a37"]])

        // The link drops: it reconnects at once (backoff starts over) and notifications come back.
        backend.set(device) { $0.connected = false }
        #expect(await eventually(30) { backend.notified.withLock { $0.count } == 2 })
        #expect(manager.current[device] == .connected)
        #expect(backend.attempts.withLock { $0.count } == 6)
        manager.unwatch(device)
        #expect(manager.current[device] == nil)
    }

    @Test func anAbsentDeviceIsNotTriedUntilItReturns() async throws {
        let backend = FakeConnectionBackend()
        let device = try id(2)
        backend.set(device) { $0.present = false }
        let manager = ConnectionManager(backend: backend, sleeper: RecordingSleeper())
        manager.watch(device)
        #expect(await eventually { manager.current[device] == .waitingForDevice })
        try await Task.sleep(for: .milliseconds(200))
        #expect(backend.attempts.withLock { $0.isEmpty }, "no attempts, no hot loop, while the device is gone")
        backend.set(device) { $0.present = true }
        #expect(await eventually { manager.current[device] == .connected })
        #expect(backend.attempts.withLock { $0.count } == 1)
    }

    @Test func atMostTheLimitOfAttemptsPerAdapterAtOnce() async throws {
        let backend = FakeConnectionBackend()
        let devices = try (3...6).map { try id($0) }
        for d in devices { backend.set(d) { $0.block = true } }
        let manager = ConnectionManager(backend: backend, sleeper: RecordingSleeper(), maxConcurrentPerAdapter: 2)
        for d in devices { manager.watch(d) }
        #expect(await eventually { backend.concurrent.withLock { $0.now } == 2 })
        try await Task.sleep(for: .milliseconds(100))
        #expect(backend.concurrent.withLock { $0.peak } == 2)
        for d in devices { backend.set(d) { $0.block = false } }
        #expect(await eventually { devices.allSatisfy { manager.current[$0] == .connected } })
        #expect(backend.concurrent.withLock { $0.peak } == 2)
    }

    @Test func theSimulatorsFlakyDeviceIsKeptConnected() async throws {
        // The flaky link drops 0.4 s after connecting in the fixture; a loaded CI run
        // resolved its services later than that (a third failure, "disconnected
        // before its services were resolved"). Here it drops after 2 s.
        let sim = try await Simulated.start("test-faults.json") { scenario in
            for d in scenario.devices.indices where scenario.devices[d].address == "F0:00:00:00:00:01" {
                scenario.devices[d].faults.disconnectAfter = 2
            }
        }
        defer { sim.bus.stop() }
        let simulator = sim.simulator, client = sim.client
        let session = try await client.discover(adapter: try client.adapter().id)
        let flaky = DeviceID(adapter: hci0, address: try BluetoothAddress("F0:00:00:00:00:01"))
        try await client.mirror.wait(for: "flaky", timeout: .seconds(5)) { $0.devices[flaky] != nil }
        // Backoff runs on the injected sleeper: the delays are observed, not waited for.
        let sleeper = RecordingSleeper()
        let manager = ConnectionManager(backend: BlueZConnectionBackend(client: client),
                                        policy: BackoffPolicy(initial: .seconds(2), maximum: .seconds(30), jitter: 0.2),
                                        sleeper: sleeper, random: { 0.25 })
        let history = Lock<[ConnectionStatus]>([])
        let statuses = manager.statuses()
        let recorder = Task { for await s in statuses { if let v = s[flaky] { history.withLock { $0.append(v) } } } }
        manager.watch(flaky)
        // Two aborted attempts with bluetoothd's reason, a connection, the link drops after 2 s, and it reconnects.
        #expect(await eventually(15) { history.withLock { h in h.filter { $0 == .connected }.count >= 2 } }, "\(history.withLock { $0 })")
        let failures = history.withLock { h in h.compactMap { if case let .retrying(_, _, reason) = $0 { return reason } else { return nil } } }
        #expect(failures.count == 2 && failures.allSatisfy { $0.contains("le-connection-abort-by-local") }, "\(failures)")
        // 2 s then 4 s, each 10 % short (random 0.25 with ±20 % jitter); the reconnect after the drop needs no delay.
        #expect(sleeper.delays.withLock { $0 } == [.milliseconds(1800), .milliseconds(3600)])
        manager.unwatch(flaky)
        recorder.cancel()
        await session.stop()
        await simulator.stop()
    }
}

