import ArgumentParser
import BLEParsing
import BlueZ
import Bounds
import Domain
import Foundation
import Vocabulary

/// `blecompanion provision ADDRESS --ssid NAME --password-file FILE`: Wi-Fi
/// credentials to an ESPHome/WLED-style device over Improv (docs/FIRMWARE.md).
struct ProvisionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "provision",
        abstract: "Give a device Wi-Fi credentials over Bluetooth (Improv Wi-Fi), or make it identify itself.",
        discussion: """
            The password is read from a file (--password-file; - for standard input, first line) so that it is \
            never on the command line, in the shell's history or in `ps`; it is not printed or logged. A device \
            that asks for authorization is waited for (--authorization-timeout) while you press its button.

            EXIT STATUS
              0  provisioned (the device's URL is printed when it gives one), or identified
              1  the device refused (wrong password: "unable to connect"), no Improv service, not authorized in time,
                 no answer, or it could not be found or connected
              64 bad options
              66 the password file cannot be read
            """)
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Option(help: "The network's name (SSID).") var ssid: String?
    @Option(help: "A file whose first line is the network's password (- for standard input).") var passwordFile: String?
    @Flag(help: "An open network (no password).") var open = false
    @Flag(help: "Only ask the device to identify itself (blink or beep).") var identify = false
    @Option(parsing: .unconditional, help: "Seconds to wait for the device's button when it asks for authorization.")
    var authorizationTimeout: Double = 60
    @Option(parsing: .unconditional, help: "Seconds the device may take to join the network.") var timeout: Double = 30
    @Option(parsing: .unconditional, help: "Seconds to find (scan for) and connect to the device.") var connectTimeout: Double = 30

    func validate() throws {
        try checkSeconds(authorizationTimeout, "--authorization-timeout")
        try checkSeconds(timeout, "--timeout")
        try checkSeconds(connectTimeout, "--connect-timeout")
        if identify { return }
        guard let ssid else { throw ValidationError("--ssid is needed (or --identify)") }
        guard (1...32).contains(ssid.utf8.count) else { throw ValidationError("an SSID has 1 to 32 bytes; \"\(ssid)\" has \(ssid.utf8.count)") }
        if open == (passwordFile != nil) { throw ValidationError("give --password-file, or --open for a network without one") }
    }

    func password() throws -> [UInt8] {
        guard let passwordFile else { return [] }
        let data: Data?
        if passwordFile == "-" { data = FileHandle.standardInput.readDataToEndOfFile() } else { data = FileManager.default.contents(atPath: passwordFile) }
        guard let data else {
            printError("Error: cannot read the password file \(passwordFile)")
            throw ExitCode(66)
        }
        var bytes = [UInt8](data)
        if let end = bytes.firstIndex(of: 0x0A) { bytes = Array(bytes[..<end]) }
        if bytes.last == 0x0D { bytes.removeLast() }
        guard !bytes.isEmpty else {
            printError("Error: the password file \(passwordFile) has an empty first line (use --open for a network without a password)")
            throw ExitCode(1)
        }
        guard bytes.count <= 63 || bytes.count == 64 && bytes.allSatisfy({ Hex.value($0) != nil }) else {
            printError("Error: the password in \(passwordFile) has \(bytes.count) bytes; a Wi-Fi passphrase has at most 63 (or 64 hex digits)")
            throw ExitCode(1)
        }
        return bytes
    }

    func run() async throws {
        let secret = try password()
        try await runReporting {
            let client = try await options.client()
            let device = try await findDevice(address, options: options, client: client, within: connectTimeout)
            let connectedBefore = device.connected
            do {
                if !(device.connected && device.servicesResolved) {
                    try await client.connectResolvingServices(device.id, timeout: Bounds.duration(seconds: connectTimeout))
                }
            } catch {
                throw CLIError("cannot connect to \(device.address): \(CLIError(error, device: device).description)")
            }
            // Let go of a device this command connected, on every way out, and
            // wait for it: a Disconnect still under way when the next command
            // starts would drop that command's link.
            do {
                if identify {
                    try await ImprovProvisioning.identify(client: client, device: device.id)
                    out(options.json ? jsonLine(["address": device.address.description, "identify": true]) : "Asked \(device.displayName) to identify itself.")
                } else {
                    let json = options.json
                    let name = device.displayName
                    let outcome = try await ImprovProvisioning.provision(
                        client: client, device: device.id, ssid: Array((ssid ?? "").utf8), password: secret,
                        authorization: Bounds.duration(seconds: authorizationTimeout), timeout: Bounds.duration(seconds: timeout)) { state in
                            if !json, state == .authorizationRequired {
                                printError("\(name) wants authorization: press its button (waiting up to \(Int(authorizationTimeout)) s).")
                            }
                        }
                    if json {
                        out(jsonLine(["address": device.address.description, "ssid": ssid ?? "", "state": "provisioned",
                                      "url": outcome.url ?? NSNull(), "states": outcome.states.map(\.name)]))
                    } else {
                        out("Provisioned \(name) onto \"\(ssid ?? "")\"" + (outcome.url.map { "; it answers at \($0)" } ?? "") + ".")
                    }
                }
            } catch {
                if !connectedBefore { try? await client.disconnect(device.id) }
                if let e = error as? DomainError { throw CLIError(e.description) }
                throw error
            }
            if !connectedBefore { try? await client.disconnect(device.id) }
        }
    }
}
