import ArgumentParser
import BlueZSimulator
import DBus
import Dispatch
import Foundation
import ScenarioFormat

/// `blecompanion simulate SCENARIO`: runs the BlueZ simulator as `org.bluez`
/// on a bus, until SIGINT or SIGTERM. Without `--bus` it starts its own
/// private dbus-daemon and prints the address to give to clients.
struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run a simulated bluetoothd (org.bluez) from a scenario file.",
        discussion: """
        Point BlueZ clients at the printed bus, e.g.
          DBUS_SYSTEM_BUS_ADDRESS=<address> bluetoothctl
        Exit status: 0 after SIGINT/SIGTERM; 1 for a bad scenario file or when the bus cannot be used.
        """
    )

    @Argument(help: "The scenario file (JSON, see docs/SCENARIOS.md).")
    var scenario: String

    @Option(help: "Use this D-Bus address instead of starting a private dbus-daemon.")
    var bus: String?

    @Option(help: "Timeline speed factor (2 = twice as fast), or max: no waiting, as fast as the discovering clients take the events (playback starts when one discovers).")
    var speed: String = "1"

    @Flag(help: "Start the timelines over after the scenario's duration (a recording's length), keeping their order across devices.")
    var loop = false

    @Flag(help: "Print nothing but the bus address.")
    var quiet = false

    /// The numeric factor, or nil for max.
    var speedFactor: Double? { speed == "max" ? nil : Double(speed) }

    func validate() throws {
        guard speed != "max" else { return }
        guard let factor = Double(speed), factor >= 0.001, factor <= 1000 else {
            throw ValidationError("--speed must be a number between 0.001 and 1000, or max; got \"\(speed)\"")
        }
        _ = factor
    }

    func run() async throws {
        let loaded: Scenario
        do {
            loaded = try Scenario.load(path: scenario)
        } catch {
            printError("simulate: \(error)")
            throw ExitCode(1)
        }
        var privateBus: PrivateBus?
        let address: String
        if let bus {
            address = bus
        } else {
            do {
                let started = try PrivateBus.start()
                privateBus = started
                address = started.address
            } catch {
                printError("simulate: \(error)")
                throw ExitCode(1)
            }
        }
        let quiet = self.quiet
        var log: (@Sendable (String) -> Void)?
        if !quiet {
            log = { @Sendable (line: String) -> Void in printLine("[sim] " + line) }
        }
        let simulator = BlueZSimulator(scenario: loaded, options: SimulatorOptions(
            speed: speedFactor ?? 1, asFastAsConsumed: speedFactor == nil, loop: loop, log: log))
        do {
            try await simulator.start(busAddress: address)
        } catch {
            privateBus?.stop()
            printError("simulate: \(error)")
            throw ExitCode(1)
        }
        printLine("DBUS_SYSTEM_BUS_ADDRESS=\(address)")
        if !quiet {
            var how = speedFactor == nil ? " at max speed (starts when a client discovers)" : ""
            if loop { how += ", looping every \(loaded.span) s" }
            printLine("Simulating \"\(loaded.name)\"\(how): \(loaded.adapters.count) adapter(s), \(loaded.devices.count) device(s). Ctrl-C stops.")
        }
        let signal = await waitForStopSignal()
        await simulator.stop()
        privateBus?.stop()
        if !quiet { printLine("Stopped (signal \(signal)).") }
    }
}

/// Writes one line to standard output at once (unbuffered, for pipes).
func printLine(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Waits until SIGINT or SIGTERM arrives; returns its number.
func waitForStopSignal() async -> Int32 {
    while true {
        if let signal = await StopSignals.wait() { return signal }
        if Task.isCancelled { return SIGTERM }
    }
}
