import Foundation
import Glibc
import Testing
import TestSupport

/// A bluetoothd that keeps its bus name but stops answering (here the
/// simulator process, SIGSTOPped; in the field a hung or swamped daemon):
/// the gateway's pings (`bluez.ping_interval`) turn it into `/healthz` 503
/// "not answering", a metric and a log line, and back once it answers.
@Suite(.timeLimit(.minutes(2))) struct GatewayLivenessTests {
    @Test func aStoppedBluetoothdIsReportedAsNotAnsweringAndBackWhenItAnswers() async throws {
        let simulator = try SimulatorProcess()
        let simulatorPID = simulator.process.processIdentifier
        // Whatever happens below, the simulator must be able to take its SIGTERM.
        defer {
            kill(simulatorPID, SIGCONT)
            simulator.stop()
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-liveness-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let started = try spawnGateway(bus: simulator.address, pingInterval: 1, in: dir)
        let gateway = started.pid, port = started.port, log = started.log
        var stopped = false
        defer { if !stopped { kill(gateway, SIGKILL); _ = waitForExit(gateway) } }
        let health = "http://127.0.0.1:\(port)/healthz"
        func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

        let before = try await httpWait(health, seconds: 30) { $0.status == 200 }
        #expect(before.status == 200 && before.body.contains("\"bluetoothd\":\"available\""), "\(before) \(logText())")

        kill(simulatorPID, SIGSTOP)
        // A ping a second, a second to answer: noticed within a few seconds.
        let frozen = try await httpWait(health, seconds: 15) { $0.status == 503 }
        #expect(frozen.status == 503 && frozen.body.contains("\"bluetoothd\":\"not answering\""), "\(frozen) \(logText())")
        let metrics = try await httpGet("http://127.0.0.1:\(port)/metrics")
        #expect(metrics.body.contains("blecompanion_bluetoothd_answering 0"), "\(metrics.body)")

        kill(simulatorPID, SIGCONT)
        let back = try await httpWait(health, seconds: 15) { $0.status == 200 }
        #expect(back.status == 200 && back.body.contains("\"bluetoothd\":\"available\""), "\(back) \(logText())")

        kill(gateway, SIGTERM)
        let status = try await offPool { waitForExit(gateway) }
        stopped = true
        #expect(status == 0, "wait status \(status)")
        let text = logText()
        #expect(text.contains("did not answer a ping within"), "\(text)")
        #expect(text.contains("bluetoothd answers again"), "\(text)")
    }

    /// SIGTERM or SIGINT at any moment of start-up (before the signal
    /// handlers exist, while connecting, while opening the stores, once
    /// running): the process is gone within 10 s, by a clean exit 0 or,
    /// before its handlers are installed, by the signal's default action.
    /// SIGHUP (a reload of the profiles) at any moment after the first
    /// steps does not end it: it still stops cleanly on SIGTERM afterwards.
    @Test func aSignalAtAnyStageOfStartUpEndsTheProcess() async throws {
        let simulator = try SimulatorProcess()
        defer { simulator.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-startstop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let config = dir.appendingPathComponent("gateway.yaml")
        try """
            gateway: { id: startstop, state_dir: "\(dir.appendingPathComponent("state").path)" }
            bluez: { bus: "\(simulator.address)" }
            http: { listen: "127.0.0.1:\(try freeLoopbackPort())" }
            """.write(to: config, atomically: true, encoding: .utf8)
        let cases: [(Int32, Double)] = [(SIGTERM, 0), (SIGTERM, 0.02), (SIGTERM, 0.05), (SIGTERM, 0.1), (SIGTERM, 0.2),
                                        (SIGTERM, 0.4), (SIGTERM, 0.8), (SIGTERM, 1.6), (SIGINT, 0.3), (SIGHUP, 1.0), (SIGHUP, 1.6)]
        for (signal, delay) in cases {
            let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path],
                                stderr: dir.appendingPathComponent("gateway-\(signal)-\(delay).log").path)
            try await Task.sleep(for: .seconds(delay))
            if signal == SIGHUP {
                kill(pid, SIGHUP)
                try await Task.sleep(for: .seconds(1))
                var status: Int32 = 0
                #expect(waitpid(pid, &status, WNOHANG) == 0, "SIGHUP after \(delay) s ended the gateway: wait status \(status)")
            }
            let stop = signal == SIGHUP ? SIGTERM : signal
            let sent = Date()
            kill(pid, stop)
            let status = try await offPool { waitForExit(pid) }
            let took = Date().timeIntervalSince(sent)
            let clean = status == 0
            let byTheSignal = status & 0x7f == stop
            #expect(clean || byTheSignal, "signal \(signal) after \(delay) s: wait status \(status)")
            #expect(took < 10, "signal \(signal) after \(delay) s: exited after \(took) s")
        }
    }
}
