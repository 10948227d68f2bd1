import Bounds
import ArgumentParser
import BlueZ
import BlueZSimulator
import Capture
import DBus
import Foundation
import Vocabulary

/// `blecompanion record --out FILE`: captures what bluetoothd reports into a
/// scenario file that `blecompanion simulate` replays unchanged.
struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record bluetoothd's devices and changes into a scenario file for the simulator.",
        discussion: """
        Takes the object tree, then every InterfacesAdded/Removed and PropertiesChanged from org.bluez with \
        monotonic timestamps (advertisements, characteristic values read or notified, battery, bluetoothd and \
        adapter outages) until --duration has passed or SIGINT/SIGTERM; then writes FILE atomically. \
        Discovery is not started unless --scan is given: without it, what other clients discover is recorded. \
        Replay with `blecompanion simulate FILE`. See docs/SCENARIOS.md, "Capture and replay".
        Exit status: 0 when the file was written; 1 when bluetoothd cannot be reached or FILE cannot be written.
        """
    )

    @Option(help: "The scenario file to write (replaced atomically).")
    var out: String

    @Option(help: "Which bus bluetoothd is on: system (default), session, or a D-Bus address such as unix:path=/run/x.")
    var bus: String = "system"

    @Option(help: "Only this adapter and its devices, e.g. hci0 (default: every adapter; --scan uses the first).")
    var adapter: String?

    @Option(parsing: .unconditional, help: "Stop after this many seconds (default: until Ctrl-C).")
    var duration: Double?

    @Option(name: .customLong("device"), help: "Only this device (repeatable), e.g. AA:BB:CC:DD:EE:FF.")
    var devices: [String] = []

    @Flag(help: "Start discovery (transport LE) while recording, as `blecompanion scan` does.")
    var scan = false

    @Flag(help: "Replace addresses and names consistently (and the MACs inside ATC/pvvx/Ruuvi/MiBeacon/BTHome payloads) to share the file.")
    var redact = false

    @Option(help: "The scenario's name (default: the file name without .json).")
    var name: String?

    func validate() throws {
        try checkSeconds(duration, "--duration")
        if let adapter { try checkAdapterName(adapter) }
        for d in devices {
            do { _ = try BluetoothAddress(d) } catch { throw ValidationError("--device: \(error.description)") }
        }
        try checkBusName(bus)
        if out.isEmpty { throw ValidationError("--out must name a file") }
    }

    func run() async throws {
        try await runReporting {
            // Before anything is recorded: a typo in --out must not cost the capture.
            do { try AtomicFile.checkWritable(out) } catch { throw CLIError("\(error)") }
            let connection: DBusConnection
            do {
                connection = try await DBusConnection.connect(to: DBusBusAddress(parsing: bus))
            } catch {
                throw CLIError("cannot reach the \(bus) bus: \(error). Is D-Bus running? See `blecompanion doctor`.")
            }
            defer { connection.close() }
            let owner = try? await connection.nameOwner(BlueZInterface.service)
            guard owner != nil else {
                throw CLIError("bluetoothd is not running on the \(bus) bus (org.bluez has no owner). Start it with `sudo systemctl start bluetooth`, or run `blecompanion simulate` for a simulated one.")
            }
            let filter = RecordingFilter(adapter: adapter, devices: Set(devices.compactMap { try? BluetoothAddress($0) }))
            let fileName = URL(fileURLWithPath: out).deletingPathExtension().lastPathComponent
            let options = Recorder.Options(filter: filter, scan: scan, name: name ?? fileName)
            let recorder: Recorder
            do {
                recorder = try await Recorder.start(connection: connection, options: options)
            } catch let e as BlueZError {
                throw CLIError(e)
            } catch {
                throw CLIError("cannot record: \(error)")
            }
            let stop = StopSignal(after: duration)
            printError("Recording\(scan ? " (scanning)" : "")… \(duration.map { "for \($0) s" } ?? "Ctrl-C stops and writes \(out)")")
            await stop.wait()
            var scenario = await recorder.stop()
            if redact {
                var redaction = Redaction()
                scenario = redaction.redact(scenario)
            }
            let text = scenario.jsonText()
            do {
                try AtomicFile.write(text, to: out)
            } catch {
                // A full disk or a directory gone since the start must not
                // cost the recording: keep it in the temporary directory
                // and say where.
                let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
                let kept = "\(base)/blecompanion-recording-\(getpid())-\(Int(Date().timeIntervalSince1970)).json"
                do {
                    try AtomicFile.write(text, to: kept)
                    throw CLIError("\(error). The recording is kept in \(kept); move it where you want it.")
                } catch let fallback as CaptureFileError {
                    throw CLIError("\(error); it could not be kept elsewhere either (\(fallback))")
                }
            }
            let events = scenario.devices.reduce(0) { $0 + ($1.advertising?.events.count ?? 0) }
            printError("Wrote \(out): \(scenario.adapters.count) adapter(s), \(scenario.devices.count) device(s), \(events) advertising event(s), \(scenario.outages.count) bluetoothd outage(s) in \(String(format: "%.1f", scenario.duration ?? 0)) s\(redact ? ", redacted" : "").")
        }
    }
}
