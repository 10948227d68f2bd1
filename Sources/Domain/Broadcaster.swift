import Locking
import Synchronization

/// Hands each event to every current subscriber — for things that happen
/// (a pairing ended), where `StateStore` is for things that are (its
/// subscribers get the current value first and equal values only once,
/// which would replay an old event or swallow a repeated one).
package final class Broadcaster<Element: Sendable>: Sendable {
    private struct Inner {
        var subscribers: [UInt64: AsyncStream<Element>.Continuation] = [:]
        var next: UInt64 = 0
    }
    private let inner = Lock(Inner())
    /// How many subscribers there are, read without the lock: usually none
    /// (the gateway's event stream without an HTTP client), and then
    /// ``yield(_:)`` — once per state message — costs one load.
    private let listening = Atomic<Int>(0)
    private let bufferLimit: Int

    /// `bufferLimit`: at most this many undelivered events per subscriber
    /// (the oldest go first).
    package init(bufferLimit: Int = 64) { self.bufferLimit = max(1, bufferLimit) }

    /// Every event from now on.
    package func events() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(bufferLimit))
        let id = inner.withLock { i -> UInt64 in
            i.next += 1
            i.subscribers[i.next] = continuation
            listening.add(1, ordering: .releasing)
            return i.next
        }
        // Yields happen outside the lock (below), so termination may take it.
        continuation.onTermination = { [weak self] _ in
            self?.inner.withLock { i in
                if i.subscribers.removeValue(forKey: id) != nil { self?.listening.subtract(1, ordering: .relaxed) }
            }
        }
        return stream
    }

    package func yield(_ element: Element) {
        guard listening.load(ordering: .acquiring) > 0 else { return }
        let subscribers = inner.withLock { Array($0.subscribers.values) }
        for c in subscribers { c.yield(element) }
    }

    deinit { inner.withLock { i in for (_, c) in i.subscribers { c.finish() } } }
}
