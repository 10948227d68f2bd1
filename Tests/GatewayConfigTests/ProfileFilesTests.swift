import BLEParsing
import Foundation
import GatewayConfig
import Testing
import TestSupport
import Vocabulary

private func fixture(_ name: String) -> String { packageRoot().appendingPathComponent("fixtures/profiles/\(name)").path }

/// The problems of a profile text, one `line: key: message` each.
private func profileProblems(_ yaml: String) -> [String] {
    do {
        _ = try ProfileFiles.parse(yaml, file: "p.yaml")
        return []
    } catch {
        return error.problems.map(\.description)
    }
}

@Suite("Device profile files")
struct ProfileFilesTests {
    @Test("every example profile in fixtures/profiles loads", arguments: ["ruuvi-rawv2.yaml", "pvvx-custom.yaml", "soil-sensor.yaml", "power-meter.yaml", "smart-lock.yaml"])
    func examplesLoad(_ name: String) throws {
        let profile = try ProfileFiles.load(path: fixture(name))
        #expect(!profile.name.isEmpty)
        #expect(!profile.match.isEmpty)
        #expect(!(profile.advertisement.isEmpty && profile.gatt.isEmpty && profile.commands.isEmpty))
    }

    @Test("the lock example's commands encode their constants and arguments")
    func lockCommands() throws {
        let lock = try ProfileFiles.load(path: fixture("smart-lock.yaml"))
        let unlock = try #require(lock.commands.first { $0.name == "unlock" })
        #expect(try unlock.encode(arguments: ["pin=1234"]) == [0x02, 0xD2, 0x04, 0x00, 0x00])
        #expect(unlock.arguments.map(\.name) == ["pin"])
        #expect(try lock.commands.first { $0.name == "set_mode" }?.encode(arguments: ["mode=privacy"]) == [0x04, 0x02])
        #expect(lock.commands.first { $0.name == "set_auto_lock" }?.withResponse == false)
        #expect(throws: FieldLayout.Problem.self) { try unlock.encode(arguments: ["pin=-1"]) }
        #expect(throws: FieldLayout.Problem.self) { try unlock.encode(arguments: []) }
        #expect(throws: FieldLayout.Problem.self) { try unlock.encode(arguments: ["opcode=9"]) }  // a constant is not an argument
    }

    @Test("a field's offset follows the one before; bit fields of one integer share it")
    func implicitOffsets() throws {
        let p = try ProfileFiles.load(path: fixture("soil-sensor.yaml"))
        let fields = try #require(p.advertisement.first).layout.fields
        #expect(fields.map(\.offset) == [0, 1, 2, 4, 6, 9, 9, 9, 9])
        #expect(fields.last?.bits == FieldLayout.Bits(shift: 3, width: 5))
        #expect(fields.first { $0.name == "soil_temperature" }?.decimals == 1)  // from the scale
    }

    /// Equivalence: a profile written for a device the built-in decoders know
    /// gives the decoder's readings over the decoder's own test vectors.
    @Test("profiles for Ruuvi RAWv2 and pvvx give the built-in decoders' readings over the fixture vectors",
          arguments: [("ruuvi-rawv2.yaml", "ruuvi.json"), ("pvvx-custom.yaml", "atc_pvvx.json")])
    func equivalence(_ profileFile: String, _ vectorsFile: String) throws {
        let profile = try ProfileFiles.load(path: fixture(profileFile))
        let url = packageRoot().appendingPathComponent("fixtures/vectors/adv/\(vectorsFile)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
        let vectors = try #require(json["vectors"] as? [[String: Any]])
        var compared = 0
        for v in vectors {
            guard let input = v["input"] as? [String: Any], let hex = input["data"] as? String,
                  input["bindkey"] == nil, let data = try? Hex.bytes(hex) else { continue }
            let builtIn: AdvertisementModel
            let adv: Advertisement
            if let company = input["company_id"] as? String, let id = UInt16(company.dropFirst(2), radix: 16) {
                guard let m = try? AdvertisementDecoder.decodeManufacturerData(companyID: id, data: data), m.modelName == "ruuvi_rawv2" else { continue }
                builtIn = m
                adv = Advertisement(manufacturerData: [ManufacturerData(companyID: id, data: data)])
            } else if let uuid = (input["service_uuid"] as? String).flatMap({ try? BluetoothUUID(parsing: $0) }) {
                guard let m = try? AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data), m.modelName == "pvvx_custom" else { continue }
                builtIn = m
                adv = Advertisement(serviceData: [ServiceData(uuid: uuid, data: data)])
            } else { continue }
            let results = ProfileSet([profile]).decode(adv)
            let models = results.compactMap { try? $0.get() }
            #expect(models.count == 1, "\(v["name"] ?? ""): \(results)")
            // The same readings, in any order (a profile lists its fields in byte order).
            func key(_ r: Reading) -> String { "\(r.kind.rawValue)|\(r.label ?? "")|\(r.unit ?? "")|\(r.value)" }
            #expect(models.first?.readings.map(key).sorted() == builtIn.readings.map(key).sorted(), "\(v["name"] ?? "")")
            compared += 1
        }
        #expect(compared >= 3, "only \(compared) vectors compared")
    }

