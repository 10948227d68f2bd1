import BlueZSimulator
import ScenarioFormat
import Testing

@Suite struct ScenarioWriterTests {
    @Test(arguments: ["demo-home.json", "test-basic.json", "test-faults.json", "test-outage.json"])
    func everyFixtureRoundTrips(_ name: String) throws {
        let original = try fixture(name)
        let text = original.jsonText()
        let again = try Scenario.parse(text, fileName: "written.json")
        // Written again, the same text: nothing was lost or changed on the way.
        #expect(again.jsonText() == text)
        #expect(again.devices.map(\.address) == original.devices.map(\.address))
        #expect(again.devices.map { $0.advertising?.events.count } == original.devices.map { $0.advertising?.events.count })
        #expect(again.devices.map { $0.gatt.flatMap(\.characteristics).map(\.value) } == original.devices.map { $0.gatt.flatMap(\.characteristics).map(\.value) })
        #expect(again.outages.map(\.at) == original.outages.map(\.at))
        #expect(again.adapters.map { $0.outages.map(\.returnAt) } == original.adapters.map { $0.outages.map(\.returnAt) })
    }

    @Test func textIsEscapedAndTimesKeepMilliseconds() throws {
        var s = Scenario(name: "quote \" and \\ and\nnewline", adapters: [AdapterSpec(id: "hci0", address: "00:11:22:33:44:55")])
        var d = DeviceSpec(address: "AA:BB:CC:DD:EE:FF")
        d.name = "Tab\there ünïcode"
        d.comment = "Recorded: connected at 1.5 s"
        d.advertising = Timeline(events: [AdvertisementEvent(at: 0.0004, rssi: -70), AdvertisementEvent(at: 1.2346, present: false)])
        s.devices = [d]
        s.duration = 2.5
        let again = try Scenario.parse(s.jsonText())
        #expect(again.name == s.name)
        #expect(again.devices.first?.name == "Tab\there ünïcode")
        #expect(again.devices.first?.comment == "Recorded: connected at 1.5 s")
        #expect(again.devices.first?.advertising?.events.map(\.at) == [0, 1.235])
        #expect(again.duration == 2.5)
    }
}
