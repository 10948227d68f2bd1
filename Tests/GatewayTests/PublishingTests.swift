import BLEParsing
import BlueZ
import Domain
import Foundation
import Testing
@testable import Gateway
import Vocabulary

private func address() throws -> BluetoothAddress { try BluetoothAddress("AA:BB:CC:DD:EE:FF") }

private func record(name: String? = "Ruuvi 1A2B", readings: [Reading]? = nil) throws -> DeviceRecord {
    DeviceRecord(
        id: DeviceID(adapter: try AdapterID(name: "hci0"), address: try address()),
        name: name, rssi: -70, format: "ruuvi",
        readings: readings ?? [
            Reading(.temperature, 21.5),
            Reading(.humidity, 45.25),
            Reading(.pressure, 1013.6),
            Reading(.battery, 87),
            Reading(.temperature, 20.25, label: "Probe 1"),
            Reading(.motion, true),
            Reading(.co2, Double.nan),
        ],
        lastSeen: Date(timeIntervalSince1970: 1_700_000_000))
}

private let topics = GatewayTopics(gatewayID: "pi-kitchen")

private func object(_ message: OutgoingMessage) throws -> [String: Any] {
    let parsed = try JSONSerialization.jsonObject(with: Data(message.payload))
    return try #require(parsed as? [String: Any], "payload of \(message.topic) is not a JSON object")
}

@Suite struct TopicTests {
    /// The fast path of TopicSafe.key returns a string unchanged only when
    /// the full rewrite would: checked on every string of up to four
    /// characters from an alphabet with each case the rules distinguish.
    @Test func keyFastPathAgreesWithTheRewrite() {
        let alphabet: [Character] = ["a", "z", "0", "9", "_", "-", "A", " ", "é", "/"]
        var strings: [String] = [""]
        var level: [String] = [""]
        for _ in 0..<4 {
            level = level.flatMap { s in alphabet.map { s + String($0) } }
            strings += level
        }
        var fast = 0
        for s in strings {
            #expect(TopicSafe.key(s) == TopicSafe.rewrittenKey(s), "\(s)")
            if TopicSafe.isKey(s) { fast += 1; #expect(TopicSafe.rewrittenKey(s) == s, "\(s)") }
        }
        #expect(fast > 100)   // the fast path is taken, not only the rewrite
    }

    @Test func deviceTopics() throws {
        let a = try address()
        #expect(topics.gatewayAvailability == "blecompanion/pi-kitchen/status")
        #expect(topics.state(a) == "blecompanion/pi-kitchen/aabbccddeeff/state")
        #expect(topics.availability(a) == "blecompanion/pi-kitchen/aabbccddeeff/status")
        #expect(topics.command(a) == "blecompanion/pi-kitchen/aabbccddeeff/command")
        #expect(topics.reply(a) == "blecompanion/pi-kitchen/aabbccddeeff/reply")
        #expect(topics.onlineMessage == OutgoingMessage(topic: "blecompanion/pi-kitchen/status", payload: Array("online".utf8), retain: true, qos: 1))
        #expect(topics.offlineMessage.text == "offline")
    }

    /// Reading a topic back is the inverse of writing one: the command
    /// handler and the HTTP API's event stream both go through it.
    @Test func deviceTopicsReadBack() throws {
        let a = try address()
        for (topic, leaf) in [(topics.state(a), "state"), (topics.availability(a), "status"), (topics.command(a), "command"), (topics.reply(a), "reply")] {
            let levels = try #require(topics.deviceLevels(of: topic))
            #expect(levels.leaf == leaf && GatewayTopics.address(fromID: levels.id) == a)
        }
        #expect(GatewayTopics.address(fromID: "AABBCCDDEEFF") == a)
        for notDevice in ["blecompanion/pi-kitchen/status", "blecompanion/other/aabbccddeeff/state",
                          "blecompanion/pi-kitchen/aabbccddeeff/state/x", "homeassistant/sensor/x/y/config", ""] {
            #expect(topics.deviceLevels(of: notDevice) == nil, "\(notDevice)")
        }
        // The level is given back as written; only 12 hex digits are an address.
        let odd = try #require(topics.deviceLevels(of: "blecompanion/pi-kitchen/kitchen-lamp/command"))
        #expect(odd.id == "kitchen-lamp" && GatewayTopics.address(fromID: odd.id) == nil)
        for bad in ["aa:bb:cc:dd:ee:ff", "aabbccddeef", "aabbccddeeffa", "aabbccddeefg", ""] {
            #expect(GatewayTopics.address(fromID: bad) == nil, "\(bad)")
        }
    }

    @Test func userStringsCannotAddLevelsOrWildcards() throws {
        let t = GatewayTopics(gatewayID: "my host/#+", base: "home/ble+", discoveryPrefix: "")
        #expect(t.gatewayID == "my_host")
        #expect(t.base == "home/ble")
        #expect(t.discoveryPrefix == "homeassistant")
        #expect(t.command(try address()) == "home/ble/my_host/aabbccddeeff/command")
    }
}

@Suite struct StatePayloadTests {
    @Test func ruuviLikeRecordExactBytes() throws {
        let json = StatePayload.json(for: try record(), at: Date(timeIntervalSince1970: 0))
        let expected = #"{"address":"AA:BB:CC:DD:EE:FF","battery":87,"format":"ruuvi","humidity":45.25,"#
            + #""last_seen":"2023-11-14T22:13:20Z","motion":true,"name":"Ruuvi 1A2B","pressure":1013.6,"#
            + #""rssi":-70,"temperature":21.5,"temperature_probe_1":20.25}"#
        #expect(String(decoding: json, as: UTF8.self) == expected)
        #expect(json == Array(expected.utf8))
    }

