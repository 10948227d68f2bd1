import Foundation
import TestSupport
import Testing

/// `blecompanion record` and `simulate --speed/--loop` as users run them.
@Suite(.serialized, .timeLimit(.minutes(2))) struct RecordCLITests {
    func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("record-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test func badArgumentsAreRefusedWithAClearMessage() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("x.json").path
        let badAddress = try await cli(["record", "--out", out, "--device", "AA:BB:CC"])
        #expect(badAddress.status == 64)
        #expect(badAddress.stderr.contains("--device: \"AA:BB:CC\" is not a Bluetooth address"), "\(badAddress.stderr)")
        let negative = try await cli(["record", "--out", out, "--duration=-2"])
        #expect(negative.status == 64)
        #expect(negative.stderr.contains("--duration: expected a number of seconds > 0, got -2"), "\(negative.stderr)")
        let zero = try await cli(["record", "--out", out, "--duration", "0"])
        #expect(zero.status == 64)
        // Checked before anything else: no bus is needed to be told.
        let unwritable = try await cli(["record", "--out", dir.appendingPathComponent("missing/x.json").path, "--bus", "unix:path=/nonexistent"])
        #expect(unwritable.status == 1)
        #expect(unwritable.stderr.contains("cannot write") && unwritable.stderr.contains("No such file or directory"), "\(unwritable.stderr)")
        let directory = try await cli(["record", "--out", dir.path, "--bus", "unix:path=/nonexistent"])
        #expect(directory.status == 1)
        #expect(directory.stderr.contains("it is a directory"), "\(directory.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
    }

    @Test func speedZeroIsRefusedAndMaxLoopIsAccepted() async throws {
        let file = packageRoot().appendingPathComponent("fixtures/scenarios/test-basic.json").path
        let zero = try await cli(["simulate", file, "--speed", "0"])
        #expect(zero.status == 64)
        #expect(zero.stderr.contains("--speed must be a number between 0.001 and 1000, or max; got \"0\""), "\(zero.stderr)")
        let words = try await cli(["simulate", file, "--speed", "fast"])
        #expect(words.status == 64)
        // max + loop runs until SIGTERM; the timeout kills it, which is the point: it was accepted.
        let run = try await cli(["simulate", file, "--speed", "max", "--loop", "--bus", "unix:path=/nonexistent/bus"], timeout: 20)
        #expect(run.status == 1, "it got past argument parsing to the bus: \(run.stderr)")
        #expect(!run.stderr.contains("--speed"), "\(run.stderr)")
    }

    @Test func recordsASimulatorSessionThatReplays() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("session.json").path
        let sim = try await SimulatorProcess.start()
        let recorded = try await sim.runAsync(["record", "--out", out, "--duration", "2", "--scan", "--redact"], timeout: 30)
        await sim.stopAsync()
        #expect(recorded.status == 0, "\(recorded.stderr)")
        #expect(recorded.stderr.contains("Wrote \(out): 1 adapter(s), 10 device(s)"), "\(recorded.stderr)")
        let text = try String(contentsOfFile: out, encoding: .utf8)
        #expect(text.contains("\"name\": \"session\""))
        #expect(!text.contains("CB:B8:33:4C:88:4F") && !text.contains("Ruuvi 884F"), "redacted")
        #expect(text.contains("\"name\": \"Device 1\""))
        // The simulator takes the file as it is.
        let replay = try await SimulatorProcess.start(out)
        let devices = try await replay.runAsync(["scan", "--duration", "1", "--json"], timeout: 30)
        await replay.stopAsync()
        #expect(devices.status == 0, "\(devices.stderr)")
        #expect(jsonLines(devices.stdout).count >= 5)
    }
}

extension RecordCLITests {
    /// Ctrl-C is the ordinary way to end a recording: the file is written, whole.
    @Test func interruptWritesTheRecording() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("ctrl-c.json").path
        let sim = try await SimulatorProcess.start()
        defer { sim.stop() }
        let address = sim.address
        let (status, stderr) = try await offPool { () throws -> (Int32, String) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try DoctorCLI.executable())
            process.arguments = ["record", "--out", out, "--bus", address, "--scan"]
            let err = Pipe()
            process.standardError = err
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            Thread.sleep(forTimeInterval: 1.5)
            process.interrupt()
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, text)
        }
        #expect(status == 0, "\(stderr)")
        #expect(stderr.contains("Wrote \(out)"), "\(stderr)")
        let scenario = try String(contentsOfFile: out, encoding: .utf8)
        #expect(scenario.contains("\"CB:B8:33:4C:88:4F\""), "the Ruuvi tag was recorded")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".tmp-") || $0.contains(".check-") }
        #expect(leftovers.isEmpty, "no temporary files left: \(leftovers)")
    }
}
