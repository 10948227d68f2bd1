import Bounds
import ArgumentParser
import BLEParsing
import BlueZ
import Domain
import DBus
import Foundation
import Locking
import Vocabulary

struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "List the devices bluetoothd knows (discovered, paired or connected).")
    @OptionGroup var options: BlueZOptions
    @Flag(help: "Only paired devices.") var paired = false
    @Flag(help: "Only connected devices.") var connected = false

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            let adapter = try options.adapter(of: client, requirePowered: false)
            let snap = client.mirror.snapshot()
            let keys = try options.bindkeys()
            let list = snap.devices(on: adapter.id).filter { (!paired || $0.paired) && (!connected || $0.connected) }
            for d in list {
                let battery = snap.batteries[d.id], key = keys[d.address]
                out(options.json ? jsonLine(deviceJSON(d, battery: battery, bindkey: key)) : deviceLine(d, battery: battery, bindkey: key))
            }
            if list.isEmpty && !options.json { out("No devices on \(adapter.id.name). Run `blecompanion scan` to discover some.") }
        }
    }
}

struct ScanCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scan",
        abstract: "Discover devices and stream them with their decoded advertisements.",
        discussion: "Runs until --duration has passed or Ctrl-C; stops discovery on the way out.")
    @OptionGroup var options: BlueZOptions
    @Option(parsing: .unconditional, help: "Stop after this many seconds (default: run until Ctrl-C).") var duration: Double?
    @Option(help: "Only devices at least this strong (dBm, e.g. -80).") var rssi: Int16?
    @Option(help: "Only devices advertising this service UUID (repeatable).") var uuid: [String] = []
    @Option(help: "le, bredr or auto.") var transport: String?
    @Flag(help: "Report every advertisement, not only changes.") var duplicates = false

    func validate() throws {
        try checkSeconds(duration, "--duration")
        if let transport, DiscoveryFilter.Transport(rawValue: transport) == nil {
            throw ValidationError("--transport must be le, bredr or auto, got \"\(transport)\"")
        }
    }

    func run() async throws {
        try await runReporting {
            // First: Ctrl-C from here on ends the scan cleanly (exit 0),
            // whenever it comes.
            let stop = StopSignal(after: duration)
            let client = try await options.client()
            let adapter = try options.adapter(of: client)
            let keys = try options.bindkeys()
            // Kept per device, not as a queue of every event: when our
            // output is slower than the advertisements, a device's latest
            // state replaces its earlier one (counted, said at the end).
            let backlog = ScanBacklog(adapter: adapter.id)
            let subscription = client.mirror.events(bufferCapacity: 1, where: backlog.note)
            // No UUIDs for bluetoothd: its filter never matches service-data
            // UUIDs (BTHome's fcd2 is only that); `passes` matches both here.
            let filter = DiscoveryFilter(rssi: rssi,
                                         transport: transport.flatMap(DiscoveryFilter.Transport.init(rawValue:)) ?? .le,
                                         duplicateData: duplicates)
            // Devices already in range (another client was discovering) are
            // reported first; everything after comes from the event stream.
            let before = client.mirror.snapshot().devices(on: adapter.id).filter { $0.rssi != nil }
            let session: DiscoverySession
            do { session = try await client.discover(adapter: adapter.id, filter: filter) } catch {
                // bluetoothd answers NotReady when the adapter is not powered:
                // it was switched off between our look and StartDiscovery.
                if case .bluez(.notReady, _)? = error as? BlueZError {
                    throw CLIError("adapter \(adapter.id.name) was powered off as the scan started (bluetoothd: NotReady). "
                                   + "Turn it on with `bluetoothctl power on` and scan again.")
                }
                throw CLIError(error)
            }
            if !options.json { printError("Scanning on \(adapter.id.name)… (Ctrl-C to stop)") }
            let reported = ReportedDevices()
            for d in before where report(d, client, keys: keys) { reported.insert(d.id) }
            let connection = client.connection
            // True when the bus connection went away (the bus daemon stopped
            // or restarted): no discovery can come back on it, so the scan
            // ends with exit status 69 instead of waiting for ever.
            let busLost = await withTaskGroup(of: Bool.self) { group -> Bool in
                group.addTask {
                    await connection.disconnected()
                    return !Task.isCancelled
                }
                group.addTask {
                    var away = false
                    for await _ in backlog.wakes {
                        while let item = backlog.pop() {
                            switch item {
                            case let .seen(id):
                                if let d = client.mirror.snapshot().devices[id], report(d, client, keys: keys) { reported.insert(id) }
                            case let .lost(id, seenAgain):
                                // Only devices this scan reported (the filters apply to "lost" too).
                                if reported.remove(id) {
                                    out(options.json ? jsonLine(["address": id.address.description, "event": "lost"]) : "\(id.address)  lost")
                                }
                                if seenAgain, let d = client.mirror.snapshot().devices[id], report(d, client, keys: keys) {
                                    reported.insert(id)
                                }
                            case .notice(.interfacesRemoved):
                                printError("adapter \(adapter.id.name) was removed; waiting for it to return…")
                            case .notice(.interfacesAdded):
                                printError("adapter \(adapter.id.name) is back; scanning again.")
                            case .notice(.availability(false)):
                                away = true
                                printError("bluetoothd went away; waiting for it to return…")
                            case .notice(.availability(true)) where away:
                                away = false
                                printError("bluetoothd is back; scanning again.")
                            case .notice:
                                break
                            }
                        }
                    }
                    return false
                }
                group.addTask { await stop.wait(); return false }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
            withExtendedLifetime(subscription) {}
            let merged = backlog.merged
            if merged > 0 {
                printError("\(merged) change\(merged == 1 ? " was" : "s were") not printed: standard output was slower than the advertisements, so each device's latest state was printed instead of every change.")
            }
            let notices = backlog.droppedNotices
            if notices > 0 {
                printError("\(notices) adapter or bluetoothd notice\(notices == 1 ? " was" : "s were") not printed (more than \(ScanBacklog.maxNotices) waited for a slow output).")
            }
            if busLost {
                printError("Error: lost the connection to the D-Bus bus (the bus daemon stopped or restarted). See `blecompanion doctor`.")
                throw ExitCode(69)
            }
            await session.stop()
        }
    }

    /// The discovery filter applied to what we print too: bluetoothd filters
    /// only new reports, not devices it already knew.
    private func passes(_ d: Device) -> Bool {
        if let rssi, let r = d.rssi, r < rssi { return false }
        if !uuid.isEmpty {
            let wanted = Set(uuid.map(BlueZSnapshot.normalizeUUID))
            let offered = Set(d.uuids.map { $0.lowercased() }).union(d.serviceData.keys)
            if wanted.isDisjoint(with: offered) { return false }
        }
        return true
    }

    /// Prints the device if it passes the filters; says whether it did.
    private func report(_ d: Device, _ client: BlueZClient, keys: [BluetoothAddress: [UInt8]]) -> Bool {
        guard passes(d) else { return false }
        let battery = client.mirror.snapshot().batteries[d.id], key = keys[d.address]
        out(options.json ? jsonLine(deviceJSON(d, battery: battery, bindkey: key)) : deviceLine(d, battery: battery, bindkey: key))
        return true
    }
}

