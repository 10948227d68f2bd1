import Foundation
import Testing

/// `settings` and `history` on a temporary state directory, and bindkeys
/// from the settings reaching the decoder of `scan`.
@Suite(.timeLimit(.minutes(2))) struct SettingsCLITests {
    let dir: URL

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-cli-state-\(UUID().uuidString)")
    }

    @Test func settingsRoundTripAndBadInput() async throws {
        defer { try? FileManager.default.removeItem(at: dir) }
        let state = ["--state-dir", dir.path]
        var r = try await cli(["settings", "watch", "A4:C1:38:00:00:02"] + state)
        #expect(r.status == 0 && r.stdout.contains("Watching A4:C1:38:00:00:02."), "\(r.stderr)")
        r = try await cli(["settings", "bindkey", "A4:C1:38:00:00:02", "231d39c1d7cc1ab1aee224cd096db932"] + state)
        #expect(r.status == 0, "\(r.stderr)")
        let mode = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("bindkeys.json").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        r = try await cli(["settings", "adapter", "hci1"] + state)
        #expect(r.status == 0, "\(r.stderr)")
        r = try await cli(["settings", "show", "--json"] + state)
        let shown = jsonLines(r.stdout).first
        #expect(shown?["watched"] as? [String] == ["A4:C1:38:00:00:02"])
        #expect(shown?["bindkeys_for"] as? [String] == ["A4:C1:38:00:00:02"])
        #expect(shown?["adapter"] as? String == "hci1")
        #expect(!r.stdout.contains("231d39"), "keys are never printed")

        // Bad input: usage errors (64) naming the problem; nothing changes.
        r = try await cli(["settings", "bindkey", "A4:C1:38:00:00:02", "1234"] + state)
        #expect(r.status == 64 && r.stderr.contains("a bindkey is 16 bytes (32 hex digits), got 2 bytes"), "\(r.stderr)")
        r = try await cli(["settings", "watch", "A4:C1:38"] + state)
        #expect(r.status == 64 && r.stderr.contains("is not a Bluetooth address"), "\(r.stderr)")
        r = try await cli(["settings", "adapter", "hci-1"] + state)
        #expect(r.status == 64 && r.stderr.contains("is not an adapter name"), "\(r.stderr)")
        r = try await cli(["settings", "unwatch", "11:22:33:44:55:66"] + state)
        #expect(r.status == 1 && r.stderr.contains("11:22:33:44:55:66 is not watched"), "\(r.stderr)")
        r = try await cli(["settings", "show", "--json"] + state)
        #expect(jsonLines(r.stdout).first?["watched"] as? [String] == ["A4:C1:38:00:00:02"])

        // A corrupt settings file is named, not replaced.
        try Data("{ nope".utf8).write(to: dir.appendingPathComponent("settings.json"))
        r = try await cli(["settings", "show"] + state)
        #expect(r.status == 1 && r.stderr.contains("settings.json is not valid settings"), "\(r.stderr)")
        #expect(try String(contentsOf: dir.appendingPathComponent("settings.json"), encoding: .utf8) == "{ nope")

        r = try await cli(["history", "A4:C1:38:00:00:02"] + state)
        #expect(r.status == 1 && r.stderr.contains("no readings of A4:C1:38:00:00:02"), "\(r.stderr)")
        r = try await cli(["history", "A4:C1:38:00:00:02", "--kind", "warmth"] + state)
        #expect(r.status == 64 && r.stderr.contains("unknown reading kind \"warmth\""), "\(r.stderr)")
    }

    @Test func aBindkeyFromTheSettingsDecryptsBTHomeInScan() async throws {
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        // An encrypted BTHome v2 advertisement and its key: bthome-ble's
        // tests/test_parser_v2.py::test_bindkey_correct (25.06 °C, 50.55 %).
        let scenario = dir.appendingPathComponent("encrypted.json")
        try Data("""
        {
          "name": "encrypted-bthome",
          "adapters": [ { "id": "hci0", "address": "00:1A:7D:DA:71:13" } ],
          "devices": [ { "address": "54:48:E6:8F:80:A5", "name": "Secret H&T", "rssi": -60,
                         "serviceData": { "fcd2": "41a47266c95f730011223378237214" } } ]
        }
        """.utf8).write(to: scenario)
        let state = ["--state-dir", dir.appendingPathComponent("state").path]
        let sim = try await SimulatorProcess.start(scenario.path)
        defer { sim.stop() }

        // No state directory named that exists yet: said so.
        var r = try await sim.runAsync(["scan", "--duration", "1", "--json"] + state)
        #expect(r.status == 1 && r.stderr.contains("does not exist"), "\(r.stderr)")

        r = try await cli(["settings", "watch", "54:48:E6:8F:80:A5"] + state)
        #expect(r.status == 0, "\(r.stderr)")
        r = try await sim.runAsync(["scan", "--duration", "1.5", "--json"] + state)
        #expect(r.status == 0, "\(r.stderr)")
        let before = jsonLines(r.stdout).first { $0["address"] as? String == "54:48:E6:8F:80:A5" }
        #expect(before != nil && before?["decoded"] == nil, "without the key nothing is decoded: \(r.stdout)")

        r = try await cli(["settings", "bindkey", "54:48:E6:8F:80:A5", "231d39c1d7cc1ab1aee224cd096db932"] + state)
        #expect(r.status == 0, "\(r.stderr)")
        r = try await sim.runAsync(["scan", "--duration", "1.5"] + state)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("temperature=25.06 °C") && r.stdout.contains("humidity=50.55 %"), "\(r.stdout)")
        await sim.stopAsync()
    }
}
