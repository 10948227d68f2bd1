import Foundation
import Testing
@testable import BLEParsing
import Vocabulary

/// Loads fixtures/vectors/adv/*.json and checks every vector against the
/// advertisement decoders. Vector schema (see the files):
///   input:  service_uuid + data [+ mac, bindkey, manufacturer_data]
///           | company_id + data [+ name]
///           | raw [+ address, bindkey]
///   expect: readings (each must be present), exact (count must match too),
///           model, fields_contain (text that must occur in the JSON of the
///           fields), models/errors (raw advertisements)
///   expect_error: kind [+ offset]
enum AdvVectors {
    static let root: URL = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }()

    static let directory = root.appendingPathComponent("fixtures/vectors/adv")

    /// A JSON value (decoded with JSONDecoder, so booleans stay booleans).
    enum J: Decodable, Sendable {
        case null, bool(Bool), number(Double), string(String), array([J]), object([String: J])
        init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if c.decodeNil() { self = .null }
            else if let b = try? c.decode(Bool.self) { self = .bool(b) }
            else if let d = try? c.decode(Double.self) { self = .number(d) }
            else if let s = try? c.decode(String.self) { self = .string(s) }
            else if let a = try? c.decode([J].self) { self = .array(a) }
            else { self = .object(try c.decode([String: J].self)) }
        }
        subscript(_ key: String) -> J? { if case let .object(o) = self { return o[key] }; return nil }
        var string: String? { if case let .string(s) = self { return s }; return nil }
        var number: Double? { if case let .number(d) = self { return d }; return nil }
        var bool: Bool? { if case let .bool(b) = self { return b }; return nil }
        var array: [J] { if case let .array(a) = self { return a }; return [] }
    }

    struct File: Decodable { let vectors: [J] }

    struct Vector: Sendable, CustomStringConvertible {
        let file: String
        let name: String
        let json: J
        var description: String { "\(file):\(name)" }
    }

    static func load(_ file: String) -> [Vector] {
        let url = directory.appendingPathComponent(file + ".json")
        guard let data = try? Data(contentsOf: url), let decoded = try? JSONDecoder().decode(File.self, from: data)
        else { return [] }
        return decoded.vectors.map { Vector(file: file, name: $0["name"]?.string ?? "?", json: $0) }
    }

    static let files = ["bthome_v2", "bthome_v1", "xiaomi_mibeacon", "atc_pvvx", "ruuvi", "ibeacon", "eddystone",
                        "govee", "inkbird", "qingping", "switchbot", "detector"]

    static func hex(_ s: J?) -> [UInt8] {
        guard let s = s?.string else { return [] }
        return (try? parseHex(s)) ?? []
    }

    static func run(_ v: Vector) -> [Result<AdvertisementModel, DecodeError>] {
        let input = v.json["input"] ?? .null
        let data = hex(input["data"])
        let mac = input["mac"]?.string.flatMap { try? BluetoothAddress($0) }
        let key = input["bindkey"].map { hex($0) }
        if let raw = input["raw"] {
            let address = input["address"]?.string.flatMap { try? BluetoothAddress($0) }
            return AdvertisementDecoder.decodeRawAdvertisement(bytes: hex(raw), address: address, bindkey: key)
        }
        if let uuidText = input["service_uuid"]?.string, let uuid = try? BluetoothUUID(parsing: uuidText) {
            if let mfr = input["manufacturer_data"] {
                let adv = Advertisement(address: mac,
                                        manufacturerData: [ManufacturerData(companyID: SwitchBot.companyID, data: hex(mfr))],
                                        serviceData: [ServiceData(uuid: uuid, data: data)])
                return AdvertisementDecoder.decode(adv, bindkey: key)
            }
            return [Result { () throws(DecodeError) in
                try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data, mac: mac, bindkey: key)
            }]
        }
        if let cidText = input["company_id"]?.string, let cid = UInt16(cidText.dropFirst(2), radix: 16) {
            let name = input["name"]?.string
            return [Result { () throws(DecodeError) in
                try AdvertisementDecoder.decodeManufacturerData(companyID: cid, data: data, name: name, mac: mac)
            }]
        }
        return []
    }

    static func close(_ a: Double, _ b: Double) -> Bool { abs(a - b) <= 1e-6 * max(1, abs(b)) }

    /// Does `r` satisfy the expected reading `e`?
    static func matches(_ r: Reading, _ e: J) -> Bool {
        guard r.kind.rawValue == e["kind"]?.string else { return false }
        if r.label != e["label"]?.string { return false }
        if let unit = e["unit"]?.string, r.unit != unit { return false }
        switch (r.value, e["value"]) {
        case let (.number(x), .number(y)?): return close(x, y)
        case let (.bool(x), .bool(y)?): return x == y
        case let (.text(x), .string(y)?): return x == y
        default: return false
        }
    }

    /// Problems found (empty = pass).
    static func check(_ v: Vector) -> [String] {
        let results = run(v)
        var problems: [String] = []
        if results.isEmpty { return ["no result (input not understood)"] }
        if let err = v.json["expect_error"] {
            guard case let .failure(e) = results[0] else {
                return ["expected error \(err), got a model: \(results[0])"]
            }
            if e.kind.rawValue != err["kind"]?.string { problems.append("error kind \(e.kind.rawValue) != \(err): \(e)") }
            if let off = err["offset"]?.number, e.offset != Int(off) {
                problems.append("error offset \(String(describing: e.offset)) != \(Int(off)): \(e)")
            }
            return problems
        }
        guard let expect = v.json["expect"] else { return ["vector has no expectation"] }
        var models: [AdvertisementModel] = []
        var errors: [DecodeError] = []
        for r in results {
            switch r {
            case let .success(m): models.append(m)
            case let .failure(e): errors.append(e)
            }
        }
        if let names = expect["models"] {
            let want = names.array.compactMap(\.string)
            let got = models.map(\.modelName)
            if want != got { problems.append("models \(got) != \(want)") }
            let wantErrors = expect["errors"]?.array ?? []
            if wantErrors.count != errors.count { problems.append("errors \(errors) != \(wantErrors)") }
            for (e, w) in zip(errors, wantErrors) {
                if e.kind.rawValue != w["kind"]?.string { problems.append("error kind \(e)") }
                if let off = w["offset"]?.number, e.offset != Int(off) { problems.append("error offset \(e)") }
            }
        } else {
            if !errors.isEmpty { return ["unexpected errors \(errors)"] }
            if let m = expect["model"]?.string, models.first?.modelName != m {
                problems.append("model \(models.first?.modelName ?? "-") != \(m)")
            }
        }
        let readings = models.flatMap(\.readings)
        let expected = expect["readings"]?.array ?? []
        for e in expected where !readings.contains(where: { matches($0, e) }) {
            problems.append("missing reading \(e) in \(readings)")
        }
        if expect["exact"]?.bool == true, readings.count != expected.count {
            problems.append("reading count \(readings.count) != \(expected.count): \(readings)")
        }
        if let text = expect["fields_contain"]?.string {
            let json = models.map(\.jsonString).joined()
            if !json.contains(text) { problems.append("JSON lacks \"\(text)\": \(json)") }
        }
        return problems
    }
}

@Suite("Advertisement vectors")
struct AdvVectorTests {
    @Test("every vector file is present and non-empty", arguments: AdvVectors.files)
    func fileLoads(_ file: String) {
        #expect(AdvVectors.load(file).count >= 4, "fixtures/vectors/adv/\(file).json missing or too small")
    }

    @Test("vectors decode as specified", arguments: AdvVectors.files)
    func vectors(_ file: String) async {
        let vectors = AdvVectors.load(file)
        #expect(!vectors.isEmpty)
        // Off the cooperative pool, one file at a time (see HeavyWork).
        let problems = await HeavyWork.run { vectors.map { v in (String(describing: v), AdvVectors.check(v)) } }
        for (vector, found) in problems {
            #expect(found.isEmpty, "\(vector): \(found.joined(separator: "; "))")
        }
    }
}
