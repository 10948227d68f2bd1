import Foundation
import Testing
import TestSupport
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters
import Vocabulary

/// The adapters presenter over the real repository, the real client and the
/// simulator on a private dbus-daemon.
@Suite(.timeLimit(.minutes(1))) struct AdaptersIntegrationTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")

    @Test func poweringOffAndOnThenScanningWithAFilterAndStopping() async throws {
        let sim = try await Simulated.start("test-basic.json")
        defer { sim.bus.stop() }
        let client = sim.client, hci0 = self.hci0
        let ruuvi = try BluetoothAddress("C0:FE:00:00:00:01")         // RSSI -60 (-55…-70 over its timeline)
        let strap = try BluetoothAddress("A4:C1:38:00:00:02")         // RSSI -75, name "Heart Strap"
        let repository = BlueZAdapterRepository(client: client)
        let devices = BlueZDeviceRepository(client: client)
        let presenter = AdaptersPresenter(repository: repository)

        let ready = await first(presenter.states()) { $0.selected == hci0 && $0.adapters.value?.first?.power == .on }
        #expect(ready?.adapters.value?.map(\.title) == ["sim-host"], "\(presenter.state)")
        #expect(ready?.adapters.value?.first?.address == "00:1A:7D:DA:71:13")

        // Power off: the row says so, bluetoothd agrees, and the device list
        // is unavailable for the same reason.
        presenter.send(.powerToggled)
        let off = await first(presenter.states()) { $0.pending == nil && $0.adapters.value?.first?.power == .off }
        // bluetoothd 5.66 has PowerState only with --experimental; the row goes by Powered.
        #expect(off?.adapters.value?.first?.powerState == nil, "\(presenter.state)")
        #expect(off?.error == nil)
        #expect(client.mirror.snapshot().adapters[hci0]?.powered == false)
        let listOff = await first(devices.snapshots()) { $0.availability == .adapterOff(hci0) }
        #expect(listOff != nil)

        // Scanning while off fails with bluetoothd's reason.
        presenter.send(.scanToggled)
        let refused = await first(presenter.states()) { $0.pending == nil && $0.error != nil }
        #expect(refused?.error == "cannot start scanning on hci0: NotReady: Resource Not Ready", "\(presenter.state)")
        presenter.send(.errorDismissed)

        presenter.send(.powerToggled)
        let on = await first(presenter.states()) { $0.pending == nil && $0.adapters.value?.first?.power == .on }
        #expect(on?.error == nil, "\(presenter.state)")
        #expect(client.mirror.snapshot().adapters[hci0]?.powered == true)

        // An LE scan of devices at -65 dBm or stronger.
        presenter.send(.filterTransportChanged(.le))
        presenter.send(.filterRSSIChanged(-65))
        presenter.send(.filterApplied)
        presenter.send(.scanToggled)
        let strong = DiscoveryFilter(rssi: -65, transport: .le, duplicateData: false)
        let scanning = await first(presenter.states()) { s in
            guard let row = s.adapters.value?.first else { return false }
            return row.scan == .on && row.scanFilter == strong && row.discovering
        }
        #expect(scanning != nil, "\(presenter.state)")
        #expect(client.mirror.snapshot().adapters[hci0]?.discovering == true)
        // The filter reached bluetoothd: the Ruuvi is reported, the weaker
        // strap is not (without the filter both are reported at once).
        try await client.mirror.wait(for: "the Ruuvi to be discovered", timeout: .seconds(5)) { $0.device(ruuvi, on: hci0) != nil }
        try await Task.sleep(for: .milliseconds(300))
        #expect(client.mirror.snapshot().device(strap, on: hci0) == nil)

        // A new filter while scanning restarts the scan with it.
        presenter.send(.filterRSSIChanged(nil))
        presenter.send(.filterPatternChanged("Heart"))
        presenter.send(.filterApplied)
        let named = DiscoveryFilter(transport: .le, duplicateData: false, pattern: "Heart")
        let restarted = await first(presenter.states()) { s in
            s.pending == nil && s.adapters.value?.first?.scan == .on && s.adapters.value?.first?.scanFilter == named
        }
        #expect(restarted?.error == nil, "\(presenter.state)")
        try await client.mirror.wait(for: "the strap to be discovered", timeout: .seconds(5)) { $0.device(strap, on: hci0) != nil }

        presenter.send(.scanToggled)
        let stopped = await first(presenter.states()) { s in
            guard let row = s.adapters.value?.first else { return false }
            return row.scan == .off && !row.discovering
        }
        #expect(stopped?.adapters.value?.first?.scanFilter == nil, "\(presenter.state)")
        #expect(client.mirror.snapshot().adapters[hci0]?.discovering == false)

        await sim.simulator.stop()
        let gone = await first(presenter.states()) { $0.adapters == .unavailable(.bluetooth(.bluetoothdGone)) }
        #expect(gone?.selected == hci0, "\(presenter.state)")
    }

    @Test func discoverableAndPairableReachBluetoothdAndPoweringOffEndsTheScan() async throws {
        let sim = try await Simulated.start("test-basic.json")
        defer { sim.bus.stop() }
        let client = sim.client, hci0 = self.hci0
        let repository = BlueZAdapterRepository(client: client)

        let initial = await first(repository.snapshots()) { $0.adapters.count == 1 }
        #expect(initial?.adapters.first?.pairable == true)
        #expect(initial?.adapters.first?.discoverable == false)
        #expect(initial?.adapters.first?.roles == ["central", "peripheral"])

        // Each operation returns once the repository's snapshot shows it.
        try await repository.setDiscoverable(true, adapter: hci0)
        #expect(await current(repository)?.adapters.first?.discoverable == true)
        #expect(client.mirror.snapshot().adapters[hci0]?.discoverable == true)
        try await repository.setPairable(false, adapter: hci0)
        #expect(await current(repository)?.adapters.first?.pairable == false)
        #expect(client.mirror.snapshot().adapters[hci0]?.pairable == false)

        let filter = DiscoveryFilter(transport: .le, duplicateData: false)
        try await repository.setScanning(true, adapter: hci0, filter: filter)
        #expect(await current(repository)?.discoveryFilters == [hci0: filter])
        try await client.mirror.wait(for: "discovery", timeout: .seconds(5)) { $0.adapters[hci0]?.discovering == true }

        // bluetoothd ends discovery when the adapter powers off; the
        // repository lets go of its session, so scanning can start afresh.
        try await repository.setPowered(false, adapter: hci0)
        #expect(await current(repository)?.discoveryFilters == [:])
        #expect(await current(repository)?.adapters.first?.discoverable == false)
        try await repository.setPowered(true, adapter: hci0)
        try await repository.setScanning(true, adapter: hci0, filter: filter)
        try await client.mirror.wait(for: "discovery again", timeout: .seconds(5)) { $0.adapters[hci0]?.discovering == true }
        try await repository.setScanning(false, adapter: hci0, filter: filter)
        #expect(await current(repository)?.discoveryFilters == [:])

        // Errors name the operation and the adapter.
        let hci5 = AdapterID(path: "/org/bluez/hci5")
        await #expect(throws: DomainError("cannot power on hci5: there is no adapter hci5 (bluetoothd has hci0)")) {
            try await repository.setPowered(true, adapter: hci5)
        }
        await sim.simulator.stop()
        _ = await first(repository.snapshots()) { !$0.bluetoothdAvailable }
        await #expect(throws: DomainError("cannot make hci0 pairable: bluetoothd is not running")) {
            try await repository.setPairable(true, adapter: hci0)
        }
    }

    @Test func theDeviceListScansThroughTheAdapterRepositorysOneSession() async throws {
        let sim = try await Simulated.start("test-basic.json")
        defer { sim.bus.stop() }
        let client = sim.client, hci0 = self.hci0
        let adapters = BlueZAdapterRepository(client: client)
        let devices = BlueZDeviceRepository(client: client, scanner: adapters)
        let list = DeviceListPresenter(repository: devices, navigator: Navigator())
        let screen = AdaptersPresenter(repository: adapters)

        // The list's toggle starts the adapter repository's session (LE by default)…
        list.send(.scanToggled)
        let le = await first(adapters.snapshots()) { $0.discoveryFilters[hci0] != nil }
        #expect(le?.discoveryFilters[hci0]?.transport == .le)
        #expect(await first(screen.states()) { $0.adapters.value?.first?.scan == .on } != nil, "\(screen.state)")

        // …the adapters screen applies a filter to that same session, and the
        // list's scan goes on with it: the weak strap (-75) is filtered out.
        let strict = DiscoveryFilter(rssi: -65, transport: .le)
        try await adapters.setScanning(true, adapter: hci0, filter: strict)
        #expect(await current(adapters)?.discoveryFilters == [hci0: strict])
        #expect(await waitFor(list) { $0.scan == .on })

        // Stopping from the list stops the one session.
        list.send(.scanToggled)
        #expect(await first(adapters.snapshots()) { $0.discoveryFilters.isEmpty } != nil)
        try await client.mirror.wait(for: "discovery off", timeout: .seconds(5)) { $0.adapters[hci0]?.discovering == false }
        #expect(await waitFor(list) { $0.scan == .off })
        #expect(await first(screen.states()) { $0.adapters.value?.first?.scan == .off } != nil, "\(screen.state)")
        await sim.simulator.stop()
    }

    /// The repository's snapshot now (a new subscriber gets it first).
    func current(_ repository: BlueZAdapterRepository) async -> AdapterListSnapshot? {
        await first(repository.snapshots(), within: 1) { _ in true }
    }
}