struct InfoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info", abstract: "Show a device's properties and GATT tree with decoded values.")
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address, e.g. AA:BB:CC:DD:EE:FF.") var address: String
    @Flag(help: "Do not read characteristic values (show only cached ones).") var noRead = false

    func run() async throws {
        try await runReporting {
            let client = try await options.client()
            let (_, device) = try options.device(address, of: client)
            let snap = client.mirror.snapshot()
            var tree: [[String: Any]] = []
            var lines: [String] = []
            lines.append("Device \(device.address) (\(device.addressType ?? "public"))")
            // Every property as bluetoothd has it now (the mirror keeps only the typed model).
            let properties = try await DBusProxy(connection: client.connection, destination: BlueZInterface.service,
                                                 path: device.id.path, interface: BlueZInterface.device).allProperties()
            for (k, v) in properties.sorted(by: { $0.key < $1.key }) { lines.append("  \(k): \(propertyText(v))") }
            if let b = snap.batteries[device.id] { lines.append("  Battery: \(b) %") }
            let decoded = decodedAdvertisement(device, bindkey: try options.bindkeys()[device.address])
            let profile = cliProfiles.profiles.profile(for: AdvertisementReadings.advertisement(of: device))
            if let profile { lines.append("  Profile: \(profile.name)") }
            if !decoded.isEmpty { lines.append("  Decoded advertisement: \(readingsText(decoded))") }
            for entry in snap.gattTree(of: device.id) {
                let s = entry.service
                lines.append("  Service \(BluetoothUUID.short(s.uuid))\(sigName(s.uuid)) \(s.primary ? "(primary)" : "(secondary)")")
                var chars: [[String: Any]] = []
                for (c, descriptors) in entry.characteristics {
                    var value = c.value
                    if !noRead && c.canRead && device.connected {
                        value = (try? await client.readValue(c.id)) ?? value
                    }
                    var line = "    Characteristic \(BluetoothUUID.short(c.uuid))\(sigName(c.uuid)) [\(c.flags.sorted().joined(separator: ", "))]"
                    var cj: [String: Any] = ["uuid": c.uuid, "flags": c.flags.sorted(), "path": c.id.path.rawValue]
                    if let value {
                        line += " = \(Hex.string(value))"
                        cj["value"] = Hex.string(value)
                        if let profile, let field = profile.gattField(service: s.uuid, characteristic: c.uuid) {
                            // The device's profile reads this characteristic (docs/PROFILES.md).
                            switch Result(catching: { () throws(DecodeError) in try profile.decodeCharacteristic(field, value) }) {
                            case let .success(m):
                                line += "  → \(readingsText([m]).isEmpty ? m.fields.map { "\($0.0)=\(DecodeOutput.fieldText($0.1))" }.joined(separator: ", ") : readingsText([m]))"
                                cj["decoded"] = (try? JSONSerialization.jsonObject(with: Data(DecodeOutput.json(m).utf8))) ?? NSNull()
                            case let .failure(e): line += "  → (profile \(profile.name): \(e.description))"
                            }
                        } else if let g = try? GATTDecoder.decode(characteristic: try BluetoothUUID(parsing: c.uuid), value: value) {
                            line += "  → \(gattText(g))"
                            cj["decoded"] = (try? JSONSerialization.jsonObject(with: Data(g.jsonString.utf8))) ?? NSNull()
                        }
                    }
                    lines.append(line)
                    for d in descriptors { lines.append("      Descriptor \(BluetoothUUID.short(d.uuid))\(sigName(d.uuid))\(d.value.map { " = " + Hex.string($0) } ?? "")") }
                    chars.append(cj)
                }
                tree.append(["uuid": s.uuid, "primary": s.primary, "characteristics": chars])
            }
            if options.json {
                var o = deviceJSON(device, battery: snap.batteries[device.id], bindkey: try options.bindkeys()[device.address])
                o["gatt"] = tree
                out(jsonLine(o))
            } else {
                if tree.isEmpty { lines.append(device.connected ? "  (GATT services not resolved yet)" : "  (connect to see the GATT services)") }
                out(lines.joined(separator: "\n"))
            }
        }
    }
}

