import Bounds
import ArgumentParser
import BLEParsing
import BlueZ
import DBus
import Foundation
import Locking
import Vocabulary

struct ConnectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connect", abstract: "Connect to a device and wait until its GATT services are resolved.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Option(parsing: .unconditional, help: "Seconds to wait for the connection and service discovery.") var timeout: Double = 30

    func validate() throws { try checkSeconds(timeout, "--timeout") }

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            _ = try options.adapter(of: client)
            let (_, device) = try options.device(address, of: client)
            do {
                try await client.connectResolvingServices(device.id, timeout: Bounds.duration(seconds: timeout))
            } catch {
                throw CLIError("cannot connect to \(device.address): \(CLIError(error, device: device).description)")
            }
            let services = client.mirror.snapshot().gattTree(of: device.id).count
            out(options.json ? jsonLine(["address": device.address.description, "connected": true, "services": services])
                               : "Connected to \(device.displayName) (\(device.address)); \(services) GATT services.")
        }
    }
}

struct DisconnectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "disconnect", abstract: "Disconnect a device.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String

    func run() async throws {
        try await deviceAction(options, address, json: ["connected": false], text: { "Disconnected \($0.address)." }) {
            try await $0.disconnect($1.id)
        }
    }
}

struct PairCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair",
        abstract: "Pair with a device, answering bluetoothd's agent requests.",
        discussion: """
            Prompts on the terminal for passkeys and confirmations. For scripts: --passkey answers a passkey \
            request, --pin a PIN request, --yes accepts confirmations and authorisations. Without a terminal \
            and without those options, requests are rejected with a message saying which option was needed.
            """)
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Option(help: "The 6-digit passkey to enter when the device asks for one.") var passkey: UInt32?
    @Option(help: "The PIN code to enter for a legacy device.") var pin: String?
    @Flag(help: "Accept passkey confirmations and authorisation requests.") var yes = false
    @Flag(help: "Also mark the device trusted after pairing.") var trust = false
    @Option(help: "Agent capability: KeyboardDisplay (default), DisplayYesNo, DisplayOnly, KeyboardOnly, NoInputNoOutput.")
    var capability: String = AgentCapability.keyboardDisplay.rawValue

    func validate() throws {
        if let passkey, passkey > 999_999 { throw ValidationError("--passkey must have at most 6 digits") }
        if let pin, !(1...16).contains(pin.utf8.count) { throw ValidationError("--pin must be 1 to 16 characters") }
        if AgentCapability(rawValue: capability) == nil {
            throw ValidationError("--capability must be one of \(AgentCapability.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            _ = try options.adapter(of: client)
            let (_, device) = try options.device(address, of: client)
            if device.paired {
                out(options.json ? jsonLine(["address": device.address.description, "paired": true]) : "\(device.address) is already paired.")
                return
            }
            let interactive = isatty(STDIN_FILENO) == 1
            let passkey = self.passkey, pin = self.pin, yes = self.yes
            let agent: BlueZAgent
            do {
                agent = try await BlueZAgent.register(client: client, capability: AgentCapability(rawValue: capability) ?? .keyboardDisplay) { request in
                    PairCommand.answer(request, passkey: passkey, pin: pin, yes: yes, interactive: interactive)
                }
            } catch { throw CLIError(error) }
            defer { Task { await agent.unregister() } }
            do {
                try await client.pair(device.id)
                if trust { try await client.setTrusted(true, device: device.id) }
            } catch {
                throw CLIError("pairing with \(device.address) failed: \(CLIError(error, device: device).description)")
            }
            await agent.unregister()
            out(options.json ? jsonLine(["address": device.address.description, "paired": true, "trusted": trust])
                               : "Paired with \(device.displayName) (\(device.address))\(trust ? " and trusted it" : "").")
        }
    }

    static func answer(_ request: AgentRequest, passkey: UInt32?, pin: String?, yes: Bool, interactive: Bool) -> AgentResponse {
        switch request {
        case let .passkey(d):
            if let passkey { return .passkey(passkey) }
            guard interactive, let line = prompt("Enter the passkey shown by \(d.address): "), let key = UInt32(line), key <= 999_999 else {
                printError("The device asks for a passkey: pass --passkey NNNNNN.")
                return .reject
            }
            return .passkey(key)
        case let .pinCode(d):
            if let pin { return .pinCode(pin) }
            guard interactive, let line = prompt("Enter the PIN code for \(d.address): "), !line.isEmpty else {
                printError("The device asks for a PIN code: pass --pin CODE.")
                return .reject
            }
            return .pinCode(line)
        case let .confirmation(d, key):
            if yes { return .accept }
            guard interactive, let line = prompt("Does \(d.address) show \(String(format: "%06u", key))? [y/N] ") else {
                printError("The device asks to confirm passkey \(String(format: "%06u", key)): pass --yes to accept.")
                return .reject
            }
            return line.lowercased().hasPrefix("y") ? .accept : .reject
        case let .authorization(d), let .authorizeService(d, _):
            if yes { return .accept }
            guard interactive, let line = prompt("Allow \(d.address) to pair? [y/N] ") else {
                printError("The device asks for authorisation: pass --yes to accept.")
                return .reject
            }
            return line.lowercased().hasPrefix("y") ? .accept : .reject
        case let .displayPasskey(d, key, entered):
            printError("Type \(String(format: "%06u", key)) on \(d.address) (\(entered) digits entered).")
            return .accept
        case let .displayPinCode(d, code):
            printError("Type PIN \(code) on \(d.address).")
            return .accept
        case .cancel:
            printError("bluetoothd cancelled the request.")
            return .accept
        case .release:
            return .accept
        }
    }

    static func prompt(_ text: String) -> String? {
        FileHandle.standardError.write(Data(text.utf8))
        return readLine()?.trimmingCharacters(in: .whitespaces)
    }
}

