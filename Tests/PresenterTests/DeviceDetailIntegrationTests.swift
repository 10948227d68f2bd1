import Foundation
import ScenarioFormat
import Testing
import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters
import Vocabulary

/// The device detail presenter over the real BlueZ device control, the
/// simulator's heart-rate strap on a private dbus-daemon, and a real SQLite
/// reading history.
@Suite(.timeLimit(.minutes(1))) struct DeviceDetailIntegrationTests {
    @Test func connectReadNotifyWriteDisconnectAndForgetTheHeartStrap() async throws {
        // The strap notifies 74 bpm once (no repeating timeline; 72 is its
        // cached value before any notification), so every
        // value it shows stays until the next one and each check below looks
        // at where the state settles, not at a state in passing (states are
        // coalesced: a slow observer sees only the latest).
        // The strap notifies 74 bpm once, instead of the fixture's repeating
        // 72/74 (which replaced the write's 80 within 100 ms: a coalescing
        // observer could miss it). Scenario UUIDs are in the canonical form.
        var replaced = 0
        let sim = try await Simulated.start("test-basic.json") { scenario in
            for d in scenario.devices.indices where scenario.devices[d].address == "A4:C1:38:00:00:02" {
                for s in scenario.devices[d].gatt.indices {
                    for c in scenario.devices[d].gatt[s].characteristics.indices
                    where scenario.devices[d].gatt[s].characteristics[c].uuid == BluetoothUUID(uuid16: 0x2A37).string {
                        scenario.devices[d].gatt[s].characteristics[c].notifications = Timeline(events: [ValueEvent(at: 0.1, value: [0x00, 0x4A])])
                        replaced += 1
                    }
                }
            }
        }
        #expect(replaced == 1, "the heart rate characteristic's notifications were not replaced")
        defer { sim.bus.stop() }
        let client = sim.client
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("detail-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let history = try ReadingStore(path: dir.appendingPathComponent("readings.sqlite").path)

        let session = try await client.discover(adapter: try client.adapter().id)
        let strap = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("A4:C1:38:00:00:02"))
        try await client.mirror.wait(for: "heart strap", timeout: .seconds(5)) { $0.devices[strap] != nil }

        let navigator = Navigator()
        navigator.push(.deviceDetail(strap))
        let presenter = DeviceDetailPresenter(device: strap, control: BlueZDeviceControl(client: client), history: history,
                                              watchList: nil, navigator: navigator)
        // Battery1 appears once connected, as bluetoothd's battery plugin does.
        #expect(await waitFor(presenter) { s in
            s.device.value?.name == "Heart Strap" && s.device.value?.battery == nil && s.services == .unavailable(.notConnected)
        }, "\(presenter.state)")

        presenter.send(.connectRequested)
        #expect(await waitFor(presenter) { s in
            s.command == .idle && s.device.value?.connected == true && s.device.value?.battery == 87 && (s.services.value?.first?.characteristics.count ?? 0) == 4
        }, "\(presenter.state)")
        let chars = presenter.state.services.value?.first?.characteristics ?? []
        let hr = try #require(chars.first { $0.uuid.hasPrefix("00002a37") })
        let location = try #require(chars.first { $0.uuid.hasPrefix("00002a38") })
        let control = try #require(chars.first { $0.uuid.hasPrefix("00002a39") })
        #expect(presenter.state.services.value?.first?.name == "Heart Rate")
        #expect(hr.canNotify && !hr.canRead && location.canRead && control.canWrite)

        presenter.send(.readRequested(location.id))
        #expect(await waitFor(presenter) { s in
            s.operations[location.id] == nil
                && s.services.value?.first?.characteristics.first { $0.id == location.id }?.decoded == .fields(["location": "chest"], order: ["location"])
        }, "\(presenter.state)")

        presenter.send(.notifyToggled(hr.id))
        #expect(await waitFor(presenter) { s in
            s.operations[hr.id] == nil && s.services.value?.first?.characteristics.first { $0.id == hr.id }?.notifying == true
        }, "\(presenter.state)")
        // The strap's timeline notifies 74 bpm.
        #expect(await waitFor(presenter) { heartRate(in: $0, hr.id) == 74 }, "\(presenter.state)")

        // Writing 01 to the control point makes the strap notify 80 bpm 50 ms
        // later; on a loaded machine that can land before the write's reply:
        // watch for 80 from before the write, then for the write's end.
        let sees80 = Task { await waitFor(presenter) { s in heartRate(in: s, hr.id) == 80 } }
        try await Task.sleep(for: .milliseconds(20))
        presenter.send(.writeRequested(control.id, hex: "01", withoutResponse: false))
        #expect(await sees80.value, "\(presenter.state)")
        #expect(await waitFor(presenter) { s in s.operations[control.id] == nil }, "\(presenter.state)")

        // A write the device refuses says why (nothing was pending before it;
        // the refusal can arrive before `send` returns, so look first).
        #expect(presenter.state.operations[location.id] == nil)
        presenter.send(.writeRequested(location.id, hex: "02", withoutResponse: false))
        #expect(await waitFor(presenter) { s in
            if case .failed("this characteristic cannot be written")? = s.operations[location.id] { return true }
            return false
        })

        presenter.send(.disconnectRequested)
        #expect(await waitFor(presenter) { $0.command == .idle && $0.device.value?.connected == false }, "\(presenter.state)")

        presenter.send(.forgetRequested)
        presenter.send(.forgetConfirmed)
        #expect(await waitFor(presenter) { s in
            if case .failed = s.device { return s.command == .idle }
            return false
        }, "\(presenter.state)")
        #expect(navigator.stack == [.deviceList])
        await session.stop()
        await sim.simulator.stop()
    }
}

/// The heart rate the detail screen shows for characteristic `id`, if decoded.
private func heartRate(in state: DeviceDetailPresenter.State, _ id: GATTAttributeID) -> Double? {
    guard let c = state.services.value?.flatMap(\.characteristics).first(where: { $0.id == id }),
          case let .readings(r)? = c.decoded else { return nil }
    return r.first?.value.number
}
