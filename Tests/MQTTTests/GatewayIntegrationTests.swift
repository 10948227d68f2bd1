import BlueZ
@testable import BlueZSimulator
import DBus
import Domain
import Foundation
import Logging
import MQTT
@testable import ScenarioFormat
import Testing
import TestSupport
@testable import Gateway
import Vocabulary

/// The gateway end to end: the simulator on a private bus, a real mosquitto
/// on a free loopback port, the real runtime (repositories, presenters,
/// SQLite queue, libmosquitto) in between.
struct GatewayHarness {
    let bus: PrivateBus
    let simulator: BlueZSimulator
    let runtime: GatewayRuntime
    let directory: URL

    static let quiet = ProcessInfo.processInfo.environment["GATEWAY_TEST_LOG"] != nil
        ? Logger(label: "gateway-test", factory: { StreamLogHandler.standardError(label: $0) })
        : Logger(label: "gateway-test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func start(_ scenario: Scenario, broker: Broker?, watched: [BluetoothAddress: [String]] = [:],
                      http: GatewayOptions.HTTPOptions? = nil, activeScan: Bool = true,
                      retention: RetentionPolicy = RetentionPolicy()) async throws -> GatewayHarness {
        let bus = try PrivateBus.start()
        let simulator = BlueZSimulator(scenario: scenario)
        do {
            try await simulator.start(busAddress: bus.address)
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-gw-\(UUID().uuidString)")
            var mqtt: MQTTConfiguration?
            if let broker {
                var config = MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "gateway-under-test")
                // Back within 2 s of a broker restart (libmosquitto reconnects by itself).
                config.reconnectDelayMin = 2
                config.reconnectDelayMax = 2
                mqtt = config
            }
            var options = GatewayOptions(topics: GatewayTopics(gatewayID: "test"), stateDirectory: directory,
                                         policy: PublishPolicy(minInterval: 0, heartbeat: nil), activeScan: activeScan,
                                         watched: watched, mqtt: mqtt, http: http)
            options.retention = retention
            let runtime = try await GatewayRuntime.start(bus: .address(bus.address), options: options, logger: quiet)
            runtime.run()
            return GatewayHarness(bus: bus, simulator: simulator, runtime: runtime, directory: directory)
        } catch {
            await simulator.stop()
            bus.stop()
            throw error
        }
    }

    func stop() async {
        await runtime.shutdown()
        await simulator.stop()
        bus.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

func demoScenario() throws -> Scenario {
    try Scenario.load(path: packageRoot().appendingPathComponent("fixtures/scenarios/demo-home.json").path)
}

func json(_ message: MQTTMessage) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(message.payload))) as? [String: Any]
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct GatewayIntegrationTests {
    static let ruuvi = "blecompanion/test/cbb8334c884f"
    static let strap = "blecompanion/test/e45f01aa1001"

    @Test func demoReadingsArriveOnTheirTopicsWithHomeAssistantDiscovery() async throws {
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("#", qos: .atLeastOnce))
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker)
            let configTopic = "homeassistant/sensor/test_cbb8334c884f/cbb8334c884f_temperature/config"
            let seen = await inbox.wait(timeout: .seconds(20)) { all in
                all.contains { $0.topic == "\(Self.ruuvi)/state" } && all.contains { $0.topic == configTopic }
                    && all.contains { $0.topic == "\(Self.ruuvi)/status" && $0.text == "online" }
                    && all.contains { $0.topic == "blecompanion/test/status" && $0.text == "online" }
                    && all.contains { $0.topic == "blecompanion/test/d03a1b2c3d4e/state" }
            }
            // The state: JSON with the decoded RuuviTag readings (data format 5 test vector: 24.3 °C, then 24.5 °C).
            let state = try #require(seen.first { $0.topic == "\(Self.ruuvi)/state" }.flatMap(json))
            let temperature = try #require(state["temperature"] as? Double)
            #expect([24.3, 24.5].contains(temperature))
            #expect(state["address"] as? String == "CB:B8:33:4C:88:4F")
            #expect(state["format"] as? String != nil)
            #expect(state["humidity"] is Double)
            // Discovery: retained, with unique id, classes, unit, and the gateway as via_device.
            let config = try #require(seen.first { $0.topic == configTopic })
            let payload = try #require(json(config))
            #expect(payload["unique_id"] as? String == "blecompanion_test_cbb8334c884f_temperature")
            #expect(payload["device_class"] as? String == "temperature")
            #expect(payload["state_class"] as? String == "measurement")
            #expect(payload["unit_of_measurement"] as? String == "°C")
            #expect(payload["state_topic"] as? String == "\(Self.ruuvi)/state")
            #expect(payload["value_template"] as? String == "{{ value_json.temperature }}")
            let device = try #require(payload["device"] as? [String: Any])
            #expect(device["via_device"] as? String == "blecompanion_test")
            #expect((device["identifiers"] as? [String])?.first == "blecompanion_test_cbb8334c884f")
            // The gateway's own device is announced too.
            let gatewayConfig = await inbox.wait { $0.contains { $0.topic == "homeassistant/binary_sensor/test/status/config" } }
                .first { $0.topic == "homeassistant/binary_sensor/test/status/config" }
            let gatewayDevice = try #require(gatewayConfig.flatMap(json)?["device"] as? [String: Any])
            #expect((gatewayDevice["identifiers"] as? [String]) == ["blecompanion_test"])
            // A device whose advertisements carry nothing to decode (the heart strap) is not published;
            // the iBeacon is (a recognised format, RSSI only).
            #expect(!seen.contains { $0.topic.hasPrefix("\(Self.strap)/") })
            #expect(seen.contains { $0.topic == "blecompanion/test/d03a1b2c3d4e/state" })

            // A retained config is what a Home Assistant started later sees.
            let late = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let retained = Inbox(try await late.subscribe(configTopic, qos: .atLeastOnce))
            let first = await retained.wait { !$0.isEmpty }.first
            #expect(first?.retain == true)
            await late.disconnect()
            await gateway.stop()
            await watcher.disconnect()
        }
    }

    @Test func commandsOverMQTTRunThroughThePresenterAndReply() async throws {
        try await withBroker { broker in
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker)
            let tester = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let replies = Inbox(try await tester.subscribe("\(Self.strap)/reply", qos: .atLeastOnce))
            // `online` means the gateway listens for commands.
            let status = Inbox(try await tester.subscribe("blecompanion/test/status", qos: .atLeastOnce))
            #expect(await status.wait { $0.contains { $0.text == "online" } }.contains { $0.text == "online" })
            func send(_ body: String, id: String) async throws -> [String: Any]? {
                try await tester.publish(MQTTMessage(topic: "\(Self.strap)/command", text: body, qos: .atLeastOnce))
                return await replies.wait(timeout: .seconds(20)) { all in all.contains { json($0)?["id"] as? String == id } }
                    .compactMap(json).first { $0["id"] as? String == id }
            }
            // The strap must be known to bluetoothd first (advertising, seen by the scan).
            _ = await gateway.runtime.list.states().first { state in
                state.devices.value?.contains { $0.id.address.description == "E4:5F:01:AA:10:01" } == true
            }

            let connect = try #require(try await send(#"{"action":"connect","id":"c1"}"#, id: "c1"))
            #expect(connect["ok"] as? Bool == true, "\(connect)")
            let read = try #require(try await send(#"{"action":"read","characteristic":"2a38","id":"r1"}"#, id: "r1"))
            #expect(read["ok"] as? Bool == true, "\(read)")
            #expect(read["value"] as? String == "01")
            let write = try #require(try await send(#"{"action":"write","characteristic":"2a39","value":"01","id":"w1"}"#, id: "w1"))
            #expect(write["ok"] as? Bool == true, "\(write)")
            // The simulated control point refuses anything but 01: the device's error reaches the reply.
            let refused = try #require(try await send(#"{"action":"write","characteristic":"2a39","value":"02","id":"w2"}"#, id: "w2"))
            #expect(refused["ok"] as? Bool == false)
            #expect((refused["error"] as? String)?.contains("not supported") == true, "\(refused)")
            let notify = try #require(try await send(#"{"action":"notify","characteristic":"2a37","enable":true,"id":"n1"}"#, id: "n1"))
            #expect(notify["ok"] as? Bool == true, "\(notify)")
            let missing = try #require(try await send(#"{"action":"read","characteristic":"ffff","id":"x1"}"#, id: "x1"))
            #expect(missing["ok"] as? Bool == false)
            #expect((missing["error"] as? String)?.contains("no characteristic ffff") == true)
            let bad = try #require(try await send(#"{"action":"fly","id":"b1"}"#, id: "b1"))
            #expect((bad["error"] as? String)?.contains("unknown action \"fly\"") == true)
            let disconnect = try #require(try await send(#"{"action":"disconnect","id":"d1"}"#, id: "d1"))
            #expect(disconnect["ok"] as? Bool == true, "\(disconnect)")
            // Not JSON at all: the reply says so (no id to echo).
            try await tester.publish(MQTTMessage(topic: "\(Self.strap)/command", text: "connect please", qos: .atLeastOnce))
            let all = await replies.wait { $0.contains { (json($0)?["error"] as? String)?.contains("not JSON") == true } }
            #expect(all.contains { (json($0)?["error"] as? String)?.contains("not JSON") == true })
            // A topic whose address level is not an address: answered on its own reply topic.
            let wrong = Inbox(try await tester.subscribe("blecompanion/test/e45f01aa10zz/reply", qos: .atLeastOnce))
            try await tester.publish(MQTTMessage(topic: "blecompanion/test/e45f01aa10zz/command", text: #"{"action":"connect","id":"a1"}"#, qos: .atLeastOnce))
            let answered = await wrong.wait(timeout: .seconds(20)) { !$0.isEmpty }.compactMap(json).first
            #expect(answered?["ok"] as? Bool == false && answered?["id"] as? String == "a1")
            #expect((answered?["error"] as? String)?.contains("is not a device address") == true, "\(String(describing: answered))")
            let metrics = gateway.runtime.metrics.render()
            #expect(metrics.contains(#"blecompanion_commands_total{action="read",result="ok"} 1"#))
            #expect(metrics.contains(#"blecompanion_commands_total{action="write",result="error"} 1"#))
            await tester.disconnect()
            await gateway.stop()
        }
    }

    @Test func aWatchedDeviceIsKeptConnectedAndItsNotificationsJoinItsState() async throws {
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("\(Self.strap)/state", qos: .atLeastOnce))
            let strap = try BluetoothAddress("E4:5F:01:AA:10:01")
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker, watched: [strap: ["2a37"]])
            // The strap advertises nothing decodable: it is published because it is watched and notifies.
            let states = await inbox.wait(timeout: .seconds(20)) { all in
                Set(all.compactMap { json($0)?["heart_rate"] as? Double }).count >= 2
            }
            let rates = states.compactMap { json($0)?["heart_rate"] as? Double }
            #expect(Set(rates).count >= 2, "heart rate from notifications, changing: \(rates)")
            #expect(rates.allSatisfy { (40...220).contains($0) })
            let metrics = gateway.runtime.metrics.render()
            #expect(metrics.contains("blecompanion_connections_total 1"), "\(metrics)")
            await gateway.stop()
            await watcher.disconnect()
        }
    }

    @Test func passiveScanningPublishesWithoutDiscovery() async throws {
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("blecompanion/test/+/state", qos: .atLeastOnce))
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker, activeScan: false)
            let seen = await inbox.wait(timeout: .seconds(20)) { $0.contains { $0.topic == "\(Self.ruuvi)/state" } }
            #expect(seen.contains { $0.topic == "\(Self.ruuvi)/state" }, "the Ruuvi tag is heard through an advertisement monitor")
            let adapter = try #require(gateway.runtime.client.mirror.snapshot().sortedAdapters.first)
            #expect(adapter.discovering == false, "no discovery session: passive")
            await gateway.stop()
            await watcher.disconnect()
        }
    }

    @Test func readingsProducedWhileTheBrokerIsDownArriveAfterwardsInOrder() async throws {
        // The watcher keeps one durable session (clean session off; the broker saves it when it
        // stops and loads it when it starts again), so the broker queues the gateway's states for
        // it from the moment it is back, whichever of the two clients reconnects first.
        try await withBroker(persistent: true) { broker in
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker)
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "outage-watcher",
                                                                         cleanSession: false, reconnectDelayMin: 1, reconnectDelayMax: 1))
            let inbox = Inbox(try await watcher.subscribe("blecompanion/test/+/state", qos: .atLeastOnce))
            _ = await inbox.wait { $0.filter { $0.topic == "\(Self.ruuvi)/state" }.count >= 2 }

            // The broker goes away; everything the gateway produces from now on, in its order
            // (what it produced just before may have reached the old broker already).
            try await broker.pause()
            let produced = Inbox(gateway.runtime.published.events())
            // The Ruuvi changes every second: several states pile up in SQLite.
            _ = await produced.wait(timeout: .seconds(20)) { $0.filter { $0.topic == "\(Self.ruuvi)/state" }.count >= 4 }
            #expect(gateway.runtime.queue.depth >= 4)
            let outage = produced.all.filter { $0.topic.hasSuffix("/state") }
            try await broker.resume()
            let received = await inbox.wait(timeout: .seconds(30)) { all in
                let texts = all.map { "\($0.topic) \($0.text ?? "")" }
                guard let first = outage.first, let i = texts.firstIndex(of: "\(first.topic) \(first.text)") else { return false }
                return texts.count - i >= outage.count
            }
            #expect(outage.count >= 4)
            let expected = outage.map { "\($0.topic) \($0.text)" }
            // A message published just before the broker went away may have been sent again
            // (QoS 1, unacknowledged) ahead of them: the outage's run starts at its first message.
            let all = received.map { "\($0.topic) \($0.text ?? "")" }
            let start = all.firstIndex(of: expected.first ?? "") ?? all.count
            let got = all[start...].prefix(expected.count)
            #expect(Array(got) == expected, "every state produced during the outage, in order")
            #expect(gateway.runtime.queue.dropped == 0)
            await watcher.disconnect()
            await gateway.stop()
        }
    }

    @Test func bluetoothdVanishingTakesDevicesOfflineAndBackAndPublishingResumes() async throws {
        var scenario = try demoScenario()
        scenario.outages = [.init(at: 4, returnAt: 7)]
        try await expectOfflineThenOnlineAndPublishing(scenario, while: "bluetoothd left")
    }

    /// The adapter unplugged and plugged back (a USB dongle, a reset
    /// controller): devices offline, then online and publishing again. The
    /// adapter comes back unpowered and is powered a moment later; scanning
    /// must start again by itself then (the repositories used to take that
    /// for a power-off and end their discovery for good).
    @Test func anAdapterUnpluggedAndBackTakesDevicesOfflineAndBackAndPublishingResumes() async throws {
        var scenario = try demoScenario()
        scenario.adapters[0].outages = [.init(at: 4, returnAt: 7)]
        try await expectOfflineThenOnlineAndPublishing(scenario, while: "the adapter left")
    }

    /// Runs the gateway on `scenario` (an outage in it): the RuuviTag's
    /// status goes offline, then online, and state messages follow.
    func expectOfflineThenOnlineAndPublishing(_ scenario: Scenario, while what: String) async throws {
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("\(Self.ruuvi)/#", qos: .atLeastOnce))
            let gateway = try await GatewayHarness.start(scenario, broker: broker)
            let seen = await inbox.wait(timeout: .seconds(30)) { all in
                let statuses = all.filter { $0.topic == "\(Self.ruuvi)/status" }.compactMap(\.text)
                guard let off = statuses.firstIndex(of: "offline"), statuses[off...].contains("online") else { return false }
                // And a state after coming back.
                guard let back = all.lastIndex(where: { $0.topic == "\(Self.ruuvi)/status" && $0.text == "online" }) else { return false }
                return all[back...].contains { $0.topic == "\(Self.ruuvi)/state" }
            }
            let statuses = seen.filter { $0.topic == "\(Self.ruuvi)/status" }.compactMap(\.text)
            #expect(statuses.first == "online")
            #expect(statuses.contains("offline"), "\(what): the device went offline (\(statuses))")
            let offIndex = try #require(statuses.firstIndex(of: "offline"))
            #expect(statuses[offIndex...].contains("online"), "\(what) and came back: online again (\(statuses))")
            let back = try #require(seen.lastIndex { $0.topic == "\(Self.ruuvi)/status" && $0.text == "online" })
            #expect(seen[back...].contains { $0.topic == "\(Self.ruuvi)/state" }, "publishing resumed")
            await gateway.stop()
            await watcher.disconnect()
        }
    }

    @Test func shutdownFlushesTheQueueAndGoesOffline() async throws {
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("blecompanion/test/#", qos: .atLeastOnce))
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker)
            _ = await inbox.wait { $0.contains { $0.topic == "\(Self.ruuvi)/state" } }
            await gateway.runtime.shutdown()
            #expect(gateway.runtime.queue.depth == 0, "queue flushed")
            let end = await inbox.wait { all in
                all.contains { $0.topic == "blecompanion/test/status" && $0.text == "offline" }
                    && all.contains { $0.topic == "\(Self.ruuvi)/status" && $0.text == "offline" }
            }
            #expect(end.last { $0.topic == "blecompanion/test/status" }?.text == "offline")
            #expect(end.last { $0.topic == "\(Self.ruuvi)/status" }?.text == "offline")
            await gateway.stop()
            await watcher.disconnect()
        }
    }
}
