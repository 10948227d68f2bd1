import ArgumentParser
import BLEParsing
import BlueZ
import DBus
import Domain
import Foundation
import Vocabulary

/// Options every bluetoothd command shares.
struct BlueZOptions: ParsableArguments {
    @Option(help: "Which bus bluetoothd is on: system (default), session, or a D-Bus address such as unix:path=/run/x.")
    var bus: String = "system"

    @Option(help: "The adapter to use, e.g. hci0 (default: the first one).")
    var adapter: String?

    @Flag(help: "Print JSON (JSON Lines for streams) instead of text.")
    var json = false

    @OptionGroup var state: StateOptions

    func bindkeys() throws -> [BluetoothAddress: [UInt8]] { try state.bindkeys() }

    func validate() throws {
        if let adapter { try checkAdapterName(adapter) }
        try checkBusName(bus)
    }

    var busAddress: DBusBusAddress { DBusBusAddress(parsing: bus) }

    /// Connects and mirrors bluetoothd, turning every failure into a message
    /// that says what to do.
    func client() async throws -> BlueZClient {
        state.loadProfiles()
        do {
            let client = try await BlueZClient.connect(to: busAddress)
            guard client.mirror.snapshot().available else {
                if let problem = client.mirror.problem { throw CLIError(problem) }
                throw CLIError("bluetoothd is not running on the \(bus) bus (org.bluez has no owner). Start it with `sudo systemctl start bluetooth`, or run `blecompanion simulate` for a simulated one.")
            }
            return client
        } catch let e as BlueZError {
            if case let .dbus(.connectionFailed(address, reason)) = e {
                throw CLIError("cannot reach the \(bus) bus at \(address): \(reason). Is D-Bus running? See `blecompanion doctor`.")
            }
            throw CLIError(e)
        }
    }

    /// The adapter chosen by --adapter, which must be powered for radio work.
    func adapter(of client: BlueZClient, requirePowered: Bool = true) throws -> Adapter {
        let a: Adapter
        do { a = try client.adapter(adapter) } catch { throw CLIError(error) }
        if requirePowered && a.powered == false {
            throw CLIError("adapter \(a.id.name) is powered off. Turn it on with `bluetoothctl power on` (or check rfkill: `rfkill list`).")
        }
        return a
    }

    /// The device with `address` that bluetoothd knows on the adapter.
    func device(_ address: String, of client: BlueZClient) throws -> (Adapter, Device) {
        let a = try adapter(of: client, requirePowered: false)
        let addr: BluetoothAddress
        do { addr = try BluetoothAddress(address) } catch { throw CLIError(error) }
        do {
            return (a, try client.device(addr, on: a.id))
        } catch {
            throw CLIError(error)
        }
    }
}

/// An error for the user: printed as `Error: <message>`, exit status 1.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ message: String) { description = message }
    init(_ error: any Error) {
        if let e = error as? BlueZError { description = e.description } else { description = "\(error)" }
    }

    /// For a call on `device`: bluetoothd answers a method call on a device
    /// it has just removed with D-Bus's "Method … doesn't exist", which says
    /// nothing to a user. It removes a device it has not heard for a while
    /// (TemporaryTimeout, 30 s by default) unless it is paired or connected.
    init(_ error: any Error, device: Device) {
        if case .notFound? = error as? BlueZError {
            self.init("bluetoothd no longer knows \(device.address): it forgets a device it has not heard for about "
                      + "30 s unless it is paired or connected. Scan (`blecompanion scan`) and try again.")
        } else {
            self.init(error)
        }
    }
}

/// Runs a command body, printing CLIError/BlueZError as one line and
/// exiting 1 (argument errors keep ArgumentParser's own status).
func runReporting(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let e as CLIError {
        printError("Error: \(e.description)")
        throw ExitCode(1)
    } catch let e as BlueZError {
        printError("Error: \(e.description)")
        throw ExitCode(1)
    }
}

