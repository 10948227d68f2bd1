import ArgumentParser
import Bounds
import BLEParsing
import BlueZ
import Domain
import Foundation
import GatewayConfig
import Vocabulary

/// `blecompanion profile check|test`: a device profile (docs/PROFILES.md)
/// validated, tried on sample bytes, or on what a scan hears.
struct ProfileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "profile",
        abstract: "Check a device profile, or decode sample bytes with it.",
        discussion: """
            A profile describes a device the built-in decoders do not know: which devices it is for, \
            where readings lie in its advertisements and characteristics, and its commands \
            (docs/PROFILES.md).

            EXIT STATUS
              0  valid (check), decoded (test)
              2  test: the bytes did not decode; the reason is on standard error
              65 the profile has problems; each is printed as FILE:LINE: KEY: MESSAGE
            """,
        subcommands: [ProfileCheckCommand.self, ProfileTestCommand.self])
}

/// The profile in force (``cliProfiles``) that describes `device`, if any.
func profileOf(_ device: Device) -> DeviceProfile? {
    let set = cliProfiles.profiles
    return set.isEmpty ? nil : set.profile(for: AdvertisementReadings.advertisement(of: device))
}

/// The profile or exit 65 with its problems.
private func loadProfile(_ path: String) throws -> DeviceProfile {
    do { return try ProfileFiles.load(path: path) } catch {
        printError(error.description)
        throw ExitCode(65)
    }
}

struct ProfileCheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate profile files; with --scan, show which devices in range each matches and what they decode to.")

    @Argument(help: "Profile files.") var files: [String]
    @Option(parsing: .unconditional, help: "Scan this many seconds (1…600) and list the devices each profile matches.")
    var scan: Double?
    @OptionGroup var options: BlueZOptions

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("give at least one profile file") }
        try checkSeconds(scan, "--scan")
        if let scan, !(1...600).contains(scan) { throw ValidationError("--scan must be 1…600 seconds, got \(scan)") }
    }

    func run() async throws {
        var profiles: [DeviceProfile] = []
        var problems = false
        for file in files {
            do {
                let p = try ProfileFiles.load(path: file)
                profiles.append(p)
                if !options.json { print("\(file): valid: \(summary(p))") }
            } catch {
                printError(error.description)
                problems = true
            }
        }
        if problems { throw ExitCode(65) }
        if options.json {
            for p in profiles { out(jsonLine(["profile": p.name, "valid": true, "summary": summary(p)])) }
        }
        guard let scan else { return }
        try await runReporting {
            let client = try await options.client()
            let adapter = try options.adapter(of: client)
            let set = ProfileSet(profiles)
            let session = try await client.discover(adapter: adapter.id, filter: DiscoveryFilter(transport: .le))
            if !options.json { printError("Scanning on \(adapter.id.name) for \(Int(scan)) s…") }
            try? await Task.sleep(for: .seconds(scan))
            await session.stop()
            var matched = 0
            for d in client.mirror.snapshot().devices(on: adapter.id).sorted(by: { $0.address < $1.address }) {
                let adv = AdvertisementReadings.advertisement(of: d)
                guard let p = set.profile(for: adv) else { continue }
                matched += 1
                let results = ProfileSet([p]).decode(adv)
                let readings = results.compactMap { try? $0.get() }.flatMap(\.readings)
                let errors = results.compactMap { r -> String? in if case let .failure(e) = r { return e.description } else { return nil } }
                if options.json {
                    out(jsonLine(["address": d.address.description, "profile": p.name, "name": d.name ?? "",
                                  "readings": readings.map { DecodeOutput.readingName($0) + "=" + DecodeOutput.readingValue($0.value) },
                                  "errors": errors]))
                } else {
                    var line = "\(d.address)  \(d.name ?? "(no name)")  → \(p.name)"
                    if !readings.isEmpty { line += "  " + readings.map { r in
                        "\(DecodeOutput.readingName(r))=\(DecodeOutput.readingValue(r.value))\(r.unit.map { " \($0)" } ?? "")"
                    }.joined(separator: " ") }
                    for e in errors { line += "  (decode error: \(e))" }
                    out(line)
                }
            }
            if !options.json { printError("\(matched) device\(matched == 1 ? "" : "s") matched.") }
        }
    }

    func summary(_ p: DeviceProfile) -> String {
        var parts: [String] = ["profile \(p.name)"]
        var match: [String] = []
        if let n = p.match.name { match.append("name \(n)") }
        if let s = p.match.service { match.append("service \(BluetoothUUID.short(s.string))") }
        if let m = p.match.manufacturer { match.append("manufacturer \(hexString(m))") }
        if let a = p.match.address { match.append("address \(a)") }
        parts.append("matches " + match.joined(separator: " and "))
        let readings = (p.advertisement.map(\.layout) + p.gatt.map(\.layout)).flatMap(\.fields).filter { $0.reading != nil }.count
        parts.append("\(p.advertisement.count) advertisement payload(s), \(p.gatt.count) characteristic(s), \(readings) reading field(s)")
        if !p.commands.isEmpty { parts.append("commands: " + p.commands.map(\.name).joined(separator: ", ")) }
        return parts.joined(separator: "; ")
    }
}

