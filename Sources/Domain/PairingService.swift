import BlueZ
import Foundation
import Locking

/// A question bluetoothd asks while pairing, waiting for the user.
public struct PairingPrompt: Sendable, Equatable, Identifiable {
    public let id: UInt64
    public let request: AgentRequest
    public init(id: UInt64, request: AgentRequest) {
        self.id = id
        self.request = request
    }
    public var device: DeviceID? {
        switch request {
        case let .pinCode(d), let .displayPinCode(d, _), let .passkey(d), let .displayPasskey(d, _, _),
             let .confirmation(d, _), let .authorization(d), let .authorizeService(d, _):
            return d
        case .cancel, .release:
            return nil
        }
    }
}

/// How one pairing attempt ended.
public enum PairingOutcome: Sendable, Equatable {
    case paired(DeviceID)
    /// `reason` says why, without repeating the device.
    case failed(DeviceID, reason: String)

    public var device: DeviceID {
        switch self {
        case let .paired(d), let .failed(d, _): return d
        }
    }
}

/// Turns bluetoothd's agent requests into prompts anyone can observe, and
/// user answers back into agent replies.
public protocol PairingService: Sendable {
    /// The prompt waiting for an answer (nil when none), current first.
    func prompts() -> AsyncStream<PairingPrompt?>
    /// Pairs with `device`; returns when bluetoothd has paired it.
    func pair(_ device: DeviceID) async throws(DomainError)
    /// Answers the prompt `id` (ignored if it is no longer pending).
    func answer(_ id: UInt64, _ response: AgentResponse)
    /// Asks bluetoothd to stop pairing with `device` (Device1.CancelPairing,
    /// what bluetoothctl's `cancel-pairing` does): the `pair` call then fails.
    /// Throws when no pairing with it is in progress.
    func cancelPairing(_ device: DeviceID) async throws(DomainError)
    /// How every `pair` call ends, from now on (nothing is replayed).
    func outcomes() -> AsyncStream<PairingOutcome>
}

/// The pairing service over BlueZ: one agent for the connection, registered
/// on first use; each request becomes a prompt that is rejected by itself
/// after `promptTimeout` (bluetoothd's own limit is longer).
public final class BlueZPairingService: PairingService {
    private let client: BlueZClient
    private let promptTimeout: Duration
    private let store = StateStore<PairingPrompt?>(nil)
    private struct Pending {
        var continuation: CheckedContinuation<AgentResponse, Never>
        var timer: Task<Void, Never>?
    }
    private let pending = Lock<[UInt64: Pending]>([:])
    private let counter = Lock<UInt64>(0)
    private let agent = Lock<BlueZAgent?>(nil)
    private let outcome = Broadcaster<PairingOutcome>()

    public init(client: BlueZClient, promptTimeout: Duration = .seconds(60)) {
        self.client = client
        self.promptTimeout = promptTimeout
    }

    public func prompts() -> AsyncStream<PairingPrompt?> { store.states() }
    public func outcomes() -> AsyncStream<PairingOutcome> { outcome.events() }

    public func pair(_ device: DeviceID) async throws(DomainError) {
        if agent.withLock({ $0 == nil }) {
            do {
                let registered = try await BlueZAgent.register(client: client, capability: .keyboardDisplay) { [weak self] request in
                    await self?.ask(request) ?? .reject
                }
                agent.withLock { $0 = registered }
            } catch {
                let reason = "cannot register a pairing agent: \(error.description)"
                outcome.yield(.failed(device, reason: reason))
                throw DomainError(reason)
            }
        }
        do {
            try await client.pair(device)
            store.update { $0 = nil }
            outcome.yield(.paired(device))
        } catch {
            store.update { $0 = nil }
            outcome.yield(.failed(device, reason: error.description))
            throw DomainError("pairing with \(device.address) failed: \(error.description)", cause: error)
        }
    }

    public func cancelPairing(_ device: DeviceID) async throws(DomainError) {
        do {
            try await client.cancelPairing(device)
        } catch {
            throw DomainError("cannot cancel pairing with \(device.address): \(error.description)", cause: error)
        }
    }

    public func answer(_ id: UInt64, _ response: AgentResponse) {
        let entry = pending.withLock { $0.removeValue(forKey: id) }
        guard let entry else { return }
        entry.timer?.cancel()
        store.update { if $0?.id == id { $0 = nil } }
        entry.continuation.resume(returning: response)
    }

    private func ask(_ request: AgentRequest) async -> AgentResponse {
        switch request {
        case .cancel, .release:
            // bluetoothd gave up: whatever was asked is void.
            let all = pending.withLock { p -> [UInt64] in Array(p.keys) }
            for id in all { answer(id, .cancel) }
            store.update { $0 = nil }
            return .accept
        default:
            break
        }
        let id = counter.withLock { c -> UInt64 in
            c += 1
            return c
        }
        if case .displayPasskey = request {
            // Shown until pairing ends; bluetoothd does not wait for an answer.
            store.update { $0 = PairingPrompt(id: id, request: request) }
            return .accept
        }
        if case .displayPinCode = request {
            store.update { $0 = PairingPrompt(id: id, request: request) }
            return .accept
        }
        let timeout = promptTimeout
        return await withCheckedContinuation { (c: CheckedContinuation<AgentResponse, Never>) in
            let timer = Task { [weak self] in
                try? await Task.sleep(for: timeout)
                if Task.isCancelled { return }
                self?.answer(id, .reject)
            }
            pending.withLock { $0[id] = Pending(continuation: c, timer: timer) }
            store.update { $0 = PairingPrompt(id: id, request: request) }
        }
    }
}
