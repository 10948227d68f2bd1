import Foundation
import Testing
import BLEParsing
import BlueZ
import DBus
import Domain
import Presenters
import TerminalUI
@testable import Dashboard
import Vocabulary

/// Text snapshots of every screen and dialog, from fixed states, at 80×24
/// and 120×40 and one column narrower than each. A snapshot that differs
/// fails with both texts; `RECORD_SNAPSHOTS=1` writes missing or changed
/// ones (review them with `git diff` before committing).
@Suite struct DashboardSnapshotTests {
    static let sizes = [(80, 24), (79, 24), (120, 40), (119, 40)]
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let hci0 = AdapterID(path: "/org/bluez/hci0")

    func id(_ address: String) throws -> DeviceID { DeviceID(adapter: hci0, address: try BluetoothAddress(address)) }
    func attribute(_ device: DeviceID, _ suffix: String) throws -> GATTAttributeID {
        guard let a = GATTAttributeID(path: try ObjectPath(device.path.rawValue + suffix)) else { throw DomainError("bad path") }
        return a
    }

    // MARK: Fixed states

    func base() -> DashboardView {
        var v = DashboardView(now: t0)
        v.timeZone = TimeZone(identifier: "UTC") ?? .current
        var adapters = AdaptersPresenter.State()
        adapters.adapters = .loaded([AdaptersPresenter.Row(id: hci0, title: "sim-host", address: "00:1A:7D:DA:71:13", power: .on,
                                                            pairable: .on, scan: .on, discovering: true)])
        adapters.selected = hci0
        v.adapters = adapters
        return v
    }

    func rows() throws -> [DeviceListPresenter.Row] {
        [
            DeviceListPresenter.Row(id: try id("E4:5F:01:AA:10:01"), title: "Polar H10 A1B2C3", rssi: -58, readings: [],
                                    paired: true, trusted: true, connected: true, lastSeen: t0, watch: .connected),
            DeviceListPresenter.Row(id: try id("CB:B8:33:4C:88:4F"), title: "Ruuvi 884F", rssi: -65, format: "ruuvi",
                                    readings: [Reading(.temperature, 24.5, unit: "°C"), Reading(.humidity, 45.25, unit: "%"),
                                               Reading(.pressure, 1013.6, unit: "hPa"), Reading(.battery, 87, unit: "%")],
                                    lastSeen: t0.addingTimeInterval(-3)),
            DeviceListPresenter.Row(id: try id("A4:C1:38:8D:18:B2"), title: "SBHT-003C", rssi: -67, format: "bthome",
                                    readings: [Reading(.temperature, 23.4, unit: "°C"), Reading(.humidity, 52, unit: "%"),
                                               Reading(.battery, 93, unit: "%")],
                                    lastSeen: t0.addingTimeInterval(-12)),
            DeviceListPresenter.Row(id: try id("A4:C1:38:12:DB:F8"), title: "温度計 GVH5075", rssi: -79, format: "govee",
                                    readings: [Reading(.temperature, 19.8, unit: "°C")], lastSeen: t0.addingTimeInterval(-75),
                                    watch: .retrying(attempt: 3, delay: .seconds(4), reason: "le-connection-abort-by-local")),
            DeviceListPresenter.Row(id: try id("D0:3A:1B:2C:3D:4E"), title: "D0:3A:1B:2C:3D:4E", rssi: -91, format: "ibeacon",
                                    lastSeen: t0.addingTimeInterval(-400), stale: true),
        ]
    }

    func listView() throws -> DashboardView {
        var v = base()
        v.list.devices = .loaded(ChunkedArray(try rows()))
        v.list.scan = .on
        v.list.formats = ["bthome", "govee", "ibeacon", "ruuvi"]
        v.listCursor = 1
        return v
    }

