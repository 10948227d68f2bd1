import BlueZ
import Foundation
import Locking

/// What the connection manager needs from bluetoothd (a protocol so tests
/// can drive it with a fake).
public protocol ConnectionBackend: Sendable {
    /// bluetoothd is up and knows the device.
    func isPresent(_ id: DeviceID) -> Bool
    func isConnected(_ id: DeviceID) -> Bool
    /// Fires whenever something may have changed (no payload: re-check).
    func changes() -> AsyncStream<Void>
    func connect(_ id: DeviceID) async throws(DomainError)
    /// Turns notifications of these characteristics on again after a reconnect.
    func enableNotifications(_ id: DeviceID, uuids: [String]) async
}

/// Waiting, injectable so tests run backoff on a hand-driven clock.
public protocol Sleeper: Sendable {
    func sleep(for duration: Duration) async throws
}

public struct TaskSleeper: Sleeper {
    public init() {}
    public func sleep(for duration: Duration) async throws { try await Task.sleep(for: duration) }
}

/// Exponential backoff with jitter.
public struct BackoffPolicy: Sendable, Equatable {
    public var initial: Duration = .seconds(1)
    public var multiplier: Double = 2
    public var maximum: Duration = .seconds(60)
    /// ± this fraction of the delay, chosen at random.
    public var jitter: Double = 0.2
    public init(initial: Duration = .seconds(1), multiplier: Double = 2, maximum: Duration = .seconds(60), jitter: Double = 0.2) {
        self.initial = initial
        self.multiplier = multiplier
        self.maximum = maximum
        self.jitter = jitter
    }

    /// The delay before attempt `attempt + 1` (attempt counts from 1);
    /// `random` in [0, 1).
    public func delay(afterAttempt attempt: Int, random: Double) -> Duration {
        let base = min(seconds(initial) * pow(multiplier, Double(max(0, attempt - 1))), seconds(maximum))
        let factor = 1 + jitter * (2 * random - 1)
        return .milliseconds(Int((base * factor * 1000).rounded()))
    }

    private func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}

public enum ConnectionStatus: Sendable, Equatable {
    /// Not watched (or no longer).
    case idle
    /// bluetoothd is down or does not know the device: nothing is tried
    /// until that changes.
    case waitingForDevice
    case connecting(attempt: Int)
    case connected
    /// The last attempt failed; the next comes after `delay`.
    case retrying(attempt: Int, delay: Duration, reason: String)
}

/// Keeps watched devices connected: exponential backoff with jitter on
/// failures, at most `maxConcurrentPerAdapter` connection attempts per
/// adapter at once, notifications re-enabled after every reconnect, and no
/// attempts at all while a device is absent (it waits for a change).
public final class ConnectionManager: Sendable {
    private let backend: any ConnectionBackend
    private let policy: BackoffPolicy
    private let sleeper: any Sleeper
    private let random: @Sendable () -> Double
    private let limiter: AdapterLimiter
    private let store = StateStore<[DeviceID: ConnectionStatus]>([:])
    private let loops = Lock<[DeviceID: Task<Void, Never>]>([:])

    public init(backend: any ConnectionBackend, policy: BackoffPolicy = BackoffPolicy(), sleeper: any Sleeper = TaskSleeper(),
                maxConcurrentPerAdapter: Int = 2, random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.backend = backend
        self.policy = policy
        self.sleeper = sleeper
        self.random = random
        limiter = AdapterLimiter(limit: max(1, maxConcurrentPerAdapter))
    }

    deinit { loops.withLock { for (_, t) in $0 { t.cancel() } } }

    public func statuses() -> AsyncStream<[DeviceID: ConnectionStatus]> { store.states() }
    public var current: [DeviceID: ConnectionStatus] { store.state }

    /// Keeps `id` connected, re-enabling notifications of `uuids` after each connection.
    public func watch(_ id: DeviceID, notify uuids: [String] = []) {
        // The loop holds the parts it needs, not the manager: releasing the
        // manager cancels the loops (deinit).
        let loop = Loop(backend: backend, policy: policy, sleeper: sleeper, random: random, limiter: limiter, store: store)
        let task = Task { await loop.keepConnected(id, uuids: uuids) }
        loops.withLock { l in
            l[id]?.cancel()
            l[id] = task
        }
    }

