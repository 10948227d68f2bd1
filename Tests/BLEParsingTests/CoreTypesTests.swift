import Testing

@testable import BLEParsing
import Vocabulary

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