    /// The state as ``SortedJSON`` writes it from the members the way the
    /// payload was built before it was written directly: the reference the
    /// direct writer must match byte for byte.
    private func throughSortedJSON(_ record: DeviceRecord, at: Date, extra: [(String, FieldValue)]) -> [UInt8] {
        var members = extra
        members.append(("address", .string(record.id.address.description)))
        members.append(("name", record.name.map { .string($0) } ?? .null))
        members.append(("rssi", record.rssi.map { .int(Int($0)) } ?? .null))
        members.append(("format", record.format.map { .string($0) } ?? .null))
        members.append(("last_seen", .string(ISO8601UTC.string(record.lastSeen ?? at))))
        for (key, reading) in ReadingKey.published(record.readings) where !StatePayload.fixedKeys.contains(key) {
            switch reading.value {
            case let .number(v): members.append((key, .number(v)))
            case let .bool(b): members.append((key, .bool(b)))
            case let .text(t): members.append((key, .string(t)))
            }
        }
        return SortedJSON.bytes(members)
    }

    @Test(arguments: [0, 1, 2, 3, 4])
    func writtenDirectlyAsSortedJSONWritesIt(_ variant: Int) throws {
        var r = try record()
        var extra: [(String, FieldValue)] = []
        switch variant {
        case 1:   // fleet mode's members, a name to escape, no RSSI
            extra = [("gateway", .string("kitchen-pi")), ("room", .string("Küche \"2\""))]
            r.name = "Tab\there \u{1}"
            r.rssi = nil
        case 2:   // repeated keys: the first finite one wins; non-finite ones claim nothing
            r.readings = [Reading(.temperature, .nan), Reading(.temperature, 19.0), Reading(.temperature, 30.5),
                          Reading(.humidity, 50), Reading(.temperature, 1e-7, label: "b"), Reading(.temperature, 1e21, label: "a")]
        case 3:   // no readings, nothing known
            r = DeviceRecord(id: r.id, name: nil, rssi: nil, format: nil, readings: [], lastSeen: nil)
        case 4:   // every kind of value, labels that sort between the fixed keys
            r.readings = [Reading(.button, text: "double_press"), Reading(.motion, false), Reading(.voltage, -0.0),
                          Reading(.count, 12_345_678_901), Reading(.temperature, -40.125, label: "Zone A"),
                          Reading(.battery, .infinity), Reading(.moisture, 33)]
        default: break
        }
        let at = Date(timeIntervalSince1970: 1_764_000_000.5)
        let direct = StatePayload.json(for: r, at: at, extra: extra)
        #expect(String(decoding: direct, as: UTF8.self) == String(decoding: throughSortedJSON(r, at: at, extra: extra), as: UTF8.self))
    }

