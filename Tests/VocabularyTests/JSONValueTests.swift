import Foundation
import Testing
import Vocabulary

@Suite("JSON value")
struct JSONValueTests {
    @Test func secondsAreExactDecimals() {
        #expect(JSONValue.seconds(microseconds: 0) == .number("0"))
        #expect(JSONValue.seconds(microseconds: 100_000) == .number("0.1"))
        #expect(JSONValue.seconds(microseconds: 2_000_000) == .number("2"))
        #expect(JSONValue.seconds(microseconds: 1) == .number("0.000001"))
        #expect(JSONValue.seconds(microseconds: 12_345_678) == .number("12.345678"))
    }

    @Test func stringsAreEscaped() throws {
        let value = JSONValue.object([("name", .string("a\"b\\c\n\u{01}é"))])
        #expect(value.compact == #"{ "name": "a\"b\\c\n\u0001é" }"#)
        let parsed = try JSONSerialization.jsonObject(with: Data(value.text.utf8)) as? [String: String]
        #expect(parsed?["name"] == "a\"b\\c\n\u{01}é")
    }

    @Test func everyControlCharacterIsEscapedAndTheTextParsesBack() throws {
        let all = String(decoding: (0..<0x80).map { UInt8($0) }, as: UTF8.self) + "é€😀"
        let quoted = JSONValue.quote(all)
        #expect(!quoted.utf8.dropFirst().dropLast().contains { $0 < 0x20 || $0 == 0x7F })
        let parsed = try JSONSerialization.jsonObject(with: Data("[\(quoted)]".utf8)) as? [String]
        #expect(parsed == [all])
        #expect(JSONValue.quote("\u{08}\u{0C}\u{7F}") == #""\b\f\u007f""#)
    }

    @Test func secondsFromADoubleAreRoundedToTheMillisecond() {
        #expect(JSONValue.seconds(1.5) == .number("1.5"))
        #expect(JSONValue.seconds(2) == .number("2"))
        #expect(JSONValue.seconds(0.0004) == .number("0"))
        #expect(JSONValue.seconds(0.1236) == .number("0.124"))
        for odd in [-1, .nan, .infinity, 1e300] as [Double] { #expect(JSONValue.seconds(odd) == .number("0"), "\(odd)") }
    }

    @Test func sortingKeysOrdersEveryObject() {
        let value = JSONValue.object([("b", .int(1)), ("a", .array([.object([("z", .bool(true)), ("y", .hex([0x0A, 0xFF]))])]))])
        #expect(value.sortingKeys().compact == #"{ "a": [{ "y": "0aff", "z": true }], "b": 1 }"#)
    }

    @Test func longValuesBreakAcrossLines() {
        let long = JSONValue.array((0..<40).map { .int($0) })
        #expect(long.text.split(separator: "\n").count == 42)
        #expect(JSONValue.array([.int(1), .int(2)]).text == "[1, 2]\n")
    }

    @Test func textWithALimitIsTheSameTextOrNothing() {
        let events = JSONValue.array((0..<500).map { .object([("at", .seconds(microseconds: Int64($0) * 1000)), ("rssi", .int(-60 - $0 % 20))]) })
        let document = JSONValue.object([("name", .string("big")), ("devices", .array([.object([("timeline", events)])]))])
        let whole = document.text
        #expect(document.text(limit: whole.utf8.count) == whole)
        #expect(document.text(limit: whole.utf8.count - 1) == nil)
        #expect(document.text(limit: 100) == nil)
    }
}

