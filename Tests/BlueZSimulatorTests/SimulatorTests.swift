import Foundation
@testable import ScenarioFormat
import Testing
@testable import BlueZSimulator

@Suite struct ScenarioParsingTests {
    func error(_ text: String) -> ScenarioError? {
        do {
            _ = try Scenario.parse(text, fileName: "scenario.json")
            return nil
        } catch {
            return error
        }
    }

    @Test func serviceNameIsBlueZ() { #expect(BlueZSimulatorInfo.serviceName == "org.bluez") }

    @Test func unknownFlagNamesPathAndLine() throws {
        let text = """
        {
          "devices": [
            { "address": "AA:BB:CC:DD:EE:01" },
            { "address": "AA:BB:CC:DD:EE:02" },
            { "address": "AA:BB:CC:DD:EE:03",
              "gatt": [
                { "uuid": "180d",
                  "characteristics": [
                    { "uuid": "2a37", "flags": ["notify"] },
                    { "uuid": "2a38",
                      "flags": ["reed"] }
                  ] }
              ] }
          ]
        }
        """
        let e = try #require(error(text))
        #expect(e.line == 11)
        #expect(e.path == "devices[2].gatt[0].characteristics[1].flags[0]")
        #expect(e.description.hasPrefix("scenario.json:11: devices[2].gatt[0].characteristics[1].flags[0]: unknown flag \"reed\" (expected one of broadcast, read,"))
    }

    /// `bluetoothd.replyDelay`: read, range-checked (0…60 s), written back.
    @Test func replyDelayIsReadCheckedAndWritten() throws {
        let s = try Scenario.parse("{ \"bluetoothd\": { \"replyDelay\": 1.5 }, \"devices\": [] }", fileName: "s.json")
        #expect(s.replyDelay == 1.5)
        #expect(try Scenario.parse(s.jsonText(), fileName: "again.json").replyDelay == 1.5)
        #expect(try Scenario.parse("{ \"devices\": [] }", fileName: "s.json").replyDelay == 0)
        let tooLong = try #require(error("{ \"bluetoothd\": { \"replyDelay\": 61 } }"))
        #expect(tooLong.path == "bluetoothd.replyDelay")
        #expect(tooLong.message.contains("at most 60 seconds"))
        let negative = try #require(error("{ \"bluetoothd\": { \"replyDelay\": -1 } }"))
        #expect(negative.message.contains("between 0 and"))
    }

    @Test func badHexAndUnknownMemberAndSyntax() throws {
        let hex = try #require(error("{\n\"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\",\n \"manufacturerData\": { \"0x0499\": \"05zz\" } } ] }"))
        #expect(hex.line == 3)
        #expect(hex.path == "devices[0].manufacturerData.0x0499")
        #expect(hex.message.contains("\"05zz\" is not hex bytes"), "\(hex.message)")

        let member = try #require(error("{ \"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\", \"rsi\": -50 } ] }"))
        #expect(member.path == "devices[0].rsi")
        #expect(member.message.contains("unknown member \"rsi\""))

        let syntax = try #require(error("{\n  \"devices\": [\n    { \"address\": \"AA:BB:CC:DD:EE:01\", }\n  ]\n}"))
        #expect(syntax.line == 3)
        #expect(syntax.message.contains("invalid JSON"))

        let adapter = try #require(error("{ \"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\", \"adapter\": \"hci7\" } ] }"))
        #expect(adapter.path == "devices[0].adapter")
        #expect(adapter.message.contains("unknown adapter \"hci7\""))

        let errName = try #require(error("{ \"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\", \"faults\": { \"pairError\": \"org.bluez.Error.Oops\" } } ] }"))
        #expect(errName.path == "devices[0].faults.pairError")

        let order = try #require(error("{ \"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\", \"advertising\": { \"timeline\": [ {\"at\": 2}, {\"at\": 1} ] } } ] }"))
        #expect(order.path == "devices[0].advertising.timeline[1].at")

        let target = try #require(error("""
        { "devices": [ { "address": "AA:BB:CC:DD:EE:01", "gatt": [ { "uuid": "180d", "characteristics": [
          { "uuid": "2a39", "flags": ["write"], "onWrite": [ { "then": [ { "characteristic": "2a99", "value": "00" } ] } ] } ] } ] } ] }
        """))
        #expect(target.line == 2)
        #expect(target.message.contains("no characteristic with UUID 00002a99"))
    }

    @Test(arguments: ["demo-home.json", "test-basic.json", "test-faults.json", "test-outage.json", "test-passive.json", "test-passive-outage.json"])
    func fixturesParse(_ name: String) throws {
        let s = try loadScenario(name)
        #expect(!s.devices.isEmpty)
        #expect(!s.adapters.isEmpty)
    }

    @Test func experimentalIsOffUnlessAsked() throws {
        #expect(try loadScenario("test-basic.json").experimental == false)
        #expect(try loadScenario("demo-home.json").experimental == true)
        do {
            _ = try Scenario.parse(#"{ "bluetoothd": { "experimental": "yes" } }"#)
            Issue.record("a string is not a boolean")
        } catch {
            #expect(error.path == "bluetoothd.experimental", "\(error)")
        }
    }

    @Test func bluetoothdVersionIs566UnlessAskedAndRoundTrips() throws {
        #expect(try loadScenario("test-basic.json").bluetoothdVersion == .v5_66)
        var latest = try Scenario.parse(#"{ "bluetoothd": { "version": "latest" }, "settings": { "disconnectDelay": 0.5 } }"#)
        #expect(latest.bluetoothdVersion == .latest)
        #expect(latest.settings.disconnectDelay == 0.5)
        let again = try Scenario.parse(latest.jsonText())
        #expect(again.bluetoothdVersion == .latest && again.settings.disconnectDelay == 0.5)
        latest.bluetoothdVersion = .v5_66
        #expect(!latest.jsonText().contains("version"))
        do {
            _ = try Scenario.parse(#"{ "bluetoothd": { "version": "5.80" } }"#)
            Issue.record("an unknown version must be refused")
        } catch {
            #expect(error.path == "bluetoothd.version", "\(error)")
            #expect("\(error)".contains("\"5.66\", \"latest\""), "\(error)")
        }
    }

    @Test func readsUUIDsInMethodArgumentsAsBluetoothdDoes() {
        #expect(normalizeUUID("180D") == "0000180d-0000-1000-8000-00805f9b34fb")
        #expect(normalizeUUID("0x2A37") == "00002a37-0000-1000-8000-00805f9b34fb")
        #expect(normalizeUUID("0000180D-0000-1000-8000-00805F9B34FB") == "0000180d-0000-1000-8000-00805f9b34fb")
        #expect(normalizeUUID("nope") == nil)
        // 32 digits without dashes: ours reads them, bluetoothd does not.
        #expect(normalizeUUID("0000180d00001000800000805f9b34fb") == nil)
    }

    @Test func missingFileIsAClearError() {
        do {
            _ = try Scenario.load(path: "/nonexistent/x.json")
            Issue.record("expected an error")
        } catch {
            #expect(error.description.contains("cannot open /nonexistent/x.json"))
        }
    }
}

@Suite struct ScenarioLimitsTests {
    @Test func byteOrderMarkAndHandleLimit() throws {
        let withBOM = "\u{FEFF}{ \"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\" } ] }"
        #expect(try Scenario.parse(withBOM).devices.count == 1)
        var characteristics: [String] = []
        for _ in 0..<22_000 { characteristics.append("{\"uuid\": \"2a37\", \"flags\": [\"notify\"]}") }
        let huge = "{ \"devices\": [ { \"address\": \"AA:BB:CC:DD:EE:01\", \"gatt\": [ { \"uuid\": \"180d\", \"characteristics\": [\(characteristics.joined(separator: ","))] } ] } ] }"
        do {
            _ = try Scenario.parse(huge)
            Issue.record("expected the handle limit error")
        } catch {
            #expect(error.path == "devices[0].gatt")
            #expect(error.message.contains("at most 65535"))
        }
    }

    @Test func speedOutOfRangeIsRefused() async throws {
        let sim = BlueZSimulator(scenario: try loadScenario("test-basic.json"), options: SimulatorOptions(speed: 0))
        await #expect(throws: SimulatorError.self) { try await sim.start(busAddress: "unix:path=/nonexistent") }
    }

    /// The schema and the reader agree on the fixtures (when python3-jsonschema is installed).
    @Test(.enabled(if: pythonHasJSONSchema))
    func fixturesMatchTheSchema() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let dir = "\(repositoryRoot)/fixtures/scenarios"
        process.arguments = ["python3", "-c", """
        import json, sys, glob, jsonschema
        schema = json.load(open(sys.argv[1] + "/scenario.schema.json"))
        files = sorted(f for f in glob.glob(sys.argv[1] + "/*.json") if not f.endswith("schema.json"))
        for f in files:
            jsonschema.validate(json.load(open(f)), schema)
        bad = {"devices": [{"address": "AA:BB:CC:DD:EE:01", "gatt": [{"uuid": "180d", "characteristics": [{"uuid": "2a37", "flags": ["reed"]}]}]}]}
        try:
            jsonschema.validate(bad, schema)
            sys.exit(3)
        except jsonschema.ValidationError:
            pass
        print(len(files))
        """, dir]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0)
        #expect(Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 4)
    }
}

/// Whether `python3` on PATH can import jsonschema (for the schema test).
let pythonHasJSONSchema: Bool = {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    p.arguments = ["python3", "-c", "import jsonschema"]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    do { try p.run() } catch { return false }
    p.waitUntilExit()
    return p.terminationStatus == 0
}()