    /// One device's messages in a row, its layout kept from one to the next
    /// (as the planner does): each must be the bytes a fresh one writes,
    /// whether the shape stayed (new values) or changed under it.
    @Test func aLayoutKeptFromMessageToMessageWritesWhatAFreshOneWrites() throws {
        let first = try record()
        var steps: [(DeviceRecord, [(String, FieldValue)])] = [(first, [])]
        func step(_ change: (inout DeviceRecord) -> Void, extra: [(String, FieldValue)] = []) {
            var r = steps[steps.count - 1].0
            change(&r)
            steps.append((r, extra))
        }
        step { $0.readings[0] = Reading(.temperature, 22.75); $0.rssi = -61 }                 // same shape, new values
        step { $0.readings[1] = Reading(.humidity, .nan) }                                     // a value turns non-finite
        step { $0.readings[1] = Reading(.humidity, 47) }                                       // and back
        step { $0.readings[4] = Reading(.temperature, 20.5, label: "Probe 2") }                // a label changes
        step { $0.readings[2] = Reading(.voltage, 3.1) }                                       // a kind changes
        step { $0.readings.append(Reading(.temperature, 18, label: "Probe 2")) }               // a duplicate key is added
        step { $0.readings.insert(Reading(.temperature, 5), at: 0) }                           // one before it takes the key
        step({ $0.name = nil }, extra: [("gateway", .string("pi")), ("room", .string("hall"))]) // fleet members appear
        step({ $0.readings[0] = Reading(.temperature, 6) }, extra: [("gateway", .string("pi")), ("room", .string("loft"))])
        step({ _ in }, extra: [("room", .string("loft")), ("gateway", .string("pi"))])          // same members, other order
        step { $0.readings = [] }
        step { $0.readings = [Reading(.motion, true), Reading(.button, text: "press")] }
        var layout: StatePayload.Layout?
        var reused = StatePayload.Reused()
        var shared = StatePayload.Layouts()
        let at = Date(timeIntervalSince1970: 1_764_000_000)
        for (i, (r, extra)) in steps.enumerated() {
            let kept = StatePayload.json(for: r, at: at, extra: extra, reusing: &layout, shared: &shared)
            let fresh = StatePayload.json(for: r, at: at, extra: extra)
            #expect(String(decoding: kept, as: UTF8.self) == String(decoding: fresh, as: UTF8.self), "step \(i)")
            #expect(String(decoding: fresh, as: UTF8.self) == String(decoding: throughSortedJSON(r, at: at, extra: extra), as: UTF8.self), "step \(i)")
            let message = StatePayload.message(for: r, at: at, topics: topics, extra: extra, reusing: &reused, shared: &shared)
            #expect(message.payload == fresh, "step \(i)")
            #expect(message.topic == "blecompanion/pi-kitchen/aabbccddeeff/state")
        }
    }

