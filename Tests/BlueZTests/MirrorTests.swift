import Locking
import Foundation
import Testing
import DBus
@testable import BlueZ
import Vocabulary

/// Runs `body` against a private dbus-daemon that is always stopped afterwards.
func withBus<T>(_ body: (PrivateBus) async throws -> T) async throws -> T {
    let bus = try PrivateBus.start()
    defer { bus.stop() }
    return try await body(bus)
}

/// A minimal stand-in for bluetoothd's object tree (ObjectManager at "/",
/// one adapter, AgentManager1), exported by a connection that owns org.bluez.
/// Enough to test the mirror's bookkeeping; the simulator covers behaviour.
final class StandIn: @unchecked Sendable {
    let connection: DBusConnection
    let manager: DBusObjectManagerRegistration
    let adapter: DBusObjectRegistration
    let agentManager: DBusObjectRegistration
    var devices: [DBusObjectRegistration] = []
    let agentCalls = AsyncStream<String>.makeStream()

    init(bus: PrivateBus) async throws {
        connection = try await DBusConnection.connect(to: .address(bus.address))
        _ = try await connection.requestName("org.bluez")
        manager = try await connection.exportObjectManager(at: .root)
        adapter = try await connection.export("/org/bluez/hci0", interfaces: [
            DBusExportedInterface(DBusInterfaceDescription("org.bluez.Adapter1", methods: [
                DBusMethodDescription("StartDiscovery") { _ in [] },
                DBusMethodDescription("StopDiscovery") { _ in [] },
            ], properties: [
                DBusPropertyDescription("Address", .string),
                DBusPropertyDescription("Powered", .boolean, access: .readwrite),
                DBusPropertyDescription("Discovering", .boolean),
            ]), values: ["Address": .string("00:11:22:33:44:55"), "Powered": .boolean(true), "Discovering": .boolean(false)]),
        ])
        let calls = agentCalls.continuation
        agentManager = try await connection.export("/org/bluez", interfaces: [
            DBusExportedInterface(DBusInterfaceDescription("org.bluez.AgentManager1", methods: [
                DBusMethodDescription("RegisterAgent", inputs: [.init("agent", .objectPath), .init("capability", .string)]) { call in
                    let p: ObjectPath = try call.argument(0)
                    let c: String = try call.argument(1)
                    calls.yield("RegisterAgent \(call.sender ?? "") \(p) \(c)")
                    return []
                },
                DBusMethodDescription("RequestDefaultAgent", inputs: [.init("agent", .objectPath)]) { call in
                    calls.yield("RequestDefaultAgent \(try call.argument(0, as: ObjectPath.self))")
                    return []
                },
                DBusMethodDescription("UnregisterAgent", inputs: [.init("agent", .objectPath)]) { call in
                    calls.yield("UnregisterAgent \(try call.argument(0, as: ObjectPath.self))")
                    return []
                },
            ])),
        ])
    }

    func addDevice(_ address: String, rssi: Int16) async throws -> DBusObjectRegistration {
        let path = try ObjectPath("/org/bluez/hci0/dev_" + address.split(separator: ":").joined(separator: "_"))
        let reg = try await connection.export(path, interfaces: [
            DBusExportedInterface(DBusInterfaceDescription("org.bluez.Device1", properties: [
                DBusPropertyDescription("Address", .string),
                DBusPropertyDescription("RSSI", .int16),
                DBusPropertyDescription("ServicesResolved", .boolean),
                DBusPropertyDescription("Connected", .boolean),
            ]), values: ["Address": .string(address), "RSSI": .int16(rssi), "ServicesResolved": .boolean(false), "Connected": .boolean(false)]),
        ])
        devices.append(reg)
        return reg
    }
}

