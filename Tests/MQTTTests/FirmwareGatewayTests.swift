import BlueZSimulator
import DBus
import Foundation
import Glibc
import MQTT
import ScenarioFormat
import Testing
import TestSupport

/// Firmware and provisioning through a running gateway (docs/FIRMWARE.md,
/// "Gateway"): an image POSTed over HTTP is uploaded to a simulated mcumgr
/// device, tested and the device reset, the progress and the end on the
/// device's firmware topic; the state read and a device provisioned over
/// MQTT commands; the password in no log and no message but the command.
@Suite(.serialized, .timeLimit(.minutes(3))) struct FirmwareGatewayTests {
    @Test func uploadOverHTTPAndProvisionOverMQTT() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-fwgw-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let simulator = BlueZSimulator(scenario: try Scenario.load(path: packageRoot().appendingPathComponent("fixtures/scenarios/test-firmware.json").path))
        try await simulator.start(busAddress: bus.address)
        let image = MCUbootTestImage.make(size: 150_000, version: (2, 5, 0, 0))
        let imageFile = dir.appendingPathComponent("app.bin")
        try Data(image.bytes).write(to: imageFile)
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("#", qos: .atLeastOnce))
            let http = try freeLoopbackPort()
            let config = dir.appendingPathComponent("gateway.yaml")
            try """
                gateway: { id: fw, state_dir: "\(dir.appendingPathComponent("state").path)" }
                bluez: { bus: "\(bus.address)" }
                mqtt: { host: 127.0.0.1, port: \(broker.port) }
                http: { listen: "127.0.0.1:\(http)" }
                """.write(to: config, atomically: true, encoding: .utf8)
            let log = dir.appendingPathComponent("gateway.log").path
            let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path], stderr: log)
            defer { kill(pid, SIGKILL) }
            func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
            func firmware(_ id: String) -> [[String: Any]] {
                inbox.all.filter { $0.topic == "blecompanion/fw/\(id)/firmware" }.compactMap(json)
            }
            let sensor = "d05eed000001", api = "http://127.0.0.1:\(http)/api/devices/D0:5E:ED:00:00:01/firmware"
            // The gateway scans: wait until it knows the device.
            var known = false
            for _ in 0..<100 where !known {
                known = (try? await curl("http://127.0.0.1:\(http)/api/devices/D0:5E:ED:00:00:01"))?.status == 200
                if !known { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(known, "\(logText())")

            // Not an image: refused before anything.
            let junk = try await curl(api, ["-X", "POST", "--data-binary", String(repeating: "not firmware ", count: 10)])
            #expect(junk.status == 422 && junk.body.contains("not an MCUboot image"), "\(junk)")
            let started = try await curl(api + "?mark=test&reset=true", ["-X", "POST", "--data-binary", "@\(imageFile.path)",
                                                                          "-H", "Content-Type: application/octet-stream"])
            #expect(started.status == 202 && started.body.contains("\"version\":\"2.5.0\""), "\(started) \(logText())")
            await inbox.wait(timeout: .seconds(60)) { _ in firmware(sensor).contains { $0["job"] as? String == "finished" || $0["job"] as? String == "failed" } }
            let states = firmware(sensor)
            #expect(states.contains { $0["job"] as? String == "uploading" && ($0["acknowledged"] as? Int ?? 0) > 0 }, "progress was published")
            let end = try #require(states.last { $0["job"] as? String == "finished" || $0["job"] as? String == "failed" }, "\(logText())")
            #expect(end["job"] as? String == "finished" && ((end["message"] as? String) ?? "").contains("restarting"), "\(end)")
            let polled = try await curl(api)
            #expect(polled.status == 200 && polled.body.contains("\"job\":\"finished\""), "\(polled)")

            // The state over MQTT: the test image runs.
            try await watcher.publish(MQTTMessage(topic: "blecompanion/fw/\(sensor)/command", payload: Array(#"{"action":"firmware_state","id":"s1"}"#.utf8),
                                                  qos: .atLeastOnce, retain: false))
            let replied = await inbox.wait(timeout: .seconds(60)) { all in
                all.contains { $0.topic == "blecompanion/fw/\(sensor)/reply" && json($0)?["id"] as? String == "s1" }
            }
            #expect(replied.last { $0.topic == "blecompanion/fw/\(sensor)/reply" }.flatMap(json)?["ok"] as? Bool == true, "\(logText())")
            await inbox.wait(timeout: .seconds(10)) { _ in
                (firmware(sensor).last?["images"] as? [[String: Any]])?.contains { $0["slot"] as? Int == 0 && $0["version"] as? String == "2.5.0" } == true
            }
            let running = (firmware(sensor).last?["images"] as? [[String: Any]])?.first { $0["slot"] as? Int == 0 }
            #expect(running?["version"] as? String == "2.5.0" && running?["active"] as? Bool == true && running?["confirmed"] as? Bool == false,
                    "\(String(describing: firmware(sensor).last))")

            // Confirming twice: each reply is its own command's (the second ends like the first, and is still told apart).
            for id in ["c1", "c2"] {
                try await watcher.publish(MQTTMessage(topic: "blecompanion/fw/\(sensor)/command", payload: Array(#"{"action":"firmware_confirm","id":"\#(id)"}"#.utf8),
                                                      qos: .atLeastOnce, retain: false))
                let confirmed = await inbox.wait(timeout: .seconds(30)) { all in
                    all.contains { $0.topic == "blecompanion/fw/\(sensor)/reply" && json($0)?["id"] as? String == id }
                }
                let answer = confirmed.last { $0.topic == "blecompanion/fw/\(sensor)/reply" && json($0)?["id"] as? String == id }.flatMap(json)
                #expect(answer?["ok"] as? Bool == true, "\(id): \(String(describing: answer)) \(logText())")
            }

            // Provisioning over MQTT.
            let plug = "e59a00000001"
            try await watcher.publish(MQTTMessage(topic: "blecompanion/fw/\(plug)/command",
                                                  payload: Array(#"{"action":"provision","ssid":"HomeNet","password":"correct horse battery","id":"p1"}"#.utf8),
                                                  qos: .atLeastOnce, retain: false))
            let provisioned = await inbox.wait(timeout: .seconds(60)) { all in
                all.contains { $0.topic == "blecompanion/fw/\(plug)/reply" && json($0)?["id"] as? String == "p1" }
            }
            let reply = provisioned.last { $0.topic == "blecompanion/fw/\(plug)/reply" }.flatMap(json)
            #expect(reply?["ok"] as? Bool == true, "\(String(describing: reply)) \(logText())")
            let message = (firmware(plug).last?["message"] as? String) ?? ""
            #expect(message.contains("http://192.168.1.77/"), "\(String(describing: firmware(plug).last))")
            let leaks = inbox.all.filter { !$0.topic.hasSuffix("/command") && String(decoding: $0.payload, as: UTF8.self).contains("correct horse") }
            #expect(leaks.isEmpty, "the password was published on \(leaks.map(\.topic))")
            #expect(!logText().contains("correct horse"), "the password is not logged")
        }
    }
}
