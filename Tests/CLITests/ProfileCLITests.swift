import Foundation
import Testing
import TestSupport

/// The profile commands from a terminal (docs/PROFILES.md): `profile check`
/// and `profile test` on files, `scan`, `info`, `command` and `timesync`
/// against the simulator's custom devices.
@Suite(.serialized) struct ProfileCLITests {
    let profiles = packageRoot().appendingPathComponent("fixtures/profiles").path

    func file(_ name: String) -> String { "\(profiles)/\(name)" }

    @Test func checkValidatesAndNamesEveryProblem() async throws {
        let ok = try await DoctorCLI.run(["profile", "check", file("soil-sensor.yaml"), file("smart-lock.yaml")])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(ok.stdout.contains("soil-sensor.yaml: valid: profile growsense; matches name GrowSense-* and manufacturer 0xffff"), "\(ok.stdout)")
        #expect(ok.stdout.contains("commands: lock, unlock, set_auto_lock, set_mode"))
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("profile-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let bad = dir.appendingPathComponent("bad.yaml").path
        try "profile: bad\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: a, type: u16 }\n      - { name: b, type: uint8, offset: 1 }\n      - { name: c, type: u8, reading: door }\n"
            .write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try await DoctorCLI.run(["profile", "check", bad])
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("bad.yaml:7: advertisement[0].fields[1].type:") && refused.stderr.contains("did you mean \"u8\"?"), "\(refused.stderr)")
    }

    @Test func testDecodesSampleBytesAndEncodesCommands() async throws {
        let decoded = try await DoctorCLI.run(["profile", "test", file("soil-sensor.yaml"), "--hex", "012ADC005E01102700F8", "--json"])
        #expect(decoded.status == 0, "\(decoded.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(decoded.stdout.utf8)) as? [String: Any])
        #expect(object["model"] as? String == "GrowSense S2")
        let readings = object["readings"] as? [[String: Any]] ?? []
        #expect(readings.contains { $0["kind"] as? String == "moisture" && $0["value"] as? Double == 42 }, "\(readings)")
        // Too short: a decode error naming the profile, exit 2.
        let short = try await DoctorCLI.run(["profile", "test", file("soil-sensor.yaml"), "--hex", "012A"])
        #expect(short.status == 2 && short.stderr.contains("profile growsense"), "\(short.stderr)")
        // A payload no entry's prefix starts: said, exit 2.
        let other = try await DoctorCLI.run(["profile", "test", file("soil-sensor.yaml"), "--hex", "022ADC005E01102700F8"])
        #expect(other.status == 2 && other.stderr.contains("prefixes: 01"), "\(other.stderr)")
        // A characteristic value.
        let meter = try await DoctorCLI.run(["profile", "test", file("power-meter.yaml"), "--characteristic", "6e400003-b5a3-f393-e0a9-e50e24dcca9e", "--hex", "2301"])
        #expect(meter.status == 0 && meter.stdout.contains("35 °C"), "\(meter.stdout) \(meter.stderr)")
        // A command's bytes, and a bad argument.
        let unlock = try await DoctorCLI.run(["profile", "test", file("smart-lock.yaml"), "--command", "unlock", "pin=0x10"])
        #expect(unlock.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0210000000", "\(unlock.stdout) \(unlock.stderr)")
        let mode = try await DoctorCLI.run(["profile", "test", file("smart-lock.yaml"), "--command", "set_mode", "mode=holiday"])
        #expect(mode.status == 64 && mode.stderr.contains("mode") && mode.stderr.contains("normal|away|privacy"), "\(mode.stderr)")
    }

