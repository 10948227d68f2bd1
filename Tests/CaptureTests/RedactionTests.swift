import BLEParsing
import Foundation
import BlueZSimulator
import Capture
import ScenarioFormat
import Testing

/// Literal vectors: addresses map the same way everywhere, payload MACs follow, readings do not change.
@Suite struct RedactionTests {
    @Test func addressesAreSequentialConsistentAndKeepTheirType() {
        var r = Redaction()
        #expect(r.address("00:1A:7D:DA:71:13") == "00:00:00:00:00:01")
        #expect(r.address("E4:5F:01:AA:10:01", random: true) == "C0:00:00:00:00:02", "random static keeps its top bits 11")
        #expect(r.address("5A:11:22:33:44:55", random: true) == "40:00:00:00:00:03", "resolvable private keeps 01")
        #expect(r.address("e4:5f:01:aa:10:01", random: true) == "C0:00:00:00:00:02", "the same address, any case, the same fake")
        #expect(r.addresses.count == 3)
        #expect(r.name("Polar H10 A1B2C3") == "Device 1")
        #expect(r.name("ATC_5A1B2C") == "Device 2")
        #expect(r.name("Polar H10 A1B2C3") == "Device 1")
        #expect(r.name("sps") == "sps", "a name a decoder needs that identifies nobody")
        #expect(r.name("E4-5F-01-AA-10-01") == "C0-00-00-00-00-02", "BlueZ's address alias follows the address")
    }

    @Test func payloadMACsAreRewrittenInTheirOwnByteOrder() {
        var r = Redaction()
        let fake = r.address("A4:C1:38:5A:1B:2C")  // 00:00:00:00:00:01
        #expect(fake == "00:00:00:00:00:01")
        // pvvx custom: MAC little-endian in bytes 0-5.
        #expect(r.serviceData(uuid: uuid("181a"), bytes("2c1b5a38c1a48b08d412a80b521f04")) == bytes("010000000000" + "8b08d412a80b521f04"))
        // ATC1441: MAC big-endian in bytes 0-5.
        #expect(r.serviceData(uuid: uuid("181a"), bytes("a4c1385a1b2c00e62d5a0b8601")) == bytes("000000000001" + "00e62d5a0b8601"))
        // RuuviTag RAWv2: the last six bytes, big-endian; a new MAC gets the next fake.
        let ruuvi = r.manufacturerData(company: 0x0499, bytes("0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F"))
        #expect(ruuvi == bytes("0512FC5394C37C0004FFFC040CAC364200CD" + "000000000002"))
        #expect(r.addresses["CB:B8:33:4C:88:4F"] == "00:00:00:00:00:02")
        // …"not available" (all 0xFF) stays.
        let unknown = bytes("0512FC5394C37C0004FFFC040CAC364200CDFFFFFFFFFFFF")
        #expect(r.manufacturerData(company: 0x0499, unknown) == unknown)
        // MiBeacon with the MAC flag (frame control bit 4): little-endian at 5.
        let mi = bytes("5050" + "5b05" + "01" + "2c1b5a38c1a4" + "0410" + "02" + "e600")
        #expect(r.serviceData(uuid: uuid("fe95"), mi) == bytes("5050" + "5b05" + "01" + "010000000000" + "0410" + "02" + "e600"))
        // …without the flag nothing moves.
        let miNoMAC = bytes("4050" + "5b05" + "01" + "0410" + "02" + "e600")
        #expect(r.serviceData(uuid: uuid("fe95"), miNoMAC) == miNoMAC)
        // BTHome v2 with "MAC included" (bit 1): little-endian at 1.
        let bthome = bytes("42" + "2c1b5a38c1a4" + "02" + "ca09")
        #expect(r.serviceData(uuid: uuid("fcd2"), bthome) == bytes("42" + "010000000000" + "02" + "ca09"))
        // Encrypted BTHome (bit 0) without a MAC field: kept byte for byte.
        let encrypted = bytes("41" + "a47266c95f73" + "00112233" + "78235c2e")
        #expect(r.serviceData(uuid: uuid("fcd2"), encrypted) == encrypted)
        // Formats without a MAC are untouched.
        let ibeacon = bytes("0215426c7565436861726d426561636f6e730efe1355c5")
        #expect(r.manufacturerData(company: 0x004C, ibeacon) == ibeacon)
    }

