import BlueZ
import Domain
import Locking

/// Pairing one device: what bluetoothd asks (passkey, PIN, confirmation,
/// authorisation, a code to type on the device) and the user's answers.
public final class PairingPresenter: Presenter {
    /// What the user is asked right now.
    public enum Question: Sendable, Equatable {
        case enterPasskey
        case enterPIN
        case confirmPasskey(String)
        case authorize
        case authorizeService(String)
        /// Type this on the device; nothing to answer here.
        case typeOnDevice(String)
    }

    public enum Phase: Sendable, Equatable {
        case idle
        /// bluetoothd is pairing; `question` is set while it waits for the user.
        case pairing(question: Question?)
        case paired
        case failed(String)
    }

    public struct State: Sendable, Equatable {
        public var device: DeviceID
        public var phase: Phase = .idle
        /// What the user has typed for a passkey or PIN question.
        public var input: String = ""
        /// Why the input cannot be submitted yet (nil when it can).
        public var inputProblem: String?
        public init(device: DeviceID) { self.device = device }
    }

    public enum Action: Sendable, Equatable {
        case pairRequested
        case inputChanged(String)
        /// One character typed / the last one deleted: applied to the input
        /// as it is when the action runs, so fast typing loses nothing.
        case inputCharacterTyped(Character)
        case inputCharacterDeleted
        case inputSubmitted
        case accepted
        case rejected
        case cancelled
        case promptChanged(PairingPrompt?)
        case pairingFinished(DomainError?)
    }

    private let store: StateStore<State>
    private let service: any PairingService
    private let navigator: Navigator
    private let prompt = Lock<PairingPrompt?>(nil)
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.pairing")

    public init(device: DeviceID, service: any PairingService, navigator: Navigator) {
        store = StateStore(State(device: device))
        self.service = service
        self.navigator = navigator
        runtime.start { [weak self] action in await self?.handle(action) }
        runtime.follow(service.prompts()) { p in p == nil || p?.device == device ? .promptChanged(p) : nil }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        switch action {
        case .pairRequested:
            switch store.state.phase {
            case .pairing, .paired: return
            case .idle, .failed: break
            }
            store.update { $0.phase = .pairing(question: nil) }
            let service = self.service, device = store.state.device, runtime = self.runtime
            // Pairing waits for the user's answers, which arrive as actions:
            // run it beside the action queue, report back through it.
            runtime.run {
                do throws(DomainError) {
                    try await service.pair(device)
                    runtime.send(.pairingFinished(nil))
                } catch {
                    runtime.send(.pairingFinished(error))
                }
            }
        case let .inputChanged(text):
            setInput(text)
        case let .inputCharacterTyped(c):
            setInput(store.state.input + String(c))
        case .inputCharacterDeleted:
            setInput(String(store.state.input.dropLast()))
        case .inputSubmitted:
            guard let p = prompt.withLock({ $0 }), store.state.inputProblem == nil else { return }
            let text = store.state.input
            switch p.request {
            case .passkey:
                guard let key = UInt32(text) else { return }
                service.answer(p.id, .passkey(key))
            case .pinCode:
                service.answer(p.id, .pinCode(text))
            default:
                return
            }
        case .accepted:
            guard let p = prompt.withLock({ $0 }) else { return }
            service.answer(p.id, .accept)
        case .rejected:
            guard let p = prompt.withLock({ $0 }) else { return }
            service.answer(p.id, .reject)
        case .cancelled:
            // Leaving the screen ends the pairing too, as bluetoothctl's
            // cancel-pairing does: the open question is answered "cancelled"
            // and bluetoothd is asked to stop (a display question, or none,
            // leaves nothing to answer, and Pair would otherwise go on).
            if case .pairing = store.state.phase {
                if let p = prompt.withLock({ $0 }) { service.answer(p.id, .cancel) }
                let service = self.service, device = store.state.device
                runtime.run {
                    // Pairing may have ended meanwhile ("does not exist"): nothing to undo.
                    try? await service.cancelPairing(device)
                }
            }
            navigator.pop()
        case let .promptChanged(p):
            prompt.withLock { $0 = p }
            guard case .pairing = store.state.phase else { return }
            store.update { s in
                s.phase = .pairing(question: p.flatMap(PairingPresenter.question))
                s.input = ""
                s.inputProblem = PairingPresenter.problem(with: "", for: s.phase)
            }
        case let .pairingFinished(error):
            prompt.withLock { $0 = nil }
            store.update { s in
                s.phase = error.map { .failed($0.description) } ?? .paired
                s.input = ""
                s.inputProblem = nil
            }
        }
    }

    private func setInput(_ text: String) {
        store.update { s in
            s.input = text
            s.inputProblem = PairingPresenter.problem(with: text, for: s.phase)
        }
    }

    static func question(_ p: PairingPrompt) -> Question? {
        switch p.request {
        case .passkey: return .enterPasskey
        case .pinCode: return .enterPIN
        case let .confirmation(_, key): return .confirmPasskey(sixDigits(key))
        case .authorization: return .authorize
        case let .authorizeService(_, uuid): return .authorizeService(uuid)
        case let .displayPasskey(_, key, _): return .typeOnDevice(sixDigits(key))
        case let .displayPinCode(_, code): return .typeOnDevice(code)
        case .cancel, .release: return nil
        }
    }

    static func sixDigits(_ key: UInt32) -> String {
        let digits = String(key)
        return String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    static func problem(with input: String, for phase: Phase) -> String? {
        guard case let .pairing(question?) = phase else { return nil }
        switch question {
        case .enterPasskey:
            guard input.count == 6, input.allSatisfy(\.isASCIIDigitCharacter) else { return "enter the 6 digits the device shows" }
            return nil
        case .enterPIN:
            guard (1...16).contains(input.utf8.count) else { return "a PIN code has 1 to 16 characters" }
            return nil
        default:
            return nil
        }
    }
}

extension Character {
    var isASCIIDigitCharacter: Bool { ("0"..."9").contains(self) }
}
