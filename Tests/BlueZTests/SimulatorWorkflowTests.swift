import Foundation
import Testing
import DBus
import BlueZSimulator
@testable import BlueZ

/// Our client against the simulator on a private bus: every fault the
/// scenario format can inject, with the errors users will see.
func withSimulator<T>(_ scenario: String, filePath: String = #filePath, _ body: (PrivateBus, BlueZClient) async throws -> T) async throws -> T {
    let root = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let loaded = try Scenario.load(path: root.appendingPathComponent("fixtures/scenarios/\(scenario)").path)
    return try await withBus { bus in
        let simulator = BlueZSimulator(scenario: loaded)
        try await simulator.start(busAddress: bus.address)
        let client = try await BlueZClient.connect(to: .address(bus.address))
        do {
            let result = try await body(bus, client)
            await simulator.stop()
            return result
        } catch {
            await simulator.stop()
            throw error
        }
    }
}

@Suite(.serialized, .timeLimit(.minutes(1))) struct SimulatorWorkflowTests {
    func device(_ client: BlueZClient, _ address: String) throws -> DeviceID {
        DeviceID(adapter: try client.adapter().id, address: try BluetoothAddress(address))
    }

    @Test func faultsGiveTheErrorsUsersWillSee() async throws {
        try await withSimulator("test-faults.json") { _, client in
            let hci0 = try client.adapter().id
            let session = try await client.discover(adapter: hci0, filter: DiscoveryFilter(rssi: -80, transport: .le))
            try await client.mirror.wait(for: "devices", timeout: .seconds(5)) { $0.devices.count >= 4 }
            // The RSSI filter keeps the -95 dBm device out, as bluetoothd does.
            #expect(client.mirror.snapshot().device(try BluetoothAddress("F0:00:00:00:00:05")) == nil)
            await session.stop()
            // Stopping discovery invalidates RSSI, as bluetoothd does: no stale signal strengths.
            let lockID = try device(client, "F0:00:00:00:00:02")
            try await client.mirror.wait(for: "RSSI to be invalidated", timeout: .seconds(5)) { $0.devices[lockID]?.rssi == nil }
            #expect(client.mirror.snapshot().objects[lockID.path]?["org.bluez.Device1"]?["RSSI"] == nil)

            // Connect fails twice with bluetoothd's reason, then works, then the link drops.
            let flaky = try device(client, "F0:00:00:00:00:01")
            for _ in 0..<2 {
                await #expect(throws: BlueZError.bluez(.failed, message: "le-connection-abort-by-local")) { try await client.connect(flaky) }
            }
            let changes = client.mirror.events()
            try await client.connect(flaky)
            let dropped = try await next(changes, within: 5) { event in
                guard case let .propertiesChanged(p, BlueZInterface.device, changed, _) = event, p == flaky.path else { return false }
                return changed["Connected"] == .boolean(false)
            }
            #expect(dropped != nil, "the flaky link should drop by itself")

            // Passkey pairing through our agent: wrong key, then the right one.
            let lock = try device(client, "F0:00:00:00:00:02")
            let answers = AnswerBox([.passkey(111111), .passkey(654321)])
            let agent = try await BlueZAgent.register(client: client, capability: .keyboardDisplay) { request in
                answers.next(for: request)
            }
            await #expect(throws: BlueZError.self) { try await client.pair(lock) }
            try await client.pair(lock)
            #expect(answers.requests.prefix(2).allSatisfy { if case .passkey = $0 { return true } else { return false } })
            try await client.mirror.wait(for: "paired", timeout: .seconds(5)) { $0.devices[lock]?.paired == true }

            // A device that rejects, one whose bond is broken.
            await #expect(throws: BlueZError.self) { try await client.pair(try device(client, "F0:00:00:00:00:03")) }
            await #expect(throws: BlueZError.bluez(.authenticationFailed, message: "Authentication Failed")) {
                try await client.pair(try device(client, "F0:00:00:00:00:04"))
            }
            await agent.unregister()
        }
    }

    @Test func adapterAndBluetoothdOutagesAreFollowed() async throws {
        try await withSimulator("test-outage.json") { _, client in
            let events = client.mirror.events()
            #expect(client.mirror.snapshot().adapters.count == 2)
            let hci0 = try AdapterID(name: "hci0")
            let session = try await client.discover(adapter: hci0)
            // hci1 is removed at 0.3 s and comes back at 0.8 s.
            #expect(try await next(events, within: 5) { if case let .interfacesRemoved(p, _) = $0 { return p == "/org/bluez/hci1" } else { return false } } != nil)
            #expect(try await next(events, within: 5) { if case let .interfacesAdded(p, _) = $0 { return p == "/org/bluez/hci1" } else { return false } } != nil)
            // bluetoothd leaves at 1.2 s and returns at 1.6 s: the mirror says so, then refills.
            #expect(try await next(events, within: 5) { $0 == .availability(false) } != nil)
            #expect(!client.mirror.snapshot().available)
            #expect(try await next(events, within: 5) { $0 == .availability(true) } != nil)
            try await client.mirror.wait(for: "adapters back", timeout: .seconds(5)) { $0.adapters.count == 2 }
            // The paired keyboard is known again, and discovery was restarted.
            #expect(client.mirror.snapshot().device(try BluetoothAddress("B0:00:00:00:00:01"))?.paired == true)
            try await client.mirror.wait(for: "discovery restarted", timeout: .seconds(5)) { $0.adapters[hci0]?.discovering == true }
            await session.stop()
        }
    }
}

/// Hands out scripted agent answers in order and records the requests.
final class AnswerBox: @unchecked Sendable {
    private let lock = NSLock()
    private var answers: [AgentResponse]
    private(set) var requests: [AgentRequest] = []
    init(_ answers: [AgentResponse]) { self.answers = answers }
    func next(for request: AgentRequest) -> AgentResponse {
        lock.lock()
        defer { lock.unlock() }
        requests.append(request)
        if case .passkey = request, !answers.isEmpty { return answers.removeFirst() }
        return .accept
    }
}
