import Foundation
import Locking
import Testing
import BLEParsing
import BlueZ
import DBus
import Domain
import Presenters
import TerminalUI
import TestSupport
@testable import Dashboard
import Vocabulary

// Fakes implementing the repositories' protocols (the screen runs real presenters on them).

final class ListRepository: DeviceRepository {
    let store: StateStore<DeviceListSnapshot>
    let scans = Lock<[Bool]>([])
    init(_ snapshot: DeviceListSnapshot) { store = StateStore(snapshot) }
    func snapshots() -> AsyncStream<DeviceListSnapshot> { store.states() }
    func setScanning(_ on: Bool) async throws(DomainError) {
        scans.withLock { $0.append(on) }
        store.update { $0.scanning = on }
    }
}

final class Control: DeviceControl {
    let store = StateStore(DeviceDetailSnapshot(availability: .available))
    let calls = Lock<[String]>([])
    func details(of id: DeviceID) -> AsyncStream<DeviceDetailSnapshot> { store.states() }
    func connect(_ id: DeviceID) async throws(DomainError) { calls.withLock { $0.append("connect \(id.address)") } }
    func disconnect(_ id: DeviceID) async throws(DomainError) { calls.withLock { $0.append("disconnect") } }
    func setTrusted(_ on: Bool, _ id: DeviceID) async throws(DomainError) { calls.withLock { $0.append("trust \(on)") } }
    func forget(_ id: DeviceID) async throws(DomainError) { calls.withLock { $0.append("forget") } }
    func read(_ c: GATTAttributeID) async throws(DomainError) -> [UInt8] {
        calls.withLock { $0.append("read") }
        throw DomainError("reading failed: org.bluez.Error.NotPermitted")
    }
    func write(_ c: GATTAttributeID, _ value: [UInt8], withoutResponse: Bool) async throws(DomainError) {
        calls.withLock { $0.append("write \(value)") }
    }
    func setNotifying(_ on: Bool, _ c: GATTAttributeID) async throws(DomainError) { calls.withLock { $0.append("notify \(on)") } }
}

/// Asks for a passkey and finishes pairing when it is answered.
final class Pairing: PairingService {
    let store = StateStore<PairingPrompt?>(nil)
    let answers = Lock<[AgentResponse]>([])
    let paired = Lock<[DeviceID]>([])
    private let waiting = Lock<CheckedContinuation<Void, Never>?>(nil)
    func prompts() -> AsyncStream<PairingPrompt?> { store.states() }
    func outcomes() -> AsyncStream<PairingOutcome> { AsyncStream { $0.finish() } }
    func pair(_ device: DeviceID) async throws(DomainError) {
        paired.withLock { $0.append(device) }
        await withCheckedContinuation { c in
            waiting.withLock { $0 = c }
            store.update { $0 = PairingPrompt(id: 1, request: .passkey(device)) }
        }
        store.update { $0 = nil }
    }
    func cancelPairing(_ device: DeviceID) async throws(DomainError) {}
    func answer(_ id: UInt64, _ response: AgentResponse) {
        answers.withLock { $0.append(response) }
        waiting.withLock { w in defer { w = nil }; return w }?.resume()
    }
}

final class Adapters: AdapterRepository {
    let store: StateStore<AdapterListSnapshot>
    init(_ s: AdapterListSnapshot) { store = StateStore(s) }
    func snapshots() -> AsyncStream<AdapterListSnapshot> { store.states() }
    func setPowered(_ on: Bool, adapter: AdapterID) async throws(DomainError) {}
    func setDiscoverable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {}
    func setPairable(_ on: Bool, adapter: AdapterID) async throws(DomainError) {}
    func setScanning(_ on: Bool, adapter: AdapterID, filter: DiscoveryFilter) async throws(DomainError) {}
}