struct UnpairCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unpair", abstract: "Remove a device and its pairing keys.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String

    func run() async throws {
        try await deviceAction(options, address, json: ["removed": true], text: { "Removed \($0.address)." }) {
            try await $0.removeDevice($1.id)
        }
    }
}

struct TrustCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "trust", abstract: "Trust a device (it may connect without asking).")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    func run() async throws { try await setTrust(options, address, true) }
}

struct UntrustCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "untrust", abstract: "Stop trusting a device.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    func run() async throws { try await setTrust(options, address, false) }
}

private func setTrust(_ options: BlueZOptions, _ address: String, _ on: Bool) async throws {
    try await deviceAction(options, address, json: ["trusted": on], text: { "\($0.address) \(on ? "trusted" : "no longer trusted")." }) {
        try await $0.setTrusted(on, device: $1.id)
    }
}

/// The one-shot device commands: find the device, ask bluetoothd, report
/// (`{"address": …} + json` or `text`).
private func deviceAction(
    _ options: BlueZOptions, _ address: String, json: [String: Any], text: (Device) -> String,
    _ action: (BlueZClient, Device) async throws -> Void
) async throws {
    try await runReporting {
        let client = try await options.client()
        let (_, device) = try options.device(address, of: client)
        do { try await action(client, device) } catch { throw CLIError(error, device: device) }
        var object = json
        object["address"] = device.address.description
        out(options.json ? jsonLine(object) : text(device))
    }
}

/// A characteristic chosen by UUID on a connected device.
private func characteristic(_ options: BlueZOptions, _ client: BlueZClient, _ address: String, _ uuid: String) throws -> (Device, GATTCharacteristic) {
    let (_, device) = try options.device(address, of: client)
    guard device.connected else { throw CLIError("\(device.address) is not connected: run `blecompanion connect \(device.address)` first.") }
    guard let c = client.mirror.snapshot().characteristic(uuid, on: device.id) else {
        let known = client.mirror.snapshot().characteristics.values.filter { $0.id.device == device.id }.map { BluetoothUUID.short($0.uuid) }.sorted()
        throw CLIError("\(device.address) has no characteristic \(uuid) (it has: \(known.isEmpty ? "none resolved yet" : known.joined(separator: ", "))).")
    }
    return (device, c)
}

