import DBus
import Foundation
import Locking
import TestSupport
import Testing

/// `blecompanion simulate` running in the background on its own private bus,
/// stopped (SIGTERM, then waited for) when the test is done.
final class SimulatorProcess: @unchecked Sendable {
    let process = Process()
    let address: String

    /// `scenario`: a file in fixtures/scenarios, or an absolute path; `bus`:
    /// an existing bus instead of the simulator's own private one.
    init(scenario: String = "demo-home.json", bus: String? = nil, filePath: String = #filePath) throws {
        let root = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        process.executableURL = URL(fileURLWithPath: try DoctorCLI.executable())
        let file = scenario.hasPrefix("/") ? scenario : root.appendingPathComponent("fixtures/scenarios/\(scenario)").path
        process.arguments = ["simulate", file, "--quiet"] + (bus.map { ["--bus", $0] } ?? [])
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // The first line names the bus: DBUS_SYSTEM_BUS_ADDRESS=<address>.
        var line = Data()
        let handle = out.fileHandleForReading
        while true {
            let byte = handle.readData(ofLength: 1)
            if byte.isEmpty || byte == Data([0x0A]) { break }
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let eq = text.firstIndex(of: "="), text.hasPrefix("DBUS_SYSTEM_BUS_ADDRESS=") else {
            process.terminate()
            process.waitUntilExit()
            throw DoctorCLI.TimedOut(arguments: ["simulate: no address line, got \"\(text)\""], seconds: 0)
        }
        address = String(text[text.index(after: eq)...])
    }

    func run(_ arguments: [String], timeout: Double = 60) throws -> DoctorCLI.Run {
        try DoctorCLI.runBlocking(arguments + ["--bus", address], timeout: timeout)
    }

    /// SIGCONT (a test may have stopped it), SIGTERM, and the exit reaped by
    /// pid, SIGKILL after 5 s. Not `Process.waitUntilExit`: called from a
    /// test's task, it spun the run loop at 100 % CPU on a pool thread until
    /// Foundation's own monitor saw the exit, which it was seen never to do
    /// (the child left a zombie; the whole suite stalled behind it).
    func stop() {
        let first = reaped.withLock { r -> Bool in defer { r = true }; return !r }
        guard first else { return }
        let pid = process.processIdentifier
        kill(pid, SIGCONT)
        kill(pid, SIGTERM)
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid || (r < 0 && errno == ECHILD) { return }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }
    private let reaped = Lock(false)

    deinit { stop() }
}

extension SimulatorProcess {
    static func start(_ scenario: String = "demo-home.json", bus: String? = nil) async throws -> SimulatorProcess {
        try await offPool { try SimulatorProcess(scenario: scenario, bus: bus) }
    }
    func runAsync(_ arguments: [String], timeout: Double = 60) async throws -> DoctorCLI.Run {
        try await offPool { try self.run(arguments, timeout: timeout) }
    }
    func stopAsync() async { _ = try? await offPool { self.stop() } }
}

func cli(_ arguments: [String], timeout: Double = 60) async throws -> DoctorCLI.Run {
    try await DoctorCLI.run(arguments, timeout: timeout)
}

func jsonLines(_ text: String) -> [[String: Any]] {
    text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct BlueZCLITests {
    let ruuvi = "CB:B8:33:4C:88:4F"
    let strap = "E4:5F:01:AA:10:01"
    let lock = "F4:12:FA:33:44:55"
    let flaky = "EC:11:27:00:BE:EF"

    @Test func scanStreamsDevicesWithDecodedReadingsThenDevicesListsThem() async throws {
        let sim = try await SimulatorProcess.start()
        defer { sim.stop() }
        let scan = try await sim.runAsync(["scan", "--duration", "2", "--json"])
        #expect(scan.status == 0, "\(scan.stderr)")
        // A reader that keeps up is not told that changes were folded.
        #expect(!scan.stderr.contains("not printed"), "\(scan.stderr)")
        let lines = jsonLines(scan.stdout)
        let ruuviLines = lines.filter { $0["address"] as? String == ruuvi }
        #expect(!ruuviLines.isEmpty)
        let decoded = ruuviLines.first?["decoded"] as? [[String: Any]]
        #expect(decoded?.first?["format"] as? String == "ruuvi")
        let kinds = (decoded?.first?["readings"] as? [[String: Any]])?.compactMap { $0["kind"] as? String } ?? []
        #expect(kinds.contains("temperature") && kinds.contains("humidity") && kinds.contains("pressure"))
        #expect(ruuviLines.first?["rssi"] is Int)

        let devices = try await sim.runAsync(["devices"])
        #expect(devices.status == 0)
        // Discovery has ended: no RSSI any more (bluetoothd invalidates it), the last data stays.
        #expect(devices.stdout.contains("\(ruuvi)  Ruuvi 884F  — temperature="), "\(devices.stdout)")
        // A UUID filter only lets matching devices through (BTHome: fcd2).
        let filtered = try await sim.runAsync(["scan", "--duration", "1.5", "--json", "--uuid", "fcd2"])
        #expect(filtered.status == 0)
        let addresses = Set(jsonLines(filtered.stdout).compactMap { $0["address"] as? String })
        #expect(!addresses.isEmpty && !addresses.contains(ruuvi), "\(addresses)")
    }

    @Test func connectInfoReadNotifyWriteDisconnect() async throws {
        let sim = try await SimulatorProcess.start()
        defer { sim.stop() }
        _ = try await sim.runAsync(["scan", "--duration", "1"])
        let connect = try await sim.runAsync(["connect", strap])
        #expect(connect.status == 0, "\(connect.stderr)")
        #expect(connect.stdout.contains("Connected to Polar H10"))

        let info = try await sim.runAsync(["info", strap])
        #expect(info.status == 0)
        #expect(info.stdout.contains("Service 180d (Heart Rate) (primary)"))
        #expect(info.stdout.contains("Characteristic 2a38 (Body Sensor Location) [read] = 01  → location=chest"))

        let read = try await sim.runAsync(["read", strap, "2a19", "--json"])
        #expect(read.status == 0)
        let value = jsonLines(read.stdout).first
        #expect((value?["decoded"] as? [String: Any])?["model"] as? String == "battery_level")

        let notify = try await sim.runAsync(["notify", strap, "2a37", "--count", "3", "--json"], timeout: 30)
        #expect(notify.status == 0, "\(notify.stderr)")
        let beats = jsonLines(notify.stdout).compactMap { (($0["decoded"] as? [String: Any])?["readings"] as? [[String: Any]])?.first { $0["kind"] as? String == "heart_rate" }?["value"] as? Double }
        #expect(beats.count == 3 && beats.allSatisfy { (30...220).contains($0) }, "\(notify.stdout)")

        // AcquireNotify: the same values through a socket.
        let acquired = try await sim.runAsync(["notify", strap, "2a37", "--acquire", "--count", "2", "--json"], timeout: 30)
        #expect(acquired.status == 0, "\(acquired.stderr)")
        #expect(jsonLines(acquired.stdout).count == 2, "\(acquired.stdout)")

        let write = try await sim.runAsync(["write", strap, "2a39", "01"])
        #expect(write.status == 0, "\(write.stderr)")
        let badHex = try await sim.runAsync(["write", strap, "2a39", "0g"])
        #expect(badHex.status == 64)

        // Disconnecting hangs up an acquired socket: the command says so and fails.
        async let hungUp = sim.runAsync(["notify", strap, "2a37", "--acquire", "--duration", "30"], timeout: 60)
        try await Task.sleep(for: .milliseconds(1500))
        let disconnect = try await sim.runAsync(["disconnect", strap])
        #expect(disconnect.status == 0)
        let ended = try await hungUp
        #expect(ended.status == 1 && ended.stderr.contains("bluetoothd closed the AcquireNotify socket"), "\(ended.status) \(ended.stderr)")
        let after = try await sim.runAsync(["read", strap, "2a19"])
        #expect(after.status == 1)
        #expect(after.stderr.contains("is not connected: run `blecompanion connect \(strap)` first"))
    }

    @Test func pairingFaultsAndErrorsSayWhatToDo() async throws {
        let sim = try await SimulatorProcess.start()
        defer { sim.stop() }
        _ = try await sim.runAsync(["scan", "--duration", "1"])
        // No terminal and no --passkey: rejected, and told which option was needed.
        let refused = try await sim.runAsync(["pair", lock])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("pass --passkey NNNNNN"))
        #expect(refused.stderr.contains("AuthenticationRejected"))
        let wrong = try await sim.runAsync(["pair", lock, "--passkey", "111111"])
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("pairing with \(lock) failed: Authentication"))
        let paired = try await sim.runAsync(["pair", lock, "--passkey", "246810", "--trust"])
        #expect(paired.status == 0, "\(paired.stderr)")
        let list = try await sim.runAsync(["devices", "--paired", "--json"])
        let entry = jsonLines(list.stdout).first { $0["address"] as? String == lock }
        #expect(entry?["paired"] as? Bool == true && entry?["trusted"] as? Bool == true)
        #expect(try await sim.runAsync(["untrust", lock]).status == 0)
        #expect(try await sim.runAsync(["unpair", lock]).status == 0)

        // The flaky device aborts its first connection, with bluetoothd's reason and advice.
        let flakyConnect = try await sim.runAsync(["connect", flaky])
        #expect(flakyConnect.status == 1)
        #expect(flakyConnect.stderr.contains("Failed: le-connection-abort-by-local (the local adapter gave up"))

        let unknown = try await sim.runAsync(["info", "11:22:33:44:55:66"])
        #expect(unknown.status == 1)
        #expect(unknown.stderr.contains("device 11:22:33:44:55:66 on hci0"))
        let badAdapter = try await sim.runAsync(["devices", "--adapter", "hci9"])
        #expect(badAdapter.status == 1)
        #expect(badAdapter.stderr.contains("adapter hci9 (bluetoothd has hci0)"))
        let badAddress = try await sim.runAsync(["info", "not-an-address"])
        #expect(badAddress.status == 1)
        #expect(badAddress.stderr.contains("is not a Bluetooth address"))
    }

