import ArgumentParser
import BLEParsing
import DBus
import Dispatch
import Foundation

/// `blecompanion demo`: runs with no Bluetooth hardware. It reports what the
/// doctor finds on this host, then starts a private dbus-daemon with a
/// small BlueZ-shaped object tree (an ObjectManager, an adapter and three
/// RuuviTag-like devices whose RSSI and manufacturer data change), follows
/// it through the D-Bus layer the way the product follows bluetoothd, and
/// decodes each advertisement. Everything it starts is stopped on exit,
/// including on Ctrl-C and SIGTERM.
///
/// (The BlueZ simulator and the dashboard replace this preview in later work.)
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run a demonstration on a private bus, with no Bluetooth hardware.",
        discussion: "Exit status: 0 when the demonstration ran; 1 when it could not start (e.g. no dbus-daemon)."
    )

    @Option(help: "How long the devices keep advertising, in seconds.")
    var duration: Double = 5

    @Flag(help: "Skip the host check (doctor) at the start.")
    var skipDoctor = false

    func validate() throws {
        guard duration > 0, duration <= 3600 else {
            throw ValidationError("--duration must be between 0 and 3600 seconds, got \(duration)")
        }
    }

    func run() async throws {
        if !skipDoctor {
            print("== This host (blecompanion doctor) ==")
            var findings = await localFindings(host: .live)
            findings.append(contentsOf: await busFindings(bus: "system"))
            for f in findings where f.status != .skipped {
                print("  \(f.status.rawValue.uppercased().padding(toLength: 8, withPad: " ", startingAt: 0)) \(f.summary)")
            }
            print("  (run `blecompanion doctor` for details and fixes)\n")
        }

        let bus: PrivateBus
        do {
            bus = try PrivateBus.start()
        } catch {
            printError("demo: \(error)")
            throw ExitCode(1)
        }
        let stopper = SignalStopper(bus: bus)
        defer {
            stopper.cancel()
            bus.stop()
        }
        print("== A private bus at \(bus.address) ==")

        let service = try await DBusConnection.connect(to: .address(bus.address))
        _ = try await service.requestName("org.bluez")
        let manager = try await service.exportObjectManager(at: .root, includeStandardInterfaces: true)
        let adapter = try await service.export("/org/bluez/hci0", interfaces: [
            DBusExportedInterface(DBusInterfaceDescription("org.bluez.Adapter1", properties: [
                DBusPropertyDescription("Address", .string), DBusPropertyDescription("Alias", .string, access: .readwrite),
                DBusPropertyDescription("Powered", .boolean, access: .readwrite), DBusPropertyDescription("Discovering", .boolean),
            ]), values: ["Address": .string("00:1A:7D:DA:71:13"), "Alias": .string("demo-adapter"),
                         "Powered": .boolean(true), "Discovering": .boolean(true)]),
        ])
        let tags = DemoTag.all
        var devices: [DBusObjectRegistration] = []
        for tag in tags {
            devices.append(try await service.export(tag.path, interfaces: [tag.exported(sequence: 0)]))
        }

        // The client side: subscribe first, then enumerate (no race).
        let client = try await DBusConnection.connect(to: .address(bus.address))
        let changes = try await client.signals(matching: DBusMatchRule(
            sender: "org.bluez", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            pathNamespace: "/org/bluez"))
        let objects = try await client.managedObjects(destination: "org.bluez")
        for (path, interfaces) in objects.sorted(by: { $0.key < $1.key }) {
            let names = interfaces.keys.filter { $0.hasPrefix("org.bluez.") }.sorted().joined(separator: ", ")
            print("  \(path)  [\(names)]")
        }
        print("\n== Advertisements for \(Int(duration)) s (RSSI and decoded manufacturer data) ==")

        let ticks = max(1, Int(duration * 2))
        let producer = Task {
            for tick in 1...ticks {
                try await Task.sleep(for: .milliseconds(500))
                for (i, tag) in tags.enumerated() {
                    let update = tag.exported(sequence: tick).values
                    devices[i].setProperties("org.bluez.Device1", update.filter { $0.key == "RSSI" || $0.key == "ManufacturerData" })
                }
            }
        }
        var seen = 0
        let expected = ticks * tags.count
        let names = Dictionary(uniqueKeysWithValues: tags.map { ($0.path, $0.name) })
        for try await message in changes {
            guard let path = message.path, message.body.count == 3 else { continue }
            let props: [String: DBusValue] = (try? message.argument(1)) ?? [:]
            var line = "  \(names[path] ?? path.rawValue)"
            if case let .int16(rssi)? = props["RSSI"] { line += "  RSSI \(rssi) dBm" }
            if let data = props["ManufacturerData"], let companies: [UInt16: DBusValue] = try? data.decode() {
                for (company, value) in companies {
                    guard case let .bytes(bytes) = value else { continue }
                    do {
                        let model = try AdvertisementDecoder.decodeManufacturerData(companyID: company, data: bytes)
                        let shown: Set<ReadingKind> = [.temperature, .humidity, .pressure, .voltage]
                        line += "  \(model.modelName): "
                            + model.readings.filter { shown.contains($0.kind) }.map(\.description).joined(separator: ", ")
                    } catch {
                        line += "  (0x\(String(company, radix: 16)): \(error))"
                    }
                }
            }
            print(line)
            seen += 1
            if seen == expected { break }
        }
        try await producer.value
        print("\nReceived \(seen) property changes through the D-Bus layer; stopping the private bus.")
        _ = (manager, adapter)
        client.close()
        service.close()
    }
}

