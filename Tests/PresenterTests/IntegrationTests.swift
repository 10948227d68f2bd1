import Foundation
import Testing
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
                && rows.contains { $0.title == "Ruuvi 884F" && $0.format == "ruuvi" && $0.readings.contains { $0.hasPrefix("temperature ") } }
        }
        #expect(found, "\(presenter.state)")

        // Sorted by RSSI, strongest first.
        let rssis = presenter.state.devices.value?.compactMap(\.rssi) ?? []
        #expect(rssis == rssis.sorted(by: >))

        await simulator.stop()
        let gone = await waitFor(presenter, within: 10) { $0.devices == .unavailable("bluetoothd is not running") }
        #expect(gone, "\(presenter.state)")
    }

    func waitFor(_ presenter: DeviceListPresenter, within seconds: Double, _ condition: @escaping @Sendable (DeviceListPresenter.State) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        for await state in presenter.states() {
            if condition(state) { return true }
            if ContinuousClock.now > deadline { return false }
        }
        return false
    }
}
