import Foundation
import Testing

/// Runs the real `blecompanion decode …` on vectors from fixtures/vectors and checks
/// the JSON it prints, the human output, and exit statuses/messages for bad input.
/// Uses `DoctorCLI` (DoctorCLISupport.swift) to find and run the binary.
@Suite struct DecodeTests {
    static let fixtures = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/vectors")

    /// Loads a fixture file as a JSON object.
    static func fixture(_ path: String) throws -> [String: Any] {
        let data = try Data(contentsOf: fixtures.appendingPathComponent(path))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// The first vector named `name` in an adv fixture file.
    static func advVector(_ file: String, _ name: String) throws -> [String: Any] {
        let vectors = try #require(try fixture("adv/\(file).json")["vectors"] as? [[String: Any]])
        return try #require(vectors.first { ($0["name"] as? String) == name && $0["expect"] != nil })
    }

    /// Parses one JSON object line and checks it has exactly the documented top-level keys.
    static func object(_ line: Substring) throws -> [String: Any] {
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(Set(object.keys) == ["format", "model", "readings", "fields"])
        return object
    }

    static func readings(_ object: [String: Any]) throws -> [[String: Any]] {
        try #require(object["readings"] as? [[String: Any]])
    }

    static func value(_ reading: [String: Any]) -> Double? { (reading["value"] as? NSNumber)?.doubleValue }

    /// Each expected reading (kind, value, optional unit/label) occurs in `actual`.
    static func expectContains(_ actual: [[String: Any]], _ expected: [[String: Any]], _ comment: String) {
        for want in expected {
            let kind = want["kind"] as? String
            let wantValue = value(want)
            let match = actual.contains { got in
                guard got["kind"] as? String == kind else { return false }
                if let unit = want["unit"] as? String, got["unit"] as? String != unit { return false }
                if let label = want["label"] as? String, got["label"] as? String != label { return false }
                if let wantValue {
                    guard let gotValue = value(got) else { return false }
                    return abs(gotValue - wantValue) <= 1e-9 * max(1, abs(wantValue))
                }
                return true
            }
            #expect(match, "\(comment): missing reading \(want) in \(actual)")
        }
    }

    // MARK: GATT

    @Test func gattHeartRateVectorsFromFixtures() async throws {
        let file = try Self.fixture("gatt/heart_rate_measurement.json")
        let vectors = try #require(file["vectors"] as? [[String: Any]])
        var checked = 0
        for vector in vectors {
            guard let expect = vector["expect"] as? [String: Any], let hex = vector["hex"] as? String else { continue }
            let run = try await DoctorCLI.run(["decode", "gatt", "2a37", hex, "--json"])
            #expect(run.status == 0, "\(hex): \(run.stderr)")
            let lines = run.stdout.split(separator: "\n")
            #expect(lines.count == 1)
            let object = try Self.object(try #require(lines.first))
            #expect(object["format"] as? String == "gatt")
            #expect(object["model"] as? String == "heart_rate_measurement")
            let got = try Self.readings(object)
            let want = try #require(expect["readings"] as? [[String: Any]])
            #expect(got.count == want.count, "\(hex)")
            Self.expectContains(got, want, hex)
            let fields = try #require(object["fields"] as? [String: Any])
            for (name, expected) in (expect["fields"] as? [String: Any]) ?? [:] {
                if let number = expected as? NSNumber {
                    #expect((fields[name] as? NSNumber)?.doubleValue == number.doubleValue, "\(hex) field \(name)")
                } else if let text = expected as? String {
                    #expect(fields[name] as? String == text, "\(hex) field \(name)")
                }
            }
            checked += 1
        }
        #expect(checked >= 3)
    }

    @Test func gattHumanOutputShowsModelReadingsAndFields() async throws {
        let run = try await DoctorCLI.run(["decode", "gatt", "0x2A37", "16 48 54 01 EC 02"])
        #expect(run.status == 0)
        #expect(run.stdout.contains("format:   gatt"))
        #expect(run.stdout.contains("model:    heart_rate_measurement"))
        #expect(run.stdout.contains("72 bpm"))
        #expect(run.stdout.contains("duration (rr_interval)  0.33203125 s"))
        #expect(run.stdout.contains("heart_rate_bpm:"))
        #expect(!run.stdout.contains("{\"format\""))
    }

    @Test func hexSpellingsDecodeAlike() async throws {
        let spellings = ["16485401EC02", "0x16485401ec02", "16 48 54 01 ec 02", "16:48:54:01:EC:02"]
        var outputs: [DoctorCLI.Run] = []
        for spelling in spellings { outputs.append(try await DoctorCLI.run(["decode", "gatt", "2a37", spelling, "--json"])) }
        for run in outputs { #expect(run.status == 0, "\(run.stderr)") }
        #expect(Set(outputs.map(\.stdout)).count == 1)
        #expect(outputs[0].stdout.contains("\"heart_rate_bpm\":72"))
    }

    @Test func gattPresentationFormatPath() async throws {
        // fixtures/vectors/gatt/presentation_format_generic.json: sint16 × 10^-2 °C, 0x0834 = 2100 -> 21 °C.
        let run = try await DoctorCLI.run(["decode", "gatt", "e95d9250-251d-470a-a062-fa1922dfa9a8", "3408",
                                     "--presentation-format", "0EFE2F27010000", "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let object = try Self.object(try #require(run.stdout.split(separator: "\n").first))
        Self.expectContains(try Self.readings(object), [["kind": "temperature", "value": 21.0, "unit": "°C"]], "pf")
    }

    @Test func gattTruncationExitsTwoWithTheDecodeError() async throws {
        let run = try await DoctorCLI.run(["decode", "gatt", "2a37", "0148"])
        #expect(run.status == 2)
        #expect(run.stdout.isEmpty)
        #expect(run.stderr.contains("heart rate measurement: need 2 bytes for heart rate (uint16) at offset 1, have 1"),
                "\(run.stderr)")
        let json = try await DoctorCLI.run(["decode", "gatt", "2a37", "0148", "--json"])
        #expect(json.status == 2)
        #expect(json.stdout.isEmpty)
    }

    @Test func unknownCharacteristicIsADecodeError() async throws {
        let run = try await DoctorCLI.run(["decode", "gatt", "ffe1", "01"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("has no decoder and no presentation format"))
    }

    // MARK: Advertisements

    @Test func bthomeV2EncryptedWithBindkey() async throws {
        let vector = try Self.advVector("bthome_v2", "test_bindkey_correct")
        let input = try #require(vector["input"] as? [String: Any])
        let uuid = try #require(input["service_uuid"] as? String)
        let data = try #require(input["data"] as? String)
        let mac = try #require(input["mac"] as? String)
        let key = try #require(input["bindkey"] as? String)
        let run = try await DoctorCLI.run(["decode", "service-data", uuid, data, "--mac", mac, "--bindkey", key, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let object = try Self.object(try #require(run.stdout.split(separator: "\n").first))
        #expect(object["model"] as? String == "bthome_v2")
        let expect = try #require(vector["expect"] as? [String: Any])
        let want = try #require(expect["readings"] as? [[String: Any]])
        #expect(!want.isEmpty)
        Self.expectContains(try Self.readings(object), want, "bthome encrypted")
        let fields = try #require(object["fields"] as? [String: Any])
        #expect(fields["encrypted"] as? Bool == true)

        // Without the key the payload cannot be decoded: exit 2 and say why.
        let noKey = try await DoctorCLI.run(["decode", "service-data", uuid, data, "--mac", mac])
        #expect(noKey.status == 2)
        #expect(noKey.stderr.contains("bindkey"), "\(noKey.stderr)")

        // A wrong key fails the MIC check.
        let wrong = try await DoctorCLI.run(["decode", "service-data", uuid, data, "--mac", mac,
                                       "--bindkey", "814aac74c4f17b6c1581e1ab87816b99"])
        #expect(wrong.status == 2)
        #expect(!wrong.stderr.isEmpty)
    }

    @Test func ruuviManufacturerData() async throws {
        let vector = try Self.advVector("ruuvi", "rawv2_valid")
        let input = try #require(vector["input"] as? [String: Any])
        let company = try #require(input["company_id"] as? String)
        let data = try #require(input["data"] as? String)
        let run = try await DoctorCLI.run(["decode", "manufacturer", company, data, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let object = try Self.object(try #require(run.stdout.split(separator: "\n").first))
        #expect(object["format"] as? String == "ruuvi")
        #expect(object["model"] as? String == "ruuvi_rawv2")
        let expect = try #require(vector["expect"] as? [String: Any])
        Self.expectContains(try Self.readings(object), try #require(expect["readings"] as? [[String: Any]]), "ruuvi")
        // Ruuvi's documented vector: 24.3 °C, 53.49 %, 1000.44 hPa.
        Self.expectContains(try Self.readings(object), [["kind": "temperature", "value": 24.3, "unit": "°C"],
                                                        ["kind": "humidity", "value": 53.49, "unit": "%"],
                                                        ["kind": "pressure", "value": 1000.44, "unit": "hPa"]], "ruuvi")
        // The company id in decimal (0x0499 = 1177) gives the same output.
        let decimal = try await DoctorCLI.run(["decode", "manufacturer", "1177", data, "--json"])
        #expect(decimal.status == 0)
        #expect(decimal.stdout == run.stdout)

        // One byte short is a decode error.
        let short = try await DoctorCLI.run(["decode", "manufacturer", company, String(data.dropLast(2))])
        #expect(short.status == 2)
        #expect(short.stderr.contains("need"), "\(short.stderr)")
    }

    @Test func rawAdvertisementPrintsJSONLinesPerModel() async throws {
        let vector = try Self.advVector("detector", "bthome_io_example")
        let input = try #require(vector["input"] as? [String: Any])
        let raw = try #require(input["raw"] as? String)
        let run = try await DoctorCLI.run(["decode", "adv", raw, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let objects = try run.stdout.split(separator: "\n").map(Self.object)
        let expect = try #require(vector["expect"] as? [String: Any])
        let models = try #require(expect["models"] as? [String])
        #expect(objects.map { $0["model"] as? String } == models)
        let last = try #require(objects.last)
        Self.expectContains(try Self.readings(last), try #require(expect["readings"] as? [[String: Any]]), "adv")
        #expect(run.stdout.contains("DIY-sensor"))

        // Human output separates the models with a blank line.
        let text = try await DoctorCLI.run(["decode", "adv", raw])
        #expect(text.status == 0)
        #expect(text.stdout.contains("model:    advertising_data"))
        #expect(text.stdout.contains("\n\nformat:   bthome"))
        #expect(text.stdout.contains("50.55 %"))
    }

    @Test func rawEncryptedAdvertisementWithMacAndBindkey() async throws {
        let vector = try Self.advVector("detector", "bthome_encrypted_full_adv")
        let input = try #require(vector["input"] as? [String: Any])
        let rawInput = try #require(input["raw"] as? String)
        let address = try #require(input["address"] as? String)
        let bindkey = try #require(input["bindkey"] as? String)
        let run = try await DoctorCLI.run(["decode", "adv", rawInput, "--mac", address, "--bindkey", bindkey, "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let objects = try run.stdout.split(separator: "\n").map(Self.object)
        #expect(objects.count == 2)
        let bthome = try #require(objects.last)
        Self.expectContains(try Self.readings(bthome), [["kind": "temperature", "value": 25.06],
                                                         ["kind": "humidity", "value": 50.55]], "encrypted adv")
    }

    @Test func malformedAdvertisementKeepsPartialResultsAndExitsTwo() async throws {
        let run = try await DoctorCLI.run(["decode", "adv", "0201060A09414243", "--json"])
        #expect(run.status == 2)
        let objects = try run.stdout.split(separator: "\n").map(Self.object)
        #expect(objects.map { $0["model"] as? String } == ["advertising_data"])
        #expect(run.stderr.contains("advertising data: need 10 bytes"), "\(run.stderr)")
        #expect(run.stderr.contains("at offset 3, have 4"), "\(run.stderr)")
    }

    // MARK: Usage errors (exit 64, the message names the argument)

    @Test(arguments: [
        (["decode", "gatt", "2a37", "zz"], "<hex>"),
        (["decode", "gatt", "2a37", "123"], "<hex>"),
        (["decode", "gatt", "2a3x", "00"], "<characteristic-uuid>"),
        (["decode", "service-data", "12345", "00"], "<uuid>"),
        (["decode", "manufacturer", "0x10000", "00"], "<company-id>"),
        (["decode", "manufacturer", "ruuvi", "00"], "<company-id>"),
        (["decode", "service-data", "fcd2", "4002ca09", "--mac", "A4:C1:38:8D:18"], "--mac"),
        (["decode", "service-data", "fcd2", "4002ca09", "--bindkey", "231d39"], "--bindkey"),
        (["decode", "adv", "02 01 06", "--bindkey", "xyz"], "--bindkey"),
        (["decode", "gatt", "ffe1", "00", "--presentation-format", "0E"], "--presentation-format"),
    ])
    func usageErrorsNameTheArgument(arguments: [String], argument: String) async throws {
        let run = try await DoctorCLI.run(arguments)
        #expect(run.status == 64, "\(arguments): \(run.stderr)")
        #expect(run.stdout.isEmpty)
        #expect(run.stderr.contains(argument), "\(arguments): \(run.stderr)")
    }
}