private func printValue(_ value: [UInt8], _ c: GATTCharacteristic, json: Bool, extra: [String: Any] = [:], profile: DeviceProfile? = nil) {
    if let profile, let field = profile.gattField(service: "", characteristic: c.uuid) {
        // The device's profile reads this characteristic (docs/PROFILES.md).
        switch Result(catching: { () throws(DecodeError) in try profile.decodeCharacteristic(field, value) }) {
        case let .success(m):
            if json {
                var o: [String: Any] = ["uuid": c.uuid, "value": Hex.string(value), "profile": profile.name]
                o["decoded"] = (try? JSONSerialization.jsonObject(with: Data(DecodeOutput.json(m).utf8))) ?? NSNull()
                for (k, v) in extra { o[k] = v }
                out(jsonLine(o))
            } else {
                let text = readingsText([m]).isEmpty ? m.fields.map { "\($0.0)=\(DecodeOutput.fieldText($0.1))" }.joined(separator: ", ") : readingsText([m])
                out("\(Hex.string(value))  → \(text)")
            }
        case let .failure(e):
            out(json ? jsonLine(["uuid": c.uuid, "value": Hex.string(value), "error": e.description]) : "\(Hex.string(value))  → (profile \(profile.name): \(e.description))")
        }
        return
    }
    let decoded = (try? BluetoothUUID(parsing: c.uuid)).flatMap { try? GATTDecoder.decode(characteristic: $0, value: value) }
    if json {
        var o: [String: Any] = ["uuid": c.uuid, "value": Hex.string(value)]
        if let decoded { o["decoded"] = (try? JSONSerialization.jsonObject(with: Data(decoded.jsonString.utf8))) ?? NSNull() }
        for (k, v) in extra { o[k] = v }
        out(jsonLine(o))
    } else {
        out("\(Hex.string(value))\(decoded.map { "  → " + gattText($0) } ?? "")")
    }

}

struct ReadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "read", abstract: "Read a characteristic and decode its value.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Argument(help: "The characteristic UUID (e.g. 2a19 or the full form).") var uuid: String
    @Option(help: "Read from this byte offset.") var offset: UInt16 = 0

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            let (d, c) = try characteristic(options, client, address, uuid)
            let value: [UInt8]
            do { value = try await client.readValue(c.id, offset: offset) } catch { throw CLIError(error) }
            printValue(value, c, json: options.json, profile: profileOf(d))
        }
    }
}

struct WriteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "write", abstract: "Write a value (hex) to a characteristic.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Argument(help: "The characteristic UUID.") var uuid: String
    @Argument(help: "The value as hex bytes, e.g. 01ff or \"01 ff\".") var value: String
    @Flag(help: "Write without response (a write command).") var withoutResponse = false
    @Option(help: "Write at this byte offset.") var offset: UInt16 = 0

    func validate() throws { _ = try DecodeArguments.hex(value) }

    func run() async throws {
        try await runReporting {
            let bytes = try DecodeArguments.hex(value)
            let client = try await options.client()
            let (_, c) = try characteristic(options, client, address, uuid)
            do {
                try await client.writeValue(c.id, bytes, offset: offset, type: withoutResponse ? .command : .request)
            } catch { throw CLIError(error) }
            out(options.json ? jsonLine(["uuid": c.uuid, "written": Hex.string(bytes)]) : "Wrote \(bytes.count) bytes to \(BluetoothUUID.short(c.uuid)).")
        }
    }
}

