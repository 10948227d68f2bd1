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

    /// `JSON.appendNumber` writes sensor values from their digits; it must
    /// write exactly what `formatNumber` (Swift's shortest round trip) does.
    @Test func numbersWrittenFromTheirDigitsMatchTheShortestRoundTrip() {
        func written(_ v: Double) -> String {
            var out: [UInt8] = []
            JSON.appendNumber(v, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        var values: [Double] = [0, -0.0, 0.5, -0.5, 21.5, 45.25, 1013.6, 0.1 + 0.2, 1e-4, 1.2e-4, 9.99e-5, 1e-5,
                                999_999_999.5, 1e9 + 0.5, 1e15, 1e15 + 0.5, 2.5e15, 1.5e16, 123_456.789_012,
                                0.000_123_456, Double(Int64.max), -Double(Int64.max), 4_503_599_627_370_495.5,
                                .ulpOfOne, .leastNonzeroMagnitude, .greatestFiniteMagnitude, -1013.65, 3.3, 2.675]
        // Decimals as sensors send them (a scaled integer), and arbitrary bit patterns.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state
        }
        for _ in 0..<100_000 {
            let r = next()
            let integer = Double(Int64(bitPattern: r >> 20) % 2_000_000_000) - 1_000_000_000
            let scale = [1.0, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000, 256, 3][Int(r % 10)]
            values.append(integer / scale)
            values.append(integer / scale / 1_000_000)
            let bits = Double(bitPattern: next())
            if bits.isFinite { values.append(bits) }
        }
        for v in values { #expect(written(v) == formatNumber(v), "\(v.bitPattern)") }
        #expect(written(.nan) == "null")
        #expect(written(-.infinity) == "null")
    }

    @Test func integersWrittenFromTheirDigits() {
        for n: Int64 in [0, 7, -7, 10, 99, 100, -100, 1_000_000_007, .max, .min, .max - 1, .min + 1] {
            var out: [UInt8] = []
            JSON.appendDecimal(n, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == String(n))
        }
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
    @Test func aReadingFitsInThirtyTwoBytes() {
        // The number (8), the kind and the form byte (padded to 8), one optional string (16).
        #expect(MemoryLayout<Reading>.stride <= 32)
    }

    /// Every combination of value case, unit (none, the kind's canonical
    /// one, another) and label reads back as it was given, and two readings
    /// are equal (and hash alike) exactly when what they show is equal.
    @Test func everyCombinationOfPartsReadsBackAndComparesByWhatItShows() {
        let values: [ReadingValue] = [.number(21.5), .number(-0.0), .bool(true), .bool(false), .text(""), .text("long press: 3 s"), .text("12:x")]
        let units: [String?] = [nil, "°C", "mV", "", "3:abc"]
        let labels: [String?] = [nil, "x", "", "a label longer than fifteen bytes", "1:"]
        var all: [Reading] = []
        for v in values { for u in units { for l in labels {
            let r = Reading(kind: .temperature, value: v, unit: u, label: l)
            #expect(r.value == v, "value of \(v) \(String(describing: u)) \(String(describing: l))")
            #expect(r.unit == u, "unit of \(v) \(String(describing: u)) \(String(describing: l))")
            #expect(r.label == l, "label of \(v) \(String(describing: u)) \(String(describing: l))")
            #expect(r.kind == .temperature)
            all.append(r)
        } } }
        for (i, a) in all.enumerated() {
            for (j, b) in all.enumerated() {
                let same = a.value == b.value && a.unit == b.unit && a.label == b.label
                #expect((a == b) == same, "\(i) against \(j)")
                if same { #expect(a.hashValue == b.hashValue) }
            }
        }
    }

    @Test func theNumericInitialiserMatchesTheGeneralOne() {
        #expect(Reading(.temperature, 21.5) == Reading(kind: .temperature, value: .number(21.5), unit: "°C"))
        #expect(Reading(.temperature, 21.5).unit == "°C")
        #expect(Reading(.temperature, 21.5, unit: "°F").unit == "°F")
        #expect(Reading(.count, 3, label: "movement").unit == nil)
        #expect(Reading(.acceleration, 1, label: "x") != Reading(.acceleration, 1, label: "y"))
        #expect(Reading(kind: .temperature, value: .number(1), unit: nil) != Reading(.temperature, 1))
    }

    @Test func settingAPartKeepsTheOthers() {
        var r = Reading(.temperature, 21.5, label: "probe")
        r.kind = .humidity
        // Still °C: the unit was given (as the old kind's canonical one), not derived from the new kind.
        #expect(r.unit == "°C" && r.label == "probe" && r.value == .number(21.5) && r.kind == .humidity)
        r.unit = "%"
        #expect(r == Reading(.humidity, 21.5, label: "probe"))
        r.value = .text("dry")
        #expect(r.value == .text("dry") && r.unit == "%" && r.label == "probe")
        r.label = nil
        #expect(r.label == nil && r.value == .text("dry") && r.unit == "%")
        #expect(r.description == "humidity=dry %")
    }
}