/// One JSON object per line, keys sorted (stable output for scripts).
func jsonLine(_ object: [String: Any]) -> String {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return "{}" }
    return String(decoding: data, as: UTF8.self)
}

/// Decodes what a device advertises (the domain layer's glue to the parser).
func decodedAdvertisement(_ device: Device, bindkey: [UInt8]? = nil) -> [AdvertisementModel] {
    AdvertisementReadings.decode(device, bindkey: bindkey, profiles: cliProfiles.profiles)
}

func readingsText(_ models: [AdvertisementModel]) -> String {
    models.flatMap { m in
        m.readings.map { r in
            var s = "\(DecodeOutput.readingName(r))=\(DecodeOutput.readingValue(r.value))"
            if let u = r.unit, !u.isEmpty { s += " \(u)" }
            return s
        }
    }.joined(separator: ", ")
}

func readingsJSON(_ models: [AdvertisementModel]) -> [[String: Any]] {
    models.compactMap { m in
        (try? JSONSerialization.jsonObject(with: Data(m.jsonString.utf8))) as? [String: Any]
    }
}

/// A device as one JSON object.
func deviceJSON(_ d: Device, battery: UInt8? = nil, bindkey: [UInt8]? = nil) -> [String: Any] {
    var o: [String: Any] = [
        "address": d.address.description, "adapter": d.id.adapter.name, "paired": d.paired, "trusted": d.trusted,
        "connected": d.connected, "blocked": d.blocked, "services_resolved": d.servicesResolved,
    ]
    if let v = d.name { o["name"] = v }
    if let v = d.alias { o["alias"] = v }
    if let v = d.addressType { o["address_type"] = v }
    if let v = d.rssi { o["rssi"] = Int(v) }
    if let v = d.txPower { o["tx_power"] = Int(v) }
    if let v = d.appearance { o["appearance"] = Int(v) }
    if let v = d.icon { o["icon"] = v }
    if let battery { o["battery"] = Int(battery) }
    if !d.uuids.isEmpty { o["uuids"] = d.uuids }
    if !d.manufacturerData.isEmpty {
        o["manufacturer_data"] = Dictionary(uniqueKeysWithValues: d.manufacturerData.map { (String(format: "0x%04x", $0.key), Hex.string($0.value)) })
    }
    if !d.serviceData.isEmpty { o["service_data"] = d.serviceData.mapValues(hexString) }
    let readings = readingsJSON(decodedAdvertisement(d, bindkey: bindkey))
    if !readings.isEmpty { o["decoded"] = readings }
    if !d.problems.isEmpty { o["problems"] = d.problems }
    return o
}

/// One line per device for humans.
func deviceLine(_ d: Device, battery: UInt8? = nil, bindkey: [UInt8]? = nil) -> String {
    var parts = ["\(d.address)", d.displayName == d.address.description ? "(no name)" : d.displayName]
    if let r = d.rssi { parts.append("RSSI \(r) dBm") }
    var flags: [String] = []
    if d.paired { flags.append("paired") }
    if d.trusted { flags.append("trusted") }
    if d.connected { flags.append("connected") }
    if d.blocked { flags.append("blocked") }
    if !flags.isEmpty { parts.append("[" + flags.joined(separator: ",") + "]") }
    if let battery { parts.append("battery \(battery) %") }
    let readings = readingsText(decodedAdvertisement(d, bindkey: bindkey))
    if !readings.isEmpty { parts.append("— " + readings) }
    return parts.joined(separator: "  ")
}

/// Writes one line to standard output at once (no stdio buffering, so
/// streamed lines reach a pipe immediately).
/// When the reader has gone (a closed pipe), the process is asked to stop
/// with SIGTERM, so commands that started a bus or simulator clean up.
func out(_ line: String) {
    do {
        try FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
    } catch {
        raise(SIGTERM)
    }
}