struct ProfileTestCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test",
        abstract: "Decode sample bytes with a profile: an advertisement payload, a characteristic value, or a command's bytes.",
        discussion: """
            Without --characteristic or --adv, HEX is a manufacturer or service data payload (without the \
            company id or UUID) and is decoded by each of the profile's advertisement entries whose prefix \
            it begins with. --adv: HEX is raw advertising data (AD structures), and the profile's match is \
            tried too. --characteristic UUID: HEX is that characteristic's value. --command NAME ARG…: \
            prints the bytes the command writes (nothing is sent).
            """)

    @Argument(help: "The profile file.") var file: String
    @Option(help: ArgumentHelp("Sample bytes (repeatable).", valueName: "hex"), transform: DecodeArguments.payload)
    var hex: [[UInt8]] = []
    @Option(help: "Decode HEX as this characteristic's value (a UUID the profile's gatt section names).")
    var characteristic: String?
    @Flag(help: "HEX is raw advertising data (AD structures); the profile's match is tried too.")
    var adv = false
    @Option(help: "Encode this command's arguments (the remaining arguments, as NAME=VALUE) and print the bytes.")
    var command: String?
    @Argument(help: "For --command: the arguments, NAME=VALUE.") var arguments: [String] = []
    @OptionGroup var output: DecodeOutputOptions

    func validate() throws {
        guard command != nil || !hex.isEmpty else { throw ValidationError("give --hex (bytes to decode) or --command") }
        guard command == nil || hex.isEmpty else { throw ValidationError("--command encodes; do not give --hex with it") }
        guard characteristic == nil || !adv else { throw ValidationError("--adv and --characteristic exclude each other") }
    }

    func run() throws {
        let profile = try loadProfile(file)
        if let command { return try encode(profile, command) }
        var failed = false
        for bytes in hex {
            let results = decode(profile, bytes)
            if results.isEmpty {
                DecodeOutput.error("\(Hex.string(bytes)): \(why(profile, bytes))")
                failed = true
            }
            for result in results {
                switch result {
                case let .success(model): print(output.json ? DecodeOutput.json(model) : DecodeOutput.text(model))
                case let .failure(e):
                    DecodeOutput.error(e.description)
                    failed = true
                }
            }
        }
        if failed { throw ExitCode(2) }
    }

    func decode(_ profile: DeviceProfile, _ bytes: [UInt8]) -> [Result<AdvertisementModel, DecodeError>] {
        if let characteristic {
            guard let uuid = try? BluetoothUUID(parsing: characteristic),
                  let field = profile.gatt.first(where: { $0.characteristic == uuid }) else { return [] }
            return [Result { () throws(DecodeError) in try profile.decodeCharacteristic(field, bytes) }]
        }
        if adv {
            let (ad, errors) = AdvertisingData.parsePartial(bytes)
            return errors.map { .failure($0) } + ProfileSet([profile]).decode(ad.advertisement(address: nil))
        }
        return profile.advertisement.filter { bytes.starts(with: $0.prefix) }.map { field in
            Result { () throws(DecodeError) in try profile.decodeAdvertisement(field, bytes) }
        }
    }

    func why(_ profile: DeviceProfile, _ bytes: [UInt8]) -> String {
        if let characteristic { return "the profile has no gatt entry for characteristic \(characteristic)" }
        if adv { return "the profile's match does not hold for this advertisement, or it has none of the payloads the profile reads" }
        if profile.advertisement.isEmpty { return "the profile has no advertisement section (use --characteristic for a GATT value)" }
        return "no advertisement entry of the profile begins with these bytes (prefixes: "
            + profile.advertisement.map { $0.prefix.isEmpty ? "none" : Hex.string($0.prefix) }.joined(separator: ", ") + ")"
    }

    func encode(_ profile: DeviceProfile, _ name: String) throws {
        guard let command = profile.commands.first(where: { $0.name == name }) else {
            let known = profile.commands.map(\.name)
            printError("Error: the profile has no command \"\(name)\"" + (known.isEmpty ? "" : "; it has: \(known.joined(separator: ", "))"))
            throw ExitCode(64)
        }
        let bytes: [UInt8]
        do { bytes = try command.encode(arguments: arguments) } catch {
            printError("Error: \(name): \(error.description)")
            throw ExitCode(64)
        }
        print(output.json ? jsonLine(["command": name, "hex": Hex.string(bytes), "response": command.withResponse]) : Hex.string(bytes))
    }
}

