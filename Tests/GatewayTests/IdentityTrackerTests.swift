import BLEParsing
import Foundation
import Testing
@testable import Gateway
import Vocabulary

/// Identities on a gateway of its own: rows' addresses in, messages out.
@Suite struct IdentityTrackerTests {
    let key = (try? IdentityResolvingKey(hex: "ec0234a357c8ad05341010a60a397d9b"))!
    let topics = GatewayTopics(gatewayID: "hall")
    let t0 = 1_800_000_000.0

    func tracker(expireAfter: Double = 30) -> IdentityTracker {
        IdentityTracker(identities: [.init(name: "watch", key: key)], topics: topics, discovery: true, fleet: nil, expireAfter: expireAfter)
    }

    func rpa(_ prand: UInt32) throws -> BluetoothAddress { try #require(key.resolvablePrivateAddress(prand: prand)) }

    @Test func theFirstSightingAnnouncesTheIdentityThenOnlyRotationsAndRSSIStepsArePublished() throws {
        var t = tracker()
        let first = t.heard(try rpa(1), rssi: -60, at: t0)
        #expect(first.name == "watch")
        #expect(first.messages.map(\.topic) == [
            "homeassistant/device_tracker/hall_id_watch/id_watch_presence/config",
            "homeassistant/sensor/hall_id_watch/id_watch_rssi/config",
            "blecompanion/hall/id_watch/status",
            "blecompanion/hall/id_watch/state",
        ])
        let tracker = try #require(try JSONSerialization.jsonObject(with: Data(first.messages[0].payload)) as? [String: Any])
        #expect(tracker["state_topic"] as? String == "blecompanion/hall/id_watch/status")
        #expect(tracker["source_type"] as? String == "bluetooth_le")
        #expect(first.messages[3].text.contains("\"identity\":\"watch\""))
        // The same address, RSSI within 6 dB: nothing.
        #expect(t.heard(try rpa(1), rssi: -63, at: t0 + 1).messages.isEmpty)
        // 6 dB: the state.
        #expect(t.heard(try rpa(1), rssi: -66, at: t0 + 2).messages.map(\.topic) == ["blecompanion/hall/id_watch/state"])
        // A new address: the same identity, the state says the address it uses now.
        let rotated = t.heard(try rpa(2), rssi: -66, at: t0 + 3)
        #expect(rotated.name == "watch")
        let second = try rpa(2).description
        #expect(rotated.messages.count == 1 && rotated.messages[0].text.contains(second))
    }

    @Test func anIdentityNotHeardForTheExpiryIsNotHome() throws {
        var t = tracker(expireAfter: 30)
        _ = t.heard(try rpa(1), rssi: -60, at: t0)
        #expect(t.expire(now: t0 + 29).isEmpty)
        #expect(t.nextExpiry == Date(timeIntervalSince1970: t0 + 30))
        let gone = t.expire(now: t0 + 30)
        #expect(gone.map(\.topic) == ["blecompanion/hall/id_watch/status"] && gone[0].text == "offline" && gone[0].retain)
        #expect(t.nextExpiry == nil)
        // Back: online and its state again, discovery not repeated.
        let back = t.heard(try rpa(3), rssi: -60, at: t0 + 40).messages.map(\.topic)
        #expect(back == ["blecompanion/hall/id_watch/status", "blecompanion/hall/id_watch/state"])
    }

    @Test func strangersAndOtherAddressKindsAreNotIdentities() throws {
        var t = tracker()
        #expect(t.heard(try BluetoothAddress("4A:00:00:12:34:56"), rssi: -60, at: t0).name == nil)
        #expect(t.heard(try BluetoothAddress("C4:7C:8D:6A:00:01"), rssi: -60, at: t0).name == nil)
    }

    @Test func bondedIdentitiesAreReadFromBluetoothdsStorage() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bonded-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let device = dir.appendingPathComponent("00:1A:7D:DA:71:13/F0:99:B6:12:34:56")
        try FileManager.default.createDirectory(at: device, withIntermediateDirectories: true)
        try "[General]\nName=Ann's Watch\n\n[IdentityResolvingKey]\nKey=9B7D390AA610103405ADC857A33402EC\n"
            .write(to: device.appendingPathComponent("info"), atomically: true, encoding: .utf8)
        let broken = dir.appendingPathComponent("00:1A:7D:DA:71:13/F0:99:B6:00:00:01")
        try FileManager.default.createDirectory(at: broken, withIntermediateDirectories: true)
        try "[IdentityResolvingKey]\nKey=12\n".write(to: broken.appendingPathComponent("info"), atomically: true, encoding: .utf8)
        let (identities, problems) = BondedIdentities.read(directory: dir.path)
        #expect(identities == [.init(name: "Ann_s_Watch_3456", key: key)])
        #expect(problems.count == 1 && problems[0].contains("F0:99:B6:00:00:01/info"))
        #expect(BondedIdentities.read(directory: dir.appendingPathComponent("absent").path).problems.first?.contains("cannot read") == true)
    }
}
