import BLEParsing
import BlueZSimulator
import DBus
import Foundation
import Glibc
import Locking
import MQTT
@testable import ScenarioFormat
import Testing
import TestSupport

/// Fleet mode with real processes: three `blecompanion gateway` processes,
/// each with its own simulated radio (a simulator on its own private bus,
/// playing what that room hears), one mosquitto — or two, bridged — between
/// them. Device ids are the fleet's; the assertions read what a Home
/// Assistant subscribed to `#` would see.
@Suite(.serialized, .timeLimit(.minutes(4))) struct FleetIntegrationTests {
    /// Seconds into the scenario at which the mover walks from the hall to the kitchen.
    static let moveAt = 15.0
    static let ruuvi = "cbb8334c884f", mover = "a4c13812dbf8", atc = "a4c1385a1b2c", strap = "e45f01aa1001"

    @Test func oneBrokerOneOwnerPerDeviceHandoverFailoverAndSettleBack() async throws {
        try await withBroker { broker in
            try await Self.run(brokers: [broker], placement: ["hall": 0, "kitchen": 0, "garden": 0])
        }
    }

    @Test func twoBridgedBrokersBehaveAsOne() async throws {
        try await withBroker { first in
            let second = try await Broker.start(bridgeTo: first.port)
            do {
                try await Self.run(brokers: [first, second], placement: ["hall": 0, "kitchen": 1, "garden": 1])
                await second.stop()
            } catch {
                await second.stop()
                throw error
            }
        }
    }

    struct IdentityState: Sendable {
        let identity: String, address: String, gateway: String, room: String
    }

    struct Stamped: Sendable {
        let at: Date
        let message: MQTTMessage
    }

    /// The whole story: convergence, a handover when the mover changes
    /// rooms, failover when the owning gateway is killed (SIGKILL), and the
    /// settle-back when it returns.
    static func run(brokers: [Broker], placement: [String: Int]) async throws {
        let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: brokers[0].port))
        let raw = try await watcher.subscribe("#", qos: .atLeastOnce)
        let (stamped, continuation) = AsyncStream<Stamped>.makeStream()
        let pump = Task {
            for await m in raw { continuation.yield(Stamped(at: Date(), message: m)) }
            continuation.finish()
        }
        let inbox = Inbox(stamped)
        defer { pump.cancel() }

        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-fleet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var sites: [String: FleetSite] = [:]
        do {
            let started = Date()
            for room in ["hall", "kitchen", "garden"] {
                sites[room] = try await FleetSite.start(room: room, broker: brokers[placement[room] ?? 0], in: dir)
            }
            try await story(sites: sites, started: started, inbox: inbox, brokers: brokers.count)
        } catch {
            for site in sites.values { await site.stop() }
            await watcher.disconnect()
            throw error
        }
        for site in sites.values { await site.stop() }
        await watcher.disconnect()
    }

    static func story(sites: [String: FleetSite], started: Date, inbox: Inbox<Stamped>, brokers: Int) async throws {
        func site(_ room: String) throws -> FleetSite { try #require(sites[room]) }
        let base = "blecompanion/fleet/home"
        func claims(_ all: [Stamped], _ device: String) -> [(Date, String)] {
            all.filter { $0.message.topic == "\(base)/owner/\(device)" }.compactMap { s in
                (try? JSONSerialization.jsonObject(with: Data(s.message.payload)) as? [String: Any])?["gateway"]
                    .flatMap { $0 as? String }.map { (s.at, $0) }
            }
        }
        func states(_ all: [Stamped], _ device: String) -> [(Date, String, String)] {
            all.filter { $0.message.topic == "\(base)/\(device)/state" }.compactMap { s in
                guard let o = try? JSONSerialization.jsonObject(with: Data(s.message.payload)) as? [String: Any],
                      let g = o["gateway"] as? String, let r = o["room"] as? String else { return nil }
                return (s.at, g, r)
            }
        }
        func owner(_ all: [Stamped], _ device: String) -> String? { claims(all, device).last?.1 }
        /// The gateways of the strap's states that carry a heart rate, in order.
        func heartRates(_ all: [Stamped]) -> [String] {
            all.filter { $0.message.topic == "\(base)/\(strap)/state" }.compactMap { s in
                guard let o = try? JSONSerialization.jsonObject(with: Data(s.message.payload)) as? [String: Any], o["heart_rate"] != nil else { return nil }
                return o["gateway"] as? String
            }
        }
        func identityStates(_ all: [Stamped]) -> [IdentityState] {
            all.filter { $0.message.topic == "\(base)/id_phone/state" }.compactMap { s in
                guard let o = try? JSONSerialization.jsonObject(with: Data(s.message.payload)) as? [String: Any],
                      let i = o["identity"] as? String, let a = o["address"] as? String, let g = o["gateway"] as? String,
                      let r = o["room"] as? String else { return nil }
                return IdentityState(identity: i, address: a, gateway: g, room: r)
            }
        }
        func logs() -> String {
            sites.values.map { "--- \($0.room)\n\((try? String(contentsOfFile: $0.log, encoding: .utf8)) ?? "")" }.joined(separator: "\n")
        }

        // 1. Convergence: each device owned by the gateway that hears it best, published once.
        let converged = await inbox.wait(timeout: .seconds(30)) { all in
            owner(all, ruuvi) == "hall" && owner(all, mover) == "hall" && owner(all, atc) == "kitchen"
                && !states(all, ruuvi).isEmpty && !states(all, mover).isEmpty && !states(all, atc).isEmpty
        }
        #expect(owner(converged, ruuvi) == "hall" && owner(converged, mover) == "hall" && owner(converged, atc) == "kitchen",
                "claims: \(claims(converged, ruuvi)) \(claims(converged, mover)) \(claims(converged, atc))\n\(logs())")
        // Home Assistant sees one device per physical device, with the fleet's ids, whoever publishes it.
        var identifiers: [String: Set<String>] = [:]
        for s in converged where s.message.topic.hasPrefix("homeassistant/sensor/") {
            guard let o = try? JSONSerialization.jsonObject(with: Data(s.message.payload)) as? [String: Any],
                  let device = o["device"] as? [String: Any], let ids = device["identifiers"] as? [String],
                  let connections = device["connections"] as? [[String]], let address = connections.first?.last else { continue }
            identifiers[address, default: []].formUnion(ids)
        }
        for address in ["CB:B8:33:4C:88:4F", "A4:C1:38:12:DB:F8", "A4:C1:38:5A:1B:2C"] {
            let id = address.replacingOccurrences(of: ":", with: "").lowercased()
            #expect(identifiers[address] == ["blecompanion_fleet_home_\(id)"], "\(address): \(identifiers[address] ?? [])")
        }
        #expect(!converged.contains { $0.message.topic.contains("/hall_") || $0.message.topic.contains("/kitchen_") || $0.message.topic.contains("/garden_") },
                "a gateway published a device under its own id")
        // The watched strap: its owner (the kitchen, nearest) connects and publishes its heart rate; the hall does not connect.
        let strapped = await inbox.wait(timeout: .seconds(20)) { all in
            owner(all, strap) == "kitchen" && heartRates(all).contains { $0 == "kitchen" }
        }
        #expect(owner(strapped, strap) == "kitchen" && heartRates(strapped).contains("kitchen"), "\(claims(strapped, strap))\n\(logs())")
        #expect(try site("kitchen").connected("E4:5F:01:AA:10:01"))
        // Before the kitchen's sighting reaches it, the hall may claim the
        // strap, connect and publish a heart rate (the fleet has not converged
        // yet: the fresh-clone CI run of 5ccdd1c saw ["hall", "kitchen"]). Then it
        // lets go: its disconnect can come after the kitchen's first heart rate
        // (bluetoothd's disconnect takes time; seen in a loaded CI run), so it is
        // waited for. Once the kitchen publishes, the hall must not again.
        let hallLetGo = await eventually(10) { (try? site("hall").connected("E4:5F:01:AA:10:01")) == false }
        #expect(hallLetGo, "the hall kept a link to a device it does not own\n\(logs())")
        #expect(heartRates(strapped).drop { $0 != "kitchen" }.allSatisfy { $0 == "kitchen" }, "\(heartRates(strapped))")

        // A command over HTTP to a gateway that does not own the device: passed on to its owner through
        // the broker, which runs it on its radio and answers; the hall never touches the device.
        let connected = try await site("hall").post("/api/devices/A4:C1:38:5A:1B:2C/actions", "{\"action\":\"connect\"}")
        #expect(connected.status == 200 && connected.body.contains("\"ok\":true"), "\(connected)\n\(logs())")
        #expect(try site("kitchen").connected("A4:C1:38:5A:1B:2C"))
        #expect(try !site("hall").events.withLock { $0.contains { $0.hasPrefix("device A4:C1:38:5A:1B:2C connected") } })
        let disconnected = try await site("hall").post("/api/devices/A4:C1:38:5A:1B:2C/actions", "{\"action\":\"disconnect\",\"id\":\"d1\"}")
        #expect(disconnected.status == 200 && disconnected.body.contains("\"id\":\"d1\""), "\(disconnected)")
        // A device no gateway hears: 409, said so.
        let nobody = try await site("hall").post("/api/devices/C0:FF:EE:00:00:99/actions", "{\"action\":\"connect\"}")
        #expect(nobody.status == 409 && nobody.body.contains("no gateway of this fleet hears C0:FF:EE:00:00:99"), "\(nobody)")

        // The phone: one identity, whatever address it uses, owned by the hall that hears it best.
        let phoneSeen = await inbox.wait(timeout: .seconds(25)) { all in
            Set(identityStates(all).map(\.address)).count >= 2
        }
        let phone = identityStates(phoneSeen)
        #expect(Set(phone.map(\.address)).count >= 2, "the phone rotated its address; states: \(phone)\n\(logs())")
        #expect(phone.allSatisfy { $0.gateway == "hall" && $0.room == "hall" && $0.identity == "phone" }, "\(phone)")
        #expect(owner(phoneSeen, "id_phone") == "hall")
        let rpas = Set(try FleetSite.phoneAddresses().map { $0.replacingOccurrences(of: ":", with: "").lowercased() })
        #expect(!phoneSeen.contains { s in rpas.contains { s.message.topic.contains($0) } }, "an address of the phone was published as a device of its own")
        let trackers = phoneSeen.filter { $0.message.topic.hasPrefix("homeassistant/device_tracker/") }.map(\.message.topic)
        #expect(Set(trackers) == ["homeassistant/device_tracker/fleet_home_id_phone/id_phone_presence/config"], "\(trackers)")
        // Only the owner publishes a device's state; presence is its room.
        #expect(states(converged, ruuvi).allSatisfy { $0.1 == "hall" && $0.2 == "hall" })
        #expect(states(converged, atc).allSatisfy { $0.1 == "kitchen" })

        // 2. Handover: at moveAt the mover is heard 30 dB better in the kitchen.
        let moved = started.addingTimeInterval(moveAt)
        let afterMove = await inbox.wait(timeout: .seconds(moveAt + 25)) { owner($0, mover) == "kitchen" }
        let handover = try #require(claims(afterMove, mover).last { $0.1 == "kitchen" }, "\(logs())")
        let handoverSeconds = handover.0.timeIntervalSince(moved)
        #expect(handoverSeconds > 0 && handoverSeconds < 10, "handover took \(handoverSeconds) s")
        print("fleet: handover \(String(format: "%.2f", handoverSeconds)) s after the move (\(brokers) broker(s))")
        let settled = await inbox.wait(timeout: .seconds(10)) { all in states(all, mover).contains { $0.1 == "kitchen" && $0.2 == "kitchen" } }
        let moverStates = states(settled, mover)
        let firstKitchen = try #require(moverStates.firstIndex { $0.1 == "kitchen" })
        #expect(!moverStates[firstKitchen...].contains { $0.1 == "hall" }, "the old owner published after the handover: \(moverStates.map(\.1))")
        #expect(!moverStates[..<firstKitchen].contains { $0.1 != "hall" }, "\(moverStates.map(\.1))")

        // 3. Failover: the kitchen gateway is killed; its will fires, the others take its devices.
        let kitchen = try site("kitchen")
        try await offPool { kitchen.kill() }
        let killed = Date()
        let failed = await inbox.wait(timeout: .seconds(20)) { owner($0, mover) == "hall" && owner($0, atc) == "garden" }
        #expect(owner(failed, mover) == "hall" && owner(failed, atc) == "garden", "\(claims(failed, mover)) \(claims(failed, atc))\n\(logs())")
        if let takeover = claims(failed, atc).last(where: { $0.1 == "garden" }) {
            let seconds = takeover.0.timeIntervalSince(killed)
            #expect(seconds < 5, "failover took \(seconds) s")
            print("fleet: failover \(String(format: "%.2f", seconds)) s after SIGKILL (\(brokers) broker(s))")
        }
        let resumed = await inbox.wait(timeout: .seconds(15)) { all in
            states(all, atc).last?.1 == "garden" && owner(all, strap) == "hall" && heartRates(all).last == "hall"
        }
        #expect(states(resumed, atc).last?.1 == "garden")
        // The strap: the hall takes it over, connects, subscribes again and publishes its heart rate.
        #expect(owner(resumed, strap) == "hall" && heartRates(resumed).last == "hall", "\(claims(resumed, strap))\n\(logs())")
        #expect(try site("hall").connected("E4:5F:01:AA:10:01"))

        // 4. Settle-back: it returns, hears the mover and the ATC best again, and takes them back after the dwell.
        try await sites["kitchen"]?.restart()
        let returned = Date()
        let back = await inbox.wait(timeout: .seconds(25)) { owner($0, mover) == "kitchen" && owner($0, atc) == "kitchen" }
        #expect(owner(back, mover) == "kitchen" && owner(back, atc) == "kitchen", "\(claims(back, mover)) \(claims(back, atc))\n\(logs())")
        if let reclaimed = claims(back, atc).last(where: { $0.1 == "kitchen" }) {
            print("fleet: settle-back \(String(format: "%.2f", reclaimed.0.timeIntervalSince(returned))) s after restart (\(brokers) broker(s))")
        }
        let final = await inbox.wait(timeout: .seconds(10)) { all in
            states(all, atc).last?.1 == "kitchen" && owner(all, strap) == "kitchen" && heartRates(all).last == "kitchen"
        }
        // The strap went back to the kitchen, and the hall let go of its link.
        #expect(owner(final, strap) == "kitchen" && heartRates(final).last == "kitchen", "\(claims(final, strap))\n\(logs())")
        // (bluetoothd, and the simulator, take disconnectDelay, 2 s, to drop a link.)
        let hall = try site("hall")
        let released = await eventually(8) { !hall.connected("E4:5F:01:AA:10:01") }
        #expect(released, "the hall kept its link to a device it handed back\n\(logs())")
        let atcStates = states(final, atc)
        let lastKitchenClaim = try #require(claims(final, atc).last { $0.1 == "kitchen" })
        #expect(!atcStates.contains { $0.0 > lastKitchenClaim.0.addingTimeInterval(0.5) && $0.1 != "kitchen" },
                "another gateway published the ATC after the kitchen took it back: \(atcStates.map(\.1))")
        // The ruuvi never moved: one owner throughout.
        #expect(Set(claims(final, ruuvi).map(\.1)) == ["hall"], "\(claims(final, ruuvi))")

        for room in ["hall", "kitchen", "garden"] {
            let site = try site(room)
            let status = try await offPool { site.terminate() }
            #expect(status == 0, "\(room) did not stop cleanly (wait status \(status))\n\(logs())")
        }
    }
}