@Suite(.timeLimit(.minutes(1))) struct DashboardScreenTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")

    struct Harness {
        let screen: DashboardScreen
        let list: ListRepository
        let control: Control
        let pairing: Pairing
        let log: EventLog
        let device: DeviceID
        let characteristic: GATTAttributeID
    }

    func start(firmware: (any FirmwareService)? = nil) throws -> Harness {
        let device = DeviceID(adapter: hci0, address: try BluetoothAddress("A4:C1:38:00:00:02"))
        let other = DeviceID(adapter: hci0, address: try BluetoothAddress("C0:FE:00:00:00:01"))
        let list = ListRepository(DeviceListSnapshot(availability: .available, devices: [
            DeviceRecord(id: device, name: "Heart Strap", rssi: -60),
            DeviceRecord(id: other, name: "Ruuvi 0001", rssi: -70, format: "ruuvi"),
        ]))
        let control = Control()
        guard let c = GATTAttributeID(path: try ObjectPath(device.path.rawValue + "/service0010/char0014")),
              let s = GATTAttributeID(path: try ObjectPath(device.path.rawValue + "/service0010")) else { throw DomainError("path") }
        var d = DeviceDetails(id: device)
        d.name = "Heart Strap"
        d.connected = true
        d.servicesResolved = true
        control.store.update {
            $0 = DeviceDetailSnapshot(availability: .available, device: d, services: [GATTServiceNode(
                id: s, uuid: "0000180d-0000-1000-8000-00805f9b34fb", name: "Heart Rate", primary: true,
                characteristics: [GATTCharacteristicNode(id: c, uuid: "00002a38-0000-1000-8000-00805f9b34fb", name: "Body Sensor Location",
                                                         flags: ["read", "write"], canRead: true, canWrite: true, canWriteWithoutResponse: false,
                                                         canNotify: false, notifying: false, value: [1], decoded: nil, descriptors: [])])])
        }
        let pairing = Pairing()
        let log = EventLog()
        let adapters = Adapters(AdapterListSnapshot(bluetoothdAvailable: true))
        let env = DashboardEnvironment(devices: list, control: control, history: nil, watchList: nil, pairing: pairing,
                                       adapters: adapters, log: log, firmware: firmware)
        return Harness(screen: DashboardScreen(environment: env), list: list, control: control, pairing: pairing, log: log,
                       device: device, characteristic: c)
    }

    /// Applies the screen's own events until `condition` holds (they arrive
    /// from the presenters asynchronously).
    func settle(_ screen: DashboardScreen, _ condition: (DashboardView) -> Bool) async -> Bool {
        if condition(screen.view) { return true }
        let events = screen.changes
        // Generous: on a loaded 2-core CI machine the presenters' tasks can wait seconds for a thread.
        let deadline = ContinuousClock.now + .seconds(20)
        // A tick every 50 ms, so a quiet stream cannot hold the wait past its deadline.
        let post = screen.poster
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(50))
                post(.tick)
            }
        }
        defer { ticker.cancel() }
        for await e in events {
            screen.apply(e)
            if condition(screen.view) { return true }
            if ContinuousClock.now > deadline { return false }
        }
        return false
    }

    func press(_ screen: DashboardScreen, _ keys: Key...) {
        for k in keys { screen.apply(.terminal(.key(k))) }
    }

    /// F on the device screen opens its firmware screen: the slots, an image
    /// typed as a path, U uploads, tests and resets with a progress bar, w asks
    /// for Wi-Fi credentials (the password shown as bullets), Esc goes back.
    @Test func firmwareScreenUploadAndProvision() async throws {
        let service = FakeFirmwareService(stepDelay: .milliseconds(5))
        let h = try start(firmware: service)
        let screen = h.screen
        #expect(await settle(screen) { $0.list.devices.value?.count == 2 })
        press(screen, .enter)
        #expect(await settle(screen) { $0.screen == .deviceDetail(h.device) })
        press(screen, .character("F"))
        #expect(await settle(screen) { $0.screen == .firmware(h.device) && $0.firmware?.slots.value?.count == 1 })
        var text = DashboardContent.render(screen.view, width: 100, height: 30).text
        #expect(text.contains("slot 0  1.0.0  active confirmed") && text.contains("o to choose a file"), "\(text)")

        let image = MCUbootTestImage.make(size: 30_000, version: (2, 0, 0, 0))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("dash-\(UUID().uuidString).bin")
        try Data(image.bytes).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        press(screen, .character("o"))
        #expect(screen.view.context == .input)
        screen.apply(.terminal(.paste(file.path)))
        press(screen, .enter)
        #expect(await settle(screen) { $0.firmware?.image?.version == "2.0.0" })
        press(screen, .character("U"))
        #expect(await settle(screen) { if case .uploading = $0.firmware?.job { return true }; return false })
        text = DashboardContent.render(screen.view, width: 100, height: 30).text
        #expect(text.contains("KiB/s") && text.contains("░") || text.contains("█"), "a progress bar: \(text)")
        #expect(await settle(screen) { $0.notices.last?.text.contains("boots once on the next reset") == true }, "\(screen.view.notices)")
        #expect(service.memory.withLock { $0.calls }.suffix(3) == ["upload 30072", "mark \(Hex.string(image.hash)) false", "reset"])

        // Wi-Fi: the SSID, then the password as bullets.
        press(screen, .character("w"))
        screen.apply(.terminal(.paste("HomeNet")))
        press(screen, .enter)
        #expect(screen.view.input?.purpose == .wifiPassword(ssid: "HomeNet"))
        screen.apply(.terminal(.paste("right")))
        text = DashboardContent.render(screen.view, width: 100, height: 30).text
        #expect(text.contains("password for HomeNet: •••••") && !text.contains("right"), "\(text)")
        press(screen, .enter)
        #expect(await settle(screen) { $0.notices.last?.text.contains("http://10.0.0.9/") == true }, "\(screen.view.notices)")
        #expect(service.memory.withLock { $0.passwords } == [Array("right".utf8)])

        press(screen, .escape)
        #expect(await settle(screen) { $0.screen == .deviceDetail(h.device) && $0.firmware == nil })
    }

    @Test func scanSearchOpenConnectReadAndBack() async throws {
        let h = try start()
        let screen = h.screen
        #expect(await settle(screen) { $0.list.devices.value?.count == 2 })
        press(screen, .character("s"))
        #expect(await settle(screen) { $0.list.scan == .on })
        #expect(h.list.scans.withLock { $0 } == [true])

        // Search filters as the user types; Esc clears it.
        press(screen, .character("/"), .character("r"), .character("u"))
        #expect(screen.view.context == .input)
        #expect(await settle(screen) { $0.list.filter.text == "ru" && $0.list.devices.value?.map(\.title) == ["Ruuvi 0001"] })
        press(screen, .escape)
        #expect(await settle(screen) { $0.list.filter.text == "" && $0.list.devices.value?.count == 2 })
        #expect(screen.view.input == nil)

        // Enter opens the selected device; c connects; Enter reads the selected characteristic.
        press(screen, .character("j"), .character("k"), .enter)
        #expect(await settle(screen) { $0.screen == .deviceDetail(h.device) && $0.detail?.services.value?.count == 1 })
        press(screen, .character("c"))       // connected: c disconnects
        #expect(await settle(screen) { _ in h.control.calls.withLock { $0 } == ["disconnect"] })
        press(screen, .enter)
        // A failure is logged and becomes a notice.
        #expect(await settle(screen) { $0.notices.last?.text.contains("reading failed") == true }, "\(screen.view.notices)")
        #expect(h.log.current.entries.last?.message.contains("reading failed") == true)

        // w opens a hex field; Enter writes.
        press(screen, .character("w"), .character("0"), .character("2"), .enter)
        #expect(await settle(screen) { _ in h.control.calls.withLock { $0.last } == "write [2]" })

        // ? shows the detail screen's keys; Esc closes; Esc goes back.
        press(screen, .character("?"))
        #expect(screen.view.help)
        let helpText = DashboardContent.render(screen.view, width: 80, height: 24).text
        #expect(helpText.contains("Keys — device") && helpText.contains("notifications on/off"))
        press(screen, .escape)
        #expect(!screen.view.help)
        press(screen, .escape)
        #expect(await settle(screen) { $0.screen == .deviceList && $0.detail == nil })
        press(screen, .character("q"))
        #expect(screen.quitRequested)
    }

    @Test func pairingAPasskeyDeviceFromTheDetailScreen() async throws {
        let h = try start()
        let screen = h.screen
        #expect(await settle(screen) { $0.list.devices.value?.count == 2 })
        press(screen, .enter)
        #expect(await settle(screen) { $0.screen == .deviceDetail(h.device) && $0.detail?.device.value != nil })
        press(screen, .character("p"))
        #expect(await settle(screen) { v in
            if case .pairing(question: .enterPasskey)? = v.pairing?.phase { return v.screen == .pairing(h.device) }
            return false
        }, "\(screen.view.screen) \(String(describing: screen.view.pairing)) \(h.pairing.paired.withLock { $0 })")
        #expect(screen.view.context == .pairing)
        for c in "123456" { press(screen, .character(c)) }
        #expect(await settle(screen) { $0.pairing?.input == "123456" && $0.pairing?.inputProblem == nil })
        press(screen, .enter)
        #expect(await settle(screen) { _ in h.pairing.answers.withLock { $0 } == [.passkey(123456)] })
        #expect(await settle(screen) { $0.pairing?.phase == .paired })
        #expect(DashboardContent.render(screen.view, width: 80, height: 24).text.contains("✓ Paired with Heart Strap."))
        press(screen, .escape)
        #expect(await settle(screen) { $0.screen == .deviceDetail(h.device) && $0.pairing == nil })
    }

    @Test func idleMeansNoTicksAndScanningSpins() async throws {
        let h = try start()
        let screen = h.screen
        #expect(await settle(screen) { $0.list.devices.value?.count == 2 })
        // Nothing moves: no last-seen ages (no device heard yet), no scan, no notices.
        #expect(screen.nextTickInterval() == nil)
        press(screen, .character("s"))
        #expect(await settle(screen) { $0.list.scan == .on })
        #expect(screen.nextTickInterval() == .milliseconds(125))
    }

    @Test func theCursorFollowsItsDeviceWhenTheListReorders() async throws {
        let h = try start()
        let screen = h.screen
        #expect(await settle(screen) { $0.list.devices.value?.count == 2 })
        press(screen, .character("j"))
        #expect(screen.view.listCursor == 1 && screen.view.list.devices.value?[1].title == "Ruuvi 0001")
        // The Ruuvi gets stronger and moves to the top: the cursor goes with it.
        h.list.store.update { s in
            if let i = s.devices.firstIndex(where: { $0.name == "Ruuvi 0001" }) { s.devices[i].rssi = -40 }
        }
        #expect(await settle(screen) { $0.list.devices.value?.first?.title == "Ruuvi 0001" })
        #expect(screen.view.listCursor == 0)
        #expect(screen.view.listSelection == screen.view.list.devices.value?.first?.id)
    }

    /// A list state that changes only rows off screen asks for no frame; one
    /// that changes a row in the window, the count or a setting does.
    @Test func onlyAStateThatChangesWhatIsShownAsksForAFrame() throws {
        let screen = try start().screen
        let adapter = try AdapterID(name: "hci0")
        func rows(_ changed: Int? = nil, count: Int = 100) throws -> DeviceListPresenter.Rows {
            DeviceListPresenter.Rows(try (0..<count).map { i in
                let address = try #require(BluetoothAddress(bytes: [0xC0, 0, 0, 0, UInt8(i >> 8), UInt8(i & 0xFF)]))
                return DeviceListPresenter.Row(id: DeviceID(adapter: adapter, address: address), title: "Tag \(i)",
                                               rssi: Int16(-40 - i / 4), format: "ruuvi",
                                               readings: [Reading(.temperature, i == changed ? 30.0 : 20.0)], lastSeen: nil, stale: false)
            })
        }
        func state(_ rows: DeviceListPresenter.Rows) -> DeviceListPresenter.State {
            var s = DeviceListPresenter.State()
            s.devices = .loaded(rows)
            s.scan = .on
            return s
        }
        screen.layout = DashboardLayout(width: 80, height: 24)   // 19 rows shown, from the top
        screen.apply(.list(state(try rows())))
        screen.needsDraw = false   // drawn
        screen.apply(.list(state(try rows(80))))
        #expect(!screen.needsDraw, "row 80 is off screen")
        screen.apply(.list(state(try rows(3))))
        #expect(screen.needsDraw, "row 3 is on screen")
        screen.needsDraw = false
        screen.apply(.list(state(try rows(3, count: 101))))
        #expect(screen.needsDraw, "the count is in the header")
        screen.needsDraw = false
        var sorted = state(try rows(3, count: 101))
        sorted.sort = .name
        screen.apply(.list(sorted))
        #expect(screen.needsDraw, "a setting changed")
        // A frame already due stays due whatever comes next.
        screen.apply(.list(sorted))
        #expect(screen.needsDraw)
        // The cursor's device is found near where it was.
        let list = try rows(count: 100)
        for (near, target) in [(0, 0), (0, 99), (50, 49), (99, 0), (500, 7), (-3, 12)] {
            #expect(DashboardScreen.index(of: list[target].id, in: list, near: near) == target)
        }
        #expect(DashboardScreen.index(of: DeviceID(adapter: adapter, address: try BluetoothAddress("00:11:22:33:44:55")), in: list, near: 5) == nil)
    }

    @Test func mouseSelectsThenOpens() async throws {
        let h = try start()
        let screen = h.screen
        #expect(await settle(screen) { $0.list.devices.value?.count == 2 })
        // The second row as drawn: find it in the rendered frame, not by
        // the layout's arithmetic, so drawing and hit-test are checked
        // against each other.
        let frame = DashboardContent.render(screen.view, layout: screen.layout).text.split(separator: "\n", omittingEmptySubsequences: false)
        let second = try #require(screen.view.list.devices.value?[1].title)
        let y = try #require(frame.firstIndex { $0.contains(second) && !$0.hasPrefix("▶") })
        screen.apply(.terminal(.mouse(MouseEvent(kind: .press(button: 0), x: 5, y: y - 2))))
        #expect(screen.view.listCursor == 0 && screen.view.screen == .deviceList, "the column titles are not a row")
        screen.apply(.terminal(.mouse(MouseEvent(kind: .press(button: 0), x: 5, y: y))))
        #expect(screen.view.listCursor == 1)
        screen.apply(.terminal(.mouse(MouseEvent(kind: .press(button: 0), x: 5, y: y))))
        #expect(await settle(screen) { v in if case .deviceDetail = v.screen { return true } else { return false } })
    }
}

