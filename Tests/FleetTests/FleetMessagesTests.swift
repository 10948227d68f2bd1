import Testing
@testable import Fleet

@Suite("Fleet messages")
struct FleetMessagesTests {
    @Test("a sighting batch reads back as it was written")
    func roundTrip() throws {
        let batch = SightingBatch(gateway: "hall-1", room: "Hall \"north\"", at: 1_764_200_000.25, devices: [
            "e45f01aa1001": .init(rssi: -63, state: "9f86d081"),
            "id_alice_phone": .init(rssi: -80),
        ])
        let text = String(decoding: batch.json, as: UTF8.self)
        #expect(text.hasPrefix("{\"gateway\":\"hall-1\",\"room\":\"Hall \\\"north\\\"\",\"at\":1764200000.250,\"devices\":{\"e45f01aa1001\""))
        #expect(try SightingBatch.parse(batch.json) == batch)
        let claim = OwnerClaim(gateway: "hall-1", at: 12.5)
        #expect(try OwnerClaim.parse(claim.json) == claim)
        #expect(try OwnerClaim.parse([]) == nil)
    }

    @Test("bad batches and claims are refused with the problem named", arguments: [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ("{\"gateway\":\"a/b\",\"at\":1,\"devices\":{}}", "gateway id"),
        ("{\"gateway\":\"a\",\"at\":true,\"devices\":{}}", "\"at\""),
        ("{\"gateway\":\"a\",\"at\":1e300,\"devices\":{}}", "\"at\""),
        ("{\"gateway\":\"a\",\"at\":1,\"devices\":[]}", "\"devices\" must be an object"),
        ("{\"gateway\":\"a\",\"at\":1,\"devices\":{\"E45F01AA1001\":{\"rssi\":-60}}}", "not a device id"),
        ("{\"gateway\":\"a\",\"at\":1,\"devices\":{\"e45f01aa1001\":{\"rssi\":-600}}}", "-127…20"),
        ("{\"gateway\":\"a\",\"at\":1,\"devices\":{\"e45f01aa1001\":{\"rssi\":-60,\"state\":5}}}", "\"state\""),
        ("{\"gateway\":\"a\",\"room\":3,\"at\":1,\"devices\":{}}", "\"room\""),
    ])
    func refused(_ text: String, _ named: String) {
        do {
            _ = try SightingBatch.parse(Array(text.utf8))
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.description.contains(named), "\(error.description)")
        }
    }

    @Test("a claim without a valid gateway is refused")
    func badClaim() {
        #expect(throws: FleetMessageError.self) { try OwnerClaim.parse(Array("{\"gateway\":\"\",\"at\":1}".utf8)) }
        #expect(throws: FleetMessageError.self) { try OwnerClaim.parse(Array("{\"gateway\":\"a\"}".utf8)) }
    }

    @Test("device ids: addresses in lower-case hex, or id_<name>")
    func ids() {
        #expect(FleetIDs.isDeviceID("e45f01aa1001"))
        #expect(!FleetIDs.isDeviceID("e45f01aa100"))
        #expect(!FleetIDs.isDeviceID("e45f01aa100g"))
        #expect(FleetIDs.isDeviceID("id_watch"))
        #expect(!FleetIDs.isDeviceID("id_"))
        #expect(!FleetIDs.isDeviceID("id_a/b"))
        #expect(!FleetIDs.isGatewayID(String(repeating: "g", count: 65)))
    }
}