/// The next event satisfying `matching`, failing after `seconds`.
func next(_ events: AsyncStream<BlueZEvent>, within seconds: Double = 5, matching: @escaping @Sendable (BlueZEvent) -> Bool) async throws -> BlueZEvent? {
    try await withThrowingTaskGroup(of: BlueZEvent?.self) { group in
        group.addTask {
            for await e in events where matching(e) { return e }
            return nil
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let result = try await group.next() ?? nil
        group.cancelAll()
        return result
    }
}

@Suite(.timeLimit(.minutes(1))) struct MirrorTests {
    @Test func mirrorEnumeratesThenFollowsSignalsOnly() async throws {
        try await withBus { bus in
            let standIn = try await StandIn(bus: bus)
            let hidden = try await standIn.addDevice("AA:BB:CC:DD:EE:01", rssi: -70)
            let client = try await BlueZClient.connect(to: .address(bus.address))
            let snap = client.mirror.snapshot()
            #expect(snap.available)
            #expect(snap.sortedAdapters.map(\.id.name) == ["hci0"])
            #expect(snap.devices(on: nil).map(\.address.description) == ["AA:BB:CC:DD:EE:01"])
            #expect(snap.devices.values.first?.rssi == -70)

            let events = client.mirror.events()
            // A subscriber that wants adapter changes only gets none of the device ones.
            let adapterOnly = client.mirror.events { event in
                if case .adapterChanged = event { return true }
                return false
            }
            hidden.setProperty("org.bluez.Device1", "RSSI", .int16(-55))
            _ = try await next(events) {
                if case let .deviceChanged(id, changed) = $0 { return id.address.description == "AA:BB:CC:DD:EE:01" && changed[.rssi] == .int16(-55) }
                return false
            }
            #expect(client.mirror.snapshot().devices.values.first?.rssi == -55)

            let second = try await standIn.addDevice("AA:BB:CC:DD:EE:02", rssi: -40)
            _ = try await next(events) { if case .interfacesAdded = $0 { return true } else { return false } }
            #expect(client.mirror.snapshot().devices.count == 2)
            second.unexport()
            _ = try await next(events) { if case .interfacesRemoved = $0 { return true } else { return false } }
            #expect(client.mirror.snapshot().devices.count == 1)

            // Operations reach bluetoothd; unknown objects give BlueZ-level errors.
            let hci0 = try client.adapter().id
            try await client.setPowered(false, adapter: hci0)
            _ = try await next(events) {
                if case let .adapterChanged(id, changed) = $0 { return id == hci0 && changed[.powered] == .boolean(false) }
                return false
            }
            #expect(client.mirror.snapshot().adapters[hci0]?.powered == false)
            let firstForAdapterOnly = try await next(adapterOnly) { _ in true }
            guard case .adapterChanged(hci0, _)? = firstForAdapterOnly else {
                Issue.record("the filtered stream's first event: \(String(describing: firstForAdapterOnly))")
                return
            }
            await #expect(throws: BlueZError.self) { try await client.connect(DeviceID(adapter: hci0, address: try BluetoothAddress("AA:BB:CC:DD:EE:01"))) }
            #expect(throws: BlueZError.notFound("adapter hci7 (bluetoothd has hci0)")) { try client.adapter("hci7") }
            _ = (standIn, hidden)
        }
    }

    @Test func bluetoothdVanishingEmptiesTheMirrorAndItsReturnRefillsIt() async throws {
        try await withBus { bus in
            var standIn: StandIn? = try await StandIn(bus: bus)
            _ = try await standIn?.addDevice("AA:BB:CC:DD:EE:01", rssi: -70)
            let client = try await BlueZClient.connect(to: .address(bus.address))
            let events = client.mirror.events()
            let reported = Lock<[String]>([])
            let agent = try await BlueZAgent.register(client: client, capability: .keyboardDisplay, onRegisteredAgain: { error in
                reported.withLock { $0.append(error?.description ?? "ok") }
            }) { _ in .accept }
            var calls = standIn?.agentCalls.stream.makeAsyncIterator()
            #expect(await calls?.next()?.hasPrefix("RegisterAgent \(client.connection.uniqueName) /com/blecompanion/agent KeyboardDisplay") == true)
            #expect(await calls?.next() == "RequestDefaultAgent /com/blecompanion/agent")

            standIn?.connection.close()
            standIn = nil
            #expect(try await next(events) { $0 == .availability(false) } != nil)
            let gone = client.mirror.snapshot()
            #expect(!gone.available && gone.devices.isEmpty && gone.adapters.isEmpty)
            await #expect(throws: BlueZError.unavailable) { try await client.startDiscovery(adapter: try AdapterID(name: "hci0")) }
            #expect(throws: BlueZError.unavailable) { try client.adapter() }

            let back = try await StandIn(bus: bus)
            #expect(try await next(events) { $0 == .availability(true) } != nil)
            // The new bluetoothd exports its adapter after taking the name.
            try await client.mirror.wait(for: "hci0 to return", timeout: .seconds(5)) { $0.adapters.count == 1 }
            // The agent registers itself again with the new bluetoothd.
            var again = back.agentCalls.stream.makeAsyncIterator()
            #expect(await again.next()?.hasPrefix("RegisterAgent") == true)
            #expect(await again.next() == "RequestDefaultAgent /com/blecompanion/agent")
            // ... and says so once (the gateway logs it).
            for _ in 0..<50 where reported.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(20)) }
            #expect(reported.withLock { $0 } == ["ok"])
            await agent.unregister()
            #expect(await again.next() == "UnregisterAgent /com/blecompanion/agent")
        }
    }

    @Test func waitingForServicesResolvedEndsWithTheStateOrAReason() async throws {
        try await withBus { bus in
            let standIn = try await StandIn(bus: bus)
            let dev = try await standIn.addDevice("AA:BB:CC:DD:EE:01", rssi: -70)
            let client = try await BlueZClient.connect(to: .address(bus.address))
            let id = DeviceID(adapter: try AdapterID(name: "hci0"), address: try BluetoothAddress("AA:BB:CC:DD:EE:01"))
            // Not connected: fails at once with the reason.
            await #expect(throws: BlueZError.bluez(.notConnected, message: "AA:BB:CC:DD:EE:01 disconnected before its services were resolved")) {
                try await client.waitForServicesResolved(id, timeout: .seconds(5))
            }
            dev.setProperty("org.bluez.Device1", "Connected", .boolean(true))
            try await client.mirror.wait(for: "connected", timeout: .seconds(5)) { $0.devices[id]?.connected == true }
            let waiter = Task { try await client.waitForServicesResolved(id, timeout: .seconds(5)) }
            try await Task.sleep(for: .milliseconds(100))
            dev.setProperties("org.bluez.Device1", ["ServicesResolved": .boolean(true)])
            try await waiter.value
            #expect(client.mirror.snapshot().devices[id]?.servicesResolved == true)
            // A state that never comes times out with what was awaited.
            await #expect(throws: BlueZError.timedOut("never")) {
                try await client.mirror.wait(for: "never", timeout: .milliseconds(200)) { _ in false }
            }
            _ = standIn
        }
    }
}
