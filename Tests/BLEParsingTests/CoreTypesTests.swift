import Testing

@testable import BLEParsing

@Suite("BluetoothUUID")
struct CoreUUIDTests {
    @Test func shortAndFullForms() throws {
        let hr = BluetoothUUID(uuid16: 0x180D)
        #expect(hr.string == "0000180d-0000-1000-8000-00805f9b34fb")
        #expect(hr.shortString == "180d")
        #expect(hr.uuid16 == 0x180D)
        #expect(hr.uuid32 == 0x180D)
        #expect(try BluetoothUUID(parsing: "180d") == hr)
        #expect(try BluetoothUUID(parsing: "0x180D") == hr)
        #expect(try BluetoothUUID(parsing: "0000180D") == hr)
        #expect(try BluetoothUUID(parsing: "0000180D-0000-1000-8000-00805F9B34FB") == hr)
        #expect(try BluetoothUUID(parsing: "0000180d0000100080000 0805f9b34fb".replacingSpaces()) == hr)
        let literal: BluetoothUUID = 0x2A37
        #expect(literal.string == "00002a37-0000-1000-8000-00805f9b34fb")
    }

    @Test func thirtyTwoBitAndCustom() throws {
        let u32 = BluetoothUUID(uuid32: 0x1234_5678)
        #expect(u32.string == "12345678-0000-1000-8000-00805f9b34fb")
        #expect(u32.uuid16 == nil)
        #expect(u32.shortString == "12345678")
        let custom = try BluetoothUUID(parsing: "E95D9250-251D-470A-A062-FA1922DFA9A8")
        #expect(custom.string == "e95d9250-251d-470a-a062-fa1922dfa9a8")
        #expect(custom.uuid16 == nil)
        #expect(custom.uuid32 == nil)
        #expect(custom.shortString == custom.string)
        #expect(custom.bigEndianBytes.first == 0xE9)
        #expect(custom.littleEndianBytes.first == 0xA8)
    }

    @Test func airOrder() throws {
        #expect(try BluetoothUUID(littleEndianBytes: [0x0D, 0x18]) == BluetoothUUID(uuid16: 0x180D))
        #expect(try BluetoothUUID(littleEndianBytes: [0x78, 0x56, 0x34, 0x12]) == BluetoothUUID(uuid32: 0x1234_5678))
        let custom = try BluetoothUUID(parsing: "e95d9250-251d-470a-a062-fa1922dfa9a8")
        #expect(try BluetoothUUID(littleEndianBytes: custom.littleEndianBytes) == custom)
        #expect(try BluetoothUUID(bigEndianBytes: custom.bigEndianBytes) == custom)
        #expect(BluetoothUUID(uuid16: 0x180D).littleEndianBytes == [0x0D, 0x18])
        #expect(throws: DecodeError.self) { try BluetoothUUID(littleEndianBytes: [1, 2, 3]) }
    }

    @Test func parseErrors() {
        #expect(throws: DecodeError.self) { try BluetoothUUID(parsing: "18d") }
        #expect(throws: DecodeError.self) { try BluetoothUUID(parsing: "180g") }
        #expect(throws: DecodeError.self) { try BluetoothUUID(parsing: "") }
        #expect(throws: DecodeError.self) { try BluetoothUUID(parsing: "0000180d-00001000-8000-00805f9b34fb") }
        do {
            _ = try BluetoothUUID(parsing: "xyz")
        } catch {
            #expect(error.kind == .invalidValue)
            #expect(error.offset == 0)
        }
    }

    @Test func ordering() {
        #expect(BluetoothUUID(uuid16: 0x1800) < BluetoothUUID(uuid16: 0x1801))
    }
}

extension String {
    fileprivate func replacingSpaces() -> String { String(filter { $0 != " " }) }
}

@Suite("DeviceAddress")
struct CoreAddressTests {
    @Test func parseAndFormat() throws {
        let a = try DeviceAddress(parsing: "aa:bb:cc:dd:ee:ff")
        #expect(a.description == "AA:BB:CC:DD:EE:FF")
        #expect(a.rawValue == 0xAABB_CCDD_EEFF)
        #expect(a.bytes == [0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF])
        #expect(a.littleEndianBytes == [0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA])
        #expect(try DeviceAddress(parsing: "AA-BB-CC-DD-EE-FF") == a)
        #expect(try DeviceAddress(parsing: "aabbccddeeff") == a)
        #expect(try DeviceAddress(littleEndianBytes: [0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA]) == a)
        #expect(a.randomAddressType == .reserved)  // 0xAA = 0b10101010: top bits 10
        #expect(try DeviceAddress(parsing: "4A:00:00:00:00:01").randomAddressType == .resolvablePrivate)
        #expect(try DeviceAddress(parsing: "C0:00:00:00:00:01").randomAddressType == .staticRandom)
    }

