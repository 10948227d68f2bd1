// The fuzz harnesses for what reads outside bytes beyond BLEParsing's
// decoders (those are `parsing-fuzz`'s): one per reader, each a function
// from bytes to a number that depends on everything it read (so nothing is
// optimised away). A harness traps only where a property of the reader
// fails — a crash, or an answer that contradicts another reader of the
// same bytes; a refusal with a clear error is the right answer to bad input.
import BLEParsing
import BlueZ
import BlueZSimulator
import CaptureImport
import Fleet
@_spi(Fuzzing) import DBus
import Gateway
import GatewayConfig
@_spi(Fuzzing) import HTTPServer
import ScenarioFormat
import Vocabulary

enum Harness: String, CaseIterable {
    /// A D-Bus byte stream cut at random points into the receiver and the
    /// wire decoder, checked against libdbus (see `DBusWireFuzzing`).
    case dbus
    /// A btsnoop file into the capture analyser and the scenario importer;
    /// what the importer writes must load in the simulator.
    case btsnoop
    /// Scenario JSON into the simulator's reader.
    case scenario
    /// YAML into the gateway's configuration loader.
    case config
    /// An MQTT/HTTP command payload into `GatewayCommand.parse`.
    case command
    /// A command-line word into the CLI's address, UUID, hex, object-path,
    /// signature and bus-address parsers; what they accept must read back
    /// the same from its printed form.
    case text
    /// What a client sends the gateway's HTTP API, through the request
    /// reader a connection runs before any handler (see `HTTPRequestFuzzing`).
    case http
    /// What another gateway of a fleet publishes (sighting batches, owner
    /// claims): what the readers accept must read back the same from what
    /// the writers make of it.
    case fleet
    /// YAML into the device profile reader; an accepted profile's layouts
    /// decode the same input by both paths alike, and its commands' bytes
    /// decode back to the values encoded.
    case profile

    func run(_ input: [UInt8]) -> Int {
        switch self {
        case .dbus: return DBusWireFuzzing.run(input)
        case .btsnoop: return fuzzBtsnoop(input)
        case .scenario: return fuzzScenario(input)
        case .config: return fuzzConfig(input)
        case .command: return fuzzCommand(input)
        case .text: return fuzzText(input)
        case .http: return HTTPRequestFuzzing.run(input)
        case .fleet: return fuzzFleet(input)
        case .profile: return fuzzProfile(input)
        }
    }
}

private func fuzzFleet(_ input: [UInt8]) -> Int {
    var total = 0
    if let batch = try? SightingBatch.parse(input) {
        guard let again = try? SightingBatch.parse(batch.json), again.gateway == batch.gateway, again.room == batch.room,
              again.devices == batch.devices, abs(again.at - batch.at) < 0.001 else {
            preconditionFailure("a sighting batch did not read back from its own JSON: \(String(decoding: batch.json, as: UTF8.self))")
        }
        total &+= batch.devices.count &+ 1
    }
    if let claim = try? OwnerClaim.parse(input) {
        guard let again = try? OwnerClaim.parse(claim.json), again.gateway == claim.gateway, abs(again.at - claim.at) < 0.001 else {
            preconditionFailure("an owner claim did not read back from its own JSON: \(String(decoding: claim.json, as: UTF8.self))")
        }
        total &+= 2
    }
    return total
}

private func fuzzBtsnoop(_ input: [UInt8]) -> Int {
    let options = ScenarioImporter.Options(name: "fuzz", sourceName: "fuzz.btsnoop", sizeLimit: Scenario.maximumFileBytes)
    // As import-btsnoop does: read in blocks (here of a size the input
    // picks, 1 to 257 bytes) and folded as it goes. It must agree with the
    // whole-file path: the same error, or the same scenario.
    let block = 1 + Int(input.last ?? 0)
    var streaming = StreamingImport(options: options)
    let streamed: Result<ScenarioImporter.Result, CaptureError>
    do throws(CaptureError) {
        var at = 0
        while at < input.count, try streaming.append(input[at..<min(at + block, input.count)]) { at += block }
        streamed = .success(try streaming.finish())
    } catch {
        streamed = .failure(error)
    }
    let timeline: CaptureTimeline
    do {
        timeline = try CaptureAnalyzer.analyze(input)
    } catch {
        guard case .failure(error) = streamed else {
            preconditionFailure("the whole-file reader refuses the capture (\(error)) and the streamed import does not")
        }
        return error.description.utf8.count
    }
    // Converted and written up to the simulator's limit (past it: exit 70).
    // Below it, what is written must load.
    let result = ScenarioImporter.convert(timeline, options: options)
    guard case let .success(other) = streamed else {
        preconditionFailure("the streamed import refuses a capture the whole-file reader takes: \(streamed)")
    }
    guard other.exceedsSizeLimit == result.exceedsSizeLimit else {
        preconditionFailure("streamed and whole imports disagree on the size limit")
    }
    guard !result.exceedsSizeLimit, let text = result.scenario.text(limit: Scenario.maximumFileBytes) else {
        return result.summary.lines.count
    }
    guard other.scenario.text(limit: Scenario.maximumFileBytes) == text, other.summary == result.summary else {
        preconditionFailure("the streamed import wrote another scenario than the whole-file one")
    }
    do {
        _ = try Scenario.parse(text, fileName: "imported.json")
    } catch {
        preconditionFailure("import-btsnoop wrote a scenario the simulator refuses: \(error)\n\(text.prefix(2000))")
    }
    return text.utf8.count &+ result.summary.lines.count
}