    /// Devices of one shape share one layout (memory: one per shape, not
    /// per device), and the table of them stays bounded.
    @Test func devicesOfOneShapeShareALayoutAndTheTableIsBounded() throws {
        var shared = StatePayload.Layouts()
        var a: StatePayload.Layout?, b: StatePayload.Layout?
        var first = try record()
        var readings = first.readings
        readings[0] = Reading(.temperature, -3)
        let second = DeviceRecord(id: DeviceID(adapter: first.id.adapter, address: try BluetoothAddress("11:22:33:44:55:66")),
                                  name: "another", rssi: -80, format: first.format, readings: readings, lastSeen: first.lastSeen)
        let at = Date(timeIntervalSince1970: 1_764_000_000)
        _ = StatePayload.json(for: first, at: at, reusing: &a, shared: &shared)
        _ = StatePayload.json(for: second, at: at, reusing: &b, shared: &shared)
        #expect(a != nil && a === b)
        #expect(shared.count == 1)
        first.readings.append(Reading(.voltage, 3))
        _ = StatePayload.json(for: first, at: at, reusing: &a, shared: &shared)
        #expect(a !== b && shared.count == 2)
        for n in 0..<(2 * StatePayload.Layouts.capacity) {
            var r = first
            r.readings = [Reading(.temperature, 1, label: "probe \(n)")]
            var layout: StatePayload.Layout?
            let json = StatePayload.json(for: r, at: at, reusing: &layout, shared: &shared)
            #expect(json == StatePayload.json(for: r, at: at))
            #expect(shared.count <= StatePayload.Layouts.capacity)
        }
    }

    @Test func fixedKeysAreRecognisedWithoutTheSet() {
        for key in StatePayload.fixedKeys { #expect(StatePayload.isFixed(key)) }
        for key in ["Address", "rssi_", "temperature", "", "last-seen", "room_1"] { #expect(!StatePayload.isFixed(key)) }
    }

    @Test func absentFieldsAreNullAndLastSeenFallsBackToNow() throws {
        var r = try record(name: nil, readings: [Reading(.button, text: "long_press"), Reading(.voltage, .infinity)])
        r.rssi = nil
        r.format = nil
        r.lastSeen = nil
        let json = StatePayload.json(for: r, at: Date(timeIntervalSince1970: 951_782_400.75))   // 2000-02-29
        #expect(String(decoding: json, as: UTF8.self)
            == #"{"address":"AA:BB:CC:DD:EE:FF","button":"long_press","format":null,"last_seen":"2000-02-29T00:00:00Z","name":null,"rssi":null}"#)
    }

    @Test func timesAreWholeUTCSecondsClampedToTheFourDigitYears() {
        #expect(ISO8601UTC.string(Date(timeIntervalSince1970: 1_763_861_498.999)) == "2025-11-23T01:31:38Z")
        #expect(ISO8601UTC.string(Date(timeIntervalSince1970: -1e300)) == "1970-01-01T00:00:00Z")
        #expect(ISO8601UTC.string(Date(timeIntervalSince1970: .nan)) == "1970-01-01T00:00:00Z")
        #expect(ISO8601UTC.string(Date(timeIntervalSince1970: 1e300)) == "9999-12-31T23:59:59Z")
        #expect(ISO8601UTC.string(.distantFuture) == "4001-01-01T00:00:00Z")
    }

    @Test func stateMessageGoesToTheDeviceStateTopic() throws {
        let m = StatePayload.message(for: try record(), at: Date(), topics: topics)
        #expect(m.topic == "blecompanion/pi-kitchen/aabbccddeeff/state")
        #expect(m.retain == false)
    }
}

@Suite struct DiscoveryTests {
    @Test func oneConfigPerReadingPlusRSSI() throws {
        let messages = HomeAssistantDiscovery.messages(for: try record(), topics: topics)
        let node = "homeassistant/%@/pi-kitchen_aabbccddeeff/aabbccddeeff_%@/config"
        func topic(_ c: String, _ k: String) -> String { String(format: node, c, k) }
        #expect(messages.map(\.topic) == [
            topic("sensor", "temperature"), topic("sensor", "humidity"), topic("sensor", "pressure"),
            topic("sensor", "battery"), topic("sensor", "temperature_probe_1"), topic("binary_sensor", "motion"),
            topic("sensor", "rssi"),
        ])
        #expect(messages.allSatisfy { $0.retain && $0.qos == 1 })

        let required = ["name", "unique_id", "object_id", "state_topic", "value_template", "availability",
                        "availability_mode", "device"]
        for m in messages {
            let o = try object(m)
            for key in required { #expect(o[key] != nil, "\(m.topic) lacks \(key)") }
            #expect(o["state_topic"] as? String == "blecompanion/pi-kitchen/aabbccddeeff/state")
            #expect(o["availability_mode"] as? String == "all")
            let availability = try #require(o["availability"] as? [[String: Any]])
            #expect(availability.compactMap { $0["topic"] as? String }
                == ["blecompanion/pi-kitchen/status", "blecompanion/pi-kitchen/aabbccddeeff/status"])
            let device = try #require(o["device"] as? [String: Any])
            #expect(device["identifiers"] as? [String] == ["blecompanion_pi-kitchen_aabbccddeeff"])
            #expect(device["connections"] as? [[String]] == [["bluetooth", "AA:BB:CC:DD:EE:FF"]])
            #expect(device["name"] as? String == "Ruuvi 1A2B")
            #expect(device["model"] as? String == "ruuvi")
            #expect(device["manufacturer"] as? String == "Ruuvi Innovations")
            #expect(device["via_device"] as? String == "blecompanion_pi-kitchen")
        }
    }

