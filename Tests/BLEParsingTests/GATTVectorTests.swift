import Foundation
import Testing

@testable import BLEParsing
import Vocabulary

/// Loads fixtures/vectors/gatt/*.json and checks every vector against the decoder.
///
/// Vector format: {"characteristic": "2a37" | full UUID, "model": snake_case,
/// "vectors": [{"description", "hex", "source", "presentation_format"?,
///   "expect": {"readings": [exact, ordered], "fields": {subset}, "absent": [names]?}
///   | "error": {"kind", "offset", "message"?}}]}
enum GATTVectors {
    static let directory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/vectors/gatt")

    static func files() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasSuffix(".json") }.sorted()
    }

    struct File: Decodable {
        let characteristic: String
        let model: String
        let vectors: [Vector]
    }

    struct Vector: Decodable {
        let description: String
        let hex: String
        let source: String
        let expect: Expect?
        let error: ExpectedError?
        let presentation_format: String?
    }

    struct Expect: Decodable {
        let readings: [GATTVectorJSON]
        let fields: [String: GATTVectorJSON]
        let absent: [String]?
    }

    struct ExpectedError: Decodable {
        let kind: String
        let offset: Int?
        let message: String?
    }

    static func load(_ name: String) throws -> File {
        let data = try Data(contentsOf: directory.appendingPathComponent(name))
        return try JSONDecoder().decode(File.self, from: data)
    }
}

/// A JSON value as written in a vector file.
indirect enum GATTVectorJSON: Decodable, CustomStringConvertible {
    case null, bool(Bool), number(Double), string(String), array([GATTVectorJSON]), object([String: GATTVectorJSON])

    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null; return }
        if let b = try? c.decode(Bool.self) { self = .bool(b); return }
        if let d = try? c.decode(Double.self) { self = .number(d); return }
        if let s = try? c.decode(String.self) { self = .string(s); return }
        if let a = try? c.decode([GATTVectorJSON].self) { self = .array(a); return }
        self = .object(try c.decode([String: GATTVectorJSON].self))
    }

    var description: String {
        switch self {
        case .null: return "null"
        case let .bool(b): return "\(b)"
        case let .number(d): return "\(d)"
        case let .string(s): return "\"\(s)\""
        case let .array(a): return "[" + a.map(\.description).joined(separator: ",") + "]"
        case let .object(o): return "{" + o.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}"
        }
    }
}

fileprivate func approximatelyEqual(_ a: Double, _ b: Double) -> Bool {
    a == b || abs(a - b) <= 1e-9 * max(1, abs(b))
}

/// Does a decoded field value match the expected JSON value?
fileprivate func matches(_ actual: FieldValue, _ expected: GATTVectorJSON) -> Bool {
    switch (actual, expected) {
    case (.null, .null): return true
    case let (.bool(a), .bool(e)): return a == e
    case let (.int(a), .number(e)): return approximatelyEqual(Double(a), e)
    case let (.number(a), .number(e)): return approximatelyEqual(a, e)
    case let (.string(a), .string(e)): return a == e
    case let (.bytes(a), .string(e)): return hexString(bytes: a) == e.lowercased()
    case let (.list(a), .array(e)): return a.count == e.count && zip(a, e).allSatisfy { matches($0, $1) }
    case let (.nested(a), .object(e)):
        return a.count == e.count && a.allSatisfy { name, value in e[name].map { matches(value, $0) } ?? false }
    default: return false
    }
}

fileprivate func matches(_ reading: Reading, _ expected: GATTVectorJSON) -> Bool {
    guard case let .object(o) = expected, case let .string(kind)? = o["kind"], let value = o["value"] else { return false }
    guard reading.kind.rawValue == kind, matches(reading.value.fieldValue, value) else { return false }
    switch o["unit"] {
    case .null?, nil: if reading.unit != nil { return false }
    case let .string(u)?: if reading.unit != u { return false }
    default: return false
    }
    switch o["label"] {
    case nil: return reading.label == nil
    case let .string(l)?: return reading.label == l
    default: return false
    }
}

@Suite("GATT vectors")
struct GATTVectorTests {
    @Test("the vector directory is populated")
    func directoryIsPopulated() throws {
        let files = GATTVectors.files()
        #expect(files.count >= 40, "found \(files.count) vector files in \(GATTVectors.directory.path)")
        var total = 0
        for name in files { total += try GATTVectors.load(name).vectors.count }
        #expect(total >= 250, "only \(total) vectors")
    }

    @Test("every vector decodes as expected", arguments: GATTVectors.files())
    func vectorFile(_ name: String) throws {
        let file = try GATTVectors.load(name)
        let uuid = try BluetoothUUID(parsing: file.characteristic)
        #expect(!file.vectors.isEmpty, "\(name) has no vectors")
        for v in file.vectors {
            let tag = "\(name): \(v.description)"
            #expect(!v.source.isEmpty, "\(tag): missing source")
            #expect((v.expect == nil) != (v.error == nil), "\(tag): needs exactly one of expect/error")
            let bytes = try parseHex(v.hex)
            let pf = try v.presentation_format.map { hex throws in try PresentationFormat(bytes: try parseHex(hex)) }
            let result = Result { () throws(DecodeError) -> GATTValue in
                try GATTDecoder.decode(characteristic: uuid, value: bytes, presentationFormat: pf)
            }
            switch (result, v.expect, v.error) {
            case let (.success(value), expect?, nil):
                #expect(value.modelName == file.model, "\(tag): model \(value.modelName)")
                #expect(value.characteristic == uuid)
                // readings: exact and ordered
                #expect(
                    value.readings.count == expect.readings.count
                        && zip(value.readings, expect.readings).allSatisfy { matches($0, $1) },
                    "\(tag): readings \(value.readings) != \(expect.readings)")
                // fields: subset
                for (name, expected) in expect.fields {
                    let actual = value.field(name)
                    #expect(actual.map { matches($0, expected) } == true, "\(tag): field \(name) = \(actual.map { "\($0)" } ?? "missing"), expected \(expected)")
                }
                for name in expect.absent ?? [] {
                    #expect(value.field(name) == nil, "\(tag): field \(name) should be absent")
                }
                // the JSON projection is valid JSON with the uniform shape
                let json = try JSONSerialization.jsonObject(with: Data(value.jsonString.utf8)) as? [String: Any]
                #expect(json?["format"] as? String == "gatt", "\(tag): bad JSON \(value.jsonString)")
                #expect(json?["model"] as? String == file.model)
                #expect((json?["readings"] as? [Any])?.count == expect.readings.count)
            case let (.failure(error), nil, expected?):
                #expect(error.kind.rawValue == expected.kind, "\(tag): got \(error)")
                #expect(error.offset == expected.offset, "\(tag): offset \(String(describing: error.offset)) in \(error)")
                if let message = expected.message { #expect(error.description == message, "\(tag)") }
                #expect(!error.context.isEmpty)
            case let (.success(value), _, expected?):
                Issue.record("\(tag): expected \(expected.kind) error, decoded \(value.jsonString)")
            case let (.failure(error), _, _):
                Issue.record("\(tag): unexpected error \(error)")
            default:
                Issue.record("\(tag): malformed vector")
            }
        }
    }
}