/// One room: its simulated radio and its gateway process.
final class FleetSite: @unchecked Sendable {
    let room: String
    let bus: PrivateBus
    let simulator: BlueZSimulator
    let config: String
    let log: String
    let httpPort: Int
    private let pid = Lock<pid_t?>(nil)
    /// The simulator's notable events ("device E4:5F:01:AA:10:01 connected", …).
    let events: Lock<[String]>

    /// Whether the simulated radio's last connection event for `address` left it connected.
    func connected(_ address: String) -> Bool {
        events.withLock { lines in
            lines.last { $0.hasPrefix("device \(address) connected") || $0.hasPrefix("device \(address) disconnected") }?
                .hasPrefix("device \(address) connected") ?? false
        }
    }

    private init(room: String, bus: PrivateBus, simulator: BlueZSimulator, config: String, log: String, httpPort: Int,
                 events: Lock<[String]>) {
        self.events = events
        self.room = room
        self.bus = bus
        self.simulator = simulator
        self.config = config
        self.log = log
        self.httpPort = httpPort
    }

    /// `POST body` to this gateway's HTTP API `path`: status and body.
    func post(_ path: String, _ body: String) async throws -> (status: Int, body: String) {
        try await curl("http://127.0.0.1:\(httpPort)\(path)", ["-X", "POST", "-H", "Content-Type: application/json", "-d", body], seconds: 5)
    }

