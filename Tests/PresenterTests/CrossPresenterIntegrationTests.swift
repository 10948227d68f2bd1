import Foundation
import Testing
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters
import Vocabulary

/// Two presenters over the same real repositories: what one does appears in
/// the other with no refresh call; bluetoothd leaving makes both
/// unavailable and both recover when it returns.
@Suite(.timeLimit(.minutes(1))) struct CrossPresenterIntegrationTests {
    @Test func aChangeThroughTheDetailScreenAppearsInTheListAndBothSurviveARestart() async throws {
        let sim = try await Simulated.start("test-basic.json")
        let bus = sim.bus, client = sim.client
        defer { bus.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cross-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let settings = try SettingsStore(directory: dir)
        let hci0 = AdapterID(path: "/org/bluez/hci0")
        let strap = DeviceID(adapter: hci0, address: try BluetoothAddress("A4:C1:38:00:00:02"))
        let manager = ConnectionManager(backend: BlueZConnectionBackend(client: client),
                                        policy: BackoffPolicy(initial: .milliseconds(100), maximum: .seconds(1)))
        let watches = WatchService(settings: settings, manager: manager, adapter: hci0)
        let navigator = Navigator()
        let list = DeviceListPresenter(repository: BlueZDeviceRepository(client: client), navigator: navigator, watchList: watches)
        let detail = DeviceDetailPresenter(device: strap, control: BlueZDeviceControl(client: client), history: nil,
                                           watchList: watches, navigator: navigator)
        @Sendable func row(_ s: DeviceListPresenter.State) -> DeviceListPresenter.Row? { s.devices.value?.first { $0.id == strap } }

        list.send(.scanToggled)
        #expect(await waitFor(list) { row($0)?.connected == false }, "\(list.state)")
        #expect(await waitFor(detail) { $0.device.value?.connected == false })

        detail.send(.connectRequested)
        #expect(await waitFor(list) { row($0)?.connected == true }, "\(list.state)")
        // (A second command is ignored while one runs: wait for connect to finish.)
        #expect(await waitFor(detail) { $0.command == .idle })
        detail.send(.disconnectRequested)
        #expect(await waitFor(list) { row($0)?.connected == false }, "\(list.state)")
        #expect(await waitFor(detail) { $0.command == .idle })

        // Watching from the detail screen: stored in the settings, kept
        // connected by the manager, shown in the list's row.
        detail.send(.watchToggled)
        #expect(await waitFor(list) { row($0)?.watch == .connected && row($0)?.connected == true }, "\(list.state)")
        #expect(settings.current.watched == [strap.address])
        #expect(await waitFor(detail) { $0.watch == .watched(.connected) })
        detail.send(.watchToggled)
        #expect(await waitFor(list) { row($0).map { $0.watch == nil } ?? false }, "\(list.state)")
        #expect(settings.current.watched.isEmpty)

        // bluetoothd leaves: both screens say so; it returns: both recover.
        await sim.simulator.stop()
        #expect(await waitFor(list) { $0.devices == .unavailable(.bluetooth(.bluetoothdGone)) })
        #expect(await waitFor(detail) { $0.device == .unavailable(.bluetooth(.bluetoothdGone)) })
        let again = BlueZSimulator(scenario: sim.scenario)
        try await again.start(busAddress: bus.address)
        // The list's discovery session restarts by itself; the strap is found again.
        #expect(await waitFor(list) { row($0) != nil }, "\(list.state)")
        #expect(await waitFor(detail) { $0.device.value?.name == "Heart Strap" }, "\(detail.state)")
        list.send(.scanToggled)
        #expect(await waitFor(list) { $0.scan == .off })
        await again.stop()
    }
}
