import Locking

/// Holds a value and publishes each distinct value to every subscriber, in
/// order: presenters' states (kept without loss — they are small and few)
/// and repositories' snapshots (a bounded buffer per subscriber: one that
/// falls behind keeps the newest).
package final class StateStore<State: Sendable & Equatable>: Sendable {
    private struct Inner {
        var state: State
        var subscribers: [UInt64: AsyncStream<State>.Continuation] = [:]
        /// Subscribers that keep at most one waiting state (``states(coalescing:)``);
        /// weak: one whose stream went away is dropped at the next update.
        var mailboxes: [UInt64: WeakMailbox] = [:]
        var next: UInt64 = 0
    }
    private let inner: Lock<Inner>
    /// Subscribers that went away, removed at the next update. A separate
    /// lock: termination runs under the Swift runtime's task-status lock,
    /// and `update` takes that lock (resuming a waiting consumer) while it
    /// holds `inner`, so termination must never wait for `inner`.
    private let gone = Lock<[UInt64]>([])
    private let bufferLimit: Int?

    /// `bufferLimit`: at most this many undelivered values per subscriber
    /// (the oldest go first); nil keeps every value.
    package init(_ initial: State, bufferLimit: Int? = nil) {
        inner = Lock(Inner(state: initial))
        self.bufferLimit = bufferLimit
    }

    package var state: State { inner.withLock { $0.state } }

    /// Applies `change`; subscribers hear about it only if the state differs.
    package func update(_ change: (inout State) -> Void) {
        inner.withLock { i in
            var s = i.state
            change(&s)
            guard s != i.state else { return }
            i.state = s
            publish(&i)
        }
    }

    /// Drops the subscribers that went away and yields the state to the
    /// others — under `inner`'s lock, so that concurrent updates reach every
    /// subscriber in the order they were applied.
    private func publish(_ i: inout Inner) {
        for id in gone.withLock({ g -> [UInt64] in defer { g.removeAll() }; return g }) { i.subscribers[id] = nil }
        for (_, c) in i.subscribers { c.yield(i.state) }
        for (id, m) in i.mailboxes {
            if let mailbox = m.value { mailbox.put(i.state) } else { i.mailboxes[id] = nil }
        }
    }

    /// Reads part of the state under the lock (no copy of the parts not read).
    package func read<R>(_ body: (State) -> R) -> R { inner.withLock { body($0.state) } }

    /// Changes the state in place and publishes it: for a caller that knows
    /// it changes something and holds large values in the state (a value
    /// only the store references is then changed without a copy; take it out
    /// of the state first, change it, put it back).
    package func modify(_ change: (inout State) -> Void) {
        inner.withLock { i in
            change(&i.state)
            publish(&i)
        }
    }

    package func states() -> AsyncStream<State> {
        let (stream, continuation) = AsyncStream<State>.makeStream(bufferingPolicy: bufferLimit.map { .bufferingNewest($0) } ?? .unbounded)
        let id = inner.withLock { i -> UInt64 in
            i.next += 1
            i.subscribers[i.next] = continuation
            continuation.yield(i.state)
            return i.next
        }
        continuation.onTermination = { [weak self] _ in self?.gone.withLock { $0.append(id) } }
        return stream
    }

    /// The current state, then every change, for a consumer that may fall
    /// behind: at most one state waits for it. A newer state replaces the
    /// waiting one through `merge(waiting, newer)`, which must carry over what
    /// the consumer needs from the one it replaces (e.g. the rows that changed
    /// in both); `coalesced` is called each time. Memory stays bounded however
    /// slow the consumer is, where ``states()`` would queue every state.
    package func states(coalescing merge: @escaping @Sendable (State, State) -> State,
                       coalesced: @escaping @Sendable () -> Void = {}) -> AsyncStream<State> {
        let mailbox = Mailbox(merge: merge, coalesced: coalesced)
        inner.withLock { i in
            i.next += 1
            i.mailboxes[i.next] = WeakMailbox(value: mailbox)
            mailbox.put(i.state)
        }
        return AsyncStream(unfolding: { await mailbox.take() }, onCancel: { mailbox.cancel() })
    }

    /// One waiting state and the consumer waiting for it (never both).
    private final class Mailbox: Sendable {
        private struct Slot {
            var waiting: State?
            var consumer: CheckedContinuation<State?, Never>?
            var cancelled = false
        }
        private let slot = Lock(Slot())
        private let merge: @Sendable (State, State) -> State
        private let coalesced: @Sendable () -> Void

        init(merge: @escaping @Sendable (State, State) -> State, coalesced: @escaping @Sendable () -> Void) {
            self.merge = merge
            self.coalesced = coalesced
        }

        func put(_ state: State) {
            let (consumer, merged) = slot.withLock { s -> (CheckedContinuation<State?, Never>?, Bool) in
                if s.cancelled { return (nil, false) }
                if let c = s.consumer {
                    s.consumer = nil
                    return (c, false)
                }
                if let waiting = s.waiting {
                    s.waiting = merge(waiting, state)
                    return (nil, true)
                }
                s.waiting = state
                return (nil, false)
            }
            consumer?.resume(returning: state)
            if merged { coalesced() }
        }

        func take() async -> State? {
            await withCheckedContinuation { (c: CheckedContinuation<State?, Never>) in
                let ready = slot.withLock { s -> State?? in
                    if s.cancelled { return .some(nil) }
                    if let w = s.waiting {
                        s.waiting = nil
                        return .some(w)
                    }
                    s.consumer = c
                    return nil
                }
                if let ready { c.resume(returning: ready) }
            }
        }

        func cancel() {
            let consumer = slot.withLock { s -> CheckedContinuation<State?, Never>? in
                s.cancelled = true
                s.waiting = nil
                defer { s.consumer = nil }
                return s.consumer
            }
            consumer?.resume(returning: nil)
        }
    }

    private struct WeakMailbox: Sendable {
        weak var value: Mailbox?
    }

    /// Waits until the state satisfies `condition` (now or after a change),
    /// at most `timeout`; true if it did.
    package func wait(atMost timeout: Duration, until condition: @escaping @Sendable (State) -> Bool) async -> Bool {
        if condition(state) { return true }
        return await firstElement(of: states(), within: timeout, where: condition) != nil
    }

    deinit {
        inner.withLock { i in
            for (_, c) in i.subscribers { c.finish() }
            for (_, m) in i.mailboxes { m.value?.cancel() }
        }
    }
}

/// The first element of `stream` that satisfies `condition`, or nil when the
/// stream ends or `timeout` passes first.
package func firstElement<Element: Sendable>(of stream: AsyncStream<Element>, within timeout: Duration,
                                            where condition: @escaping @Sendable (Element) -> Bool) async -> Element? {
    await withTaskGroup(of: Element?.self) { group in
        group.addTask {
            for await element in stream where condition(element) { return element }
            return nil
        }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}
