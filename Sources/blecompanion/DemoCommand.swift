import ArgumentParser
import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
import Foundation
import Locking
import ScenarioFormat
import TerminalUI
import Vocabulary

/// `blecompanion demo`: runs with no Bluetooth hardware. It reports what the
/// doctor finds on this host, then starts a private dbus-daemon with the
/// BlueZ simulator on the demo scenario (a home with about ten devices) and
/// uses the product against it: a live scan with decoded advertisements,
/// then a connection to the heart-rate strap and its notifications.
/// Everything it starts is stopped on exit, including on Ctrl-C and SIGTERM.
///
/// On a terminal it opens the dashboard on the simulated home; with
/// `--text`, or when the output is not a terminal, it prints a scripted walk
/// through the same steps instead.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run a demonstration on a simulated bluetoothd, with no Bluetooth hardware.",
        discussion: "Exit status: 0 when the demonstration ran; 1 when it could not start (e.g. no dbus-daemon, scenario missing)."
    )

    @Option(parsing: .unconditional, help: "How long to scan, in seconds (at most 3600).")
    var duration: Double = 5

    @Option(help: "The scenario to simulate (default: fixtures/scenarios/demo-home.json).")
    var scenario: String?

    @Flag(help: "Skip the host check (doctor) at the start.")
    var skipDoctor = false

    @Flag(help: "Print a scripted walk-through instead of opening the dashboard (the default when the output is not a terminal).")
    var text = false

    @Option(help: "With the dashboard: the state directory for settings and readings (default: a temporary one, removed on exit).")
    var stateDir: String?

    func validate() throws {
        guard duration.isFinite, duration > 0, duration <= 3600 else {
            throw ValidationError("--duration must be between 0 and 3600 seconds, got \(duration)")
        }
    }

    func run() async throws {
        if !text && isatty(1) == 1 { return try await runDashboard() }
        if !skipDoctor {
            out("== This host (blecompanion doctor) ==")
            var findings = await localFindings(host: .live)
            findings.append(contentsOf: await busFindings(bus: "system"))
            for f in findings where f.status != .skipped {
                out("  \(f.status.rawValue.uppercased().padding(toLength: 8, withPad: " ", startingAt: 0)) \(f.summary)")
            }
            out("  (run `blecompanion doctor` for details and fixes)\n")
        }
        let path = try DemoCommand.scenarioPath(scenario)
        let loaded: Scenario
        do {
            loaded = try Scenario.load(path: path)
        } catch {
            printError("demo: \(error)")
            throw ExitCode(1)
        }
        let bus: PrivateBus
        // From here a signal is caught (not the default action), so that it
        // cannot end the process between the daemon's start and the stopper.
        StopSignals.install()
        do {
            bus = try PrivateBus.start()
        } catch {
            printError("demo: \(error)")
            throw ExitCode(1)
        }
        // A closed pipe (`demo | head`) must end in the same clean-up as Ctrl-C.
        signal(SIGPIPE, SIG_IGN)
        let stopper = SignalStopper(bus: bus)
        defer {
            stopper.cancel()
            bus.stop()
        }
        let simulator = BlueZSimulator(scenario: loaded)
        do {
            try await simulator.start(busAddress: bus.address)
        } catch {
            stopper.exitIfSignalled()
            printError("demo: the simulator could not start: \(error)")
            throw ExitCode(1)
        }
        out("== Simulated bluetoothd \"\(loaded.name)\" on a private bus ==")
        out("  DBUS_SYSTEM_BUS_ADDRESS=\(bus.address)  (bluetoothctl works against it while the demo runs)\n")
        do {
            try await showcase(address: bus.address)
        } catch let e as CLIError {
            stopper.exitIfSignalled()
            printError("demo: \(e.description)")
            await simulator.stop()
            throw ExitCode(1)
        } catch {
            stopper.exitIfSignalled()
            throw error
        }
        await simulator.stop()
        out("\nDone; the simulator and the private bus are stopped.")
    }

    /// The dashboard on a private bus with the simulator. The terminal
    /// session handles SIGINT/SIGTERM (restoring the terminal); the loop then
    /// returns and everything started here is stopped.
    private func runDashboard() async throws {
        let terminal: TerminalSession
        do { terminal = try openTerminal() } catch let e as CLIError {
            printError("demo: \(e.description)")
            throw ExitCode(1)
        }
        let path: String
        let loaded: Scenario
        let bus: PrivateBus
        do {
            path = try DemoCommand.scenarioPath(scenario)
            loaded = try Scenario.load(path: path)
            bus = try PrivateBus.start()
        } catch {
            terminal.restore()
            printError("demo: \(error)")
            throw ExitCode(1)
        }
        signal(SIGPIPE, SIG_IGN)
        defer { bus.stop() }
        let simulator = BlueZSimulator(scenario: loaded)
        let temporary = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-demo-\(getpid())")
        let directory = stateDir.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? temporary
        defer { if stateDir == nil { try? FileManager.default.removeItem(at: temporary) } }
        do {
            try await simulator.start(busAddress: bus.address)
            let services = try await DashboardServices.start(bus: .address(bus.address), adapter: nil, stateDirectory: directory)
            _ = await services.run(terminal: terminal)
        } catch {
            terminal.restore()
            await simulator.stop()
            printError("demo: \(error)")
            throw ExitCode(1)
        }
        await simulator.stop()
    }

    private func showcase(address: String) async throws {
        let client: BlueZClient
        do { client = try await BlueZClient.connect(to: .address(address)) } catch { throw CLIError(error) }
        let adapter: Adapter
        do { adapter = try client.adapter() } catch { throw CLIError(error) }
        out("== Scanning on \(adapter.id.name) for \(Int(duration)) s (blecompanion scan) ==")
        let events = client.mirror.events()
        let session: DiscoverySession
        do { session = try await client.discover(adapter: adapter.id, filter: DiscoveryFilter(transport: .le)) } catch { throw CLIError(error) }
        var lastShown: [DeviceID: String] = [:]
        let deadline = ContinuousClock.now + .seconds(duration)
        let scan = Task {
            for await event in events {
                let path: ObjectPath
                switch event {
                case let .interfacesAdded(p, names) where names.contains(BlueZInterface.device): path = p
                case let .deviceChanged(id, _): path = id.path
                default: continue
                }
                guard let id = DeviceID(path: path), let d = client.mirror.snapshot().devices[id], d.rssi != nil else { continue }
                let line = deviceLine(d, battery: client.mirror.snapshot().batteries[id])
                // Only what changed (RSSI jitter alone is not news).
                let key = readingsText(decodedAdvertisement(d)) + (d.name ?? "")
                if lastShown[id] == key { continue }
                lastShown[id] = key
                out("  " + line)
            }
        }
        try? await Task.sleep(until: deadline)
        scan.cancel()
        await session.stop()

        let snap = client.mirror.snapshot()
        guard let strap = snap.devices(on: adapter.id).first(where: { $0.uuids.contains(BlueZSnapshot.normalizeUUID("180d")) }) else {
            out("\n(no heart-rate device in this scenario; skipping the GATT part)")
            return
        }
        out("\n== Connecting to \(strap.displayName) (blecompanion connect / read / notify) ==")
        do {
            try await client.connect(strap.id)
            try await client.waitForServicesResolved(strap.id)
            if let battery = client.mirror.snapshot().characteristic("2a19", on: strap.id) {
                let value = try await client.readValue(battery.id)
                out("  Battery Level: \(Hex.string(value))  → \((try? GATTDecoder.decode(characteristic: BluetoothUUID(uuid16: 0x2A19), value: value)).map(gattText) ?? "?")")
            }
            if let hr = client.mirror.snapshot().characteristic("2a37", on: strap.id) {
                let stream = try await client.notifications(hr.id)
                var count = 0
                for await event in stream {
                    guard case let .value(v) = event else { continue }
                    out("  Heart Rate Measurement: \(Hex.string(v))  → \((try? GATTDecoder.decode(characteristic: BluetoothUUID(uuid16: 0x2A37), value: v)).map(gattText) ?? "?")")
                    count += 1
                    if count == 3 { break }
                }
                try? await client.stopNotify(hr.id)
            }
            try await client.disconnect(strap.id)
            out("  Disconnected.")
        } catch {
            throw CLIError(error)
        }
    }

    /// The scenario: the option, else the bundled demo next to the working
    /// directory or next to the executable's package.
    static func scenarioPath(_ option: String?) throws -> String {
        if let option { return option }
        let relative = "fixtures/scenarios/demo-home.json"
        var candidates = [FileManager.default.currentDirectoryPath + "/" + relative]
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
            for _ in 0..<4 {
                candidates.append(dir.appendingPathComponent(relative).path)
                dir = dir.deletingLastPathComponent()
            }
        }
        if let found = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }) { return found }
        printError("demo: cannot find \(relative) (looked in \(candidates.joined(separator: ", "))); pass --scenario PATH.")
        throw ExitCode(1)
    }
}