private func fuzzScenario(_ input: [UInt8]) -> Int {
    do {
        let s = try Scenario.parse(String(decoding: input, as: UTF8.self), fileName: "fuzz.json")
        return s.devices.count &+ s.adapters.count
    } catch {
        return error.description.utf8.count
    }
}

private func fuzzProfile(_ input: [UInt8]) -> Int {
    let profile: DeviceProfile
    do { profile = try ProfileFiles.parse(String(decoding: input, as: UTF8.self), file: "fuzz.yaml") } catch {
        return error.description.utf8.count
    }
    var total = profile.name.utf8.count
    let layouts = profile.advertisement.map(\.layout) + profile.gatt.map(\.layout)
    for layout in layouts {
        // The readings-only path and decode + readings agree, on success and on failure.
        let fast = Result { () throws(DecodeError) in try layout.readings(of: input) }
        let slow = Result { () throws(DecodeError) in try layout.readings(layout.decode(input)) }
        switch (fast, slow) {
        case let (.success(a), .success(b)): precondition(a == b, "readings(of:) and readings(decode) differ"); total &+= a.count
        case let (.failure(a), .failure(b)): precondition(a == b, "the two paths fail differently: \(a) vs \(b)")
        default: preconditionFailure("one path decodes, the other fails: \(fast) vs \(slow)")
        }
    }
    for command in profile.commands {
        // Zeros for every argument: refused with a reason, or bytes that decode back to them.
        let given = Dictionary(uniqueKeysWithValues: command.arguments.map { ($0.name, $0.values.isEmpty ? "0" : $0.values.values.sorted()[0]) })
        guard let bytes = try? command.encode(text: given) else { continue }
        let decoded = (try? command.layout.decode(bytes)) ?? []
        precondition(decoded.count == command.layout.fields.count, "a command's own bytes do not decode")
        total &+= bytes.count
    }
    return total
}

private func fuzzConfig(_ input: [UInt8]) -> Int {
    do {
        let c = try GatewayConfiguration.parse(String(decoding: input, as: UTF8.self), file: "fuzz.yaml")
        return c.gatewayID.utf8.count &+ (c.mqtt?.host.utf8.count ?? 0)
    } catch {
        return error.description.utf8.count
    }
}

private func fuzzCommand(_ input: [UInt8]) -> Int {
    do {
        let c = try GatewayCommand.parse(input)
        if let characteristic = c.characteristic, !characteristic.hasPrefix("/") {
            // parse accepted it as a UUID: the lookup must be able to read it.
            precondition((try? BluetoothUUID(parsing: characteristic)) != nil, "accepted characteristic \(characteristic) does not parse")
        }
        return c.action.rawValue.utf8.count &+ (c.value?.count ?? 0) &+ (c.id?.utf8.count ?? 0)
    } catch {
        return error.description.utf8.count
    }
}

private func fuzzText(_ input: [UInt8]) -> Int {
    let word = String(decoding: input, as: UTF8.self)
    var total = 0
    if let a = try? BluetoothAddress(word) {
        precondition((try? BluetoothAddress(a.description)) == a, "address \(a) does not read back")
        total &+= a.description.utf8.count
    }
    if let a = try? BluetoothAddress(word) {
        precondition((try? BluetoothAddress(a.description)) == a, "device address \(a) does not read back")
        total &+= 1
    }
    if let u = try? BluetoothUUID(parsing: word) {
        precondition((try? BluetoothUUID(parsing: u.string)) == u, "UUID \(u) does not read back from \(u.string)")
        precondition((try? BluetoothUUID(parsing: u.shortString)) == u, "UUID \(u) does not read back from \(u.shortString)")
        total &+= u.string.utf8.count
    }
    if let bytes = try? parseHex(word) {
        let printed = bytes.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
        precondition((try? parseHex(printed)) == bytes, "hex \(printed) does not read back")
        total &+= bytes.count
    }
    if let p = try? ObjectPath(word) {
        precondition((try? ObjectPath(p.rawValue)) == p, "object path \(p) does not read back")
        total &+= 1
    }
    if let s = try? DBusSignature(word) {
        precondition((try? DBusSignature(s.rawValue)) == s, "signature \(s) does not read back")
        total &+= s.types.count
    }
    return total
}