struct NotifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notify", abstract: "Stream a characteristic's notifications, decoded.",
        discussion: """
            Runs until --count values, --duration seconds or Ctrl-C; notifications are stopped on the way out. \
            When the device disconnects or bluetoothd restarts, it connects again once the device is there \
            (retrying every 1 to 30 s) and carries on. \
            With --acquire the values come through AcquireNotify's socket instead of a D-Bus signal each \
            (bleak's default); that ends when the device disconnects.
            """)
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Argument(help: "The characteristic UUID (e.g. 2a37).") var uuid: String
    @Option(help: "Stop after this many values.") var count: Int?
    @Option(parsing: .unconditional, help: "Stop after this many seconds.") var duration: Double?
    @Flag(help: "Receive through AcquireNotify (a socket) instead of StartNotify.") var acquire = false

    func validate() throws {
        if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        try checkSeconds(duration, "--duration")
    }

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            let (d, c) = try characteristic(options, client, address, uuid)
            let profile = profileOf(d)
            guard c.canNotify else { throw CLIError("characteristic \(BluetoothUUID.short(c.uuid)) does not notify (flags: \(c.flags.sorted().joined(separator: ", "))).") }
            if acquire { return try await acquired(client, c) }
            let stream: AsyncStream<NotificationEvent>
            // Paused when the link or bluetoothd goes; connected again when
            // the device is there (after bluetoothd restarts, too).
            do { stream = try await client.notifications(c.id, reconnect: true) } catch { throw CLIError(error) }
            let stop = StopSignal(after: duration)
            let json = options.json, limit = count
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    var seen = 0
                    for await event in stream {
                        switch event {
                        case let .value(v):
                            printValue(v, c, json: json, profile: profile)
                            seen += 1
                            if let limit, seen >= limit { return }
                        case let .paused(reason):
                            printError("Notifications paused: \(reason.description); connecting again when the device is there…")
                        case .resumed:
                            printError("Notifications resumed.")
                        }
                    }
                }
                group.addTask { await stop.wait() }
                await group.next()
                group.cancelAll()
            }
            try? await client.stopNotify(c.id)
        }
    }

    /// AcquireNotify: one datagram per value on a socket read by a thread of
    /// its own (a blocking recv, no polling); bluetoothd closes it when the
    /// device disconnects, which ends the command with a message.
    private func acquired(_ client: BlueZClient, _ c: GATTCharacteristic) async throws {
        let socket: UnixFileDescriptor, mtu: UInt16
        do { (socket, mtu) = try await client.acquireNotify(c.id) } catch { throw CLIError(error) }
        let reader = AcquiredSocketReader(fd: socket.take(), packetSize: Int(mtu) + 1)
        let stop = StopSignal(after: duration)
        let json = options.json, limit = count
        let profile = client.mirror.snapshot().devices[c.id.device].flatMap(profileOf)
        let outcome = await withTaskGroup(of: Int?.self) { group -> Int? in
            group.addTask {
                var seen = 0
                for await value in reader.values {
                    printValue(value, c, json: json, profile: profile)
                    seen += 1
                    if let limit, seen >= limit { return seen }
                }
                return nil  // hung up
            }
            group.addTask { await stop.wait(); return 0 }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        reader.stop()
        if outcome == nil {
            throw CLIError("notifications of \(BluetoothUUID.short(c.uuid)) ended: bluetoothd closed the AcquireNotify socket (the device disconnected)")
        }
    }
}

/// Reads an acquired GATT socket (SOCK_SEQPACKET) on a thread of its own.
final class AcquiredSocketReader: Sendable {
    let values: AsyncStream<[UInt8]>
    private let fd: Int32
    // Open until the reader thread closes it; stop() only shuts it down,
    // under the same lock, so it never touches a number reused meanwhile.
    private let open = Lock(true)

    init(fd: Int32, packetSize: Int) {
        self.fd = fd
        // bluetoothd hands the socket out non-blocking; this thread waits in recv.
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) }
        let (stream, continuation) = AsyncStream<[UInt8]>.makeStream(bufferingPolicy: .bufferingNewest(1024))
        values = stream
        Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: max(packetSize, 24))
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n > 0 {
                    continuation.yield(Array(buffer[0..<n]))
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    break
                }
            }
            continuation.finish()
            open.withLock { isOpen in
                isOpen = false
                close(fd)
            }
        }.start()
    }

    /// Wakes the reader (shutdown); it then closes the socket, which tells
    /// bluetoothd to stop the notifications.
    func stop() {
        open.withLock { isOpen in
            if isOpen { _ = shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }
}
