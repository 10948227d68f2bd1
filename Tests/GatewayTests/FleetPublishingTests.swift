import BLEParsing
import BlueZ
import Domain
import Fleet
import Foundation
import Presenters
import Testing
@testable import Gateway
import Vocabulary

/// Fleet mode in the planner and the coordinator, pure: rows, broker
/// messages and times in, messages out (the process-level story is
/// MQTTTests' FleetIntegrationTests).
@Suite struct FleetPublishingTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let topics = GatewayTopics(gatewayID: "hall", fleet: "home")

    func row(_ address: String, temperature: Double = 21.5, rssi: Int16 = -60, at: Date? = nil, stale: Bool = false) throws -> DeviceListPresenter.Row {
        DeviceListPresenter.Row(id: DeviceID(adapter: try AdapterID(name: "hci0"), address: try BluetoothAddress(address)), title: "Ruuvi",
                                rssi: rssi, format: "ruuvi", readings: [Reading(.temperature, temperature)], lastSeen: at ?? t0, stale: stale)
    }

    func planner(room: String = "Hall", topics: GatewayTopics? = nil) -> PublishPlanner {
        PublishPlanner(options: .init(topics: topics ?? self.topics, policy: PublishPolicy(minInterval: 0, heartbeat: nil),
                                      fleet: .init(gateway: (topics ?? self.topics).gatewayID, room: room)))
    }

    @Test func aDeviceThisGatewayDoesNotOwnIsFollowedButNotPublished() throws {
        var p = planner()
        #expect(p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0).isEmpty)
        #expect(p.update(.loaded([try row("AA:00:00:00:00:01", temperature: 23)]), now: t0 + 1).isEmpty)
        #expect(p.onlineAddresses.isEmpty && p.nextDeadline == nil)
    }

    @Test func adoptingPublishesDiscoveryOnlineAndAStateThatSaysWhoAndWhere() throws {
        var p = planner()
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        let out = p.adopt(a, previousState: nil, now: t0 + 1)
        #expect(out.map(\.topic) == [
            "homeassistant/sensor/fleet_home_aa0000000001/aa0000000001_temperature/config",
            "homeassistant/sensor/fleet_home_aa0000000001/aa0000000001_rssi/config",
            "homeassistant/sensor/fleet_home_aa0000000001/aa0000000001_room/config",
            "blecompanion/fleet/home/aa0000000001/status",
            "blecompanion/fleet/home/aa0000000001/state",
        ])
        let config = try #require(try JSONSerialization.jsonObject(with: Data(out[0].payload)) as? [String: Any])
        #expect(config["unique_id"] as? String == "blecompanion_fleet_home_aa0000000001_temperature")
        // Availability is the device's own (no one gateway's), and no via_device.
        #expect((config["availability"] as? [[String: String]])?.map { $0["topic"] } == ["blecompanion/fleet/home/aa0000000001/status"])
        #expect((config["device"] as? [String: Any])?["via_device"] == nil)
        #expect(out[4].text.contains("\"gateway\":\"hall\"") && out[4].text.contains("\"room\":\"Hall\""))
        // Owned: changes are published as usual.
        let changed = p.update(.loaded([try row("AA:00:00:00:00:01", temperature: 22)]), now: t0 + 2)
        #expect(changed.map(\.topic) == ["blecompanion/fleet/home/aa0000000001/state"])
    }

    @Test func aTakeoverDoesNotRepublishTheStateThePreviousOwnerAlreadySent() throws {
        // Two gateways in the same room hearing the same readings: the same state hash.
        let kitchen = GatewayTopics(gatewayID: "kitchen", fleet: "home")
        var old = planner(room: "Open plan", topics: kitchen)
        var new = planner(room: "Open plan")
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        _ = old.update(.loaded([try row("AA:00:00:00:00:01", rssi: -50)]), now: t0)
        _ = old.adopt(a, previousState: nil, now: t0)
        let hash = try #require(old.sentStateHash(a))
        _ = new.update(.loaded([try row("AA:00:00:00:00:01", rssi: -80, at: t0 + 3)]), now: t0 + 3)
        let out = new.adopt(a, previousState: hash, now: t0 + 4)
        #expect(!out.contains { $0.topic.hasSuffix("/state") }, "\(out.map(\.topic))")
        #expect(out.contains { $0.topic.hasSuffix("/status") && $0.text == "online" })
        // A different reading is a different hash: published.
        var third = planner(room: "Open plan")
        _ = third.update(.loaded([try row("AA:00:00:00:00:01", temperature: 30)]), now: t0)
        #expect(third.adopt(a, previousState: hash, now: t0 + 1).contains { $0.topic.hasSuffix("/state") })
    }

    @Test func afterReleaseNothingMoreIsPublished() throws {
        var p = planner()
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        _ = p.adopt(a, previousState: nil, now: t0)
        p.release(a)
        #expect(p.update(.loaded([try row("AA:00:00:00:00:01", temperature: 25)]), now: t0 + 1).isEmpty)
        #expect(p.update(.loaded([]), now: t0 + 2).isEmpty, "a released device's disappearance is its new owner's to say")
        #expect(p.onlineAddresses.isEmpty)
    }

    // MARK: - Coordinator

    /// A broker in memory: every published message reaches every coordinator, in publication order.
    struct Broker {
        var members: [FleetCoordinator]
        var planners: [PublishPlanner]
        var log: [OutgoingMessage] = []

        mutating func tick(_ now: Double) {
            var sent: [OutgoingMessage] = []
            for k in members.indices {
                let p = planners[k]
                sent += members[k].tick(now: now) { p.sentStateHash($0) }
            }
            deliver(sent, now: now)
        }

        mutating func deliver(_ messages: [OutgoingMessage], now: Double) {
            for m in messages {
                log.append(m)
                for k in members.indices {
                    let (changes, _) = members[k].received(topic: m.topic, payload: m.payload)
                    for change in changes {
                        switch change {
                        case let .adopt(address, previous):
                            log += planners[k].adopt(address, previousState: previous, now: Date(timeIntervalSince1970: now))
                        case let .release(address): planners[k].release(address)
                        case .adoptIdentity, .releaseIdentity: break
                        }
                    }
                }
            }
        }
    }

    func coordinators(_ names: [String], rule: OwnershipTable.Rule = .init(hysteresis: 6, dwell: 4, staleAfter: 6)) -> Broker {
        Broker(members: names.map { FleetCoordinator(me: $0, room: $0, topics: GatewayTopics(gatewayID: $0, fleet: "home"),
                                                     options: .init(rule: rule, interval: 1, settle: 2)) },
               planners: names.map { planner(room: $0, topics: GatewayTopics(gatewayID: $0, fleet: "home")) })
    }

    @Test func theStrongestClaimsAfterTheSettleThenAClearlyBetterOneTakesOver() throws {
        var b = coordinators(["hall", "kitchen"])
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        let start = t0.timeIntervalSince1970
        for k in b.members.indices { b.members[k].subscribed(now: start) }
        var firstClaim: Double?, takeover: Double?
        for s in 0..<20 {
            let now = start + Double(s)
            // The device walks from the hall to the kitchen at 10 s.
            b.members[0].heard(a, rssi: s < 10 ? -50 : -80, at: now)
            b.members[1].heard(a, rssi: s < 10 ? -80 : -50, at: now)
            for k in b.planners.indices {
                _ = b.planners[k].update(.loaded([try row("AA:00:00:00:00:01", at: Date(timeIntervalSince1970: now))]), now: Date(timeIntervalSince1970: now))
            }
            b.tick(now)
            let claims = b.log.filter { $0.topic == "blecompanion/fleet/home/owner/aa0000000001" }
            if firstClaim == nil, !claims.isEmpty { firstClaim = Double(s) }
            if takeover == nil, claims.last?.text.contains("\"kitchen\"") == true { takeover = Double(s) }
        }
        #expect(firstClaim == 2, "no claim before the settle (2 s)")
        let claims = b.log.filter { $0.topic == "blecompanion/fleet/home/owner/aa0000000001" }.map(\.text)
        #expect(claims.count == 2 && claims[0].contains("\"hall\"") && claims[1].contains("\"kitchen\""), "\(claims)")
        // Smoothing takes two sightings to put the kitchen 6 dB ahead, then the 4 s dwell.
        #expect(takeover.map { $0 >= 14 && $0 <= 16 } == true, "takeover at \(takeover ?? -1)")
        #expect(b.members[1].owns(a) && !b.members[0].owns(a))
        // Each gateway's states: the hall's all before the takeover, the kitchen's after.
        let states = b.log.filter { $0.topic.hasSuffix("/state") }.map { $0.text.contains("\"gateway\":\"hall\"") ? "hall" : "kitchen" }
        #expect(states.first == "hall" && states.last == "kitchen")
        #expect(states.firstIndex(of: "kitchen").map { !states[$0...].contains("hall") } == true, "\(states)")
    }

    @Test func sightingsAreRefreshedWhileHeardAndStopWhenNot() throws {
        var c = FleetCoordinator(me: "hall", room: "hall", topics: topics, options: .init(rule: .init(staleAfter: 6), interval: 1))
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        let start = t0.timeIntervalSince1970
        c.heard(a, rssi: -60, at: start)
        var batches: [Double] = []
        for s in 0..<12 {
            let out = c.tick(now: start + Double(s)) { _ in nil }
            if out.contains(where: { $0.topic == "blecompanion/fleet/home/sightings/hall" && $0.text.contains("aa0000000001") }) { batches.append(Double(s)) }
        }
        // Heard once at 0: in the batch at 0, refreshed every staleAfter/3 = 2 s while fresh (to 6 s), then silent.
        #expect(batches == [0, 2, 4, 6], "\(batches)")
    }

    @Test func malformedFleetMessagesAreCountedAndNamed() throws {
        var c = FleetCoordinator(me: "hall", room: "hall", topics: topics, options: .init())
        let (changes, problem) = c.received(topic: "blecompanion/fleet/home/sightings/kitchen", payload: Array("{\"gateway\":1}".utf8))
        #expect(changes.isEmpty && problem?.contains("gateway") == true)
        let (_, bad) = c.received(topic: "blecompanion/fleet/home/owner/nope", payload: OwnerClaim(gateway: "kitchen", at: 1).json)
        #expect(bad?.contains("not a device id") == true)
        #expect(c.currentStatistics.refused == 2)
    }

    @Test func aRestartedGatewayTakesBackWhatItsRetainedClaimSays() throws {
        var c = FleetCoordinator(me: "hall", room: "hall", topics: topics, options: .init())
        let (changes, _) = c.received(topic: "blecompanion/fleet/home/owner/aa0000000001", payload: OwnerClaim(gateway: "hall", at: 1).json)
        #expect(changes == [.adopt(try BluetoothAddress("AA:00:00:00:00:01"), previousState: nil)])
        let (released, _) = c.received(topic: "blecompanion/fleet/home/owner/aa0000000001", payload: OwnerClaim(gateway: "kitchen", at: 2).json)
        #expect(released == [.release(try BluetoothAddress("AA:00:00:00:00:01"))])
    }

    @Test func anotherGatewaysWillTakesItsDevicesAwayFromIt() throws {
        var c = FleetCoordinator(me: "hall", room: "hall", topics: topics, options: .init(rule: .init(), interval: 1, settle: 0))
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        let now = t0.timeIntervalSince1970
        c.subscribed(now: now)
        _ = c.received(topic: "blecompanion/fleet/home/owner/aa0000000001", payload: OwnerClaim(gateway: "kitchen", at: now).json)
        _ = c.received(topic: "blecompanion/fleet/home/sightings/kitchen",
                       payload: SightingBatch(gateway: "kitchen", room: "k", at: now, devices: ["aa0000000001": .init(rssi: -40)]).json)
        c.heard(a, rssi: -70, at: now)
        #expect(!c.tick(now: now + 0.5) { _ in nil }.contains { $0.topic.contains("/owner/") })
        _ = c.received(topic: "blecompanion/kitchen/status", payload: Array("offline".utf8))
        #expect(c.tick(now: now + 1) { _ in nil }.contains { $0.topic == "blecompanion/fleet/home/owner/aa0000000001" && $0.retain })
    }
}