    /// The app's loop reuses unchanged rows from the last frame
    /// (`DeviceRowCache`): every frame of a sequence that changes the time,
    /// the selection, one row's readings, the width and an overlay is the
    /// same, cell for cell, as drawing it from nothing, and the rows that
    /// did not change were copied, not drawn.
    @Test func reusedRowsDrawTheSameCellsAsRowsDrawnAfresh() throws {
        let cache = DeviceRowCache()
        var v = try listView()
        var width = 120
        func frame(_ what: String, reused expected: Int) {
            let before = cache.reused
            let cached = DashboardContent.render(v, layout: DashboardLayout(width: width, height: 40), rowCache: cache)
            let fresh = DashboardContent.render(v, width: width, height: 40)
            #expect(cached == fresh, "\(what):\n\(cached.text)\n---\n\(fresh.text)")
            #expect(cache.reused - before == expected, "\(what): \(cache.reused - before) rows reused")
        }
        frame("first frame", reused: 0)
        frame("the same view", reused: 5)
        v.now = t0.addingTimeInterval(65)
        frame("a minute later (the SEEN column moves on)", reused: 5)
        v.listCursor = 2
        frame("the selection moved down", reused: 3)
        var changed = try rows()
        changed[3].readings = [Reading(.temperature, 21.25, unit: "°C")]
        v.list.devices = .loaded(ChunkedArray(changed))
        frame("the wide-named row's reading changed", reused: 4)
        width = 119
        frame("one column narrower", reused: 0)
        frame("narrower again", reused: 5)
        v.help = true
        frame("the help overlay over the list", reused: 5)
    }

    func detailState(connected: Bool) throws -> DeviceDetailPresenter.State {
        let strap = try id("A4:C1:38:00:00:02")
        var s = DeviceDetailPresenter.State(id: strap)
        var d = DeviceDetails(id: strap)
        d.name = "Heart Strap"
        d.advertisedName = "Heart Strap"
        d.addressType = "public"
        d.rssi = -75
        d.txPower = 4
        d.connected = connected
        d.servicesResolved = connected
        d.paired = true
        d.bonded = true
        d.battery = connected ? 87 : nil
        d.uuids = ["0000180d-0000-1000-8000-00805f9b34fb", "0000180f-0000-1000-8000-00805f9b34fb"]
        d.lastSeen = t0.addingTimeInterval(-2)
        s.device = .loaded(d)
        s.rssiHistory = [-80, -78, -75, -74, -76, -75, -73, -75].enumerated().map { RSSISample(at: t0.addingTimeInterval(Double($0.offset)), value: Int16($0.element)) }
        s.history = .loaded([ReadingSeries(kind: .heartRate, label: "", points: [70, 72, 75, 80, 78, 74, 72, 71].enumerated().map {
            ReadingPoint(at: t0.addingTimeInterval(Double($0.offset) * 60), value: $0.element)
        })])
        s.watch = .notWatched
        if connected {
            let service = try attribute(strap, "/service0010")
            func node(_ suffix: String, _ uuid: String, _ flags: [String], _ value: [UInt8]?, notifying: Bool = false) throws -> GATTCharacteristicNode {
                GATTCharacteristicNode(id: try attribute(strap, "/service0010" + suffix), uuid: "0000\(uuid)-0000-1000-8000-00805f9b34fb",
                                       name: AttributeDecoding.name(of: uuid), flags: flags, canRead: flags.contains("read"),
                                       canWrite: flags.contains("write"), canWriteWithoutResponse: flags.contains("write-without-response"),
                                       canNotify: flags.contains("notify"), notifying: notifying, value: value,
                                       decoded: AttributeDecoding.decode(uuid: uuid, value: value), descriptors: [])
            }
            s.services = .loaded([GATTServiceNode(id: service, uuid: "0000180d-0000-1000-8000-00805f9b34fb", name: "Heart Rate", primary: true,
                                                  characteristics: [
                                                    try node("/char0011", "2a37", ["notify"], [0x00, 0x48], notifying: true),
                                                    try node("/char0014", "2a38", ["read"], [0x01]),
                                                    try node("/char0016", "2a39", ["write"], nil),
                                                  ])])
            if case let .loaded(services) = s.services, let control = services.first?.characteristics.last {
                s.operations[control.id] = .failed("writing char0016 of A4:C1:38:00:00:02 failed: org.bluez.Error.NotPermitted: Write not permitted")
            }
        } else {
            s.services = .unavailable(.notConnected)
        }
        return s
    }