    @Test func parseErrors() {
        for bad in ["AA:BB:CC:DD:EE", "AA:BB:CC:DD:EE:FF:00", "AA:BB:CC:DD:EE:FG", "AAB:BCC:DDE:EFF", "", "A:BB:CC:DD:EE:FF0"] {
            #expect(throws: DecodeError.self, "\(bad)") { try DeviceAddress(parsing: bad) }
        }
        #expect(throws: DecodeError.self) { try DeviceAddress(bytes: [1, 2, 3]) }
    }
}

@Suite("Readings, fields and JSON")
struct CoreJSONTests {
    @Test func readingDefaultsToCanonicalUnit() {
        #expect(Reading(.temperature, 21.5).unit == "°C")
        #expect(Reading(.temperature, 70, unit: Unit.fahrenheit).unit == "°F")
        #expect(Reading(.motion, true).unit == nil)
        #expect(Reading(.button, text: "press").value == .text("press"))
        #expect(ReadingKind.pm25.rawValue == "pm25")
        #expect(ReadingKind.heartRate.rawValue == "heart_rate")
        #expect(ReadingKind.conductivity.canonicalUnit == "µS/cm")
    }

    @Test func kindsAreUniqueSnakeCase() {
        let raw = ReadingKind.allCases.map(\.rawValue)
        #expect(Set(raw).count == raw.count)
        #expect(raw.allSatisfy { $0.allSatisfy { $0.isLowercase || $0.isNumber || $0 == "_" } })
    }

    @Test func serialiser() {
        let v: FieldValue = .nested([
            ("a", .int(-3)), ("b", .number(36.4)), ("c", .number(72)), ("d", .string("q\"\\\n\u{1}é")),
            ("e", .bytes([0x0A, 0xFF])), ("f", .list([.bool(true), .null])), ("g", .number(.nan)), ("h", .nested([])),
        ])
        #expect(JSON.serialize(v) == #"{"a":-3,"b":36.4,"c":72,"d":"q\"\\\n\u0001é","e":"0aff","f":[true,null],"g":null,"h":{}}"#)
        #expect(JSON.serializePretty(.nested([("x", .list([.int(1)]))])) == "{\n  \"x\": [\n    1\n  ]\n}")
    }

    @Test func modelShape() {
        let m = DecodedPayload(
            formatName: "gatt", modelName: "battery_level", readings: [Reading(.battery, 44)], fields: [("battery_percent", .int(44))])
        #expect(m.jsonString == #"{"format":"gatt","model":"battery_level","readings":[{"kind":"battery","value":44,"unit":"%"}],"fields":{"battery_percent":44}}"#)
        #expect(m.field("battery_percent") == .int(44))
        #expect(m.field("nope") == nil)
    }

    @Test func numbersFormatting() {
        #expect(formatNumber(72) == "72")
        #expect(formatNumber(-0.5) == "-0.5")
        #expect(formatNumber(1e-5) == "1e-05")
        #expect(formatNumber(0.1 + 0.2) == "0.30000000000000004")
    }

    @Test func hexHelpers() throws {
        #expect(try parseHex("0a 1B:ff") == [0x0A, 0x1B, 0xFF])
        #expect(try parseHex("0x0102") == [1, 2])
        #expect(try parseHex("") == [])
        #expect(throws: DecodeError.self) { try parseHex("abc") }
        #expect(throws: DecodeError.self) { try parseHex("zz") }
        #expect(hexString(UInt16(0x2A37)) == "0x2a37")
        #expect(hexString(bytes: [0xDE, 0xAD]) == "dead")
    }

    @Test func errorMessages() {
        #expect(DecodeError.invalidValue(context: "humidity", offset: 0, expected: "0...10000", found: "10001").description
            == "humidity: invalid value at offset 0: expected 0...10000, found 10001")
        #expect(DecodeError.unsupported(context: "gatt", what: "characteristic 2a99").description == "gatt: unsupported: characteristic 2a99")
        #expect(DecodeError.reserved(context: "x", offset: 2, field: "type", found: "9").description
            == "x: reserved value at offset 2: expected a defined type, found 9")
    }
}

/// A gateway keeps about ten readings per device it hears, in every list
/// and table that holds a device's state: their size is a memory budget.
@Suite("Reading layout")
struct ReadingLayoutTests {
    @Test func aReadingFitsInFiftySixBytes() {
        // value (17 bytes with its tag) + kind (1) + unit and label (16 each),
        // with no padding between the value's tag and the kind.
        #expect(MemoryLayout<Reading>.stride <= 56)
    }
}
