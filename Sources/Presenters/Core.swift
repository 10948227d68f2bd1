import BlueZ
import Logging
import Synchronization

/// A value that is still coming, is here, or cannot be had — one case at a
/// time, never a set of flags that could contradict each other.
public enum Loadable<Value: Sendable & Equatable>: Sendable, Equatable {
    case loading
    case loaded(Value)
    /// Something went wrong; the text is for the user.
    case failed(String)
    /// Bluetooth cannot be used right now (bluetoothd gone, no adapter,
    /// adapter off); the text says which.
    case unavailable(String)

    public var value: Value? {
        if case let .loaded(v) = self { return v }
        return nil
    }
}

/// The screens a front end can show. Presenters ask the navigator for one;
/// front ends only render what it holds.
public enum Screen: Sendable, Equatable, Hashable {
    case deviceList
    case deviceDetail(DeviceID)
    case pairing(DeviceID)
    case eventLog
}

/// The back stack. Front ends observe it; presenters push and pop.
public final class Navigator: Sendable {
    private let store: StateStore<[Screen]>

    public init(root: Screen = .deviceList) { store = StateStore([root]) }

    public var stack: [Screen] { store.state }
    public var current: Screen { store.state.last ?? .deviceList }
    public func push(_ screen: Screen) { store.update { $0.append(screen) } }
    /// Back: never pops the root.
    public func pop() { store.update { if $0.count > 1 { $0.removeLast() } } }
    public func changes() -> AsyncStream<[Screen]> { store.states() }
}

/// A presenter: an immutable State, one Action enum named for what the user
/// did, and `send(_:)` as the only way to change anything.
public protocol Presenter: AnyObject, Sendable {
    associatedtype State: Sendable & Equatable
    associatedtype Action: Sendable
    /// The current state first, then every distinct state, in order.
    func states() -> AsyncStream<State>
    var state: State { get }
    func send(_ action: Action)
}

/// Holds a state value and publishes each distinct value to every
/// subscriber, in order, without loss (presenter states are small and few).
public final class StateStore<State: Sendable & Equatable>: Sendable {
    private struct Inner {
        var state: State
        var subscribers: [UInt64: AsyncStream<State>.Continuation] = [:]
        var next: UInt64 = 0
    }
    private let inner: Mutex<Inner>

    public init(_ initial: State) { inner = Mutex(Inner(state: initial)) }

    public var state: State { inner.withLock { $0.state } }

    /// Applies `change`; subscribers hear about it only if the state differs.
    public func update(_ change: (inout State) -> Void) {
        inner.withLock { i in
            var s = i.state
            change(&s)
            guard s != i.state else { return }
            i.state = s
            // Yielded under the lock so that concurrent updates reach every
            // subscriber in the order they were applied.
            for (_, c) in i.subscribers { c.yield(s) }
        }
    }

    public func states() -> AsyncStream<State> {
        let (stream, continuation) = AsyncStream<State>.makeStream(bufferingPolicy: .unbounded)
        let id = inner.withLock { i -> UInt64 in
            i.next += 1
            i.subscribers[i.next] = continuation
            continuation.yield(i.state)
            return i.next
        }
        continuation.onTermination = { [weak self] _ in _ = self?.inner.withLock { $0.subscribers.removeValue(forKey: id) } }
        return stream
    }

    deinit { inner.withLock { i in for (_, c) in i.subscribers { c.finish() } } }
}

/// Runs a presenter's actions one at a time, in the order they were sent,
/// on one task; logs each at debug level.
public final class ActionQueue<Action: Sendable>: Sendable {
    private let continuation: AsyncStream<Action>.Continuation
    private let task: Task<Void, Never>
    private let logger: Logger

    public init(label: String, handle: @escaping @Sendable (Action) async -> Void) {
        let (stream, continuation) = AsyncStream<Action>.makeStream()
        self.continuation = continuation
        self.logger = Logger(label: label)
        task = Task {
            for await action in stream { await handle(action) }
        }
    }

    public func send(_ action: Action) {
        logger.debug("action", metadata: ["action": "\(action)"])
        continuation.yield(action)
    }

    deinit {
        continuation.finish()
        task.cancel()
    }
}