@Test func fleetMetricsAreRenderedOnlyInFleetMode() {
    let metrics = GatewayMetrics()
    #expect(!metrics.render().contains("blecompanion_fleet_"))
    var s = FleetCoordinator.Statistics()
    s.owned = 3
    s.claimsSent = 4
    s.refused = 1
    metrics.recordFleet(s)
    let text = metrics.render()
    #expect(text.contains("blecompanion_fleet_owned 3\n"))
    #expect(text.contains("blecompanion_fleet_claims_total 4\n"))
    #expect(text.contains("blecompanion_fleet_refused_total 1\n"))
}

@Test func aDeadOwnersDevicesThatNobodyHearsAreSaidOfflineByOneGateway() throws {
    let topics = GatewayTopics(gatewayID: "attic", fleet: "home")
    let now = 1_800_000_000.0
    func member(_ name: String) -> FleetCoordinator {
        var c = FleetCoordinator(me: name, room: name, topics: GatewayTopics(gatewayID: name, fleet: "home"),
                                 options: .init(rule: .init(staleAfter: 6), interval: 1, settle: 0))
        c.subscribed(now: now)
        for other in ["attic", "hall", "kitchen"] where other != name {
            _ = c.received(topic: "blecompanion/\(other)/status", payload: Array("online".utf8))
        }
        _ = c.received(topic: "blecompanion/fleet/home/owner/aa0000000001", payload: OwnerClaim(gateway: "kitchen", at: now).json)
        _ = c.received(topic: "blecompanion/fleet/home/sightings/kitchen",
                       payload: SightingBatch(gateway: "kitchen", room: "k", at: now, devices: ["aa0000000001": .init(rssi: -60)]).json)
        _ = c.received(topic: "blecompanion/kitchen/status", payload: Array("offline".utf8))
        return c
    }
    var attic = member("attic"), hall = member("hall")
    let fromAttic = attic.tick(now: now + 1) { _ in nil }
    #expect(fromAttic.contains { $0.topic == "blecompanion/fleet/home/aa0000000001/status" && $0.text == "offline" && $0.retain })
    #expect(fromAttic.contains { $0.topic == topics.fleetOwner("aa0000000001") && $0.payload.isEmpty && $0.retain })
    // Only one gateway says so: the one whose id sorts first among those online.
    #expect(!hall.tick(now: now + 1) { _ in nil }.contains { $0.topic.hasSuffix("/status") })
    // Said once.
    #expect(!attic.tick(now: now + 2) { _ in nil }.contains { $0.topic.hasSuffix("/status") })
}

@Test func aFloodOfNewDevicesKeepsTheCoordinatorBounded() throws {
    var c = FleetCoordinator(me: "hall", room: "hall", topics: GatewayTopics(gatewayID: "hall", fleet: "home"), options: .init())
    let now = 1_800_000_000.0
    for i in 0..<120_000 {
        c.heard(BluetoothAddress(value: 0xC000_0000_0000 | UInt64(i)), rssi: -70, at: now + Double(i) / 1000)
    }
    #expect(c.table.deviceCount <= c.table.capacity)
    // One batch, and it is split at the message limit.
    let out = c.tick(now: now + 121) { _ in nil }
    #expect(out.allSatisfy { (try? SightingBatch.parse($0.payload))?.devices.count ?? .max <= SightingBatch.maximumDevices })
    #expect(out.count <= (c.table.capacity * 3 / 2) / SightingBatch.maximumDevices + 1)
}