    @Test func scanInfoCommandAndTimesyncOnTheSimulator() throws {
        let simulator = try SimulatorProcess(scenario: "test-profiles.json")
        defer { simulator.stop() }
        let scan = try simulator.run(["scan", "--duration", "1.5", "--profiles", profiles])
        #expect(scan.stdout.contains("GrowSense-01") && scan.stdout.contains("moisture="), "\(scan.stdout)")
        // The lock's commands, one run (connecting for it), its state read back decoded by the profile.
        let list = try simulator.run(["command", "C0:FF:EE:00:00:33", "--profiles", profiles])
        #expect(list.stdout.contains("set_mode  mode=normal|away|privacy"), "\(list.stdout) \(list.stderr)")
        let sent = try simulator.run(["command", "C0:FF:EE:00:00:33", "unlock", "pin=1234", "--stay-connected", "--profiles", profiles])
        #expect(sent.status == 0 && sent.stdout.contains("Sent unlock (02d2040000) to Latch L1"), "\(sent.stdout) \(sent.stderr)")
        let read = try simulator.run(["read", "C0:FF:EE:00:00:33", "fff1", "--profiles", profiles])
        #expect(read.stdout.contains("015a1e00") && read.stdout.contains("lock=true"), "\(read.stdout) \(read.stderr)")
        let info = try simulator.run(["info", "C0:FF:EE:00:00:33", "--profiles", profiles])
        #expect(info.stdout.contains("Profile: latchkey"), "\(info.stdout)")
        let missing = try simulator.run(["command", "C0:FF:EE:00:00:33", "unlock", "--profiles", profiles])
        #expect(missing.status == 1 && missing.stderr.contains("\"pin\": missing"), "\(missing.stderr)")
        // Time sync: the drift before is years (the simulated clock says 2023), after about nothing.
        let synced = try simulator.run(["timesync", "C0:FF:EE:00:00:35", "--json"])
        let outcome = try #require(try JSONSerialization.jsonObject(with: Data(synced.stdout.utf8)) as? [String: Any], "\(synced.stderr)")
        #expect(outcome["clock"] as? String == "lywsd02")
        #expect((outcome["drift_before"] as? Double ?? 0) < -1e8)
        #expect(abs(outcome["drift_after"] as? Double ?? 99) < 2)
        let none = try simulator.run(["timesync", "C0:FF:EE:00:00:33"])
        #expect(none.status == 1 && none.stderr.contains("offers no clock"), "\(none.stderr)")
    }
}

/// `fw info` on the committed MCUboot images (fixtures/firmware).
@Suite struct FirmwareCLITests {
    @Test func infoShowsTheImageAndRefusesWhatIsNotOne() async throws {
        let dir = packageRoot().appendingPathComponent("fixtures/firmware").path
        let signed = try await DoctorCLI.run(["fw", "info", "\(dir)/ecdsa-p256.bin"])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(signed.stdout.contains("version        2.3.4+5") && signed.stdout.contains("signature      ECDSA P-256")
                && signed.stdout.contains("(matches the image)"), "\(signed.stdout)")
        let json = try await DoctorCLI.run(["fw", "info", "--json", "\(dir)/protected.bin"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect((object["header"] as? [String: Any])?["version"] as? String == "3.1.0+0" && object["hash_ok"] as? Bool == true)
        let notImage = try await DoctorCLI.run(["fw", "info", packageRoot().appendingPathComponent("Package.swift").path])
        #expect(notImage.status == 65 && notImage.stderr.contains("not an MCUboot image"), "\(notImage.stderr)")
        let missing = try await DoctorCLI.run(["fw", "info", "/nonexistent/image.bin"])
        #expect(missing.status == 66, "\(missing.stderr)")
        // A byte changed after signing: still described, the mismatch said, exit 65.
        var bytes = try Data(contentsOf: URL(fileURLWithPath: "\(dir)/unsigned.bin"))
        bytes[40] ^= 0xFF
        let changed = FileManager.default.temporaryDirectory.appendingPathComponent("changed-\(UUID().uuidString).bin")
        try bytes.write(to: changed)
        defer { try? FileManager.default.removeItem(at: changed) }
        let corrupt = try await DoctorCLI.run(["fw", "info", changed.path])
        #expect(corrupt.status == 65 && corrupt.stdout.contains("DOES NOT MATCH") && corrupt.stderr.contains("does not match its contents"),
                "\(corrupt.stdout) \(corrupt.stderr)")
    }
}
