import BLEParsing
import BlueZ
import Dashboard
import Domain
import Foundation
import Presenters
import TerminalUI
import Vocabulary

/// `bench dashboard [--devices N] [--width W] [--height H] [--rounds R] [--idle SECONDS]`:
/// the dashboard's drawing cost for a long device list, measured against a
/// full repaint in the same run:
/// - render: the content function for the whole screen;
/// - full: render + a full repaint's bytes (the baseline);
/// - rssi: render + diff when one visible device's RSSI changes;
/// - same: render + diff of an unchanged screen (0 bytes);
/// - idle: CPU used by the real app loop on a pseudo-terminal over 
///   repositories where nothing happens.
enum DashboardBench {
    static func run(_ arguments: [String]) async -> Int32 {
        func option(_ name: String, _ fallback: Int) -> Int {
            guard let i = arguments.firstIndex(of: name), i + 1 < arguments.count, let v = Int(arguments[i + 1]) else { return fallback }
            return v
        }
        let devices = option("--devices", 1000), width = option("--width", 200), height = option("--height", 60)
        let rounds = option("--rounds", 200), idle = option("--idle", 3)
        let rows: [DeviceListPresenter.Row]
        do { rows = try (0..<devices).map(row) } catch {
            writeError("bench dashboard: \(error)")
            return 1
        }
        var view = DashboardView(now: Date(timeIntervalSince1970: 1_800_000_000))
        view.list.devices = .loaded(ChunkedArray(rows))
        view.list.scan = .off
        view.listCursor = 3
        var changed = view
        if var r = changed.list.devices.value {
            r[5].rssi = (r[5].rssi ?? -70) - 3
            changed.list.devices = .loaded(r)
        }

        // Warm up, then medians of `rounds`.
        var fullBytes = 0, rssiBytes = 0, sameBytes = 0
        var renderTimes: [Double] = [], fullTimes: [Double] = [], rssiTimes: [Double] = [], sameTimes: [Double] = []
        for round in 0..<(rounds + 10) {
            let t0 = now()
            let buffer = DashboardContent.render(view, width: width, height: height)
            let t1 = now()
            var renderer = Renderer(colorMode: .indexed256)
            let full = renderer.frame(buffer)
            let t2 = now()
            let next = DashboardContent.render(changed, width: width, height: height)
            let diff = renderer.frame(next)
            let t3 = now()
            let again = DashboardContent.render(changed, width: width, height: height)
            let none = renderer.frame(again)
            let t4 = now()
            guard round >= 10 else { continue }
            fullBytes = full.count
            rssiBytes = diff.count
            sameBytes = none.count
            renderTimes.append(t1 - t0)
            fullTimes.append(t2 - t0)
            rssiTimes.append(t3 - t2)
            sameTimes.append(t4 - t3)
        }
        let render = median(renderTimes), full = median(fullTimes), rssi = median(rssiTimes), same = median(sameTimes)
        let cpu = await idleCPU(seconds: Double(idle))
        func us(_ s: Double) -> String { String(format: "%.1f", s * 1e6) }
        func ratio(_ a: Double, _ b: Double) -> String { String(format: "%.3f", b > 0 ? a / b : 0) }
        printFlushed("""
            {"bench":"dashboard","devices":\(devices),"width":\(width),"height":\(height),"rounds":\(rounds),\
            "render_us":\(us(render)),"full_us":\(us(full)),"full_bytes":\(fullBytes),\
            "rssi_change_us":\(us(rssi)),"rssi_change_bytes":\(rssiBytes),\
            "unchanged_us":\(us(same)),"unchanged_bytes":\(sameBytes),\
            "rssi_change_time_ratio":\(ratio(rssi, full)),"rssi_change_bytes_ratio":\(ratio(Double(rssiBytes), Double(fullBytes))),\
            "unchanged_time_ratio":\(ratio(same, full)),\
            "idle_seconds":\(idle),"idle_cpu_ms":\(cpu.map { String(format: "%.2f", $0 * 1000) } ?? "null")}
            """)
        return 0
    }

    static func row(_ i: Int) throws -> DeviceListPresenter.Row {
        // C0:FE:xx:xx:xx:01, the middle three bytes i.
        let address = BluetoothAddress(value: 0xC0FE_0000_0001 | UInt64(i & 0xFF_FFFF) << 8)
        let id = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: address)
        return DeviceListPresenter.Row(id: id, title: "Sensor \(i)", rssi: Int16(-40 - (i % 55)), format: i % 3 == 0 ? "bthome" : "ruuvi",
                                       readings: [Reading(.temperature, 20 + Double(i % 50) / 10, unit: "°C"),
                                                  Reading(.humidity, 40 + Double(i % 30), unit: "%"), Reading(.battery, 90, unit: "%")],
                                       paired: i % 7 == 0, connected: i % 11 == 0,
                                       lastSeen: Date(timeIntervalSince1970: 1_800_000_000 - Double(i % 90)))
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func median(_ values: [Double]) -> Double {
        let s = values.sorted()
        return s.isEmpty ? 0 : s[s.count / 2]
    }