    /// What each room hears: RSSI per device before and after the move (nil: not heard).
    static let hearing: [String: [String: (Double, Double)]] = [
        "hall": ["CB:B8:33:4C:88:4F": (-55, -55), "A4:C1:38:12:DB:F8": (-55, -85)],
        "kitchen": ["CB:B8:33:4C:88:4F": (-75, -75), "A4:C1:38:12:DB:F8": (-85, -55), "A4:C1:38:5A:1B:2C": (-60, -60)],
        "garden": ["CB:B8:33:4C:88:4F": (-85, -85), "A4:C1:38:12:DB:F8": (-90, -90), "A4:C1:38:5A:1B:2C": (-80, -80)],
    ]

    /// Advertisement content per device, two alternating values (readings that change).
    static let content: [String: (String, [String])] = [
        "CB:B8:33:4C:88:4F": ("manufacturerData:0x0499", ["0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F",
                                                          "0513245394C37C0004FFFC040CAC364300CECBB8334C884F"]),
        "A4:C1:38:12:DB:F8": ("manufacturerData:0xec88", ["00034db26400", "000355796400"]),
        "A4:C1:38:5A:1B:2C": ("serviceData:181a", ["2c1b5a38c1a48b08d412a80b521f04", "2c1b5a38c1a49308b612a80b522004"]),
    ]