    func detailView(connected: Bool) throws -> DashboardView {
        var v = try listView()
        let s = try detailState(connected: connected)
        v.screen = .deviceDetail(s.id)
        v.detail = s
        v.detailCursor = 1
        return v
    }

    func pairingView(_ phase: PairingPresenter.Phase, input: String = "", problem: String? = nil) throws -> DashboardView {
        var v = try detailView(connected: false)
        let lock = try id("F4:12:FA:33:44:55")
        v.detail?.device = .loaded({ var d = DeviceDetails(id: lock); d.name = "Nuki Lock"; return d }())
        v.screen = .pairing(lock)
        var p = PairingPresenter.State(device: lock)
        p.phase = phase
        p.input = input
        p.inputProblem = problem
        v.pairing = p
        return v
    }

    func logView() throws -> DashboardView {
        var v = base()
        v.list.devices = .loaded(ChunkedArray(try rows()))
        v.screen = .eventLog
        v.log.entries = .loaded([
            EventLogPresenter.Row(id: 1, at: t0.addingTimeInterval(-120), severity: .info, message: "bluetoothd is running", device: nil),
            EventLogPresenter.Row(id: 2, at: t0.addingTimeInterval(-90), severity: .info, message: "Polar H10 A1B2C3 connected", device: try id("E4:5F:01:AA:10:01")),
            EventLogPresenter.Row(id: 3, at: t0.addingTimeInterval(-60), severity: .warning,
                                  message: "connecting to 温度計 GVH5075 failed: le-connection-abort-by-local", device: try id("A4:C1:38:12:DB:F8")),
            EventLogPresenter.Row(id: 4, at: t0.addingTimeInterval(-30), severity: .error,
                                  message: "pairing with Nuki Lock failed: org.bluez.Error.AuthenticationFailed", device: try id("F4:12:FA:33:44:55")),
        ])
        v.logCursor = 2
        return v
    }

    func cases() throws -> [(String, DashboardView)] {
        var out: [(String, DashboardView)] = []
        out.append(("list", try listView()))
        var empty = base()
        empty.list.devices = .loaded([])
        out.append(("list-empty", empty))
        var gone = base()
        gone.adapters.adapters = .unavailable(.bluetooth(.bluetoothdGone))
        gone.list.devices = .unavailable(.bluetooth(.bluetoothdGone))
        out.append(("list-bluetoothd-gone", gone))
        var search = try listView()
        search.list.filter.text = "ruu"
        search.list.devices = .loaded([try rows()[1]])
        search.listCursor = 0
        search.input = InputLine(purpose: .searchDevices, text: "ruu")
        out.append(("list-search", search))
        var notice = try listView()
        notice.notices = [Notice("connecting to 温度計 GVH5075 failed: le-connection-abort-by-local", level: .error, expires: t0.addingTimeInterval(5))]
        out.append(("list-notice", notice))
        var help = try listView()
        help.help = true
        out.append(("list-help", help))
        out.append(("detail-disconnected", try detailView(connected: false)))
        out.append(("detail-connected", try detailView(connected: true)))
        var confirm = try detailView(connected: true)
        confirm.detail?.confirming = .forget
        out.append(("detail-confirm-forget", confirm))
        var write = try detailView(connected: true)
        write.detailCursor = 2
        if let c = write.detailCharacteristics.last { write.input = InputLine(purpose: .write(c.id, withoutResponse: false), text: "01") }
        out.append(("detail-write", write))
        out.append(("pairing-working", try pairingView(.pairing(question: nil))))
        out.append(("pairing-passkey", try pairingView(.pairing(question: .enterPasskey), input: "1234", problem: "enter the 6 digits the device shows")))
        out.append(("pairing-pin", try pairingView(.pairing(question: .enterPIN), input: "0000")))
        out.append(("pairing-confirm", try pairingView(.pairing(question: .confirmPasskey("123456")))))
        out.append(("pairing-authorize", try pairingView(.pairing(question: .authorize))))
        out.append(("pairing-authorize-service", try pairingView(.pairing(question: .authorizeService("0000180d-0000-1000-8000-00805f9b34fb")))))
        out.append(("pairing-display", try pairingView(.pairing(question: .typeOnDevice("482915")))))
        out.append(("pairing-paired", try pairingView(.paired)))
        out.append(("pairing-failed", try pairingView(.failed("pairing with F4:12:FA:33:44:55 failed: org.bluez.Error.AuthenticationFailed"))))
        out.append(("log", try logView()))
        var adapters = base()
        adapters.screen = .adapters
        adapters.adapters.appliedFilter = DiscoveryFilterDraft(rssiThreshold: -70)
        adapters.adapters.error = "cannot start scanning on hci0: NotReady: Resource Not Ready"
        out.append(("adapters", adapters))
        return out
    }

