import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import Testing
@testable import Gateway
import Vocabulary

/// The publishing rules, pure: list states and times in, messages out.
@Suite struct PublishPlannerTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let topics = GatewayTopics(gatewayID: "gw")

    func row(_ address: String, temperature: Double? = 21.5, format: String? = "ruuvi", stale: Bool = false,
             rssi: Int16 = -60) throws -> DeviceListPresenter.Row {
        let a = try BluetoothAddress(address)
        return DeviceListPresenter.Row(id: DeviceID(adapter: try AdapterID(name: "hci0"), address: a), title: "Ruuvi", rssi: rssi,
                                       format: format, readings: temperature.map { [Reading(.temperature, $0)] } ?? [],
                                       lastSeen: t0, stale: stale)
    }

    func planner(_ policy: PublishPolicy = PublishPolicy(minInterval: 0, heartbeat: nil), selection: DeviceSelection = .decodable,
                 discovery: Bool = true) -> PublishPlanner {
        PublishPlanner(options: .init(topics: topics, selection: selection, policy: policy, discovery: discovery))
    }

    func kinds(_ messages: [OutgoingMessage]) -> [String] {
        messages.map { m in
            if m.topic.hasPrefix("homeassistant/") { return "config" }
            if m.topic.hasSuffix("/status") { return "status:\(m.text)" }
            if m.topic.hasSuffix("/state") { return "state" }
            return m.topic
        }
    }

    @Test func aNewDeviceGetsDiscoveryThenOnlineThenState() throws {
        var p = planner()
        let out = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        // temperature + RSSI configs, then availability, then the state.
        #expect(kinds(out) == ["config", "config", "status:online", "state"])
        #expect(out[2].retain && out[2].topic == "blecompanion/gw/aa0000000001/status")
        #expect(!out[3].retain && out[3].qos == 1)
    }

    /// A whole list's messages handed out in slices as they are made are
    /// the same messages in the same order as all at once, and no slice is
    /// larger than asked; a keyed update (changed rows) is not sliced.
    @Test func aWholeListsMessagesCanBeTakenInSlicesWithoutChangingThem() throws {
        let list = try (1...40).map { try row(String(format: "AA:00:00:00:00:%02X", $0), stale: $0 == 7) }
        let rows = DeviceListPresenter.Rows(list)
        var whole = planner(), sliced = planner()
        let all = whole.update(.loaded(rows), now: t0)
        var slices: [[OutgoingMessage]] = []
        let rest = sliced.update(.loaded(rows), changes: nil, now: t0, emitEvery: 9) { slices.append($0) }
        #expect(all.count > 100, "discovery, availability and state of 39 devices")
        #expect(slices.count >= all.count / 12, "\(slices.count) slices of \(all.count) messages")
        #expect(slices.allSatisfy { $0.count >= 9 && $0.count < 9 + 4 }, "\(slices.map(\.count))")
        let joined = slices.flatMap { $0 } + rest
        #expect(joined.map(\.topic) == all.map(\.topic))
        #expect(joined.map(\.payload) == all.map(\.payload))
        var changes = DeviceListPresenter.RowChanges()
        changes.rows = try [row("AA:00:00:00:00:01", temperature: 30)]
        let changedRows = DeviceListPresenter.Rows([try row("AA:00:00:00:00:01", temperature: 30)] + list.dropFirst())
        var emitted = 0
        let keyed = sliced.update(.loaded(changedRows), changes: changes, now: t0 + 1, emitEvery: 1) { _ in emitted += 1 }
        #expect(emitted == 0 && kinds(keyed) == ["state"])
    }

    @Test func onlyContentChangesPublishNotRSSI() throws {
        var p = planner()
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        #expect(p.update(.loaded([try row("AA:00:00:00:00:01", rssi: -80)]), now: t0 + 1).isEmpty)
        let changed = p.update(.loaded([try row("AA:00:00:00:00:01", temperature: 22)]), now: t0 + 2)
        #expect(kinds(changed) == ["state"])
        #expect(changed.first?.text.contains("\"temperature\":22") == true)
    }

    /// A reading that is not a finite number is not published, so it is not
    /// a change either (NaN never equals itself: every advertisement would be).
    @Test func aNonFiniteReadingIsNeitherPublishedNorAChange() throws {
        var p = planner()
        let first = p.update(.loaded([try row("AA:00:00:00:00:01", temperature: .nan)]), now: t0)
        #expect(kinds(first).last == "state")
        #expect(first.last?.text.contains("temperature") == false)
        #expect(p.update(.loaded([try row("AA:00:00:00:00:01", temperature: .nan, rssi: -70)]), now: t0 + 1).isEmpty)
        let real = kinds(p.update(.loaded([try row("AA:00:00:00:00:01", temperature: 20, rssi: -70)]), now: t0 + 2))
        #expect(real.last == "state", "\(real)")
    }

    @Test func minimumIntervalHoldsAChangeBackUntilItsDeadline() throws {
        var p = planner(PublishPolicy(minInterval: 10, heartbeat: nil))
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        #expect(p.update(.loaded([try row("AA:00:00:00:00:01", temperature: 22)]), now: t0 + 3).isEmpty)
        #expect(p.nextDeadline == t0 + 10)
        #expect(p.tick(now: t0 + 9).isEmpty)
        let due = p.tick(now: t0 + 10)
        #expect(kinds(due) == ["state"])
        #expect(due.first?.text.contains("\"temperature\":22") == true, "the latest value, not the one before")
        #expect(p.nextDeadline == nil)
    }

    @Test func heartbeatRepublishesAnUnchangedState() throws {
        var p = planner(PublishPolicy(minInterval: 0, heartbeat: 60))
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        #expect(p.nextDeadline == t0 + 60)
        #expect(kinds(p.tick(now: t0 + 60)) == ["state"])
        #expect(p.nextDeadline == t0 + 120)
    }

    @Test func staleDevicesGoOfflineAndComeBackWithTheirState() throws {
        var p = planner()
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        #expect(kinds(p.update(.loaded([try row("AA:00:00:00:00:01", stale: true)]), now: t0 + 300)) == ["status:offline"])
        #expect(p.nextDeadline == nil, "no heartbeat for an offline device")
        #expect(kinds(p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0 + 301)) == ["status:online", "state"])
    }

    @Test func bluetoothdGoneTakesEveryDeviceOffline() throws {
        var p = planner()
        _ = p.update(.loaded([try row("AA:00:00:00:00:01"), try row("AA:00:00:00:00:02")]), now: t0)
        let out = p.update(.unavailable(.bluetooth(.bluetoothdGone)), now: t0 + 1)
        #expect(kinds(out) == ["status:offline", "status:offline"])
        #expect(!p.bluetoothAvailable)
        #expect(p.update(.loading, now: t0 + 2).isEmpty)
    }

    @Test func aNewReadingKeySendsDiscoveryAgain() throws {
        var p = planner()
        _ = p.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)
        var withHumidity = try row("AA:00:00:00:00:01")
        withHumidity.readings.append(Reading(.humidity, 40))
        #expect(kinds(p.update(.loaded([withHumidity]), now: t0 + 1)) == ["config", "config", "config", "state"])
    }

    @Test func selectionAllowDenyAndDecodable() throws {
        let plain = try row("AA:00:00:00:00:09", temperature: nil, format: nil)
        var decodable = planner()
        #expect(decodable.update(.loaded([plain]), now: t0).isEmpty)
        var allow = planner(selection: .allow([try BluetoothAddress("AA:00:00:00:00:09")]))
        #expect(kinds(allow.update(.loaded([plain, try row("AA:00:00:00:00:01")]), now: t0)) == ["config", "status:online", "state"])
        var deny = planner(selection: .deny([try BluetoothAddress("AA:00:00:00:00:01")]))
        #expect(deny.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0).isEmpty)
        var noDiscovery = planner(discovery: false)
        #expect(kinds(noDiscovery.update(.loaded([try row("AA:00:00:00:00:01")]), now: t0)) == ["status:online", "state"])
    }

    @Test func gattReadingsOfAWatchedDeviceJoinItsState() throws {
        var p = planner()
        let strap = try row("AA:00:00:00:00:07", temperature: nil, format: nil)
        let a = try BluetoothAddress("AA:00:00:00:00:07")
        let out = p.update(.loaded([strap]), gatt: [a: [Reading(.heartRate, 72, unit: "bpm")]], now: t0)
        #expect(out.last?.text.contains("\"heart_rate\":72") == true)
    }

    /// Keyed updates (only the rows that changed, as the list presenter says)
    /// publish exactly what full updates of the same states publish, with
    /// held-back changes, heartbeats, stale rows, rows that leave and return
    /// and the selection in play; with the due times it leaves behind equal too.
    /// Messages by device (the address in the topic), each device's in order.
    /// (A held-back change of a device that did not change again comes from
    /// the timer in a keyed update and from its row in a full one: the same
    /// messages, in another order across devices.)
    func perDevice(_ messages: [OutgoingMessage]) -> [String: [OutgoingMessage]] {
        Dictionary(grouping: messages) { m in m.topic.split(separator: "/").first { $0.count == 12 && $0.hasPrefix("aa") }.map(String.init) ?? m.topic }
    }

    @Test func keyedUpdatesPublishWhatFullUpdatesPublish() throws {
        var full = planner(PublishPolicy(minInterval: 5, heartbeat: 60), selection: .deny([try BluetoothAddress("AA:00:00:00:00:03")]))
        var keyed = full
        var seed: UInt64 = 7
        func next(_ n: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(n))
        }
        let addresses = (0..<12).map { String(format: "AA:00:00:00:00:%02X", $0) }
        var rows: [String: DeviceListPresenter.Row] = [:]
        for a in addresses { rows[a] = try row(a, temperature: 20) }
        func list() -> [DeviceListPresenter.Row] { addresses.compactMap { rows[$0] } }
        var now = t0
        #expect(full.update(.loaded(ChunkedArray(list())), now: now) == keyed.update(.loaded(ChunkedArray(list())), now: now))
        for round in 0..<400 {
            now = now.addingTimeInterval(Double(next(4)))
            var changed: Set<BluetoothAddress> = []
            for _ in 0..<(1 + next(3)) {
                let a = addresses[next(addresses.count)]
                switch next(6) {
                case 0: rows[a] = nil                                                         // leaves the list
                case 1: rows[a] = try row(a, temperature: 20, stale: true)                   // turns stale
                case 2: rows[a] = try row(a, temperature: nil, format: nil)                  // no longer decodable
                case 3: rows[a] = try row(a, temperature: rows[a]?.readings.first.map { _ in 20 } ?? 20, rssi: Int16(-30 - next(60)))
                default: rows[a] = try row(a, temperature: Double(next(40)))
                }
                changed.insert(try BluetoothAddress(a))
            }
            let a = perDevice(full.update(.loaded(ChunkedArray(list())), now: now))
            let b = perDevice(keyed.update(.loaded(ChunkedArray(list())), changed: changed, now: now))
            #expect(a == b, "round \(round): \(a.mapValues(kinds)) vs \(b.mapValues(kinds))")
            #expect(full.nextDeadline == keyed.nextDeadline, "round \(round)")
            if a != b { return }
            // Between states, the timer.
            if next(3) == 0 { now = now.addingTimeInterval(61); #expect(perDevice(full.tick(now: now)) == perDevice(keyed.tick(now: now))) }
        }
        #expect(full.devices == keyed.devices)
        #expect(full.onlineAddresses == keyed.onlineAddresses)
        #expect(full.onlineAddresses == Set(full.devices.filter { $0.value.online }.keys), "the online set follows the devices")
    }
}

