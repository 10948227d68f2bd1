import Locking
/// A bounded, single-consumer buffer between the connection's I/O thread
/// and one async consumer.
///
/// Overflow policy: when a consumer falls behind by `capacity` elements,
/// the *oldest* buffered element is discarded and ``droppedCount`` grows.
/// Memory therefore stays bounded however slow the consumer is, and the
/// consumer can see that it missed something (a BlueZ mirror resyncs with
/// GetManagedObjects when the count changes).
final class AsyncBuffer<Element: Sendable>: @unchecked Sendable {
    private let lock = Lock<Void>()
    private var storage: [Element?] = []
    private var head = 0
    private var stored = 0
    private var waiter: UnsafeContinuation<Result<Element?, any Error>, Never>?
    private var finishError: (any Error)?
    private var finished = false
    private var dropped = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var droppedCount: Int { lock.withLock { dropped } }
    var bufferedCount: Int { lock.withLock { stored } }

    /// Called by the producer. With `deferWake`, a waiting consumer is not
    /// resumed now; the call returns true and the producer must call
    /// ``wake()`` later (this batches wake-ups during a flood).
    @discardableResult
    func push(_ element: Element, deferWake: Bool = false) -> Bool {
        var needsWake = false
        let w: UnsafeContinuation<Result<Element?, any Error>, Never>? = lock.withLock {
            if finished { return nil }
            if let w = waiter, !deferWake {
                waiter = nil
                return w
            }
            needsWake = waiter != nil
            if storage.isEmpty { storage = Array(repeating: nil, count: min(capacity, 64)) }
            if stored == capacity {
                // Drop the oldest.
                storage[head] = nil
                head = (head + 1) % storage.count
                stored -= 1
                dropped += 1
            } else if stored == storage.count {
                grow()
            }
            storage[(head + stored) % storage.count] = element
            stored += 1
            return nil
        }
        w?.resume(returning: .success(element))
        return needsWake
    }

    /// Resumes a waiting consumer with the oldest buffered element, if both exist.
    func wake() {
        let resumed: (UnsafeContinuation<Result<Element?, any Error>, Never>, Element)? = lock.withLock {
            guard let w = waiter, stored > 0 else { return nil }
            guard case let .element(e) = poll() else { return nil }
            waiter = nil
            return (w, e)
        }
        if let (w, e) = resumed { w.resume(returning: .success(e)) }
    }

    private func grow() {
        let newCount = min(capacity, storage.count * 2)
        var fresh = [Element?](repeating: nil, count: newCount)
        for i in 0..<stored { fresh[i] = storage[(head + i) % storage.count] }
        storage = fresh
        head = 0
    }

    /// Ends the stream: buffered elements are still delivered, then nil (or
    /// the error) is returned.
    func finish(throwing error: (any Error)? = nil) {
        let w: UnsafeContinuation<Result<Element?, any Error>, Never>? = lock.withLock {
            if finished { return nil }
            finished = true
            finishError = error
            let w = waiter
            waiter = nil
            return w
        }
        if let error {
            w?.resume(returning: .failure(error))
        } else {
            w?.resume(returning: .success(nil))
        }
    }

    private enum Poll {
        case element(Element)
        case end((any Error)?)
        case wait
    }

    private func poll() -> Poll {
        if stored > 0 {
            let e = storage[head]
            storage[head] = nil
            head = (head + 1) % storage.count
            stored -= 1
            if let e { return .element(e) }
        }
        if finished { return .end(finishError) }
        return .wait
    }

    func next() async throws -> Element? {
        let immediate: Poll = lock.withLock { poll() }
        switch immediate {
        case let .element(e): return e
        case let .end(error):
            if let error { throw error }
            return nil
        case .wait: break
        }
        let result: Result<Element?, any Error> = await withTaskCancellationHandler {
            await withUnsafeContinuation { (c: UnsafeContinuation<Result<Element?, any Error>, Never>) in
                let ready: Poll = lock.withLock {
                    let p = poll()
                    if case .wait = p {
                        if Task.isCancelled { return .end(nil) }
                        waiter = c
                    }
                    return p
                }
                switch ready {
                case let .element(e): c.resume(returning: .success(e))
                case let .end(error): c.resume(returning: error.map { .failure($0) } ?? .success(nil))
                case .wait: break
                }
            }
        } onCancel: {
            let w = lock.withLock {
                let w = waiter
                waiter = nil
                return w
            }
            w?.resume(returning: .success(nil))
        }
        return try result.get()
    }
}