/// Stops the private bus and exits when SIGINT or SIGTERM arrives, so an
/// interrupted demo never leaves a dbus-daemon behind. ``StopSignals`` is
/// installed before the bus starts: a signal that comes while it starts is
/// kept and acted on here as soon as the bus exists.
///
/// Stopping the bus makes whatever the demo is doing fail ("cannot connect
/// to D-Bus"); the demo's error paths call ``exitIfSignalled()`` first, so
/// that an interrupted demo ends as the signal does (128 + signal), not
/// with that error and status 1 (seen under ThreadSanitizer's slowness).
final class SignalStopper: Sendable {
    private let waiter: Task<Void, Never>
    private let bus: PrivateBus
    private let exiting = Lock(false)

    init(bus: PrivateBus) {
        self.bus = bus
        let exiting = self.exiting
        waiter = Task {
            guard let sig = await StopSignals.wait() else { return }
            Self.stop(bus, exiting, sig)
        }
    }

    /// Ends the process as the signal does if one was caught; returns otherwise.
    func exitIfSignalled() {
        if let sig = StopSignals.caught() { Self.stop(bus, exiting, sig) }
    }

    func cancel() {
        waiter.cancel()
    }

    /// The bus stopped and the process ended, once: a second caller (the
    /// waiter and an error path racing) waits for the first one's exit.
    private static func stop(_ bus: PrivateBus, _ exiting: Lock<Bool>, _ sig: Int32) -> Never {
        let first = exiting.withLock { e in
            defer { e = true }
            return !e
        }
        if first {
            bus.stop()
            exit(128 + sig)
        }
        while true { pause() }
    }
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