@Suite struct GatewayCommandParsingTests {
    @Test func parsesEveryAction() throws {
        #expect(try GatewayCommand.parse(Array(#"{"action":"connect"}"#.utf8)) == GatewayCommand(action: .connect))
        let write = try GatewayCommand.parse(Array(#"{"action":"write","characteristic":"2a39","value":"0A ff","without_response":true,"id":7}"#.utf8))
        #expect(write == GatewayCommand(action: .write, characteristic: "2a39", value: [0x0a, 0xff], withoutResponse: true, id: "7"))
        let notify = try GatewayCommand.parse(Array(#"{"action":"notify","characteristic":"2a37","enable":false}"#.utf8))
        #expect(notify.enable == false)
        // UUID spellings the rest of the product accepts.
        for spelling in ["0x2A39", "00002a39", "00002A39-0000-1000-8000-00805F9B34FB", "00002a3900001000800000805f9b34fb"] {
            let c = try GatewayCommand.parse(Array(#"{"action":"read","characteristic":"\#(spelling)"}"#.utf8))
            #expect(c.characteristic == spelling)
        }
    }

    @Test(arguments: [
        (#"[1]"#, "must be a JSON object"),
        (#"{"characteristic":"2a37"}"#, "\"action\" is missing"),
        (#"{"action":"read"}"#, "\"read\" needs \"characteristic\""),
        // A characteristic that cannot be one is the request's fault (400), not the device's (502).
        (#"{"action":"read","characteristic":"2a3z"}"#, "must be a UUID (\"2a37\", \"0x2A37\" or 128-bit) or a characteristic's object path, got \"2a3z\""),
        (#"{"action":"read","characteristic":"/org//bluez"}"#, "\"/org//bluez\" is not a D-Bus object path"),
        (#"{"action":"write","characteristic":"2a39"}"#, "needs \"value\""),
        (#"{"action":"write","characteristic":"2a39","value":"0g"}"#, "\"value\": \"0g\" is not hex bytes"),
        (#"{"action":"notify","characteristic":"2a37","enable":1}"#, "\"enable\" must be true or false"),
        (#"{"action":"read","characteristic":"2a37","colour":"red"}"#, "unknown member \"colour\""),
        (#"{"action":"read""#, "not JSON"),
    ])
    func badCommandsSayWhatIsWrong(input: String, message: String) {
        #expect(throws: GatewayCommandError.self) { try GatewayCommand.parse(Array(input.utf8)) }
        do { _ = try GatewayCommand.parse(Array(input.utf8)) } catch {
            #expect(error.description.contains(message), "\(error.description)")
        }
    }

    @Test func replyJSON() throws {
        let a = try BluetoothAddress("AA:00:00:00:00:01")
        let ok = GatewayCommandReply(id: "r1", action: "read", address: a, value: [0x01], readings: [Reading(.heartRate, 72, unit: "bpm")])
        #expect(String(decoding: ok.json, as: UTF8.self)
                == #"{"action":"read","address":"AA:00:00:00:00:01","id":"r1","ok":true,"readings":{"heart_rate":72},"value":"01"}"#)
        let failed = GatewayCommandReply(id: nil, action: nil, address: a, error: "no")
        #expect(String(decoding: failed.json, as: UTF8.self) == #"{"action":null,"address":"AA:00:00:00:00:01","error":"no","id":null,"ok":false}"#)
    }

    @Test func metricsExposition() {
        let m = GatewayMetrics()
        m.recordDeviceList(decodeErrors: ["BTHome v2": 3], coalesced: 7, resynchronizations: 0)
        m.recordQueue(depth: 5, dropped: 0)
        m.recordBluetoothd(available: true)
        m.countCommand("read", ok: true)
        m.countCommand("read", ok: false, busy: true)
        m.recordStorage(.outboxPublisher, failed: "disk I/O error")
        m.recordAdvertisements(0, at: Date(timeIntervalSince1970: 0))
        m.recordAdvertisements(120, at: Date(timeIntervalSince1970: 60))
        let text = m.render()
        #expect(text.contains("# TYPE blecompanion_advertisements_total counter\nblecompanion_advertisements_total 120\n"))
        #expect(text.contains("blecompanion_advertisements_per_second 2.000\n"))
        #expect(text.contains(#"blecompanion_decode_errors_total{format="BTHome v2"} 3"#))
        #expect(text.contains("blecompanion_mqtt_queue_depth 5\n"))
        #expect(text.contains("blecompanion_bluetoothd_available 1\n"))
        #expect(text.contains("blecompanion_advertisements_coalesced_total 7\n"))
        #expect(text.contains(#"blecompanion_commands_total{action="read",result="busy"} 1"#))
        #expect(text.contains(#"blecompanion_commands_total{action="read",result="ok"} 1"#))
        // The outbox's publisher failing makes the outbox store not OK; readings are.
        #expect(text.contains(#"blecompanion_storage_errors_total{store="outbox"} 1"#))
        #expect(text.contains(#"blecompanion_storage_ok{store="outbox"} 0"#))
        #expect(text.contains(#"blecompanion_storage_ok{store="readings"} 1"#))
    }
}
