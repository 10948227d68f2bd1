import BlueZSimulator
import DBus
import Domain
import Foundation
import Glibc
import MQTT
import Locking
import Testing
import TestSupport

/// The gateway process stops within 10 s of SIGTERM/SIGINT with exit status
/// 0 whatever is broken around it, and what it accepted stays in the outbox:
/// a restart against a working broker delivers it, in order.
@Suite(.serialized, .timeLimit(.minutes(3))) struct GatewayShutdownTests {
    enum Fault: String, CaseIterable, CustomTestStringConvertible {
        case none
        case brokerGone
        case brokerBlackholed
        case busGone
        case bluetoothdGone
        case everythingGone
        case beforeFirstConnack

        var testDescription: String { rawValue }
        /// Whether the broker can take the queue at shutdown.
        var brokerReachable: Bool { [.none, .busGone, .bluetoothdGone].contains(self) }
    }

    /// The bound the issue and the unit's documentation promise.
    static let exitBound: Duration = .seconds(10)

    /// A private bus with the simulated home on it.
    final class Home: Sendable {
        let bus: PrivateBus
        let simulator: BlueZSimulator
        init() async throws {
            bus = try PrivateBus.start()
            simulator = BlueZSimulator(scenario: try demoScenario())
            try await simulator.start(busAddress: bus.address)
        }
        func stop() async {
            await simulator.stop()
            bus.stop()
        }
    }

    func writeConfig(_ dir: URL, bus: String, brokerPort: Int) throws -> URL {
        let config = dir.appendingPathComponent("gateway-\(UUID().uuidString).yaml")
        try """
            gateway:
              id: stop
              state_dir: \(dir.appendingPathComponent("state").path)
            bluez:
              bus: "\(bus)"
            publish:
              min_interval: 0
            mqtt:
              host: 127.0.0.1
              port: \(brokerPort)
            http:
              listen: "127.0.0.1:\(try freeLoopbackPort())"
            """.write(to: config, atomically: true, encoding: .utf8)
        return config
    }

    func log(_ dir: URL) -> String {
        (try? String(contentsOf: dir.appendingPathComponent("gateway.log"), encoding: .utf8)) ?? "(no log)"
    }

    /// SIGTERM (or SIGINT), then the wait status and how long the exit took.
    func stop(_ pid: pid_t, with signal: Int32) async throws -> (status: Int32, took: Duration) {
        let clock = ContinuousClock()
        let start = clock.now
        kill(pid, signal)
        // A watchdog of the test's own: a gateway that hangs is killed after
        // 30 s so the suite reports it instead of hanging too.
        let watchdog = Task { try await Task.sleep(for: .seconds(30)); kill(pid, SIGKILL) }
        let status = try await offPool { waitForExit(pid) }
        watchdog.cancel()
        return (status, clock.now - start)
    }

    /// Whatever a case started, stopped after it whether it passed or not.
    final class Started: Sendable {
        let homes = Lock<[Home]>([])
        let broker = Lock<Broker?>(nil)
        func stopAll() async {
            for home in homes.withLock({ $0 }) { await home.stop() }
            await broker.withLock({ $0 })?.stop()
        }
    }

    @Test(arguments: Fault.allCases)
    func exitsWithinTenSecondsAndKeepsTheOutbox(_ fault: Fault) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-stop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let started = Started()
        do {
            try await check(fault, in: dir, started: started)
        } catch {
            await started.stopAll()
            throw error
        }
        await started.stopAll()
    }

    func check(_ fault: Fault, in dir: URL, started: Started) async throws {
        let home = try await Home()
        started.homes.withLock { $0.append(home) }
        let broker = try await Broker.start()
        started.broker.withLock { $0 = broker }

        let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "watch-\(UUID().uuidString)"))
        let inbox = Inbox(try await watcher.subscribe("blecompanion/stop/#", qos: .atLeastOnce))
        if fault == .beforeFirstConnack { broker.freeze() }

        let logPath = dir.appendingPathComponent("gateway.log").path
        let config = try writeConfig(dir, bus: home.bus.address, brokerPort: broker.port)
        let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path, "--log-format", "text"], stderr: logPath)

        let ruuvi = "blecompanion/stop/cbb8334c884f/state"
        if fault == .beforeFirstConnack {
            // Running, readings queued, and no CONNACK ever: the queue grows.
            let queued = await eventually(30) { log(dir).contains("gateway running") }
            #expect(queued, "\(log(dir))")
            try await Task.sleep(for: .seconds(2))
        } else {
            let seen = await inbox.wait(timeout: .seconds(30)) { $0.contains { $0.topic == ruuvi } }
            #expect(seen.contains { $0.topic == ruuvi }, "the gateway published before the fault: \(log(dir))")
        }

        switch fault {
        case .none, .beforeFirstConnack: break
        case .brokerGone: try await broker.crash()
        case .brokerBlackholed: broker.freeze()
        case .busGone: kill(home.bus.pid, SIGKILL)
        case .bluetoothdGone: await home.simulator.stop()
        case .everythingGone:
            try await broker.crash()
            await home.simulator.stop()
            kill(home.bus.pid, SIGKILL)
        }
        // Long enough for the gateway to notice (the connection-lost log line, a new list state).
        try await Task.sleep(for: .seconds(1))

        // With the bus gone the gateway stops by itself, with 69 for systemd
        // to restart it (a signal may find it already stopping or stopped).
        let busLost = fault == .busGone || fault == .everythingGone
        // SIGINT stops it as SIGTERM does (SIGHUP reloads the profiles instead).
        let signal = fault == .busGone ? SIGINT : SIGTERM
        let (status, took) = try await stop(pid, with: signal)
        #expect(status == (busLost ? 69 << 8 : 0), "wait status \(status) after \(took); log:\n\(log(dir))")
        #expect(took < Self.exitBound, "exit took \(took); log:\n\(log(dir))")
        if busLost { #expect(log(dir).contains("lost the D-Bus connection"), "\(log(dir))") }
        print("shutdown \(fault.rawValue): exit \(status >> 8) after \(took)")

        let outboxPath = dir.appendingPathComponent("state/outbox.sqlite").path
        let kept: [QueuedMessage] = try {
            let queue = try OutboundQueue(path: outboxPath)
            return try queue.oldest(100_000)
        }()
        if fault.brokerReachable {
            #expect(kept.isEmpty, "flushed to the broker that was there: \(kept.map(\.topic))")
            let end = await inbox.wait { $0.contains { $0.topic == "blecompanion/stop/status" && $0.text == "offline" } }
            #expect(end.last { $0.topic == "blecompanion/stop/status" }?.text == "offline", "a clean offline")
            await watcher.disconnect()
            return
        }
        // The shutdown's own messages (every device offline) are among what was kept.
        #expect(kept.contains { $0.topic == "blecompanion/stop/cbb8334c884f/status" && $0.text == "offline" },
                "the devices' offline states are kept: \(kept.map(\.topic))")
        await watcher.disconnect()

        // Restart against a working broker (and bus): the outbox is delivered, in order.
        switch fault {
        case .brokerBlackholed, .beforeFirstConnack:
            try await broker.crash()
            try await broker.resume()
        default:
            try await broker.resume()
        }
        var busAddress = home.bus.address
        if fault == .everythingGone {
            let fresh = try await Home()
            started.homes.withLock { $0.append(fresh) }
            busAddress = fresh.bus.address
        }
        let second = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "watch-\(UUID().uuidString)"))
        let delivered = Inbox(try await second.subscribe("#", qos: .atLeastOnce))
        let again = try spawn(try builtExecutable("blecompanion"),
                              ["gateway", "--config", try writeConfig(dir, bus: busAddress, brokerPort: broker.port).path, "--log-format", "text"],
                              stderr: logPath)
        let wanted = kept.map { Pair(topic: $0.topic, payload: $0.payload) }
        let all = await delivered.wait(timeout: .seconds(30)) { isSubsequence(wanted, of: $0.map { Pair(topic: $0.topic, payload: $0.payload) }) }
        #expect(isSubsequence(wanted, of: all.map { Pair(topic: $0.topic, payload: $0.payload) }),
                "every kept message delivered in its order (\(wanted.count) kept, \(all.count) received); log:\n\(log(dir))")
        let (status2, took2) = try await stop(again, with: SIGTERM)
        #expect(status2 == 0 && took2 < Self.exitBound, "restarted gateway: \(status2) after \(took2)")
        await second.disconnect()
    }

    struct Pair: Equatable {
        let topic: String
        let payload: [UInt8]
    }
}

/// Whether `needle` appears in `haystack` in order (not necessarily adjacent).
func isSubsequence<T: Equatable>(_ needle: [T], of haystack: [T]) -> Bool {
    var index = needle.startIndex
    for element in haystack where index < needle.endIndex && needle[index] == element { index += 1 }
    return index == needle.endIndex
}

extension QueuedMessage {
    var text: String? { String(validating: payload, as: UTF8.self) }
}