/// `blecompanion command ADDRESS NAME ARG…`: a command of the device's
/// profile, encoded by its layout and written to its characteristic.
struct DeviceCommandCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "command",
        abstract: "Run a command of a device's profile (docs/PROFILES.md); without NAME, list its commands.",
        discussion: """
            ARGs are NAME=VALUE: numbers (decimal, or 0x hex for integers), an enumeration's names, text, \
            hex for bytes, comma-separated values for a list. The device is connected for the command when \
            it is not already, and let go afterwards (unless --stay-connected).
            """)
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Argument(help: "The command's name.") var name: String?
    @Argument(help: "Its arguments, NAME=VALUE.") var arguments: [String] = []
    @Option(parsing: .unconditional, help: "Seconds to wait for the connection.") var timeout: Double = 30
    @Flag(help: "Keep the connection the command made.") var stayConnected = false

    func validate() throws { try checkSeconds(timeout, "--timeout") }

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            let (_, device) = try options.device(address, of: client)
            guard let profile = cliProfiles.profiles.profile(for: AdvertisementReadings.advertisement(of: device)) else {
                throw CLIError("no device profile matches \(device.address) (\(device.name ?? "no name")); profiles come from --profiles or the state directory's profiles/ (docs/PROFILES.md).")
            }
            guard let name else {
                if options.json {
                    for c in profile.commands {
                        out(jsonLine(["command": c.name, "arguments": c.arguments.map { ["name": $0.name, "type": $0.argumentKind] }]))
                    }
                } else {
                    out(profile.commands.isEmpty ? "Profile \(profile.name) has no commands."
                        : profile.commands.map { "\($0.name)  \($0.arguments(described: true))" }.joined(separator: "\n"))
                }
                return
            }
            guard let command = profile.commands.first(where: { $0.name == name }) else {
                let known = profile.commands.map(\.name)
                throw CLIError("profile \(profile.name) has no command \"\(name)\"" + (known.isEmpty ? " (it has none)." : "; it has: \(known.joined(separator: ", "))."))
            }
            let bytes: [UInt8]
            do throws(FieldLayout.Problem) { bytes = try command.encode(arguments: arguments) } catch {
                throw CLIError("\(name): \(error.description)")
            }
            let connectedBefore = device.connected
            if !connectedBefore {
                do { try await client.connectResolvingServices(device.id, timeout: Bounds.duration(seconds: timeout)) } catch {
                    throw CLIError("cannot connect to \(device.address): \(CLIError(error, device: device).description)")
                }
            }
            let target = client.mirror.snapshot().characteristic(command.characteristic, inService: command.service, on: device.id)
            var failure: CLIError?
            if let target {
                do { try await client.writeValue(target.id, bytes, type: command.withResponse ? .request : .command) } catch {
                    failure = CLIError("\(name): writing \(BluetoothUUID.short(target.uuid)) failed: \(CLIError(error, device: device).description)")
                }
            } else {
                failure = CLIError("\(device.address) has no characteristic \(command.characteristic.string) in service \(command.service.string)")
            }
            if !connectedBefore, !stayConnected { try? await client.disconnect(device.id) }
            if let failure { throw failure }
            out(options.json ? jsonLine(["address": device.address.description, "command": name, "written": Hex.string(bytes)])
                             : "Sent \(name) (\(Hex.string(bytes))) to \(device.displayName).")
        }
    }
}

