import BlueZ
import Domain
import Logging
import Locking

/// A value that is still coming, is here, or cannot be had — one case at a
/// time, never a set of flags that could contradict each other.
public enum Loadable<Value: Sendable & Equatable>: Sendable, Equatable {
    case loading
    case loaded(Value)
    /// Something went wrong; the text is for the user.
    case failed(String)
    /// Cannot be had right now, for a known reason a front end can act on
    /// (offer to power the adapter on, to connect) without reading the text.
    case unavailable(Unavailable)

    public var value: Value? {
        if case let .loaded(v) = self { return v }
        return nil
    }

    /// The sentence for the user when it failed or is unavailable.
    public var problem: String? {
        switch self {
        case .loading, .loaded: return nil
        case let .failed(reason): return reason
        case let .unavailable(why): return why.description
        }
    }
}

/// Why a ``Loadable`` value cannot be had right now.
public enum Unavailable: Sendable, Equatable, CustomStringConvertible {
    /// Bluetooth cannot be used: bluetoothd gone, no adapter, adapter off.
    case bluetooth(Availability)
    /// Known only while the device is connected (its GATT services).
    case notConnected
    /// There is no reading history (no database was opened).
    case noHistory
    /// The gateway is shutting down.
    case stopping

    public var description: String {
        switch self {
        case let .bluetooth(availability): return availability.reason ?? "Bluetooth is available"
        case .notConnected: return "connect to discover services"
        case .noHistory: return "no reading history (no database)"
        case .stopping: return "gateway stopping"
        }
    }
}

/// The screens a front end can show. Presenters ask the navigator for one;
/// front ends only render what it holds.
public enum Screen: Sendable, Equatable, Hashable {
    case deviceList
    case deviceDetail(DeviceID)
    case pairing(DeviceID)
    case eventLog
    case adapters
    /// The device's firmware (MCUboot slots, upload) and Wi-Fi provisioning.
    case firmware(DeviceID)
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

/// Runs a presenter's actions one at a time, in the order they were sent,
/// on one task; logs each at debug level.
package final class ActionQueue<Action: Sendable>: Sendable {
    private let continuation: AsyncStream<Action>.Continuation
    private let task: Task<Void, Never>
    private let logger: Logger

    package init(label: String, handle: @escaping @Sendable (Action) async -> Void) {
        let (stream, continuation) = AsyncStream<Action>.makeStream()
        self.continuation = continuation
        self.logger = Logger(label: label)
        task = Task {
            for await action in stream { await handle(action) }
        }
    }

    package func send(_ action: Action) {
        logger.debug("action", metadata: ["action": "\(action)"])
        continuation.yield(action)
    }

    deinit {
        continuation.finish()
        task.cancel()
    }
}

/// The machinery every presenter shares: its action queue and the tasks
/// that feed repository streams into it (cancelled with the presenter).
package final class PresenterRuntime<Action: Sendable>: Sendable {
    private let queue = Lock<ActionQueue<Action>?>(nil)
    /// Running tasks only: each one removes itself when it ends, so a
    /// presenter that runs many commands over its life holds none of them
    /// once they finished.
    private let tasks = Lock<(next: UInt64, running: [UInt64: Task<Void, Never>])>((0, [:]))
    private let label: String

    package init(label: String) { self.label = label }

    /// Starts the action queue; `handle` usually captures the presenter weakly.
    package func start(_ handle: @escaping @Sendable (Action) async -> Void) {
        let q = ActionQueue<Action>(label: label, handle: handle)
        queue.withLock { $0 = q }
    }

    package func send(_ action: Action) { queue.withLock { $0 }?.send(action) }

    /// Turns every element of `stream` into an action (elements `map` drops
    /// with nil are skipped).
    package func follow<Element: Sendable>(_ stream: AsyncStream<Element>, _ map: @escaping @Sendable (Element) -> Action?) {
        guard let q = queue.withLock({ $0 }) else { return }
        run {
            for await element in stream {
                if let action = map(element) { q.send(action) }
            }
        }
    }

    /// Runs `body` beside the action queue, cancelled with the presenter if
    /// it is still running then (and forgotten when it ends).
    package func run(_ body: @escaping @Sendable () async -> Void) {
        tasks.withLock { t in
            let id = t.next
            t.next &+= 1
            // Ending takes the lock, so it waits for this insertion even if `body` is instant.
            t.running[id] = Task { [weak self] in
                await body()
                self?.tasks.withLock { _ = $0.running.removeValue(forKey: id) }
            }
        }
    }

    /// Tasks still running (tests: finished ones are not kept).
    package var runningTasks: Int { tasks.withLock { $0.running.count } }

    deinit { tasks.withLock { for t in $0.running.values { t.cancel() } } }
}