    /// CPU seconds the real loop uses on a pseudo-terminal while nothing
    /// happens (nil if no pty could be opened).
    static func idleCPU(seconds: Double) async -> Double? {
        guard seconds > 0, let pty = PseudoTerminal.open() else { return nil }
        defer { pty.close() }
        guard let terminal = try? TerminalSession.open(input: pty.slave, output: pty.slave, mouse: false) else { return nil }
        let drain = pty.drain()
        defer { drain.cancel() }
        let env = DashboardEnvironment(devices: StillDevices(), control: StillControl(), history: nil, watchList: nil,
                                       pairing: StillPairing(), adapters: StillAdapters(), log: EventLog())
        let screen = DashboardScreen(environment: env)
        let post = screen.poster
        let loop = Task { await DashboardApp.run(screen, terminal: terminal, colorMode: .indexed256) }
        try? await Task.sleep(for: .milliseconds(500))   // first frames drawn
        let before = DBusReceiveBench.cpuSeconds()
        try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
        let used = DBusReceiveBench.cpuSeconds() - before
        post(.terminal(.terminate(signal: SIGTERM)))
        await loop.value
        return used
    }
}

// Repositories where nothing happens: one device, never heard (no ages to tick), no scan.
struct StillDevices: DeviceRepository {
    func snapshots() -> AsyncStream<DeviceListSnapshot> {
        let devices = (try? DashboardBench.row(1)).map { [DeviceRecord(id: $0.id, name: $0.title, rssi: $0.rssi)] } ?? []
        return AsyncStream { c in c.yield(DeviceListSnapshot(availability: .available, devices: devices)) }
    }
    func setScanning(_ on: Bool) async throws(DomainError) {}
}
struct StillControl: DeviceControl {
    func details(of id: DeviceID) -> AsyncStream<DeviceDetailSnapshot> { AsyncStream { $0.yield(DeviceDetailSnapshot(availability: .available)) } }
    func connect(_ id: DeviceID) async throws(DomainError) {}
    func disconnect(_ id: DeviceID) async throws(DomainError) {}
    func setTrusted(_ on: Bool, _ id: DeviceID) async throws(DomainError) {}
    func forget(_ id: DeviceID) async throws(DomainError) {}
    func read(_ c: GATTAttributeID) async throws(DomainError) -> [UInt8] { [] }
    func write(_ c: GATTAttributeID, _ value: [UInt8], withoutResponse: Bool) async throws(DomainError) {}
    func setNotifying(_ on: Bool, _ c: GATTAttributeID) async throws(DomainError) {}
}
struct StillPairing: PairingService {
    func prompts() -> AsyncStream<PairingPrompt?> { AsyncStream { $0.yield(nil) } }
    func outcomes() -> AsyncStream<PairingOutcome> { AsyncStream { _ in } }
    func pair(_ device: DeviceID) async throws(DomainError) {}
    func answer(_ id: UInt64, _ response: AgentResponse) {}
    func cancelPairing(_ device: DeviceID) async throws(DomainError) {}
}
struct StillAdapters: AdapterRepository {
    func snapshots() -> AsyncStream<AdapterListSnapshot> { AsyncStream { $0.yield(AdapterListSnapshot(bluetoothdAvailable: true)) } }
    func setPowered(_ on: Bool, adapter: AdapterID) async throws(DomainError) {}
    func setDiscoverable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {}
    func setPairable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {}
    func setScanning(_ on: Bool, adapter: AdapterID, filter: DiscoveryFilter) async throws(DomainError) {}
}

/// A pseudo-terminal pair whose master side is read and discarded.
final class PseudoTerminal: @unchecked Sendable {
    let master: Int32
    let slave: Int32

    private init(master: Int32, slave: Int32) {
        self.master = master
        self.slave = slave
    }

    static func open() -> PseudoTerminal? {
        var m: Int32 = -1, s: Int32 = -1
        guard openpty(&m, &s, nil, nil, nil) == 0 else { return nil }
        var size = winsize(ws_row: 60, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(s, UInt(TIOCSWINSZ), &size)
        return PseudoTerminal(master: m, slave: s)
    }

    /// Reads the master side on a thread until cancelled (so writes never block).
    func drain() -> Thread {
        let fd = master
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while !Thread.current.isCancelled {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
            }
        }
        thread.start()
        return thread
    }

    func close() {
        Glibc.close(slave)
        Glibc.close(master)
    }
}