/// `blecompanion timesync ADDRESS`: sets a device's clock to the host's and
/// reports the drift before and after (docs/PROFILES.md, "Time sync").
struct TimeSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timesync",
        abstract: "Set a device's clock to the host's time and show its drift before and after.",
        discussion: """
            Knows the Current Time Service (0x1805/0x2A2B), Xiaomi LYWSD02-style clocks and pvvx/ATC custom \
            thermometer firmware; the first one the device offers is used unless --clock names one. The device \
            is connected for the sync when it is not already, and let go afterwards. Drift is the device's time \
            minus the host's, in seconds (pvvx firmware cannot report its time, so no drift for it).
            """)
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Option(help: "cts, lywsd02 or pvvx (default: what the device offers).") var clock: String?
    @Option(parsing: .unconditional, help: "Seconds to wait for the connection.") var timeout: Double = 30

    func validate() throws {
        try checkSeconds(timeout, "--timeout")
        if let clock, ClockProtocol(rawValue: clock) == nil {
            throw ValidationError("--clock must be one of \(ClockProtocol.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(clock)\"")
        }
    }

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            let (_, device) = try options.device(address, of: client)
            let connectedBefore = device.connected
            if !connectedBefore {
                do { try await client.connectResolvingServices(device.id, timeout: Bounds.duration(seconds: timeout)) } catch {
                    throw CLIError("cannot connect to \(device.address): \(CLIError(error, device: device).description)")
                }
            }
            let outcome: ClockSync.Outcome
            do throws(DomainError) {
                outcome = try await ClockSync.run(client: client, device: device.id, clock: clock.flatMap(ClockProtocol.init(rawValue:)))
            } catch {
                if !connectedBefore { try? await client.disconnect(device.id) }
                throw CLIError(error.description)
            }
            if !connectedBefore { try? await client.disconnect(device.id) }
            func drift(_ d: Double?) -> String { d.map { String(format: "%+.1f s", $0) } ?? "unknown" }
            if options.json {
                out(jsonLine(["address": device.address.description, "clock": outcome.clock.rawValue,
                              "drift_before": outcome.driftBefore.map { $0 as Any } ?? NSNull(),
                              "drift_after": outcome.driftAfter.map { $0 as Any } ?? NSNull(), "written": Hex.string(outcome.written)]))
            } else {
                out("\(device.displayName): \(outcome.clock.label) set; drift before \(drift(outcome.driftBefore)), after \(drift(outcome.driftAfter)).")
            }
        }
    }
}
