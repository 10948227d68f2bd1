import BlueZ
import CPosix
import DBus
import Domain
import Foundation
import Gateway
import Logging
import MQTT
import Locking
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// scripts/bench-gateway: simulator advertisements to MQTT messages on a real broker.
///
/// `bench gateway --address A --devices D --broker-port P --state-dir DIR`:
/// the real gateway runtime (repository, device-list presenter, planner,
/// SQLite outbox, libmosquitto) on the bus at A, publishing to the broker on
/// 127.0.0.1:P, plus a subscriber counting what arrives on the state topics.
/// Prints READY once every device's first state arrived, then obeys lines
/// on standard input: `measure` (starts the CPU/wall clock; the script then
/// floods the simulator), `settle N` (waits until the client's mirror applied
/// the N changes, then until nothing arrived for 2 s and the outbox is empty,
/// then prints one JSON line), `quit`.
///
/// `bench mqtt-publish --broker-port P --count N`: the baseline — one
/// libmosquitto client publishing N state-sized QoS 1 messages to the same
/// broker, each awaited (as the gateway's queue publisher does), with the
/// same counting subscriber. One JSON line.
enum GatewayBench {
    static func cpuSeconds() -> Double { DBusReceiveBench.cpuSeconds() }

    static func currentRSSKilobytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
    }

    static func option(_ arguments: [String], _ name: String) -> String? {
        guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count else { return nil }
        return arguments[i + 1]
    }

    /// Counts messages on a filter.
    final class Counter: Sendable {
        private let count = Atomic<Int>(0)
        private let lastAt = Lock<ContinuousClock.Instant>(.now)
        var value: Int { count.load(ordering: .relaxed) }
        var quietFor: Duration { ContinuousClock.now - lastAt.withLock { $0 } }
        func add() {
            count.add(1, ordering: .relaxed)
            touch()
        }
        /// Quiet time counts from now (the start of a measurement).
        func touch() { lastAt.withLock { $0 = .now } }
    }

    static func subscribe(port: Int, filter: String) async throws -> (MQTTClient, Counter, Task<Void, Never>) {
        // A client id of its own: two clients with one id make the broker drop the older one.
        let client = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "bench-subscriber-\(getpid())"))
        let messages = try await client.subscribe(filter, qos: .atLeastOnce)
        let counter = Counter()
        let task = Task { for await _ in messages { counter.add() } }
        return (client, counter, task)
    }

    static func runGateway(_ arguments: [String]) async -> Int32 {
        guard let address = option(arguments, "--address"), let devices = option(arguments, "--devices").flatMap(Int.init),
              let port = option(arguments, "--broker-port").flatMap(Int.init), let dir = option(arguments, "--state-dir") else {
            writeError("bench gateway: needs --address A --devices D --broker-port P --state-dir DIR")
            return 64
        }
        // The allocator as `blecompanion gateway` sets it up: without it this
        // process measured glibc's default (a mmap threshold that rises after
        // each large free, so large transients stayed on the heap), not the
        // service's memory.
        csystem_tune_malloc_for_service()
        do {
            let (subscriber, counter, counting) = try await subscribe(port: port, filter: "blecompanion/bench/+/state")
            let rssStart = currentRSSKilobytes()
            var options = GatewayOptions(topics: GatewayTopics(gatewayID: "bench"), stateDirectory: URL(fileURLWithPath: dir),
                                         policy: PublishPolicy(minInterval: 0, heartbeat: nil), discovery: false, expireAfter: 86_400)
            options.mqtt = MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "bench-gateway")
            let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
            let runtime = try await GatewayRuntime.start(bus: .address(address), options: options, logger: logger)
            runtime.run()
            let readyDeadline = ContinuousClock.now + .seconds(300)
            while counter.value < devices {
                guard ContinuousClock.now < readyDeadline else {
                    writeError("bench gateway: only \(counter.value) of \(devices) devices published within 300 s")
                    return 1
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            let rssReady = currentRSSKilobytes()
            printFlushed("READY")
            var base = counter.value
            var cpuStart = cpuSeconds()
            var start = ContinuousClock.now
            var advertisementsStart = runtime.metrics.current.advertisements
            var appliedStart = runtime.bluezChangesApplied
            while let line = readLine() {
                let words = line.split(separator: " ")
                switch words.first.map(String.init) ?? "" {
                case "measure":
                    runtime.refreshMetrics()
                    base = counter.value
                    cpuStart = cpuSeconds()
                    start = .now
                    advertisementsStart = runtime.metrics.current.advertisements
                    appliedStart = runtime.bluezChangesApplied
                    counter.touch()
                    printFlushed("MEASURING")
                case "settle":
                    // Until the mirror has every change, then nothing more arrives (2 s quiet) and the outbox is empty.
                    let expected = words.count > 1 ? UInt64(words[1]) ?? 0 : 0
                    // (A client that fell behind loses the oldest signals and resynchronises, so the
                    // count may stop short: then it waits until it has not moved for 2 s.)
                    var last = runtime.bluezChangesApplied
                    var still = ContinuousClock.now
                    while runtime.bluezChangesApplied - appliedStart < expected, ContinuousClock.now - still < .seconds(2) {
                        try await Task.sleep(for: .milliseconds(50))
                        let now = runtime.bluezChangesApplied
                        if now != last { last = now; still = .now }
                    }
                    try await Task.sleep(for: .milliseconds(200))
                    while counter.quietFor < .seconds(2) || runtime.metrics.current.queueDepth > 0 {
                        runtime.refreshMetrics()
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    let wall = (ContinuousClock.now - start) - counter.quietFor
                    let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
                    let cpu = cpuSeconds() - cpuStart
                    runtime.refreshMetrics()
                    let received = counter.value - base
                    let advertisements = runtime.bluezChangesApplied - appliedStart
                    let processed = runtime.metrics.current.advertisements - advertisementsStart
                    printFlushed(String(format: "{\"impl\":\"gateway\",\"devices\":%d,\"advertisements\":%llu,\"processed\":%llu,\"published\":%d,"
                                        + "\"wall_s\":%.4f,\"cpu_s\":%.4f,\"per_s\":%.1f,\"cpu_us_per_message\":%.2f,"
                                        + "\"rss_start_kb\":%d,\"rss_ready_kb\":%d,\"rss_now_kb\":%d,\"maxrss_kb\":%d,\"dropped\":%d}",
                                        devices, advertisements, processed, received, seconds, cpu, Double(received) / max(seconds, 1e-9),
                                        cpu * 1e6 / Double(max(received, 1)), rssStart, rssReady, currentRSSKilobytes(),
                                        BlueZIngestBench.maxRSSKilobytes(), runtime.metrics.current.queueDropped))
                case "quit":
                    await runtime.shutdown()
                    counting.cancel()
                    await subscriber.disconnect()
                    return 0
                default:
                    writeError("bench gateway: expected measure, settle or quit, got \"\(line)\"")
                }
            }
            await runtime.shutdown()
            return 0
        } catch {
            writeError("bench gateway: \(error)")
            return 1
        }
    }

    static func runPublishBaseline(_ arguments: [String]) async -> Int32 {
        guard let port = option(arguments, "--broker-port").flatMap(Int.init), let count = option(arguments, "--count").flatMap(Int.init),
              count > 0 else {
            writeError("bench mqtt-publish: needs --broker-port P --count N")
            return 64
        }
        do {
            let (subscriber, counter, counting) = try await subscribe(port: port, filter: "blecompanion/baseline/+/state")
            let publisher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "bench-baseline"))
            // A state payload of the same shape and size as the gateway's.
            let payload = Array(#"{"address":"C0:00:00:00:01:42","battery_voltage":2.977,"format":"ruuvi","humidity":53.49,"last_seen":"2026-11-23T02:00:00Z","name":"Tag 1","pressure":1000.44,"rssi":-60,"temperature":24.3}"#.utf8)
            let cpuStart = cpuSeconds()
            let start = ContinuousClock.now
            for k in 0..<count {
                try await publisher.publish(MQTTMessage(topic: "blecompanion/baseline/c0000000\(String(format: "%04x", k % 500))/state",
                                                        payload: payload, qos: .atLeastOnce))
            }
            while counter.value < count { try await Task.sleep(for: .milliseconds(20)) }
            let wall = ContinuousClock.now - start
            let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
            let cpu = cpuSeconds() - cpuStart
            printFlushed(String(format: "{\"impl\":\"mqtt-baseline\",\"published\":%d,\"wall_s\":%.4f,\"cpu_s\":%.4f,\"per_s\":%.1f,\"cpu_us_per_message\":%.2f}",
                                count, seconds, cpu, Double(count) / seconds, cpu * 1e6 / Double(count)))
            await publisher.disconnect()
            counting.cancel()
            await subscriber.disconnect()
            return 0
        } catch {
            writeError("bench mqtt-publish: \(error)")
            return 1
        }
    }
}
