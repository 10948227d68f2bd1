import Foundation
import Locking
import ScenarioFormat
import Testing
import TestSupport
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters

/// Records every state a presenter emits and lets a test assert them one
/// by one, in order, and that nothing else came (exhaustive, in the spirit
/// of Circuit's `presenter.test {}` and TCA's TestStore).
final class StateRecorder<State: Sendable & Equatable>: Sendable {
    private struct Inner {
        var states: [State] = []
        var cursor = 0
        /// The reader waiting for the next state, with the deadline it waits until.
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let inner = Lock(Inner())
    private let task: Task<Void, Never>

    init(_ states: AsyncStream<State>) {
        let inner = self.inner
        task = Task {
            for await s in states {
                let waiter = inner.withLock { i -> CheckedContinuation<Void, Never>? in
                    i.states.append(s)
                    defer { i.waiter = nil }
                    return i.waiter
                }
                waiter?.resume()
            }
        }
    }

    deinit { task.cancel() }

    /// The next state, waiting up to `seconds`: woken by its arrival, not by
    /// polling, so a test goes on as soon as the presenter has spoken.
    func next(within seconds: Double = 10) async -> State? {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while true {
            let taken = inner.withLock { i -> State? in
                guard i.cursor < i.states.count else { return nil }
                defer { i.cursor += 1 }
                return i.states[i.cursor]
            }
            if let taken { return taken }
            if ContinuousClock.now >= deadline { return nil }
            let inner = self.inner
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let ready = inner.withLock { i -> Bool in
                    if i.cursor < i.states.count { return true }
                    i.waiter = c
                    return false
                }
                if ready { c.resume(); return }
                // The deadline wakes it too; a wake-up with nothing new just
                // loops (and waits again until the deadline).
                Task {
                    try? await Task.sleep(until: deadline, clock: .continuous)
                    let timedOut = inner.withLock { i -> CheckedContinuation<Void, Never>? in
                        defer { i.waiter = nil }
                        return i.waiter
                    }
                    timedOut?.resume()
                }
            }
        }
    }

    func expectNext(_ expected: State, sourceLocation: SourceLocation = #_sourceLocation) async {
        let got = await next()
        #expect(got == expected, sourceLocation: sourceLocation)
    }

    /// The start of a presenter whose source already holds data when it is
    /// made: its initial state, then `loaded` — or `loaded` alone, when the
    /// presenter had loaded before the test subscribed (``states()`` begins
    /// with the state current at subscription; a loaded CI run showed it).
    func expectStart(_ initial: State, then loaded: State, sourceLocation: SourceLocation = #_sourceLocation) async {
        let first = await next()
        if first == initial, initial != loaded {
            await expectNext(loaded, sourceLocation: sourceLocation)
        } else {
            #expect(first == loaded, sourceLocation: sourceLocation)
        }
    }

    /// Asserts the next state with a closure, for states with parts a test
    /// cannot know exactly.
    func expectNext(sourceLocation: SourceLocation = #_sourceLocation, _ check: (State) -> Bool) async {
        let got = await next()
        #expect(got.map(check) == true, "got \(String(describing: got))", sourceLocation: sourceLocation)
    }

    /// For the start of a presenter with several sources whose first values
    /// arrive in any order: consumes states until `expected`, failing if it
    /// takes more than `atMost` states or never comes.
    func expectSettled(at expected: State, atMost: Int, sourceLocation: SourceLocation = #_sourceLocation) async {
        var seen: [State] = []
        while seen.count < atMost, let s = await next() {
            seen.append(s)
            if s == expected { return }
        }
        Issue.record("did not reach \(expected) within \(atMost) states: \(seen)", sourceLocation: sourceLocation)
    }

    func expectNoMoreStates(for seconds: Double = 0.15, sourceLocation: SourceLocation = #_sourceLocation) async {
        try? await Task.sleep(for: .seconds(seconds))
        let extra = inner.withLock { i in Array(i.states.dropFirst(i.cursor)) }
        #expect(extra.isEmpty, "unexpected states: \(extra)", sourceLocation: sourceLocation)
    }
}