    /// A link whose services never resolve (an ATT server that does not
    /// answer; python-dbusmock never sets ServicesResolved): `connect` waits
    /// --timeout in all, says what happened and closes the link again.
    @Test func connectWhoseServicesNeverResolveTimesOutAndDisconnects() async throws {
        let sim = try await SimulatorProcess.start("test-faults.json")
        defer { sim.stop() }
        let mute = "F0:00:00:00:00:06"
        _ = try await sim.runAsync(["scan", "--duration", "1"])
        let started = ContinuousClock.now
        let connect = try await sim.runAsync(["connect", mute, "--timeout", "1.5"])
        #expect(connect.status == 1)
        #expect(connect.stderr.contains("cannot connect to \(mute)"), "\(connect.stderr)")
        #expect(connect.stderr.contains("had not resolved its GATT services after 1.5 s, so it was disconnected again"), "\(connect.stderr)")
        // 1.5 s in all, then bluetoothd's 2 s disconnect timer; not two timeouts in a row.
        #expect(ContinuousClock.now - started < .seconds(8))
        var connected: Bool? = true
        for _ in 0..<20 where connected != false {
            let info = try await sim.runAsync(["info", mute, "--json"])
            connected = jsonLines(info.stdout).first?["connected"] as? Bool
            if connected != false { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(connected == false)
    }

    @Test func adapterOffMissingOrForbiddenSaySo() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }

        let off = dir.appendingPathComponent("off.json")
        try Data(#"{"adapters": [{"id": "hci0", "address": "00:1A:7D:DA:71:13", "powered": false}]}"#.utf8).write(to: off)
        let offSim = try await SimulatorProcess.start(off.path)
        let scan = try await offSim.runAsync(["scan", "--duration", "1"])
        await offSim.stopAsync()
        #expect(scan.status == 1)
        #expect(scan.stderr.contains("adapter hci0 is powered off. Turn it on with `bluetoothctl power on`"), "\(scan.stderr)")

        let gone = dir.appendingPathComponent("unplugged.json")
        try Data(#"{"adapters": [{"id": "hci0", "address": "00:1A:7D:DA:71:13", "outages": [{"at": 0}]}]}"#.utf8).write(to: gone)
        let goneSim = try await SimulatorProcess.start(gone.path)
        // The outage at 0 s is played just after start-up: ask until it has been.
        var devices = try await goneSim.runAsync(["devices"])
        for _ in 0..<20 where devices.status == 0 {
            try await Task.sleep(for: .milliseconds(250))
            devices = try await goneSim.runAsync(["devices"])
        }
        await goneSim.stopAsync()
        #expect(devices.status == 1)
        #expect(devices.stderr.contains("no Bluetooth adapter"), "\(devices.stderr)")

        // A bus whose policy forbids talking to org.bluez (the simulator may own it).
        let config = dir.appendingPathComponent("bus.conf")
        try Data("""
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig><type>session</type><listen>unix:path=\(dir.path)/bus</listen><auth>EXTERNAL</auth>
            <policy context="default"><allow send_destination="*"/><allow receive_sender="*"/><allow own="*"/><deny send_destination="org.bluez" send_type="method_call"/></policy>
            </busconfig>
            """.utf8).write(to: config)
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        daemon.arguments = ["--config-file=\(config.path)", "--nofork", "--nopidfile"]
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        // SIGKILL: a child of the test process may inherit a blocked SIGTERM.
        defer { kill(daemon.processIdentifier, SIGKILL); _ = waitForExit(daemon.processIdentifier) }
        let address = "unix:path=\(dir.path)/bus"
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: dir.path + "/bus") { try await Task.sleep(for: .milliseconds(50)) }
        let sim = try await SimulatorProcess.start("test-basic.json", bus: address)
        defer { sim.stop() }
        let denied = try await cli(["devices", "--bus", address], timeout: 30)
        #expect(denied.status == 1)
        #expect(denied.stderr.contains("permission denied by D-Bus policy"), "\(denied.stderr)")
    }

    @Test func withoutABusOrBluetoothdTheMessageSaysSo() async throws {
        let noBus = try await cli(["devices", "--bus", "unix:path=/nonexistent/bus"])
        #expect(noBus.status == 1)
        #expect(noBus.stderr.contains("cannot reach the unix:path=/nonexistent/bus bus"))
        let badBus = try await cli(["scan", "--bus", "nowhere"])
        #expect(badBus.status == 64)
        // A bus without bluetoothd on it.
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let empty = try await cli(["devices", "--bus", bus.address], timeout: 30)
        #expect(empty.status == 1)
        #expect(empty.stderr.contains("bluetoothd is not running on the \(bus.address) bus (org.bluez has no owner)"))
    }
}