    public func unwatch(_ id: DeviceID) {
        loops.withLock { $0.removeValue(forKey: id) }?.cancel()
        store.update { $0[id] = nil }
    }

    private struct Loop: Sendable {
        let backend: any ConnectionBackend
        let policy: BackoffPolicy
        let sleeper: any Sleeper
        let random: @Sendable () -> Double
        let limiter: AdapterLimiter
        let store: StateStore<[DeviceID: ConnectionStatus]>

        func set(_ id: DeviceID, _ status: ConnectionStatus) {
            guard !Task.isCancelled else { return }
            store.update { $0[id] = status }
        }

        func keepConnected(_ id: DeviceID, uuids: [String]) async {
            var attempt = 0
            while !Task.isCancelled {
                if !backend.isPresent(id) {
                    set(id, .waitingForDevice)
                    await waitUntil { backend.isPresent(id) }
                    continue
                }
                if backend.isConnected(id) {
                    set(id, .connected)
                    attempt = 0
                    await waitUntil { !backend.isConnected(id) || !backend.isPresent(id) }
                    continue
                }
                attempt += 1
                set(id, .connecting(attempt: attempt))
                await limiter.acquire(id.adapter)
                let result: DomainError?
                do throws(DomainError) {
                    try await backend.connect(id)
                    result = nil
                } catch {
                    result = error
                }
                await limiter.release(id.adapter)
                if let error = result {
                    let delay = policy.delay(afterAttempt: attempt, random: random())
                    set(id, .retrying(attempt: attempt, delay: delay, reason: error.description))
                    do { try await sleeper.sleep(for: delay) } catch { return }
                } else {
                    set(id, .connected)
                    attempt = 0
                    await backend.enableNotifications(id, uuids: uuids)
                }
            }
        }

        /// Returns once `condition` holds, re-checking on every backend change
        /// (subscribed before the first check, so no change is missed).
        func waitUntil(_ condition: @Sendable () -> Bool) async {
            let changes = backend.changes()
            if condition() { return }
            for await _ in changes where condition() { return }
        }
    }
}

/// At most `limit` connection attempts per adapter at once.
actor AdapterLimiter {
    private let limit: Int
    private var running: [AdapterID: Int] = [:]
    private var waiting: [AdapterID: [CheckedContinuation<Void, Never>]] = [:]

    init(limit: Int) { self.limit = limit }

    func acquire(_ adapter: AdapterID) async {
        if running[adapter, default: 0] < limit {
            running[adapter, default: 0] += 1
            return
        }
        await withCheckedContinuation { waiting[adapter, default: []].append($0) }
    }

    func release(_ adapter: AdapterID) {
        if var queue = waiting[adapter], !queue.isEmpty {
            let next = queue.removeFirst()
            waiting[adapter] = queue
            next.resume()   // the slot passes to the next waiter
        } else {
            running[adapter, default: 1] -= 1
        }
    }
}

/// The connection backend over a BlueZ client.
public struct BlueZConnectionBackend: ConnectionBackend {
    public let client: BlueZClient
    public init(client: BlueZClient) { self.client = client }

    public func isPresent(_ id: DeviceID) -> Bool {
        let s = client.mirror.snapshot()
        return s.available && s.devices[id] != nil
    }
    public func isConnected(_ id: DeviceID) -> Bool { client.mirror.snapshot().devices[id]?.connected == true }
    public func changes() -> AsyncStream<Void> {
        // An advertisement changes neither presence nor connection.
        let events = client.mirror.events(bufferCapacity: 16) { BlueZChangeFeed.advertisement($0) == nil }
        return AsyncStream { continuation in
            let task = Task {
                for await _ in events { continuation.yield(()) }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
    public func connect(_ id: DeviceID) async throws(DomainError) {
        do {
            try await client.connectResolvingServices(id)
        } catch {
            throw DomainError(error.description, cause: error)
        }
    }
    public func enableNotifications(_ id: DeviceID, uuids: [String]) async {
        for uuid in uuids {
            guard let c = client.mirror.snapshot().characteristic(uuid, on: id) else { continue }
            try? await client.startNotify(c.id)
        }
    }
}