    @Test func classesAndUnits() throws {
        let messages = HomeAssistantDiscovery.messages(for: try record(), topics: topics)
        let byObject = try Dictionary(uniqueKeysWithValues: messages.map { m in
            let o = try object(m)
            return (o["object_id"] as? String ?? "", o)
        })
        func check(_ key: String, _ dc: String, _ unit: String, _ sc: String = "measurement") throws {
            let o = try #require(byObject["aabbccddeeff_\(key)"])
            #expect(o["device_class"] as? String == dc, "\(key)")
            #expect(o["unit_of_measurement"] as? String == unit, "\(key)")
            #expect(o["state_class"] as? String == sc, "\(key)")
            #expect(o["value_template"] as? String == "{{ value_json.\(key) }}")
        }
        try check("temperature", "temperature", "°C")
        try check("humidity", "humidity", "%")
        try check("battery", "battery", "%")
        try check("pressure", "pressure", "hPa")
        try check("temperature_probe_1", "temperature", "°C")
        try check("rssi", "signal_strength", "dBm")
        let rssi = try #require(byObject["aabbccddeeff_rssi"])
        #expect(rssi["enabled_by_default"] as? Bool == false)

        let motion = try #require(byObject["aabbccddeeff_motion"])
        #expect(motion["device_class"] as? String == "motion")
        #expect(motion["unit_of_measurement"] == nil)
        #expect(motion["state_class"] == nil)
        #expect(motion["value_template"] as? String == "{{ 'ON' if value_json.motion else 'OFF' }}")
        #expect(motion["payload_on"] as? String == "ON")
        #expect(motion["payload_off"] as? String == "OFF")
        #expect(byObject["aabbccddeeff_co2"] == nil)   // NaN: not published, not announced
    }

    @Test func uniqueIDsAreUniqueAndStable() throws {
        func ids() throws -> [String] {
            try HomeAssistantDiscovery.messages(for: try record(), topics: topics).map { try object($0)["unique_id"] as? String ?? "" }
        }
        let first = try ids()
        #expect(Set(first).count == first.count)
        #expect(first.contains("blecompanion_pi-kitchen_aabbccddeeff_temperature"))
        #expect(try ids() == first)
        let otherGateway = HomeAssistantDiscovery.messages(for: try record(), topics: GatewayTopics(gatewayID: "garage"))
        #expect(Set(try otherGateway.map { try object($0)["unique_id"] as? String ?? "" }).isDisjoint(with: first))
    }

    @Test func removalEmptiesEveryConfig() throws {
        let r = try record()
        let configs = HomeAssistantDiscovery.messages(for: r, topics: topics)
        let removal = HomeAssistantDiscovery.removal(for: r, topics: topics)
        #expect(removal.map(\.topic) == configs.map(\.topic))
        #expect(removal.allSatisfy { $0.payload.isEmpty && $0.retain })
    }