/// The one layout the drawing and the mouse share.
@Suite struct DashboardLayoutTests {
    @Test func regionsTileTheScreen() {
        for (w, h) in [(60, 16), (80, 24), (200, 60)] {
            let l = DashboardLayout(width: w, height: h)
            #expect(!l.tooSmall)
            #expect(l.header.y == 0 && l.body.y == 1 && l.statusLine.y == h - 2 && l.footer.y == h - 1)
            #expect(l.body.maxY == l.statusLine.y, "nothing between the body and the status line")
            #expect(l.deviceList.rows.y == l.body.y + 2 && l.deviceList.rows.maxY == l.body.maxY)
            #expect(l.visibleDeviceRows == h - 5)
        }
        #expect(DashboardLayout(width: 59, height: 40).tooSmall)
        #expect(DashboardLayout(width: 100, height: 15).tooSmall)
    }

    @Test func theHitTestFollowsTheScrolling() {
        let l = DashboardLayout(width: 80, height: 24)   // 19 rows from y = 3
        #expect(l.deviceListIndex(atRow: 2, cursor: 0, count: 100) == nil, "column titles")
        #expect(l.deviceListIndex(atRow: 3, cursor: 0, count: 100) == 0)
        #expect(l.deviceListIndex(atRow: 21, cursor: 0, count: 100) == 18)
        #expect(l.deviceListIndex(atRow: 22, cursor: 0, count: 100) == nil, "status line")
        #expect(l.deviceListIndex(atRow: 3, cursor: 50, count: 100) == 41, "the cursor kept mid-view")
        #expect(l.deviceListIndex(atRow: 3, cursor: 99, count: 100) == 81, "the last page")
        #expect(l.deviceListIndex(atRow: 6, cursor: 0, count: 3) == nil, "below a short list's end")
        #expect(l.deviceListIndex(atRow: 3, cursor: 500, count: 3) == 0, "a cursor past the end is clamped")
        #expect(DashboardLayout(width: 40, height: 10).deviceListIndex(atRow: 3, cursor: 0, count: 5) == nil)
    }
}
