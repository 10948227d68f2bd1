import BlueZSimulator
import DBus
import Foundation
import Glibc
import MQTT
import ScenarioFormat
import Testing
import TestSupport

/// Device profiles in a running gateway process (docs/PROFILES.md): the
/// example profiles in the configuration directory describe the simulator's
/// custom devices (fixtures/scenarios/test-profiles.json); their readings
/// reach MQTT and Home Assistant discovery like built-in ones, a profile's
/// command runs over MQTT, and SIGHUP or POST /api/reload puts edited
/// profiles in force without a restart — a broken one left out and named.
@Suite(.serialized, .timeLimit(.minutes(3))) struct ProfileGatewayTests {
    @Test func profilesDecodeCommandAndReload() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-profiles-\(UUID().uuidString)")
        let profiles = dir.appendingPathComponent("profiles")
        try FileManager.default.createDirectory(at: profiles, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for name in ["soil-sensor.yaml", "power-meter.yaml", "smart-lock.yaml"] {
            try FileManager.default.copyItem(atPath: packageRoot().appendingPathComponent("fixtures/profiles/\(name)").path,
                                             toPath: profiles.appendingPathComponent(name).path)
        }
        // A thermometer read on demand: connected every 2 s for the read, let go in between.
        try """
            profile: thermo
            match: { name: "Thermo-7" }
            connection: on_demand
            gatt:
              - service: 181a
                characteristic: 2a6e
                read_every: 2
                fields:
                  - { name: temperature, type: s16, scale: 0.01, reading: temperature }
            """.write(to: profiles.appendingPathComponent("thermo.yaml"), atomically: true, encoding: .utf8)
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let simulator = BlueZSimulator(scenario: try Scenario.load(path: packageRoot().appendingPathComponent("fixtures/scenarios/test-profiles.json").path))
        try await simulator.start(busAddress: bus.address)
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("#", qos: .atLeastOnce))
            let http = try freeLoopbackPort()
            let config = dir.appendingPathComponent("gateway.yaml")
            try """
                gateway: { id: prof, state_dir: "\(dir.appendingPathComponent("state").path)" }
                bluez: { bus: "\(bus.address)" }
                mqtt: { host: 127.0.0.1, port: \(broker.port), discovery: true }
                http: { listen: "127.0.0.1:\(http)" }
                publish: { min_interval: 0 }
                devices: { timesync: ["C0:FF:EE:00:00:34", "C0:FF:EE:00:00:35", "A4:C1:38:00:00:36"] }
                """.write(to: config, atomically: true, encoding: .utf8)
            let log = dir.appendingPathComponent("gateway.log").path
            let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path], stderr: log)
            defer { kill(pid, SIGKILL) }
            func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
            func state(_ address: String) -> [String: Any]? {
                inbox.all.last { $0.topic == "blecompanion/prof/\(address)/state" }.flatMap(json)
            }

            // 1. An advertising sensor: its profile's readings, and Home Assistant entities with classes and units.
            let soil = "c0ffee000031"
            await inbox.wait(timeout: .seconds(30)) { _ in (state(soil)?["moisture"] as? Double) == 40 }
            let soilState = try #require(state(soil), "\(logText())")
            #expect(soilState["moisture"] as? Double == 40)
            #expect(soilState["temperature_soil"] as? Double == 22)
            #expect(soilState["conductivity"] as? Double == 350)
            #expect(soilState["battery"] as? Double == 100)
            #expect(soilState["format"] as? String == "GrowSense S2")
            let moisture = inbox.all.last { $0.topic == "homeassistant/sensor/prof_\(soil)/\(soil)_moisture/config" }.flatMap(json)
            #expect(moisture?["device_class"] as? String == "moisture")
            #expect(moisture?["unit_of_measurement"] as? String == "%")
            let device = moisture?["device"] as? [String: Any]
            #expect(device?["model"] as? String == "GrowSense S2")
            #expect(device?["manufacturer"] as? String == "Example Maker")
            let lowBattery = inbox.all.last { $0.topic == "homeassistant/binary_sensor/prof_\(soil)/\(soil)_battery_low/config" }.flatMap(json)
            #expect(lowBattery?["device_class"] as? String == "battery")

            // 2. A GATT meter kept connected: notified and polled characteristics in its state.
            let meter = "c0ffee000032"
            await inbox.wait(timeout: .seconds(30)) { _ in state(meter)?["power"] != nil && state(meter)?["temperature_internal"] != nil }
            let meterState = try #require(state(meter), "\(logText())")
            #expect(meterState["voltage"] as? Double == 230 || meterState["voltage"] as? Double == 230.12)
            #expect(meterState["temperature_internal"] as? Double == 35)
            #expect(meterState["plug_relay"] as? Bool == true)
            #expect(meterState["energy"] != nil)
            let energy = inbox.all.last { $0.topic == "homeassistant/sensor/prof_\(meter)/\(meter)_energy/config" }.flatMap(json)
            #expect(energy?["unit_of_measurement"] as? String == "kWh")
            #expect(energy?["state_class"] as? String == "total_increasing")

            // 2b. On demand: the value read, and the device let go afterwards.
            let thermo = "c0ffee000037"
            await inbox.wait(timeout: .seconds(30)) { _ in state(thermo)?["temperature"] != nil }
            #expect(state(thermo)?["temperature"] as? Double == 22.8, "\(logText())")
            var released = false
            for _ in 0..<50 where !released {
                let detail = try await curl("http://127.0.0.1:\(http)/api/devices/C0:FF:EE:00:00:37")
                released = detail.body.contains("\"connected\":false")
                if !released { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(released, "disconnected between reads")

            // 3. A lock: its commands as entities, one run over MQTT, its state notified back.
            let lock = "c0ffee000033"
            await inbox.wait(timeout: .seconds(30)) { _ in state(lock)?["lock"] != nil }
            #expect(state(lock)?["lock"] as? Bool == false, "locked at first: \(logText())")
            let button = inbox.all.last { $0.topic == "homeassistant/button/prof_\(lock)/\(lock)_command_lock/config" }.flatMap(json)
            #expect(button?["payload_press"] as? String == "{\"action\":\"command\",\"name\":\"lock\"}")
            #expect(button?["command_topic"] as? String == "blecompanion/prof/\(lock)/command")
            let select = inbox.all.last { $0.topic == "homeassistant/select/prof_\(lock)/\(lock)_command_set_mode/config" }.flatMap(json)
            #expect(select?["options"] as? [String] == ["normal", "away", "privacy"])
            let number = inbox.all.last { $0.topic == "homeassistant/number/prof_\(lock)/\(lock)_command_set_auto_lock/config" }.flatMap(json)
            #expect(number?["min"] as? Double == 0 && number?["max"] as? Double == 65535)
            try await watcher.publish(MQTTMessage(topic: "blecompanion/prof/\(lock)/command",
                                                  payload: Array(#"{"action":"command","name":"unlock","arguments":{"pin":1234},"id":"u1"}"#.utf8),
                                                  qos: .atLeastOnce, retain: false))
            let replied = await inbox.wait(timeout: .seconds(20)) { all in
                all.contains { $0.topic == "blecompanion/prof/\(lock)/reply" && json($0)?["id"] as? String == "u1" }
            }
            let reply = replied.last { $0.topic == "blecompanion/prof/\(lock)/reply" }.flatMap(json)
            #expect(reply?["ok"] as? Bool == true, "\(String(describing: reply)) \(logText())")
            #expect(reply?["action"] as? String == "command")
            await inbox.wait(timeout: .seconds(10)) { _ in state(lock)?["lock"] as? Bool == true }
            #expect(state(lock)?["lock"] as? Bool == true, "unlocked after the command")
            // A bad argument is refused with the reason, nothing written.
            let bad = try await curl("http://127.0.0.1:\(http)/api/devices/C0:FF:EE:00:00:33/actions",
                                     ["-X", "POST", "-d", #"{"action":"command","name":"unlock","arguments":{"pin":-5}}"#])
            #expect(bad.status == 502 && bad.body.contains("does not fit 32 bits"), "\(bad)")

            // 4. Reload: an edited profile in force without a restart (HTTP), a broken file left out and named.
            let edited = try String(contentsOf: profiles.appendingPathComponent("soil-sensor.yaml"), encoding: .utf8)
                .replacingOccurrences(of: "{ name: moisture, type: u8, reading: moisture, absent: 0xFF }",
                                      with: "{ name: moisture, type: u8, scale: 0.5, reading: moisture, absent: 0xFF }")
            try edited.write(to: profiles.appendingPathComponent("soil-sensor.yaml"), atomically: true, encoding: .utf8)
            try "profile: broken\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: t, type: s16, reading: temprature }\n"
                .write(to: profiles.appendingPathComponent("zz-broken.yaml"), atomically: true, encoding: .utf8)
            let reload = try await curl("http://127.0.0.1:\(http)/api/reload", ["-X", "POST"])
            #expect(reload.status == 422, "\(reload)")
            #expect(reload.body.contains("zz-broken.yaml:6") && reload.body.contains("temprature"), "\(reload.body)")
            #expect(reload.body.contains("\"growsense\"") && reload.body.contains("\"thermo\""), "\(reload.body)")
            await inbox.wait(timeout: .seconds(10)) { _ in (state(soil)?["moisture"] as? Double) == 20 }
            #expect(state(soil)?["moisture"] as? Double == 20, "the edited profile decodes: \(logText())")
            #expect(logText().contains("zz-broken.yaml:6"), "the log names the broken file and line")

            // 5. SIGHUP reloads too; a profile that does not fit the packet is a counted decode error, the device stays.
            try edited.replacingOccurrences(of: "- { name: battery, type: u8, bits: 3-7, scale: 3.2258064516, decimals: 0, reading: battery }",
                                            with: "- { name: battery, type: u8, bits: 3-7, scale: 3.2258064516, decimals: 0, reading: battery }\n      - { name: extra, type: u16 }")
                .write(to: profiles.appendingPathComponent("soil-sensor.yaml"), atomically: true, encoding: .utf8)
            try FileManager.default.removeItem(at: profiles.appendingPathComponent("zz-broken.yaml"))
            kill(pid, SIGHUP)
            var metrics = ""
            for _ in 0..<100 {
                metrics = (try? await curl("http://127.0.0.1:\(http)/metrics"))?.body ?? ""
                if metrics.contains("blecompanion_decode_errors_total{format=\"profile growsense\"}") { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(metrics.contains("blecompanion_profile_reloads_total 2"), "\(metrics)")
            #expect(metrics.contains("blecompanion_profiles 4"), "\(metrics)")
            #expect(metrics.contains("blecompanion_profile_file_errors 0"), "\(metrics)")
            #expect(metrics.contains("blecompanion_decode_errors_total{format=\"profile growsense\"}"), "\(metrics)")
            await inbox.wait(timeout: .seconds(5)) { _ in logText().contains("did not decode") }
            #expect(logText().contains("profile growsense: ") && logText().contains("advertisement payload(s) did not decode; last: C0:FF:EE:00:00:31: profile growsense"),
                    "the decode error is logged with its device and reason: \(logText())")
            let list = try await curl("http://127.0.0.1:\(http)/api/devices")
            #expect(list.body.contains("C0:FF:EE:00:00:31"), "the device is still listed")

            // 6. Time sync of the configured clocks: each set once heard, the drift before logged and exported.
            for _ in 0..<150 {
                metrics = (try? await curl("http://127.0.0.1:\(http)/metrics"))?.body ?? ""
                if metrics.contains("blecompanion_timesyncs_total{result=\"ok\"} 3") { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(metrics.contains("blecompanion_timesyncs_total{result=\"ok\"} 3"), "\(metrics) \(logText())")
            // The simulated clocks were set to 2020 and 2023: years behind.
            let drifts = metrics.split(separator: "\n").filter { $0.hasPrefix("blecompanion_timesync_drift_seconds{") }
            #expect(drifts.count == 2, "CTS and LYWSD02 report their time; pvvx cannot: \(drifts)")
            #expect(drifts.allSatisfy { ($0.split(separator: " ").last.flatMap { Double($0) } ?? 0) < -1e8 }, "\(drifts)")
            #expect(logText().contains("time sync of C0:FF:EE:00:00:34 (Current Time Service): drift before -"), "\(logText())")
            #expect(logText().contains("time sync of A4:C1:38:00:00:36 (pvvx custom firmware): drift before unknown"), "\(logText())")

            kill(pid, SIGTERM)
            let status = try await offPool { waitForExit(pid) }
            #expect(status == 0, "a clean stop after the reloads: \(logText())")
            await watcher.disconnect()
        }
        await simulator.stop()
    }
}
