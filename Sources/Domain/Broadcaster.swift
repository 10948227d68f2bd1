import Locking

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
            return i.next
        }
        // Yields happen outside the lock (below), so termination may take it.
        continuation.onTermination = { [weak self] _ in
            _ = self?.inner.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    package func yield(_ element: Element) {
        // Usually no one listens (the gateway's event stream without an HTTP
        // client): then no copy of the subscribers is made.
        let subscribers = inner.withLock { $0.subscribers.isEmpty ? [] : Array($0.subscribers.values) }
        for c in subscribers { c.yield(element) }
    }

    deinit { inner.withLock { i in for (_, c) in i.subscribers { c.finish() } } }
}
