import Foundation
import TestSupport
import Testing

/// `blecompanion fw state/upload/test/confirm/reset/erase/echo` against the
/// simulated mcumgr devices of fixtures/scenarios/test-firmware.json.
@Suite(.serialized, .timeLimit(.minutes(3))) struct FirmwareUpdateCLITests {
    let sensor = "D0:5E:ED:00:00:01"
    let badFlash = "D0:5E:ED:00:00:04"

    func imageFile(size: Int, version: (UInt8, UInt8, UInt16, UInt32)) throws -> (path: String, hash: String) {
        let image = MCUbootTestImage.make(size: size, version: version)
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("fw-\(UUID().uuidString).bin")
        try Data(image.bytes).write(to: url)
        return (url.path, image.hash.map { String(format: "%02x", $0) }.joined())
    }

    func images(_ run: DoctorCLI.Run) -> [[String: Any]] {
        (jsonLines(run.stdout).last?["images"] as? [[String: Any]]) ?? []
    }

    @Test func uploadTestResetConfirmWithJSON() async throws {
        let sim = try await SimulatorProcess.start("test-firmware.json")
        defer { sim.stop() }
        let (file, hash) = try imageFile(size: 50_000, version: (1, 4, 2, 0))
        defer { try? FileManager.default.removeItem(atPath: file) }

        let before = try await sim.runAsync(["fw", "state", sensor, "--json"])
        #expect(before.status == 0, "\(before.stderr)")
        #expect(images(before).count == 1 && images(before).first?["version"] as? String == "1.0.0")

        let upload = try await sim.runAsync(["fw", "upload", sensor, file, "--json", "--test", "--reset"])
        #expect(upload.status == 0, "\(upload.stderr)")
        let lines = jsonLines(upload.stdout)
        let progress = lines.filter { $0["event"] as? String == "progress" }
        #expect(progress.count > 5 && progress.last?["acknowledged"] as? Int == 50_072, "\(upload.stdout.prefix(400))")
        let done = try #require(lines.last)
        #expect(done["event"] as? String == "done" && done["bytes"] as? Int == 50_072 && done["hash"] as? String == hash
                && done["marked"] as? String == "test" && done["reset"] as? Bool == true && done["slot"] as? Int == 1, "\(done)")

        // The device restarted into the test image; it is not confirmed yet.
        let tested = try await sim.runAsync(["fw", "state", sensor, "--json"])
        let running = images(tested).first { $0["slot"] as? Int == 0 }
        #expect(running?["version"] as? String == "1.4.2" && running?["active"] as? Bool == true && running?["confirmed"] as? Bool == false,
                "\(tested.stdout) \(tested.stderr)")
        let confirm = try await sim.runAsync(["fw", "confirm", sensor])
        #expect(confirm.status == 0 && confirm.stdout.contains("slot 0  1.4.2  active confirmed"), "\(confirm.stdout) \(confirm.stderr)")

        let echo = try await sim.runAsync(["fw", "echo", sensor, "are you there"])
        #expect(echo.status == 0 && echo.stdout.contains("Zephyr Sensor: are you there"), "\(echo.stdout) \(echo.stderr)")
        let erase = try await sim.runAsync(["fw", "erase", sensor, "--json"])
        #expect(erase.status == 0 && images(erase).count == 1, "\(erase.stdout) \(erase.stderr)")
    }

    @Test func badFilesAreRefusedBeforeAnyConnection() async throws {
        let missing = try await cli(["fw", "upload", sensor, "/nonexistent/app.bin", "--bus", "unix:path=/nonexistent"])
        #expect(missing.status == 66 && missing.stderr.contains("cannot read"), "\(missing.stderr)")
        let notImage = try await cli(["fw", "upload", sensor, packageRoot().appendingPathComponent("Package.swift").path, "--bus", "unix:path=/nonexistent"])
        #expect(notImage.status == 65 && notImage.stderr.contains("not an MCUboot image"), "\(notImage.stderr)")
        let window = try await cli(["fw", "upload", sensor, "x.bin", "--window", "0"])
        #expect(window.status == 64 && window.stderr.contains("--window must be 1…8"), "\(window.stderr)")
        let both = try await cli(["fw", "upload", sensor, "x.bin", "--test", "--confirm"])
        #expect(both.status == 64 && both.stderr.contains("exclude each other"), "\(both.stderr)")
    }

    @Test func aCorruptUploadFailsClearlyAndAnAbsentDeviceIsNamed() async throws {
        let sim = try await SimulatorProcess.start("test-firmware.json")
        defer { sim.stop() }
        let (file, _) = try imageFile(size: 6_000, version: (2, 0, 0, 0))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let bad = try await sim.runAsync(["fw", "upload", badFlash, file])
        #expect(bad.status == 1 && bad.stderr.contains("corrupt") && bad.stderr.contains("running image is untouched"), "\(bad.stderr)")
        let state = try await sim.runAsync(["fw", "state", badFlash])
        #expect(state.status == 0 && state.stdout.contains("slot 0  1.0.0  active confirmed") && !state.stdout.contains("slot 1"), "\(state.stdout)")
        let absent = try await sim.runAsync(["fw", "state", "D0:5E:ED:00:00:99", "--connect-timeout", "1"])
        #expect(absent.status == 1 && absent.stderr.contains("was not found in 1 s of scanning"), "\(absent.stderr)")
        let noTest = try await sim.runAsync(["fw", "test", sensor])
        #expect(noTest.status == 1 && noTest.stderr.contains("no image to test"), "\(noTest.stderr)")
    }

    /// Ctrl-C mid-upload: exit 130, the running image untouched; the same
    /// command then resumes where the device stopped.
    @Test func anInterruptedUploadResumes() async throws {
        let sim = try await SimulatorProcess.start("test-firmware.json")
        defer { sim.stop() }
        let (file, hash) = try imageFile(size: 400_000, version: (7, 0, 0, 0))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fw-int-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("out"), err = dir.appendingPathComponent("err")
        // Small requests, one at a time: slow enough to interrupt.
        let pid = try spawn(try builtExecutable("blecompanion"),
                            ["fw", "upload", sensor, file, "--bus", sim.address, "--json", "--window", "1", "--request-size", "128"],
                            stdout: out.path, stderr: err.path)
        let started = await eventually(20) {
            ((try? String(contentsOf: out, encoding: .utf8)) ?? "").components(separatedBy: "\"progress\"").count > 20
        }
        kill(pid, SIGINT)
        let raw = try await offPool { waitForExit(pid, limit: 15) }
        let status = raw & 0x7F == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)
        #expect(started)
        let stderr = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        #expect(status == 130 && stderr.contains("the same command resumes"), "status \(status): \(stderr)")
        let state = try await sim.runAsync(["fw", "state", sensor])
        #expect(state.stdout.contains("slot 0  1.0.0  active confirmed") && !state.stdout.contains("slot 1"), "\(state.stdout)")
        let again = try await sim.runAsync(["fw", "upload", sensor, file, "--json"])
        let done = jsonLines(again.stdout).last
        #expect(again.status == 0 && (done?["resumed_from"] as? Int ?? 0) > 0 && done?["hash"] as? String == hash, "\(again.stdout.suffix(300)) \(again.stderr)")
    }

    @Test func provisionOverImprov() async throws {
        let sim = try await SimulatorProcess.start("test-firmware.json")
        defer { sim.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("improv-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let right = dir.appendingPathComponent("right"), wrong = dir.appendingPathComponent("wrong")
        try "correct horse battery\n".write(to: right, atomically: true, encoding: .utf8)
        try "hunter2hunter2\n".write(to: wrong, atomically: true, encoding: .utf8)

        let refused = try await sim.runAsync(["provision", "E5:9A:00:00:00:01", "--ssid", "HomeNet", "--password-file", wrong.path])
        #expect(refused.status == 1 && refused.stderr.contains("unable to connect to the network (wrong password"), "\(refused.stderr)")
        let done = try await sim.runAsync(["provision", "E5:9A:00:00:00:01", "--ssid", "HomeNet", "--password-file", right.path, "--json"])
        let line = try #require(jsonLines(done.stdout).last)
        #expect(done.status == 0 && line["url"] as? String == "http://192.168.1.77/" && line["state"] as? String == "provisioned", "\(done.stdout) \(done.stderr)")
        let again = try await sim.runAsync(["provision", "E5:9A:00:00:00:01", "--ssid", "HomeNet", "--password-file", right.path])
        #expect(again.status == 1 && again.stderr.contains("provisioned already"), "\(again.stderr)")
        // The one that wants its button pressed (the scenario presses it after 0.5 s).
        let button = try await sim.runAsync(["provision", "E5:9A:00:00:00:02", "--ssid", "HomeNet", "--password-file", right.path])
        #expect(button.status == 0 && button.stderr.contains("press its button") && button.stdout.contains("http://192.168.1.78/"),
                "\(button.stdout) \(button.stderr)")
        let identify = try await sim.runAsync(["provision", "E5:9A:00:00:00:01", "--identify"])
        #expect(identify.status == 0 && identify.stdout.contains("identify itself"), "\(identify.stderr)")
        let notImprov = try await sim.runAsync(["provision", sensor, "--ssid", "HomeNet", "--open"])
        #expect(notImprov.status == 1 && notImprov.stderr.contains("has no Improv service"), "\(notImprov.stderr)")
        for run in [refused, done, again, button, identify] {
            #expect(!run.stdout.contains("correct horse") && !run.stderr.contains("correct horse") && !run.stderr.contains("hunter2"),
                    "the password is never printed")
        }

        let noSSID = try await cli(["provision", sensor, "--open"])
        #expect(noSSID.status == 64 && noSSID.stderr.contains("--ssid is needed"), "\(noSSID.stderr)")
        let both = try await cli(["provision", sensor, "--ssid", "x", "--open", "--password-file", right.path])
        #expect(both.status == 64 && both.stderr.contains("--password-file, or --open"), "\(both.stderr)")
        let long = try await cli(["provision", sensor, "--ssid", String(repeating: "s", count: 33), "--open"])
        #expect(long.status == 64 && long.stderr.contains("1 to 32 bytes"), "\(long.stderr)")
        let unreadable = try await cli(["provision", sensor, "--ssid", "x", "--password-file", "/nonexistent/pw"])
        #expect(unreadable.status == 66 && unreadable.stderr.contains("cannot read the password file"), "\(unreadable.stderr)")
    }
}
