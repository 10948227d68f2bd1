import BlueZ
import Domain
import Foundation
import Presenters
import Locking
import Synchronization
import Testing
@testable import Gateway
import Vocabulary

/// A device control (the same protocol the BlueZ one implements) whose
/// connect waits at a gate the test opens and closes; every device exists.
final class GatedControl: DeviceControl {
    private let gate = Lock<(open: Bool, waiting: [CheckedContinuation<Void, Never>])>((true, []))
    let connects = Atomic<Int>(0)

    func details(of id: DeviceID) -> AsyncStream<DeviceDetailSnapshot> {
        AsyncStream { $0.yield(DeviceDetailSnapshot(availability: .available, device: DeviceDetails(id: id))) }
    }
    func connect(_ id: DeviceID) async throws(DomainError) {
        connects.add(1, ordering: .relaxed)
        await withCheckedContinuation { c in
            let now = gate.withLock { g -> Bool in
                if g.open { return true }
                g.waiting.append(c)
                return false
            }
            if now { c.resume() }
        }
    }
    func close() { gate.withLock { $0.open = false } }
    func open() {
        let waiting = gate.withLock { g -> [CheckedContinuation<Void, Never>] in
            g.open = true
            defer { g.waiting = [] }
            return g.waiting
        }
        for c in waiting { c.resume() }
    }
    func disconnect(_ id: DeviceID) async throws(DomainError) {}
    func setTrusted(_ on: Bool, _ id: DeviceID) async throws(DomainError) {}
    func forget(_ id: DeviceID) async throws(DomainError) {}
    func read(_ characteristic: GATTAttributeID) async throws(DomainError) -> [UInt8] { [] }
    func write(_ characteristic: GATTAttributeID, _ value: [UInt8], withoutResponse: Bool) async throws(DomainError) {}
    func setNotifying(_ on: Bool, _ characteristic: GATTAttributeID) async throws(DomainError) {}
}

/// Commands from MQTT and HTTP: bounded however many arrive and however
/// many addresses they name (unbounded, 5 000 distinct addresses once added
/// 68 MB and 40 000 MQTT commands 318 MB that never went away).
@Suite(.timeLimit(.minutes(1))) struct CommandExecutorTests {
    static let adapter = AdapterID(path: "/org/bluez/hci0")
    static func address(_ n: Int) throws -> BluetoothAddress {
        try #require(BluetoothAddress(bytes: [0xC0, 0x00, 0x00, UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]))
    }

    @Test func presentersOfDevicesNoCommandUsesAreReleasedBeyondAFew() async throws {
        let executor = CommandExecutor(control: GatedControl(), adapter: { Self.adapter })
        for n in 0..<300 {
            let reply = await executor.execute(GatewayCommand(action: .connect, id: "\(n)"), on: try Self.address(n))
            #expect(reply.ok, "\(reply.error ?? "")")
        }
        #expect(executor.load.inFlight == 0)
        #expect(executor.load.presenters == CommandExecutor.idlePresenters)
        // The most recent are the ones kept: the same device again still works.
        #expect(await executor.execute(GatewayCommand(action: .connect), on: try Self.address(299)).ok)
        #expect(executor.load.presenters == CommandExecutor.idlePresenters)
    }

    @Test func beyondTheLimitACommandIsRefusedAtOnceAsBusyAndLaterOnesRun() async throws {
        let control = GatedControl()
        let executor = CommandExecutor(control: control, adapter: { Self.adapter }, concurrency: 4)
        control.close()
        // Four commands hold the four places: two for one device (the second waits its turn), two others.
        let held = try [0, 0, 1, 2].map { n in
            let address = try Self.address(n)
            return Task { await executor.execute(GatewayCommand(action: .connect), on: address) }
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while control.connects.load(ordering: .relaxed) < 3 || executor.load.inFlight < 4, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(executor.load.inFlight == 4)
        let refused = await executor.execute(GatewayCommand(action: .connect, id: "x"), on: try Self.address(9))
        #expect(refused.busy && !refused.ok)
        #expect(refused.error?.hasPrefix("busy: 4 commands are already running or waiting") == true, "\(refused.error ?? "")")
        #expect(refused.id == "x" && refused.action == "connect")
        control.open()
        for t in held { #expect(await t.value.ok) }
        #expect(executor.load.inFlight == 0)
        #expect(await executor.execute(GatewayCommand(action: .connect), on: try Self.address(9)).ok)
    }
}