    @Test func textReadingIsAPlainSensor() throws {
        let messages = HomeAssistantDiscovery.messages(for: try record(readings: [Reading(.button, text: "press")]), topics: topics)
        let o = try object(try #require(messages.first))
        #expect(messages.first?.topic.hasPrefix("homeassistant/sensor/") == true)
        #expect(o["unit_of_measurement"] == nil && o["state_class"] == nil && o["device_class"] == nil)
    }

    @Test func unnamedDeviceAndUnsafeLabelsAreSanitized() throws {
        let r = try record(name: nil, readings: [Reading(.temperature, 4, label: "Fridge / top shelf #2")])
        let messages = HomeAssistantDiscovery.messages(for: r, topics: topics)
        #expect(messages.first?.topic == "homeassistant/sensor/pi-kitchen_aabbccddeeff/aabbccddeeff_temperature_fridge_top_shelf_2/config")
        let o = try object(try #require(messages.first))
        #expect(o["object_id"] as? String == "aabbccddeeff_temperature_fridge_top_shelf_2")
        #expect(o["value_template"] as? String == "{{ value_json.temperature_fridge_top_shelf_2 }}")
        #expect(o["name"] as? String == "Temperature (Fridge / top shelf #2)")
        let device = try #require(o["device"] as? [String: Any])
        #expect(device["name"] as? String == "AA:BB:CC:DD:EE:FF")
        for m in messages {
            let levels = m.topic.split(separator: "/")
            #expect(levels.count == 5)
            #expect(levels[2...3].allSatisfy { $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") } })
        }
        let state = String(decoding: StatePayload.json(for: r, at: Date()), as: UTF8.self)
        #expect(state.contains(#""temperature_fridge_top_shelf_2":4"#))
    }

    @Test func manufacturers() {
        #expect(HomeAssistantDiscovery.manufacturer(forFormat: "bthome") == "BTHome")
        #expect(HomeAssistantDiscovery.manufacturer(forFormat: "mibeacon") == "Xiaomi")
        #expect(HomeAssistantDiscovery.manufacturer(forFormat: "atc1441") == "pvvx custom firmware")
        #expect(HomeAssistantDiscovery.manufacturer(forFormat: "gatt") == nil)
        #expect(HomeAssistantDiscovery.manufacturer(forFormat: nil) == nil)
    }
}

/// The HTTP API's `since`/`until` query times: ISO 8601 (whole or
/// fractional seconds, any offset) or Unix seconds, range-checked.
@Suite struct QueryTimeTests {
    @Test func isoAndUnixSpellingsAreTheSameInstant() throws {
        let expected = Date(timeIntervalSince1970: 1_795_399_200)   // 2026-11-23T02:00:00Z
        #expect(try GatewayHTTPAPI.date("2026-11-23T02:00:00Z", name: "since") == expected)
        #expect(try GatewayHTTPAPI.date("2026-11-23T03:00:00+01:00", name: "since") == expected)
        #expect(try GatewayHTTPAPI.date("1795399200", name: "since") == expected)
        #expect(try GatewayHTTPAPI.date("2026-11-23T02:00:00.250Z", name: "since") == expected.addingTimeInterval(0.25))
        #expect(try GatewayHTTPAPI.date(nil, name: "since") == nil)
        #expect(try GatewayHTTPAPI.date("", name: "since") == nil)
    }

    @Test func badTimesSayWhatWasExpected() {
        for bad in ["yesterday", "2026-13-01T00:00:00Z", "2026-11-23", "1e300", "-1e12"] {
            #expect(throws: GatewayHTTPAPI.QueryError.self, "\(bad)") { try GatewayHTTPAPI.date(bad, name: "until") }
        }
        do {
            _ = try GatewayHTTPAPI.date("yesterday", name: "until")
        } catch {
            #expect(error.message.contains("\"until\" must be an ISO 8601 time"))
        }
    }
}