    // MARK: The test

    @Test(arguments: DashboardSnapshotTests.sizes.map { "\($0.0)x\($0.1)" })
    func everyScreenMatchesItsSnapshot(size: String) throws {
        let parts = size.split(separator: "x").compactMap { Int($0) }
        let (w, h) = (parts[0], parts[1])
        let record = ProcessInfo.processInfo.environment["RECORD_SNAPSHOTS"] == "1"
        for (name, view) in try cases() {
            let text = DashboardContent.render(view, width: w, height: h).text
            // Every row is exactly the terminal's width in columns.
            for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                #expect(TextWidth.of(String(line)) == w, "\(name) \(size) row \(i) is \(TextWidth.of(String(line))) columns: \(line)")
            }
            let file = DashboardSnapshotTests.directory.appendingPathComponent("\(name)-\(size).txt")
            let stored = try? String(contentsOf: file, encoding: .utf8)
            if stored != text + "\n" {
                if record {
                    try FileManager.default.createDirectory(at: DashboardSnapshotTests.directory, withIntermediateDirectories: true)
                    try (text + "\n").write(to: file, atomically: true, encoding: .utf8)
                } else {
                    Issue.record("snapshot \(name)-\(size) differs (RECORD_SNAPSHOTS=1 to accept):\n--- stored\n\(stored ?? "(none)")\n--- now\n\(text)")
                }
            }
        }
    }

    /// The list's hint follows why Bluetooth is unavailable (the reason as
    /// a value, not words matched in its sentence).
    @Test func theListSaysWhatToDoForEachReasonBluetoothIsUnavailable() {
        let cases: [(Availability, String, String)] = [
            (.bluetoothdGone, "bluetoothd is not running", "sudo systemctl start bluetooth"),
            (.noAdapter, "no Bluetooth adapter", "Plug in an adapter"),
            (.adapterOff(hci0), "adapter hci0 is powered off", "Press a for adapters, then P to power it on."),
        ]
        for (availability, reason, hint) in cases {
            var view = base()
            view.list.devices = .unavailable(.bluetooth(availability))
            let text = DashboardContent.render(view, width: 120, height: 40).text
            #expect(text.contains(reason) && text.contains(hint), "\(availability):\n\(text)")
        }
    }

    @Test func aTooSmallTerminalSaysSo() {
        let text = DashboardContent.render(base(), width: 40, height: 10).text
        #expect(text.contains("Terminal too small: 40×10."))
        #expect(text.contains("needs at least 60×16"))
    }

    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Snapshots")
    }
}