func propertyText(_ v: DBusValue) -> String {
    switch v.unwrapped {
    case let .string(s): return s
    case let .boolean(b): return b ? "yes" : "no"
    case let .int16(n): return "\(n)"
    case let .uint16(n): return String(format: "0x%04x", n)
    case let .uint32(n): return String(format: "0x%08x", n)
    case let .byte(n): return "\(n)"
    case let .objectPath(p): return p.rawValue
    case let .bytes(b): return Hex.string(b)
    case let .array(_, items): return items.map(propertyText).joined(separator: ", ")
    case let .dictionary(_, _, entries): return entries.map { "\(propertyText($0.key)): \(propertyText($0.value))" }.joined(separator: "; ")
    default: return "\(v.unwrapped)"
    }
}

func sigName(_ uuid: String) -> String {
    guard let u = try? BluetoothUUID(parsing: uuid), let name = AssignedNumbers.name(for: u) else { return "" }
    return " (\(name))"
}

func gattText(_ g: GATTValue) -> String {
    if g.readings.isEmpty {
        let fields = g.fields.map { "\($0.0)=\(DecodeOutput.fieldText($0.1))" }
        return fields.isEmpty ? g.modelName : fields.joined(separator: ", ")
    }
    return g.readings.map { r in
        var s = "\(DecodeOutput.readingName(r))=\(DecodeOutput.readingValue(r.value))"
        if let u = r.unit, !u.isEmpty { s += " \(u)" }
        return s
    }.joined(separator: ", ")
}

/// The devices a scan has printed, so that "lost" is said only of them.
final class ReportedDevices: Sendable {
    private let ids = Lock<Set<DeviceID>>([])
    func insert(_ id: DeviceID) { ids.withLock { _ = $0.insert(id) } }
    func remove(_ id: DeviceID) -> Bool { ids.withLock { $0.remove(id) != nil } }
}

/// Completes after `seconds`, or at SIGINT/SIGTERM (whichever first). The
/// signals are caught from the moment it is made (``StopSignals``).
final class StopSignal: Sendable {
    private let seconds: Double?

    init(after seconds: Double?) {
        self.seconds = seconds
        StopSignals.install()
    }

    func wait() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { _ = await StopSignals.wait() }
            if let seconds {
                group.addTask { try? await Task.sleep(for: Bounds.duration(seconds: seconds)) }
            }
            await group.next()
            group.cancelAll()
        }
    }
}