/// One simulated RuuviTag (data format 5) on the demo bus.
struct DemoTag {
    let name: String
    let address: String
    let baseTemperature: Double
    let baseHumidity: Double
    let baseRSSI: Int16

    static let all = [
        DemoTag(name: "Ruuvi Kitchen", address: "C0:FE:00:00:00:01", baseTemperature: 21.5, baseHumidity: 45, baseRSSI: -52),
        DemoTag(name: "Ruuvi Fridge", address: "C0:FE:00:00:00:02", baseTemperature: 4.2, baseHumidity: 71, baseRSSI: -67),
        DemoTag(name: "Ruuvi Balcony", address: "C0:FE:00:00:00:03", baseTemperature: -3.1, baseHumidity: 88, baseRSSI: -81),
    ]

    var path: ObjectPath {
        (try? ObjectPath("/org/bluez/hci0/dev_" + address.replacingOccurrences(of: ":", with: "_"))) ?? .root
    }

    /// Ruuvi data format 5 (RAWv2), big-endian fields: temperature in
    /// 0.005 °C, humidity in 0.0025 %, pressure in Pa − 50000, acceleration
    /// in mG, power (battery mV − 1600) << 5 | (tx dBm + 40) / 2, movement
    /// counter, sequence number, MAC.
    func payload(sequence: Int) -> [UInt8] {
        let wobble = Double(sequence % 7) * 0.05
        let temperatureSteps: Double = ((baseTemperature + wobble) / 0.005).rounded()
        let humiditySteps: Double = ((baseHumidity - wobble) / 0.0025).rounded()
        let temperature = Int16(temperatureSteps)
        let humidity = UInt16(humiditySteps)
        let pressure = UInt16(50_480 + sequence % 20)
        let batteryBits: UInt16 = (2_950 - 1_600) << 5
        let txBits: UInt16 = (4 + 40) / 2
        let power = batteryBits | txBits
        var bytes: [UInt8] = [0x05]
        func be16(_ v: UInt16) { bytes += [UInt8(v >> 8), UInt8(v & 0xff)] }
        be16(UInt16(bitPattern: temperature))
        be16(humidity)
        be16(pressure)
        be16(UInt16(bitPattern: 12)); be16(UInt16(bitPattern: -8)); be16(1_020)
        be16(power)
        bytes.append(UInt8(sequence % 256))
        be16(UInt16(sequence % 65_536))
        bytes += address.split(separator: ":").compactMap { UInt8($0, radix: 16) }
        return bytes
    }

    func exported(sequence: Int) -> DBusExportedInterface {
        DBusExportedInterface(DBusInterfaceDescription("org.bluez.Device1", properties: [
            DBusPropertyDescription("Address", .string), DBusPropertyDescription("Name", .string),
            DBusPropertyDescription("Alias", .string, access: .readwrite), DBusPropertyDescription("Adapter", .objectPath),
            DBusPropertyDescription("RSSI", .int16),
            DBusPropertyDescription("ManufacturerData", .dictionary(key: .uint16, value: .variant)),
        ]), values: [
            "Address": .string(address), "Name": .string(name), "Alias": .string(name),
            "Adapter": .objectPath("/org/bluez/hci0"),
            "RSSI": .int16(baseRSSI - Int16(sequence % 5)),
            "ManufacturerData": .dictionary(key: .uint16, value: .variant, [
                DBusDictEntry(.uint16(0x0499), .variant(.bytes(payload(sequence: sequence)))),
            ]),
        ])
    }
}

/// Stops the private bus and exits when SIGINT or SIGTERM arrives, so an
/// interrupted demo never leaves a dbus-daemon behind.
final class SignalStopper: @unchecked Sendable {
    // Written once in init, cancelled once; DispatchSource is thread-safe.
    private let sources: [any DispatchSourceSignal]

    init(bus: PrivateBus) {
        var made: [any DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                bus.stop()
                exit(128 + sig)
            }
            source.resume()
            made.append(source)
        }
        sources = made
    }

    func cancel() {
        for s in sources { s.cancel() }
    }
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