/// A fake device repository implementing the same protocol as the real one:
/// tests push snapshots and choose what scanning does.
final class FakeDeviceRepository: DeviceRepository {
    let store = StateStore(DeviceListSnapshot(availability: .bluetoothdGone))
    private let scanFailure = Lock<DomainError?>(nil)
    let scanCalls = Lock<[Bool]>([])

    func snapshots() -> AsyncStream<DeviceListSnapshot> { store.states() }

    func setScanning(_ on: Bool) async throws(DomainError) {
        scanCalls.withLock { $0.append(on) }
        if let e = scanFailure.withLock({ $0 }) { throw e }
        store.update { $0.scanning = on }
    }

    func failScanning(with error: DomainError?) { scanFailure.withLock { $0 = error } }
    func emit(_ snapshot: DeviceListSnapshot) { store.update { $0 = snapshot } }
}

/// A clock the test moves by hand.
final class TestClock: Sendable {
    private let current = Lock(Date(timeIntervalSince1970: 1_800_000_000))
    var now: Date { current.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { current.withLock { $0 += seconds } }
}

/// A scenario from fixtures/scenarios.
func loadScenario(_ name: String, filePath: String = #filePath) throws -> Scenario {
    let root = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    return try Scenario.load(path: root.appendingPathComponent("fixtures/scenarios/\(name)").path)
}

/// A private dbus-daemon with the simulator running `scenario` and our client
/// connected to it. The caller stops `bus` (in a defer).
struct Simulated {
    let scenario: Scenario
    let bus: PrivateBus
    let simulator: BlueZSimulator
    let client: BlueZClient

    static func start(_ scenarioName: String, adjust: (inout Scenario) -> Void = { _ in }) async throws -> Simulated {
        var scenario = try loadScenario(scenarioName)
        adjust(&scenario)
        let bus = try PrivateBus.start()
        do {
            let simulator = BlueZSimulator(scenario: scenario)
            try await simulator.start(busAddress: bus.address)
            let client = try await BlueZClient.connect(to: .address(bus.address))
            return Simulated(scenario: scenario, bus: bus, simulator: simulator, client: client)
        } catch {
            bus.stop()
            throw error
        }
    }
}

/// Waits until `presenter` emits a state satisfying `condition` (true), or
/// `seconds` pass (false). For integration tests, where bluetoothd's timing
/// decides how many intermediate states there are.
func waitFor<P: Presenter>(_ presenter: P, within seconds: Double = 10, _ condition: @escaping @Sendable (P.State) -> Bool) async -> Bool {
    await first(presenter.states(), within: seconds, condition) != nil
}

/// A sleeper the test wakes by hand: every sleep waits until `fireAll()`
/// (or its task is cancelled), and the durations asked for are kept.
final class ManualSleeper: Sleeper {
    private struct Inner {
        var next: UInt64 = 0
        var pending: [UInt64: (Duration, CheckedContinuation<Void, any Error>)] = [:]
        var cancelledEarly: Set<UInt64> = []
    }
    private let inner = Lock(Inner())

    func sleep(for duration: Duration) async throws {
        let id = inner.withLock { i -> UInt64 in
            i.next += 1
            return i.next
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let cancelled = inner.withLock { i -> Bool in
                    if i.cancelledEarly.remove(id) != nil { return true }
                    i.pending[id] = (duration, c)
                    return false
                }
                if cancelled { c.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let c = inner.withLock { i -> CheckedContinuation<Void, any Error>? in
                if let p = i.pending.removeValue(forKey: id) { return p.1 }
                i.cancelledEarly.insert(id)
                return nil
            }
            c?.resume(throwing: CancellationError())
        }
    }

    /// The durations of the sleeps now waiting, oldest first.
    var waiting: [Duration] { inner.withLock { i in i.pending.sorted { $0.key < $1.key }.map(\.value.0) } }

    func fireAll() {
        let all = inner.withLock { i -> [CheckedContinuation<Void, any Error>] in
            defer { i.pending.removeAll() }
            return i.pending.values.map(\.1)
        }
        for c in all { c.resume() }
    }
}