    /// The phone's identity resolving key (the Core Specification's sample IRK).
    static let phoneKey = "ec0234a357c8ad05341010a60a397d9b"
    /// Where the phone is heard: it never moves.
    static let phoneHeard: [String: Int] = ["hall": -50, "kitchen": -75]

    /// The phone's addresses: a new resolvable private address every 10 s.
    static func phoneAddresses() throws -> [String] {
        let key = try IdentityResolvingKey(hex: phoneKey)
        return try (0..<24).map { k in try #require(key.resolvablePrivateAddress(prand: 0x1234 + UInt32(k) * 7919)).description }
    }

    /// A heart-rate strap every gateway is told to watch (connect, subscribe to 2a37): heard best in the kitchen.
    static let strapHeard: [String: Int] = ["kitchen": -50, "hall": -70]

    static func scenario(room: String) throws -> String {
        var devices: [String] = []
        if let rssi = strapHeard[room] {
            let events = (0..<480).map { step in "{\"at\": \(Double(step) * 0.5), \"rssi\": \(rssi + step % 3 - 1)}" }
            devices.append("{\"address\": \"E4:5F:01:AA:10:01\", \"addressType\": \"random\", \"name\": \"Polar H10\", \"rssi\": \(rssi), "
                + "\"uuids\": [\"180d\"], \"advertising\": {\"timeline\": [\(events.joined(separator: ","))]}, "
                + "\"gatt\": [{\"uuid\": \"180d\", \"characteristics\": [{\"uuid\": \"2a37\", \"flags\": [\"notify\"], \"value\": \"10485503\", "
                + "\"notifications\": {\"timeline\": [{\"at\": 0.5, \"value\": \"10485503\"}, {\"at\": 1.0, \"value\": \"104a3e03\"}], \"repeatEvery\": 1.5}}]}]}")
        }
        if let rssi = phoneHeard[room] {
            for (k, address) in try phoneAddresses().enumerated() {
                let from = Double(k) * 10
                var events = (0..<20).map { step in "{\"at\": \(from + Double(step) * 0.5), \"rssi\": \(rssi + step % 3 - 1), \"present\": true}" }
                events.append("{\"at\": \(from + 10), \"present\": false}")
                devices.append("{\"address\": \"\(address)\", \"addressType\": \"random\", \"rssi\": \(rssi), \"advertisingAtStart\": \(k == 0), "
                    + "\"advertising\": {\"timeline\": [\(events.joined(separator: ","))]}}")
            }
        }
        for (address, rssi) in (hearing[room] ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard let (field, values) = content[address] else { continue }
            let parts = field.split(separator: ":")
            let member = String(parts[0]), key = String(parts[1])
            var events: [String] = []
            for step in 0..<480 {
                let at = Double(step) * 0.5
                let r = Int(at < FleetIntegrationTests.moveAt ? rssi.0 : rssi.1) + (step % 3) - 1  // ±1 dB of noise
                events.append("{\"at\": \(at), \"rssi\": \(r), \"\(member)\": {\"\(key)\": \"\(values[(step / 4) % 2])\"}}")
            }
            devices.append("""
                {"address": "\(address)", "addressType": "public", "rssi": \(Int(rssi.0)), "\(member)": {"\(key)": "\(values[0])"},
                 "advertising": {"timeline": [\(events.joined(separator: ","))]}}
                """)
        }
        return "{\"name\": \"fleet-\(room)\", \"devices\": [\(devices.joined(separator: ",\n"))]}"
    }

    static func start(room: String, broker: Broker, in dir: URL) async throws -> FleetSite {
        let scenarioFile = dir.appendingPathComponent("\(room).json")
        try scenario(room: room).write(to: scenarioFile, atomically: true, encoding: .utf8)
        let bus = try PrivateBus.start()
        let events = Lock<[String]>([])
        let simulator = BlueZSimulator(scenario: try Scenario.load(path: scenarioFile.path),
                                       options: SimulatorOptions(log: { line in events.withLock { $0.append(line) } }))
        try await simulator.start(busAddress: bus.address)
        let config = dir.appendingPathComponent("\(room).yaml").path
        let httpPort = try freeLoopbackPort()
        try """
            gateway: { id: \(room), state_dir: "\(dir.appendingPathComponent("state-\(room)").path)" }
            bluez: { bus: "\(bus.address)", ping_interval: 0 }
            devices: { expire_after: 20, identities: { phone: \(phoneKey) }, watch: [{ address: "E4:5F:01:AA:10:01", subscribe: [2a37] }] }
            publish: { min_interval: 0, heartbeat: 0 }
            mqtt: { host: 127.0.0.1, port: \(broker.port), keepalive: 5 }
            fleet: { name: home, room: \(room), dwell: 2, sighting_interval: 0.5, stale_after: 4 }
            http: { listen: "127.0.0.1:\(httpPort)" }
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let site = FleetSite(room: room, bus: bus, simulator: simulator, config: config,
                             log: dir.appendingPathComponent("\(room).log").path, httpPort: httpPort, events: events)
        try site.launch()
        return site
    }

    private func launch() throws {
        let child = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config], stderr: log)
        pid.withLock { $0 = child }
    }

    /// SIGKILL, as a crash or a pulled plug: no clean MQTT disconnect, the broker fires the will.
    func kill() {
        guard let child = pid.withLock({ p in defer { p = nil }; return p }) else { return }
        Glibc.kill(child, SIGKILL)
        _ = waitForExit(child)
    }

    /// Starts the gateway again with the same configuration and state directory.
    func restart() async throws { try launch() }

    /// SIGTERM and the exit status (the wait status, 0 for a clean exit).
    func terminate() -> Int32 {
        guard let child = pid.withLock({ p in defer { p = nil }; return p }) else { return 0 }
        Glibc.kill(child, SIGTERM)
        return waitForExit(child, limit: 15)
    }

    /// Whatever state it is in: the gateway killed, the simulator and its bus stopped.
    func stop() async {
        if let child = pid.withLock({ p in defer { p = nil }; return p }) {
            Glibc.kill(child, SIGKILL)
            _ = try? await offPool { waitForExit(child) }
        }
        await simulator.stop()
        bus.stop()
    }
}
