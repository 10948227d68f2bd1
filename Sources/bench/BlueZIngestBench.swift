import BlueZ
import Foundation
import BlueZSimulator
import DBus
#if canImport(Glibc)
import Glibc
import ScenarioFormat
#endif

/// scripts/bench-bluez: advertisement ingest end to end.
///
/// `bench bluez-sim --address A --devices D`: runs the BlueZ simulator with
/// D advertising devices on the bus, starts discovery (from a second
/// connection, as a client would), prints READY once every device is
/// exported, then obeys lines on standard input: `flood N` (N RSSI +
/// ManufacturerData changes round-robin, then `DONE`), `quit`.
///
/// `bench bluez-ingest --address A --devices D --count N`: our client's
/// mirror (BlueZClient.connect) on that bus; prints READY once it holds D
/// devices, then waits until it has applied N more changes and prints one
/// JSON line: CPU µs per change, changes/s, and resident memory before and
/// after mirroring (ru_maxrss).
enum BlueZIngestBench {
    static func options(_ arguments: [String], _ command: String) -> (address: String, devices: Int, count: Int, first: Int, of: Int)? {
        var address: String?
        var devices = 0
        var count = 0
        var first = 0
        var of = 0
        var i = 0
        while i + 1 < arguments.count {
            switch arguments[i] {
            case "--address": address = arguments[i + 1]
            case "--devices": devices = Int(arguments[i + 1]) ?? -1
            case "--count": count = Int(arguments[i + 1]) ?? -1
            case "--first" where command == "bluez-sim": first = Int(arguments[i + 1]) ?? -1
            case "--of" where command == "bluez-sim": of = Int(arguments[i + 1]) ?? -1
            default:
                writeError("bench \(command): unknown argument \(arguments[i])")
                return nil
            }
            i += 2
        }
        guard i == arguments.count, let address, devices > 0, count >= 0, first >= 0, of >= 0, of == 0 || of >= devices,
              devices <= 1_000_000, of <= 1_000_000, first <= 1_000_000 else {
            writeError("bench \(command): needs --address ADDRESS --devices D (0 < D ≤ 1000000)"
                + (command == "bluez-ingest" ? " [--count N]" : " [--first F --of M] (devices F…F+D-1 of M, wrapping; M ≥ D)"))
            return nil
        }
        return (address, devices, count, first, of)
    }

    /// A scenario of `n` RuuviTag-like devices, all advertising from the
    /// start: devices `first`…`first + n - 1` of a numbering that wraps at
    /// `of` (0: no wrap), so several simulators can share devices (a fleet:
    /// the same tags heard by several gateways' radios).
    static func scenario(devices n: Int, first: Int = 0, of: Int = 0) -> String {
        var entries: [String] = []
        entries.reserveCapacity(n)
        for j in 0..<n {
            let k = of > 0 ? (first + j) % of : first + j
            let a = String(format: "C0:%02X:%02X:%02X:%02X:%02X", (k >> 24) & 0xFF, (k >> 16) & 0xFF, (k >> 8) & 0xFF, k & 0xFF, 0x42)
            entries.append("""
                {"address":"\(a)","addressType":"random","name":"Tag \(k)","rssi":-60,\
                "manufacturerData":{"0x0499":"0512fc5394c37c0004fffc040cac364200cdcbb8334c884f"}}
                """)
        }
        return "{\"name\":\"bench-\(n)\",\"settings\":{\"temporaryDeviceTimeout\":3600},\"devices\":[\(entries.joined(separator: ","))]}"
    }

    static func runSimulator(_ arguments: [String]) async -> Int32 {
        guard let o = options(arguments, "bluez-sim") else { return 64 }
        do {
            let loaded = try Scenario.parse(scenario(devices: o.devices, first: o.first, of: o.of), fileName: "bench-scenario.json")
            let simulator = BlueZSimulator(scenario: loaded)
            try await simulator.start(busAddress: o.address)
            let client = try await DBusConnection.connect(to: .address(o.address))
            _ = try await client.call(destination: "org.bluez", path: "/org/bluez/hci0", interface: "org.bluez.Adapter1",
                                      member: "StartDiscovery")
            // READY once every device is on the bus.
            while true {
                let objects = try await client.managedObjects(destination: "org.bluez")
                if objects.values.filter({ $0["org.bluez.Device1"] != nil }).count >= o.devices { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            printFlushed("READY")
            while let line = readLine() {
                let parts = line.split(separator: " ")
                if parts.first == "quit" { break }
                if parts.count >= 2, parts.count <= 3, parts[0] == "flood", let n = Int(parts[1]), n > 0 {
                    // `flood N` as fast as possible; `flood N RATE` paced at RATE changes per second.
                    let rate = parts.count == 3 ? Double(parts[2]) : nil
                    await simulator.floodAdvertisements(count: n, perSecond: rate)
                    printFlushed("DONE")
                } else {
                    writeError("bench bluez-sim: expected `flood N [RATE]` or `quit`, got \"\(line)\"")
                }
            }
            await simulator.stop()
            client.close()
            return 0
        } catch {
            writeError("bench bluez-sim: \(error)")
            return 1
        }
    }

    static func maxRSSKilobytes() -> Int {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return usage.ru_maxrss
    }

    static func runIngest(_ arguments: [String]) async -> Int32 {
        guard let o = options(arguments, "bluez-ingest") else { return 64 }
        do {
            let connection = try await DBusConnection.connect(to: .address(o.address))
            let rssBefore = maxRSSKilobytes()
            let mirror = try await BlueZMirror.start(connection: connection)
            try await mirror.wait(for: "\(o.devices) devices", timeout: .seconds(120)) { $0.devices.count >= o.devices }
            let rssMirrored = maxRSSKilobytes()
            let base = mirror.appliedChanges
            printFlushed("READY")
            var line = "{\"impl\":\"swift-mirror\",\"devices\":\(mirror.snapshot().devices.count),"
                + "\"rss_before_kb\":\(rssBefore),\"rss_mirrored_kb\":\(rssMirrored)"
            if o.count > 0 {
                let cpuStart = DBusReceiveBench.cpuSeconds()
                let start = ContinuousClock.now
                try await mirror.waitForAppliedChanges(base + UInt64(o.count), timeout: .seconds(600))
                let wall = ContinuousClock.now - start
                let cpu = DBusReceiveBench.cpuSeconds() - cpuStart
                let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
                line += String(format: ",\"changes\":%d,\"cpu_s\":%.4f,\"cpu_us_per_change\":%.3f,\"wall_s\":%.4f,\"changes_per_s\":%.0f,\"rss_after_kb\":%d",
                               o.count, cpu, cpu * 1e6 / Double(o.count), seconds, Double(o.count) / max(seconds, 1e-9), maxRSSKilobytes())
            }
            printFlushed(line + "}")
            connection.close()
            return 0
        } catch {
            writeError("bench bluez-ingest: \(error)")
            return 1
        }
    }
}
