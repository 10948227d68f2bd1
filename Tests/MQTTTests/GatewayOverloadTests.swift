import DBus
import Foundation
import Glibc
import MQTT
import Testing
import TestSupport

/// Overload degrades, never collapses: the gateway process under an
/// advertisement flood faster than it can publish keeps its memory bounded
/// (the repository coalesces: the latest advertisement of each device wins,
/// counted in /metrics), answers /healthz within a second throughout, and
/// stops within 10 s of SIGTERM. The short form of the soak in
/// docs/PERFORMANCE.md: 1,000 simulated devices, a flood as fast as the
/// simulator (its own process, `bench bluez-sim`) can put it on the bus.
@Suite(.serialized, .timeLimit(.minutes(3))) struct GatewayOverloadTests {
    static let devices = 1_000

    func rssKilobytes(_ pid: pid_t) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "")
        }
        return nil
    }

    @Test func aFloodKeepsMemoryBoundedHealthAnsweringAndSIGTERMWorking() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-overload-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let bus = try PrivateBus.start()
        defer { bus.stop() }

        // The simulator in its own process, commanded through a FIFO.
        let sim = try await BenchSimulator(bus: bus.address, devices: Self.devices, in: dir)
        defer { sim.stop() }

        try await withBroker { broker in
            let http = try freeLoopbackPort()
            let config = dir.appendingPathComponent("gateway.yaml")
            try """
                gateway:
                  id: flood
                  state_dir: \(dir.appendingPathComponent("state").path)
                bluez:
                  bus: "\(bus.address)"
                publish:
                  min_interval: 0
                  heartbeat: 0
                devices:
                  expire_after: 3600
                mqtt:
                  host: 127.0.0.1
                  port: \(broker.port)
                  discovery: false
                http:
                  listen: "127.0.0.1:\(http)"
                """.write(to: config, atomically: true, encoding: .utf8)
            let log = dir.appendingPathComponent("gateway.log").path
            let gateway = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path, "--log-format", "text"],
                                    stderr: log)
            let base = "http://127.0.0.1:\(http)"
            let up = await eventually(60) { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("scanning on") }
            #expect(up, "gateway started")
            try await Task.sleep(for: .seconds(3))   // every device listed and first published
            let baseline = try #require(rssKilobytes(gateway))

            // Far more than the gateway (a debug build here) can publish: 200,000 changes as fast as possible.
            sim.flood(200_000)
            var peak = baseline
            var slowest: Duration = .zero
            let clock = ContinuousClock()
            for _ in 0..<15 {
                try await Task.sleep(for: .seconds(1))
                let start = clock.now
                let health = try await curl("GET", "\(base)/healthz", maxTime: 5)
                let took = clock.now - start
                slowest = max(slowest, took)
                #expect(health.status == 200, "/healthz during the flood: \(health.status) \(health.body)")
                peak = max(peak, rssKilobytes(gateway) ?? 0)
            }
            let metrics = try await curl("GET", "\(base)/metrics", maxTime: 5)
            let coalesced = metrics.body.split(separator: "\n").first { $0.hasPrefix("blecompanion_advertisements_coalesced_total ") }
                .flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0

            let start = clock.now
            kill(gateway, SIGTERM)
            let status = try await offPool { waitForExit(gateway) }
            let stopTook = clock.now - start
            print("overload: RSS \(baseline / 1024) MiB before, peak \(peak / 1024) MiB during; slowest /healthz \(slowest); coalesced \(Int(coalesced)); SIGTERM exit \(status >> 8) in \(stopTook)")
            #expect(slowest < .seconds(1), "/healthz answered within 1 s throughout (slowest \(slowest))")
            #expect(coalesced > 0, "coalescing is counted in /metrics")
            #expect(peak < baseline + 96 * 1024, "RSS bounded: \(baseline / 1024) MiB before, \(peak / 1024) MiB at the peak")
            #expect(status == 0 && stopTook < .seconds(10), "SIGTERM under load: wait status \(status) after \(stopTook)")
        }
    }
}
