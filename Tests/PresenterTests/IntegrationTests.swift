import Foundation
import Testing
import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters

/// The device list presenter over the real repository, the real client and
/// the simulator on a private dbus-daemon.
@Suite(.timeLimit(.minutes(1))) struct DeviceListIntegrationTests {
    @Test func scanningTheDemoHomeThenBluetoothdLeaving() async throws {
        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        let simulator = sim.simulator, client = sim.client
        let repository = BlueZDeviceRepository(client: client)
        let presenter = DeviceListPresenter(repository: repository, navigator: Navigator())

        presenter.send(.scanToggled)
        let found = await waitFor(presenter, within: 10) { state in
            guard case .on = state.scan, let rows = state.devices.value else { return false }
            return rows.count >= 9
                && rows.contains { $0.title == "Ruuvi 884F" && $0.format == "ruuvi" && $0.readings.contains { $0.kind == .temperature && $0.unit == "°C" } }
        }
        #expect(found, "\(presenter.state)")

        // Sorted by RSSI, strongest first.
        let rssis = presenter.state.devices.value?.compactMap(\.rssi) ?? []
        #expect(rssis == rssis.sorted(by: >))

        await simulator.stop()
        let gone = await waitFor(presenter, within: 10) { $0.devices == .unavailable(.bluetooth(.bluetoothdGone)) }
        #expect(gone, "\(presenter.state)")
    }

    /// `scan.filter.uuids: [fcd2]`: bluetoothd (and the simulator, which
    /// follows it) matches filter UUIDs only against advertised UUID lists,
    /// so the service filter is ours: a BTHome sensor carries fcd2 only as
    /// service data and must still be listed; the heart strap lists 180d.
    @Test func theServiceFilterMatchesServiceDataAndUUIDListsInOurProcess() async throws {
        let sim = try await Simulated.start("demo-home.json")
        defer { sim.bus.stop() }
        for (service, expected) in [("fcd2", "SBHT-003C"), ("0000180d-0000-1000-8000-00805f9b34fb", "Polar H10 A1B2C3")] {
            let repository = BlueZDeviceRepository(client: sim.client, services: [service])
            let presenter = DeviceListPresenter(repository: repository, navigator: Navigator())
            presenter.send(.scanToggled)
            let found = await waitFor(presenter, within: 10) { state in
                state.devices.value?.map(\.title) == [expected]
            }
            #expect(found, "\(service): \(presenter.state)")
            // Other devices keep advertising: still only the one after a while.
            try await Task.sleep(for: .milliseconds(1500))
            #expect(presenter.state.devices.value?.map(\.title) == [expected], "\(service): \(presenter.state)")
            presenter.send(.scanToggled)
            _ = await waitFor(presenter, within: 5) { if case .off = $0.scan { return true } else { return false } }
        }
    }

    @Test func poweringTheAdapterOffEndsTheScanAndTheNextToggleStartsANewOne() async throws {
        let sim = try await Simulated.start("test-basic.json")
        defer { sim.bus.stop() }
        let client = sim.client
        let hci0 = AdapterID(path: "/org/bluez/hci0")
        let presenter = DeviceListPresenter(repository: BlueZDeviceRepository(client: client), navigator: Navigator())
        presenter.send(.scanToggled)
        #expect(await waitFor(presenter, within: 10) { $0.scan == .on && ($0.devices.value?.count ?? 0) >= 1 }, "\(presenter.state)")
        try await client.setPowered(false, adapter: hci0)
        #expect(await waitFor(presenter, within: 10) { $0.scan == .off && $0.devices == .unavailable(.bluetooth(.adapterOff(AdapterID(path: "/org/bluez/hci0")))) },
                "\(presenter.state)")
        try await client.setPowered(true, adapter: hci0)
        #expect(await waitFor(presenter, within: 10) { $0.scan == .off && $0.devices.value != nil }, "\(presenter.state)")
        presenter.send(.scanToggled)
        #expect(await waitFor(presenter, within: 10) { $0.scan == .on })
        try await client.mirror.wait(for: "discovering again", timeout: .seconds(5)) { $0.adapters[hci0]?.discovering == true }
        presenter.send(.scanToggled)
        #expect(await waitFor(presenter, within: 10) { $0.scan == .off })
        await sim.simulator.stop()
    }
}
