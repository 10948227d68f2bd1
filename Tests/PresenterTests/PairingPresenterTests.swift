import Foundation
import Locking
import Testing
import TestSupport
import BlueZ
import BlueZSimulator
import DBus
import Domain
@testable import Presenters
import Vocabulary

/// A fake pairing service: the test decides the prompts and how pairing ends.
final class FakePairingService: PairingService {
    let store = StateStore<PairingPrompt?>(nil)
    let outcome = Broadcaster<PairingOutcome>()
    let answers = Lock<[(UInt64, AgentResponse)]>([])
    private let finish = Lock<CheckedContinuation<DomainError?, Never>?>(nil)

    func prompts() -> AsyncStream<PairingPrompt?> { store.states() }

    func pair(_ device: DeviceID) async throws(DomainError) {
        let error = await withCheckedContinuation { c in finish.withLock { $0 = c } }
        outcome.yield(error.map { .failed(device, reason: $0.description) } ?? .paired(device))
        if let error { throw error }
    }

    func outcomes() -> AsyncStream<PairingOutcome> { outcome.events() }

    func answer(_ id: UInt64, _ response: AgentResponse) { answers.withLock { $0.append((id, response)) } }

    let cancelled = Lock<[DeviceID]>([])
    func cancelPairing(_ device: DeviceID) async throws(DomainError) { cancelled.withLock { $0.append(device) } }

    func ask(_ prompt: PairingPrompt?) { store.update { $0 = prompt } }

