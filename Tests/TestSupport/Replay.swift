import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
import Domain
import Foundation
import Presenters
import Locking
import ScenarioFormat

/// How fast ``replayReadings(scenario:speed:until:)`` plays a fixture.
public enum ReplaySpeed: Sendable, Equatable {
    /// No waiting between events, and after each one the simulator waits
    /// until the presenter shows what the client's mirror holds: every
    /// change reaches the presenter on its own (deterministic).
    case max
    /// The original timing divided by the factor (no pacing: the repository
    /// may coalesce changes that come closer together than it consumes them).
    case factor(Double)
}

/// When the replay stops.
public enum ReplayEnd: Sendable, Equatable {
    /// After the scenario's last event (max speed), or its span at the factor.
    case endOfScenario
    /// After this many seconds of wall-clock time.
    case seconds(Double)
}

/// The decoded readings one device showed, in order.
public struct DeviceReadings: Sendable, Equatable, CustomStringConvertible {
    public let address: String
    /// Every distinct reading list the device list showed for the device,
    /// consecutive repeats collapsed (an RSSI-only change shows the same
    /// readings again and adds nothing). Devices whose advertisements never
    /// decoded are left out.
    public var readings: [[Reading]]

    public init(address: String, readings: [[Reading]]) {
        self.address = address
        self.readings = readings
    }

    public var description: String {
        "\(address): " + readings.map { "[" + $0.map(\.description).joined(separator: ", ") + "]" }.joined(separator: " → ")
    }
}

public struct ReplayError: Error, CustomStringConvertible {
    public let description: String
}

/// Replays `scenario` through the simulator (on a private dbus-daemon) into
/// the real `BlueZClient`, `BlueZDeviceRepository` and `DeviceListPresenter`,
/// scanning from the presenter as a user would, and returns every decoded
/// reading change per device in the order the presenter showed them —
/// devices in order of their first decoded reading. The standard way to turn
/// a capture (`blecompanion record`) into a regression test.
///
/// Guaranteed at `.max`: each timeline event is played only after the
/// presenter has caught up with the previous one, so no change is coalesced
/// away; the result depends on the scenario only. At `.factor`, changes of
/// one device closer together than the pipeline consumes them may merge.
///
/// `onBus` runs once the simulator is on the bus and before the client
/// connects (e.g. to start a recorder on the same bus).
public func replayReadings(scenario: Scenario, speed: ReplaySpeed = .max, until: ReplayEnd = .endOfScenario,
                           onBus: (@Sendable (_ address: String) async throws -> Void)? = nil) async throws -> [DeviceReadings] {
    let bus = try PrivateBus.start()
    defer { bus.stop() }
    let pipeline = Lock<(BlueZClient, DeviceListPresenter)?>(nil)
    let caughtUp: @Sendable () async -> Void = {
        guard let (client, presenter) = pipeline.withLock({ $0 }) else { return }
        let expected = expectedReadings(client.mirror.snapshot())
        _ = await first(presenter.states(), within: 10) { shows($0, expected) }
    }
    let options: SimulatorOptions
    switch speed {
    case .max: options = SimulatorOptions(speed: 1, asFastAsConsumed: true, afterEvent: caughtUp)
    case let .factor(f): options = SimulatorOptions(speed: f)
    }
    let simulator = BlueZSimulator(scenario: scenario, options: options)
    try await simulator.start(busAddress: bus.address)
    do {
        try await onBus?(bus.address)
        let client = try await BlueZClient.connect(to: .address(bus.address))
        let repository = BlueZDeviceRepository(client: client)
        let presenter = DeviceListPresenter(repository: repository, navigator: Navigator())
        let collected = Collected()
        let states = presenter.states()
        let collector = Task {
            for await state in states { collected.add(state) }
        }
        defer { collector.cancel() }
        pipeline.withLock { $0 = (client, presenter) }
        presenter.send(.scanToggled)
        switch (until, speed) {
        case let (.seconds(s), _):
            try await Task.sleep(for: .seconds(s))
        case (.endOfScenario, .max):
            await simulator.waitUntilPlayedOnce()
        case let (.endOfScenario, .factor(f)):
            try await Task.sleep(for: .seconds(scenario.span / f + 0.2))
        }
        // Nothing happens from now on (a recorder on the bus sees no more than
        // the presenter), and what is in flight reaches the client's mirror…
        await simulator.freeze()
        try await Task.sleep(for: .milliseconds(500))
        // …the presenter shows what the mirror holds (nothing left in flight)…
        let deadline = ContinuousClock.now + .seconds(10)
        while await first(presenter.states(), within: 0.5, { shows($0, expectedReadings(client.mirror.snapshot())) }) == nil {
            guard ContinuousClock.now < deadline else { throw ReplayError(description: "the presenter did not catch up with the client") }
        }
        // …and every state it emitted has been folded in.
        while collected.last != presenter.state {
            guard ContinuousClock.now < deadline else { throw ReplayError(description: "the collector did not catch up with the presenter") }
            try await Task.sleep(for: .milliseconds(5))
        }
        pipeline.withLock { $0 = nil }
        await simulator.stop()
        return collected.result
    } catch {
        pipeline.withLock { $0 = nil }
        await simulator.stop()
        throw error
    }
}