    @Test("bad profiles are refused with file, line, key and reason", arguments: [
        // wrong type
        ("profile: x\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: t, type: int16 }\n",
         "got \"int16\"; did you mean \"s16\"?"),
        // overlapping fields
        ("profile: x\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: a, type: u16 }\n      - { name: b, type: u8, offset: 1 }\n",
         "7: advertisement[0].fields[1]: overlaps field \"a\""),
        // unknown reading kind, with a suggestion
        ("profile: x\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: t, type: s16, reading: temprature }\n",
         "6: advertisement[0].fields[0].reading: unknown reading kind \"temprature\"; did you mean \"temperature\"?"),
        // a state kind on a number
        ("profile: x\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: d, type: u8, reading: door }\n",
         "6: advertisement[0].fields[0]: door is an on/off state"),
        // no match
        ("profile: x\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: a, type: u8 }\n",
         "match: missing"),
        // unknown key with a suggestion
        ("profile: x\nmatch: { nmae: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: a, type: u8 }\n",
         "2: match.nmae: unknown key; did you mean match.name?"),
        // a GATT field without its access
        ("profile: x\nmatch: { name: X }\ngatt:\n  - service: 180f\n    characteristic: 2a19\n    fields:\n      - { name: a, type: u8 }\n",
         "gatt[0]: say how the value arrives"),
        // two fields to the end
        ("profile: x\nmatch: { name: X }\nadvertisement:\n  - service: fcd2\n    fields:\n      - { name: a, type: string }\n      - { name: b, type: bytes, offset: 0 }\n",
         "advertisement[0].fields[1]"),
        // a constant that does not fit its field
        ("profile: x\nmatch: { name: X }\ncommands:\n  - name: go\n    service: fff0\n    characteristic: fff1\n    fields:\n      - { name: op, type: u8, value: 300 }\n",
         "8: commands[0].fields[0]: value: 300 does not fit 8 bits"),
        // a bits range outside its integer
        ("profile: x\nmatch: { name: X }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: a, type: u8, bits: 4-9 }\n",
         "6: advertisement[0].fields[0]: bits 4…9 are outside its 8-bit integer"),
    ])
    func badProfiles(_ yaml: String, _ expected: String) {
        let found = profileProblems(yaml)
        #expect(found.contains { $0.contains(expected) }, "expected \"\(expected)\" among \(found)")
    }

    @Test("a field past the end of the data is a decode error naming the profile, not a crash")
    func pastTheEnd() throws {
        let p = try ProfileFiles.parse("profile: short\nmatch: { manufacturer: 0xFFFF }\nadvertisement:\n  - manufacturer: 0xFFFF\n    fields:\n      - { name: a, type: u8 }\n      - { name: t, type: s16, offset: 4, reading: temperature }\n")
        let results = ProfileSet([p]).decode(Advertisement(manufacturerData: [ManufacturerData(companyID: 0xFFFF, data: [1, 2, 3])]))
        guard case let .failure(error)? = results.first else { Issue.record("\(results)"); return }
        #expect(error.context == "profile short")
        #expect(error.description.contains("6 bytes"))
    }

    @Test("a directory loads every valid profile; a bad file or a second profile of a name is named and left out")
    func directory() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("profiles-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.copyItem(atPath: fixture("soil-sensor.yaml"), toPath: dir.appendingPathComponent("a.yaml").path)
        try FileManager.default.copyItem(atPath: fixture("soil-sensor.yaml"), toPath: dir.appendingPathComponent("b.yml").path)
        try "profile: [broken".write(to: dir.appendingPathComponent("c.yaml"), atomically: true, encoding: .utf8)
        try "ignored".write(to: dir.appendingPathComponent("notes.txt"), atomically: true, encoding: .utf8)
        let loaded = ProfileFiles.loadAll([dir.path, dir.appendingPathComponent("missing").path],
                                          optional: [dir.appendingPathComponent("missing").path])
        #expect(loaded.profiles.profiles.map(\.name) == ["growsense"])
        #expect(loaded.errors.count == 2)
        #expect(loaded.errors.contains { $0.file.hasSuffix("b.yml") && $0.description.contains("a second profile named \"growsense\"") })
        #expect(loaded.errors.contains { $0.file.hasSuffix("c.yaml") && $0.description.contains("invalid YAML") })
        #expect(ProfileFiles.loadAll(["/nonexistent/profiles"]).errors.first?.description.contains("no such file") == true)
    }

    @Test("match: name globs, service in the UUID list or as service data, manufacturer and address together")
    func matching() throws {
        let p = try ProfileFiles.parse("profile: m\nmatch: { name: \"Grow*-?\", service: fcd2, manufacturer: 0x0499 }\nadvertisement:\n  - manufacturer: 0x0499\n    fields:\n      - { name: a, type: u8 }\n")
        var adv = Advertisement(localName: "GrowSense-7", manufacturerData: [ManufacturerData(companyID: 0x0499, data: [1])],
                                serviceUUIDs: [BluetoothUUID(uuid16: 0xFCD2)])
        #expect(p.match.matches(adv))
        adv.serviceUUIDs = []
        #expect(!p.match.matches(adv))
        adv.serviceData = [ServiceData(uuid: BluetoothUUID(uuid16: 0xFCD2), data: [])]
        #expect(p.match.matches(adv))
        adv.localName = "GrowSense-77"
        #expect(!p.match.matches(adv))
        #expect(Glob.matches("*", "") && Glob.matches("a*b*c", "axxbyyc") && !Glob.matches("a*b", "ab c") && Glob.matches("??", "ab"))
    }
}
