import Testing
@testable import BLEParsing
import Vocabulary

private func bytes(_ hex: String) -> [UInt8] { (try? parseHex(hex)) ?? [] }
private func ad(_ type: UInt8, _ data: [UInt8]) -> [UInt8] { [UInt8(data.count + 1), type] + data }

@Suite("AD structures")
struct AdvADStructureTests {
    @Test("common AD types are decoded into typed fields")
    func commonTypes() throws {
        let uuid128 = bytes("6efe6e726f64756374546573740000ff")
        let payload = ad(0x01, [0x1A]) + ad(0x02, [0x20, 0x18, 0x1A, 0x18]) + ad(0x05, [0x12, 0x34, 0x56, 0x78])
            + ad(0x07, uuid128) + ad(0x08, Array("Snsor".utf8)) + ad(0x0A, [0xF4]) + ad(0x12, [0x06, 0x00, 0x10, 0x00])
            + ad(0x19, [0xC0, 0x03]) + ad(0x24, [0x17] + Array("//a.bc".utf8)) + ad(0x1C, [0x02])
            + ad(0x16, [0xD2, 0xFC, 0x40, 0x01, 0x64]) + ad(0x20, [1, 2, 3, 4, 0xAA]) + ad(0xFF, [0x99, 0x04, 0x05])
            + ad(0x1B, [1, 2, 3, 4, 5, 6, 1]) + ad(0x1A, [0x20, 0x03])
        let a = try AdvertisingData.parse(payload)
        #expect(a.flags == 0x1A)
        #expect(a.serviceUUIDs.count == 4)
        #expect(a.serviceUUIDs[0] == BluetoothUUID(uuid16: 0x1820))
        #expect(a.serviceUUIDs[2] == BluetoothUUID(uuid32: 0x7856_3412))
        #expect(a.serviceUUIDs[3] == BluetoothUUID(littleEndianBytes: uuid128))
        #expect(a.serviceUUIDsComplete)
        #expect(a.localName == "Snsor")
        #expect(a.localNameIsComplete == false)
        #expect(a.txPower == -12)
        #expect(a.connectionIntervalRange?.min == 6)
        #expect(a.connectionIntervalRange?.max == 16)
        #expect(a.appearance == 0x03C0)
        #expect(a.uri == "https://a.bc")
        #expect(a.leRole == 2)
        #expect(a.serviceData == [ServiceData(uuid: BluetoothUUID(uuid16: 0xFCD2), data: [0x40, 0x01, 0x64]),
                                  ServiceData(uuid: BluetoothUUID(uuid32: 0x0403_0201), data: [0xAA])])
        #expect(a.manufacturerData == [ManufacturerData(companyID: 0x0499, data: [0x05])])
        #expect(a.leAddress?.address.description == "06:05:04:03:02:01")
        #expect(a.leAddress?.random == true)
        #expect(a.advertisingInterval == 0x0320)
        #expect(a.structures.count == 15)
        let json = a.model.jsonString
        #expect(json.contains("\"le_role\":\"peripheral_preferred\""))
        #expect(json.contains("\"connection_interval_range\":{\"min\":7.5,\"max\":20,\"unit\":\"ms\"}"))
    }

    @Test("complete local name wins over the shortened one")
    func names() throws {
        let a = try AdvertisingData.parse(ad(0x09, Array("Full name".utf8)) + ad(0x08, Array("Full".utf8)))
        #expect(a.localName == "Full name")
        #expect(a.localNameIsComplete)
    }

    @Test("zero length terminates; the rest counts as padding")
    func zeroLength() throws {
        let a = try AdvertisingData.parse(bytes("020106000000ff"))
        #expect(a.structures.count == 1)
        #expect(a.paddingBytes == 4)
    }

    @Test("length past the end is a truncated error at the length byte; partial results are kept")
    func overrun() throws {
        #expect(throws: DecodeError.self) { try AdvertisingData.parse(bytes("0201060A09414243")) }
        do {
            _ = try AdvertisingData.parse(bytes("0201060A09414243"))
        } catch {
            #expect(error.kind == .truncated)
            #expect(error.offset == 3)
        }
        let (partial, errors) = AdvertisingData.parsePartial(bytes("0201060A09414243"))
        #expect(partial.flags == 0x06)
        #expect(errors.count == 1)
        #expect(errors.first?.offset == 3)
    }

    @Test("malformed content of one structure is reported with its offset; others are kept")
    func contentErrors() {
        let cases: [(String, Int)] = [
            ("020106040312345603FF9904", 3),   // odd 16-bit UUID list
            ("0201060216D2", 3),               // service data shorter than its UUID
            ("0201060301AAAA", 3),             // flags with 2 data bytes: allowed, the first byte is used
            ("02FF99", 0),                     // manufacturer data without a full company id
            ("030A0102", 0),                   // TX power with 2 bytes
            ("021B01", 0),                     // LE address with 1 byte
        ]
        for (hex, offset) in cases {
            let (_, errors) = AdvertisingData.parsePartial(bytes(hex))
            if hex == "0201060301AAAA" {
                #expect(errors.isEmpty, "\(hex)")
                continue
            }
            #expect(errors.count == 1, "\(hex)")
            #expect(errors.first?.kind == .invalidValue, "\(hex)")
            #expect(errors.first?.offset == offset, "\(hex)")
        }
    }

    @Test("empty payload parses to nothing")
    func empty() throws {
        let a = try AdvertisingData.parse([])
        #expect(a.structures.isEmpty)
        #expect(AdvertisementDecoder.decodeRawAdvertisement(bytes: []).count == 1)
    }

    @Test("detector picks decoders by service UUID, company id and shape")
    func detector() throws {
        let adv = Advertisement(
            address: try BluetoothAddress("A4:C1:38:8D:18:B2"), localName: "sps",
            manufacturerData: [
                ManufacturerData(companyID: 0x0499, data: bytes("0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F")),
                ManufacturerData(companyID: 0x0006, data: [1, 2, 3]),  // Microsoft: not decoded, skipped
            ],
            serviceData: [
                ServiceData(uuid: BluetoothUUID(uuid16: 0xFCD2), data: bytes("4002ca0903bf13")),
                ServiceData(uuid: BluetoothUUID(uuid16: 0x180F), data: [0x64]),  // not an advertisement format
                ServiceData(uuid: BluetoothUUID(uuid16: 0xFE95), data: bytes("5030")),  // recognised but broken
            ])
        let results = AdvertisementDecoder.decode(adv)
        #expect(results.count == 3)
        let names = results.compactMap { try? $0.get().modelName }
        #expect(names == ["bthome_v2", "ruuvi_rawv2"])
        let failures = results.compactMap { r -> DecodeError? in if case let .failure(e) = r { return e }; return nil }
        #expect(failures.first?.context == "xiaomi mibeacon")
        #expect(AdvertisementDecoder.recognises(companyID: 0x0006, data: [1, 2, 3], name: nil) == false)
    }

    @Test("BTHome repeated objects get positional labels")
    func repeatedLabels() throws {
        let m = try AdvertisementDecoder.decodeServiceData(
            uuid: BluetoothUUID(uuid16: 0xFCD2), data: bytes("4002ca0902cf0902cf0803b71803b717015d"))
        #expect(m.readings.map { $0.label ?? "-" } == ["1", "2", "3", "1", "2", "-"])
        #expect(m.reading(.temperature, label: "3")?.value == .number(22.55))
        #expect(m.reading(.battery)?.value == .number(93))
    }

    @Test("encrypted BTHome decodes only with the right key and MAC")
    func bthomeKeys() throws {
        let uuid = BluetoothUUID(uuid16: 0xFCD2)
        let data = bytes("41a47266c95f730011223378237214")
        let mac = try BluetoothAddress("54:48:E6:8F:80:A5")
        let key = bytes("231d39c1d7cc1ab1aee224cd096db932")
        let m = try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data, mac: mac, bindkey: key)
        #expect(m.reading(.temperature)?.value == .number(25.06))
        #expect(m.field("counter") == .int(0x3322_1100))
        // Wrong MAC -> different nonce -> MIC fails.
        #expect(throws: DecodeError.self) {
            try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data,
                                                       mac: try BluetoothAddress("54:48:E6:8F:80:A6"), bindkey: key)
        }
        // A 15-byte key is rejected with a typed error.
        #expect(throws: DecodeError.self) {
            try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data, mac: mac, bindkey: Array(key.prefix(15)))
        }
    }
}