    /// Ends the pending pair() call (waits until it has started).
    func end(with error: DomainError?) async {
        while true {
            if let c = finish.withLock({ f -> CheckedContinuation<DomainError?, Never>? in defer { f = nil }; return f }) {
                c.resume(returning: error)
                return
            }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}

@Suite(.timeLimit(.minutes(1))) struct PairingPresenterTests {
    let device: DeviceID
    init() throws { device = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("F0:00:00:00:00:02")) }
    typealias P = PairingPresenter

    @Test func passkeyEntryEveryStateInOrder() async throws {
        let service = FakePairingService()
        let presenter = P(device: device, service: service, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State(device: device)
        await states.expectNext(expected)

        presenter.send(.pairRequested)
        expected.phase = .pairing(question: nil)
        await states.expectNext(expected)

        service.ask(PairingPrompt(id: 7, request: .passkey(device)))
        expected.phase = .pairing(question: .enterPasskey)
        expected.inputProblem = "enter the 6 digits the device shows"
        await states.expectNext(expected)

        presenter.send(.inputChanged("12"))
        expected.input = "12"
        await states.expectNext(expected)
        presenter.send(.inputSubmitted)            // refused: not 6 digits, no state change, no answer
        presenter.send(.inputChanged("654321"))
        expected.input = "654321"
        expected.inputProblem = nil
        await states.expectNext(expected)
        presenter.send(.inputSubmitted)
        try await Task.sleep(for: .milliseconds(50))
        #expect(service.answers.withLock { $0.map(\.0) } == [7])
        #expect(service.answers.withLock { $0.map(\.1) } == [.passkey(654321)])

        service.ask(nil)
        expected.phase = .pairing(question: nil)
        expected.input = ""
        await states.expectNext(expected)
        await service.end(with: nil)
        expected.phase = .paired
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func pinAuthorisationServiceAuthorisationAndPinDisplayEveryStateInOrder() async throws {
        let service = FakePairingService()
        let presenter = P(device: device, service: service, navigator: Navigator())
        let states = StateRecorder(presenter.states())
        var expected = P.State(device: device)
        await states.expectNext(expected)
        presenter.send(.pairRequested)
        expected.phase = .pairing(question: nil)
        await states.expectNext(expected)

        // RequestPinCode: 1 to 16 characters.
        service.ask(PairingPrompt(id: 1, request: .pinCode(device)))
        expected.phase = .pairing(question: .enterPIN)
        expected.inputProblem = "a PIN code has 1 to 16 characters"
        await states.expectNext(expected)
        presenter.send(.inputChanged(String(repeating: "9", count: 17)))
        expected.input = String(repeating: "9", count: 17)
        await states.expectNext(expected)
        presenter.send(.inputSubmitted)            // refused
        presenter.send(.inputChanged(""))
        expected.input = ""
        await states.expectNext(expected)
        presenter.send(.inputCharacterTyped("0"))
        presenter.send(.inputCharacterTyped("0"))
        presenter.send(.inputCharacterTyped("7"))
        presenter.send(.inputCharacterDeleted)
        presenter.send(.inputCharacterTyped("0"))
        presenter.send(.inputCharacterTyped("0"))
        expected.input = "0"
        expected.inputProblem = nil
        await states.expectNext(expected)
        for text in ["00", "007", "00", "000", "0000"] {
            expected.input = text
            await states.expectNext(expected)
        }
        presenter.send(.inputSubmitted)

        // RequestAuthorization, accepted.
        service.ask(PairingPrompt(id: 2, request: .authorization(device)))
        expected.phase = .pairing(question: .authorize)
        expected.input = ""
        await states.expectNext(expected)
        presenter.send(.accepted)

        // AuthorizeService, rejected.
        service.ask(PairingPrompt(id: 3, request: .authorizeService(device, uuid: "0000180d-0000-1000-8000-00805f9b34fb")))
        expected.phase = .pairing(question: .authorizeService("0000180d-0000-1000-8000-00805f9b34fb"))
        await states.expectNext(expected)
        presenter.send(.rejected)

        // DisplayPinCode: nothing to answer; typed on the device.
        service.ask(PairingPrompt(id: 4, request: .displayPinCode(device, "482915")))
        expected.phase = .pairing(question: .typeOnDevice("482915"))
        await states.expectNext(expected)
        presenter.send(.inputSubmitted)            // nothing to submit: ignored
        presenter.send(.accepted)                  // answered (bluetoothd does not wait for it)
        await service.end(with: nil)
        expected.phase = .paired
        await states.expectNext(expected)
        await states.expectNoMoreStates()
        #expect(service.answers.withLock { $0.map(\.0) } == [1, 2, 3, 4])
        #expect(service.answers.withLock { $0.map(\.1) } == [.pinCode("0000"), .accept, .reject, .accept])
    }

    @Test func confirmationRejectedThenFailureAndCancel() async throws {
        let service = FakePairingService()
        let navigator = Navigator()
        navigator.push(.pairing(device))
        let presenter = P(device: device, service: service, navigator: navigator)
        let states = StateRecorder(presenter.states())
        var expected = P.State(device: device)
        await states.expectNext(expected)
        presenter.send(.pairRequested)
        expected.phase = .pairing(question: nil)
        await states.expectNext(expected)
        service.ask(PairingPrompt(id: 1, request: .confirmation(device, passkey: 12345)))
        expected.phase = .pairing(question: .confirmPasskey("012345"))
        await states.expectNext(expected)
        presenter.send(.rejected)
        await service.end(with: DomainError("pairing with F0:00:00:00:00:02 failed: AuthenticationRejected"))
        expected.phase = .failed("pairing with F0:00:00:00:00:02 failed: AuthenticationRejected")
        await states.expectNext(expected)
        #expect(service.answers.withLock { $0.map(\.1) } == [.reject])

        // Trying again works from .failed; a display request needs no answer.
        presenter.send(.pairRequested)
        expected.phase = .pairing(question: nil)
        await states.expectNext(expected)
        service.ask(PairingPrompt(id: 2, request: .displayPasskey(device, passkey: 42, entered: 0)))
        expected.phase = .pairing(question: .typeOnDevice("000042"))
        await states.expectNext(expected)
        presenter.send(.cancelled)
        // The action runs on the presenter's queue, the cancel request beside it.
        #expect(await eventually { service.cancelled.withLock { $0 } == [device] && navigator.stack == [.deviceList] },
                "\(service.cancelled.withLock { $0 }) \(navigator.stack)")
        #expect(service.answers.withLock { $0.map(\.1) } == [.reject, .cancel])
        await service.end(with: DomainError("pairing with F0:00:00:00:00:02 failed: AuthenticationCanceled"))
        expected.phase = .failed("pairing with F0:00:00:00:00:02 failed: AuthenticationCanceled")
        await states.expectNext(expected)
        await states.expectNoMoreStates()
    }

    @Test func passkeyPairingAgainstTheSimulator() async throws {
        let sim = try await Simulated.start("test-faults.json")
        defer { sim.bus.stop() }
        let simulator = sim.simulator, client = sim.client
        let (session, service, outcomes) = try await discoverTheLock(sim)
        let presenter = P(device: device, service: service, navigator: Navigator())
        presenter.send(.pairRequested)
        #expect(await wait(presenter) { $0.phase == .pairing(question: .enterPasskey) })
        presenter.send(.inputChanged("654321"))
        presenter.send(.inputSubmitted)
        #expect(await wait(presenter) { $0.phase == .paired }, "\(presenter.state)")
        try await client.mirror.wait(for: "paired", timeout: .seconds(5)) { [device] in $0.devices[device]?.paired == true }
        var heard = outcomes.makeAsyncIterator()
        #expect(await heard.next() == .paired(device))
        await session.stop()
        await simulator.stop()
    }

    /// Leaving the pairing screen while the device shows a passkey (nothing
    /// to answer) stops the pairing in bluetoothd: Pair ends at once with
    /// AuthenticationCanceled instead of when the remote would have finished.
    @Test func leavingTheScreenCancelsPairingInBluetoothd() async throws {
        let address = device.address.description
        let sim = try await Simulated.start("test-faults.json") { scenario in
            for d in scenario.devices.indices where scenario.devices[d].address == address {
                scenario.devices[d].pairing.method = .displayPasskey
                scenario.devices[d].pairing.passkey = 4242
                scenario.devices[d].pairing.delay = 600
            }
        }
        defer { sim.bus.stop() }
        let simulator = sim.simulator, client = sim.client
        let (session, service, outcomes) = try await discoverTheLock(sim)
        let navigator = Navigator()
        navigator.push(.pairing(device))
        let presenter = P(device: device, service: service, navigator: navigator)
        presenter.send(.pairRequested)
        #expect(await wait(presenter) { $0.phase == .pairing(question: .typeOnDevice("004242")) }, "\(presenter.state)")
        presenter.send(.cancelled)
        let outcome = await first(outcomes, within: 20) { _ in true }
        #expect(outcome == .failed(device, reason: "AuthenticationCanceled: Authentication Canceled"), "\(String(describing: outcome))")
        #expect(navigator.stack == [.deviceList])
        #expect(client.mirror.snapshot().devices[device]?.paired == false)
        await session.stop()
        await simulator.stop()
    }

    /// Scanning on the simulator until the lock is known, and a pairing service on its client.
    func discoverTheLock(_ sim: Simulated) async throws -> (DiscoverySession, BlueZPairingService, AsyncStream<PairingOutcome>) {
        let client = sim.client
        let session = try await client.discover(adapter: try client.adapter().id)
        try await client.mirror.wait(for: "the lock", timeout: .seconds(5)) { [device] in $0.devices[device] != nil }
        let service = BlueZPairingService(client: client)
        return (session, service, service.outcomes())
    }

    func wait(_ presenter: P, within seconds: Double = 10, _ condition: @escaping @Sendable (P.State) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        for await s in presenter.states() {
            if condition(s) { return true }
            if ContinuousClock.now > deadline { return false }
        }
        return false
    }
}