/// ``replayReadings(scenario:speed:until:)`` for a scenario file.
public func replayReadings(path: String, speed: ReplaySpeed = .max, until: ReplayEnd = .endOfScenario) async throws -> [DeviceReadings] {
    try await replayReadings(scenario: try Scenario.load(path: path), speed: speed, until: until)
}

/// What the device list must show for `snapshot`: readings per device of
/// the first adapter (what the repository shows), nil while unavailable.
func expectedReadings(_ snapshot: BlueZSnapshot) -> [DeviceID: [Reading]]? {
    guard snapshot.available, let adapter = snapshot.sortedAdapters.first, adapter.powered != false else { return nil }
    var out: [DeviceID: [Reading]] = [:]
    for d in snapshot.devices(on: adapter.id) {
        out[d.id] = AdvertisementReadings.decode(d).flatMap(\.readings)
    }
    return out
}

func shows(_ state: DeviceListPresenter.State, _ expected: [DeviceID: [Reading]]?) -> Bool {
    guard let expected else {
        if case .loaded = state.devices { return false }
        return true
    }
    guard case let .loaded(rows) = state.devices else { return false }
    let byID = Dictionary(rows.map { ($0.id, $0.readings) }, uniquingKeysWith: { a, _ in a })
    return expected.allSatisfy { byID[$0.key] == $0.value }
}

/// The first element of `stream` that satisfies `condition`, or nil after `seconds`
/// (Domain's `firstElement`, with the tests' seconds and default).
public func first<E: Sendable>(_ stream: AsyncStream<E>, within seconds: Double = 10,
                               _ condition: @escaping @Sendable (E) -> Bool) async -> E? {
    await firstElement(of: stream, within: .seconds(seconds), where: condition)
}

/// Folds presenter states into per-device reading sequences.
private final class Collected: Sendable {
    private struct Inner {
        var order: [DeviceID] = []
        var readings: [DeviceID: [[Reading]]] = [:]
        var last: DeviceListPresenter.State?
    }
    private let inner = Lock(Inner())

    func add(_ state: DeviceListPresenter.State) {
        inner.withLock { i in
            i.last = state
            guard case let .loaded(rows) = state.devices else { return }
            for row in rows where !row.readings.isEmpty {
                if i.readings[row.id] == nil { i.order.append(row.id) }
                if i.readings[row.id]?.last != row.readings { i.readings[row.id, default: []].append(row.readings) }
            }
        }
    }

    var last: DeviceListPresenter.State? { inner.withLock { $0.last } }

    var result: [DeviceReadings] {
        inner.withLock { i in i.order.map { DeviceReadings(address: $0.address.description, readings: i.readings[$0] ?? []) } }
    }
}

/// A deterministic random number generator (SplitMix64) for tests that try
/// many generated cases: the same sequence on every run, so a failure repeats.
public struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// An HTTP request by curl (no redirects, `seconds` at most): the status (0
/// when there was no answer) and the body. `arguments` go before the URL
/// (`["-X", "POST", "-d", body]`).
public func curl(_ url: String, _ arguments: [String] = [], seconds: Int = 3) async throws -> (status: Int, body: String) {
    try await offPool {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        p.arguments = ["-s", "-m", "\(seconds)", "-w", "\n%{http_code}"] + arguments + [url]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }
}

/// Polls a cheap local condition (state in memory, a log file) every 5 ms
/// until it holds (true) or `seconds` pass (false).
public func eventually(_ seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}