    @Test func readingsAreTheSameAfterRedaction() throws {
        var r = Redaction()
        let vectors: [(String, [UInt8])] = [
            (uuid("181a"), bytes("2c1b5a38c1a48b08d412a80b521f04")),
            (uuid("181a"), bytes("a4c1385a1b2c00e62d5a0b8601")),
            (uuid("fe95"), bytes("5050" + "5b05" + "01" + "2c1b5a38c1a4" + "0410" + "02" + "e600")),
            (uuid("fcd2"), bytes("42" + "2c1b5a38c1a4" + "02" + "ca09")),
        ]
        for (u, data) in vectors {
            let before = readings(name: nil, manufacturer: [:], service: [u: data])
            let after = readings(name: nil, manufacturer: [:], service: [u: r.serviceData(uuid: u, data)])
            #expect(!before.isEmpty, "vector \(u) decodes")
            #expect(before == after)
        }
        let ruuvi = bytes("0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F")
        let before = readings(name: nil, manufacturer: [0x0499: ruuvi], service: [:])
        #expect(before.count >= 5)
        #expect(before == readings(name: nil, manufacturer: [0x0499: r.manufacturerData(company: 0x0499, ruuvi)], service: [:]))
    }

    @Test func demoHomeLeavesNoRealAddressOrNameAndDecodesTheSame() throws {
        let original = try fixture("demo-home.json")
        var r = Redaction()
        let redacted = r.redact(original)
        let text = redacted.jsonText()
        for d in original.devices {
            #expect(!text.contains(d.address), "\(d.address) is gone")
            let airOrder = d.address.split(separator: ":").reversed().joined().lowercased()
            let displayOrder = d.address.split(separator: ":").joined().lowercased()
            #expect(!text.lowercased().contains(airOrder) && !text.lowercased().contains(displayOrder), "\(d.address) is not in any payload")
            if let n = d.name { #expect(!text.contains(n), "\(n) is gone") }
        }
        #expect(!text.contains(original.adapters[0].address) && !text.contains(original.adapters[0].name))
        // Random static addresses stay random static.
        for (o, n) in zip(original.devices, redacted.devices) where o.addressType == "random" {
            #expect(n.address.hasPrefix("C0:"), "\(o.address) → \(n.address)")
        }
        // Every advertisement decodes to the same readings.
        for (o, n) in zip(original.devices, redacted.devices) {
            #expect(readings(name: o.name, manufacturer: o.manufacturerData, service: o.serviceData)
                    == readings(name: n.name, manufacturer: n.manufacturerData, service: n.serviceData))
            for (oe, ne) in zip(o.advertising?.events ?? [], n.advertising?.events ?? []) {
                #expect(readings(name: nil, manufacturer: oe.manufacturerData ?? [:], service: oe.serviceData ?? [:])
                        == readings(name: nil, manufacturer: ne.manufacturerData ?? [:], service: ne.serviceData ?? [:]))
            }
        }
        // The pvvx payload now carries the thermometer's fake address.
        let pvvx = try #require(redacted.devices.first { $0.serviceData[uuid("181a")] != nil })
        let mac = Array(try #require(pvvx.serviceData[uuid("181a")]).prefix(6).reversed())
        #expect(mac.map { String(format: "%02X", $0) }.joined(separator: ":") == pvvx.address)
        // Deterministic: a fresh redaction of the same file gives the same text, which loads.
        var again = Redaction()
        #expect(again.redact(original).jsonText() == text)
        #expect(try Scenario.parse(text).devices.count == original.devices.count)
    }

    @Test func theSameAddressMapsTheSameAcrossDevicesAndEvents() throws {
        // Two devices advertise the same pvvx MAC (a relay, or a capture of two adapters), and a later event repeats it.
        var a = DeviceSpec(address: "A4:C1:38:5A:1B:2C")
        a.name = "Kitchen"
        a.serviceData = [uuid("181a"): bytes("2c1b5a38c1a48b08d412a80b521f04")]
        var b = DeviceSpec(address: "A4:C1:38:5A:1B:2C", adapter: "hci1")
        b.name = "Kitchen"
        b.advertising = Timeline(events: [AdvertisementEvent(at: 1, name: "Kitchen", serviceData: [uuid("181a"): bytes("2c1b5a38c1a49308b612a80b522004")])])
        let s = Scenario(name: "two", adapters: [AdapterSpec(id: "hci0", address: "00:11:22:33:44:55"), AdapterSpec(id: "hci1", address: "00:11:22:33:44:56")],
                         devices: [a, b])
        var r = Redaction()
        let out = r.redact(s)
        #expect(out.devices[0].address == out.devices[1].address)
        #expect(out.devices[0].name == out.devices[1].name)
        #expect(out.devices[1].advertising?.events.first?.name == out.devices[0].name)
        let first = try #require(out.devices[0].serviceData[uuid("181a")])
        let later = try #require(out.devices[1].advertising?.events.first?.serviceData?[uuid("181a")])
        #expect(Array(first.prefix(6)) == Array(later.prefix(6)))
        #expect(out.adapters.map(\.address) == ["00:00:00:00:00:01", "00:00:00:00:00:02"])
        #expect(out.devices[0].address == "00:00:00:00:00:03")
    }
}
