import Locking

/// A mirror subscription that folds advertisements into one entry per
/// device: what a consumer needs that reads the mirror's current state for
/// each changed device (the device repository, device details) rather than
/// the values a signal carried.
///
/// Against ``BlueZMirror/events(bufferCapacity:where:)``: an advertisement
/// costs the I/O thread a set insertion, and wakes the consumer only when it
/// is waiting; a consumer that lags gets each device once, however many
/// advertisements it missed (the latest state wins), so a flood neither
/// grows memory nor forces a resynchronisation. Every other event (a
/// connection, an adapter, objects added or removed) is delivered in order,
/// up to `eventCapacity` between two batches; beyond that ``Batch/lost`` says
/// the consumer must read the snapshot again.
public final class BlueZChangeFeed: Sendable {
    /// What changed since the consumer's last batch.
    public struct Batch: Sendable {
        /// Devices whose only change was an advertisement (RSSI, TxPower,
        /// manufacturer or service data), each once, in the order first heard.
        public var advertised: [DeviceID] = []
        /// Every other event, in order.
        public var events: [BlueZEvent] = []
        /// Events were dropped for a full list: re-read the snapshot.
        public var lost = false
        /// Advertisements folded into an earlier one of the same device in this batch.
        public var folded = 0

        public var isEmpty: Bool { advertised.isEmpty && events.isEmpty && !lost }
    }

    private struct Inner {
        var batch = Batch()
        var seen: Set<DeviceID> = []
        var waiter: UnsafeContinuation<Batch?, Never>?
        /// The waiting consumer takes advertisements only from then on
        /// (``next(advertisementsFrom:wakeAtEnd:atTheLatest:)``); nil: at once.
        var advertisementsFrom: ContinuousClock.Instant?
        /// The waiting consumer wants to hear at the end of its hold even
        /// with nothing new (an empty batch).
        var wakeAtEnd = false
        /// When the hold ends though nothing more is offered (nil: at `advertisementsFrom`).
        var atTheLatest: ContinuousClock.Instant?
        /// ``release()`` was called: the next wait holds nothing either.
        var released = false
        var finished = false

        /// Whether the batch goes to the consumer now: events (and a loss)
        /// at once, advertisements once their hold is over.
        func ready(_ now: ContinuousClock.Instant) -> Bool {
            if !batch.events.isEmpty || batch.lost { return true }
            guard let from = advertisementsFrom else { return !batch.advertised.isEmpty }
            if !batch.advertised.isEmpty { return now >= from }
            return wakeAtEnd && now >= (atTheLatest ?? from)
        }

        /// When a waiting consumer's hold must end even if nothing more is
        /// offered (nil: no such moment).
        var deadline: ContinuousClock.Instant? {
            guard waiter != nil, let from = advertisementsFrom, wakeAtEnd || !batch.advertised.isEmpty else { return nil }
            return max(from, atTheLatest ?? from)
        }
    }

    private let inner = Lock(Inner())
    private let eventCapacity: Int
    /// Tells whoever keeps the feeds' deadlines (the mirror's connection
    /// thread) that one may have become earlier.
    private let deadlineChanged: @Sendable () -> Void
    private let now: @Sendable () -> ContinuousClock.Instant

    /// `now`: the clock holds are measured on (tests move it by hand).
    init(eventCapacity: Int, now: @escaping @Sendable () -> ContinuousClock.Instant = { .now },
         deadlineChanged: @escaping @Sendable () -> Void = {}) {
        self.eventCapacity = max(1, eventCapacity)
        self.now = now
        self.deadlineChanged = deadlineChanged
    }

    /// When the waiting consumer's hold ends even without a new change: the
    /// mirror's connection thread wakes then (``holdEnded()``) in place of a
    /// timer. nil: nobody waits with a hold that needs it.
    var holdDeadline: ContinuousClock.Instant? { inner.withLock { $0.deadline } }

    /// The hold's deadline has come: a waiting consumer gets what waited
    /// (an empty batch when it asked to hear at the end anyway).
    func holdEnded() {
        let ready: (UnsafeContinuation<Batch?, Never>, Batch)? = inner.withLock { s in
            guard let w = s.waiter, s.ready(now()) else { return nil }
            s.waiter = nil
            return (w, take(&s))
        }
        if let (w, batch) = ready { w.resume(returning: batch) }
    }

    /// Whether `event` is an advertisement only: a Device1 change of
    /// advertisement properties, with one of RSSI or the data among them and
    /// nothing invalidated (``PropertyChanges/advertisementOnly``).
    public static func advertisement(_ event: BlueZEvent) -> DeviceID? {
        guard case let .deviceChanged(id, changes) = event, changes.advertisementOnly else { return nil }
        return id
    }

    /// On the mirror's thread: adds the events, wakes a waiting consumer.
    /// False once the consumer is gone.
    func offer(_ events: [BlueZEvent]) -> Bool {
        let (alive, waiter): (Bool, (UnsafeContinuation<Batch?, Never>, Batch)?) = inner.withLock { s in
            if s.finished { return (false, nil) }
            for e in events {
                if let id = Self.advertisement(e) {
                    if s.seen.insert(id).inserted { s.batch.advertised.append(id) } else { s.batch.folded += 1 }
                } else if s.batch.events.count < eventCapacity {
                    s.batch.events.append(e)
                } else {
                    s.batch.lost = true
                }
            }
            guard let w = s.waiter, s.ready(now()) else { return (true, nil) }
            s.waiter = nil
            return (true, (w, take(&s)))
        }
        if let (w, batch) = waiter { w.resume(returning: batch) }
        return alive
    }

    /// Whether a consumer waits now (tests).
    var consumerWaits: Bool { inner.withLock { $0.waiter != nil } }

    /// Ends the hold of a waiting consumer's advertisements: it gets what
    /// is pending now, or the next change as it comes.
    public func release() {
        let ready: (UnsafeContinuation<Batch?, Never>, Batch)? = inner.withLock { s in
            s.advertisementsFrom = nil
            // Also for a consumer that is not waiting yet (it may have
            // decided on its hold before the reason to end it came).
            s.released = s.waiter == nil
            guard let w = s.waiter, !s.batch.isEmpty else { return nil }
            s.waiter = nil
            return (w, take(&s))
        }
        if let (w, batch) = ready { w.resume(returning: batch) }
    }

    private func take(_ s: inout Inner) -> Batch {
        defer {
            s.batch = Batch()
            s.seen.removeAll(keepingCapacity: s.seen.count <= 1024)
        }
        return s.batch
    }

    /// What changed since the last batch, without waiting (nil: nothing).
    public func poll() -> Batch? {
        inner.withLock { s in s.batch.isEmpty ? nil : take(&s) }
    }

    /// Waits for the next changes; nil when the mirror is gone or the
    /// calling task was cancelled (the feed then ends for good).
    public func next() async -> Batch? { await next(advertisementsFrom: nil) }

    /// ``next()`` for a consumer that needs advertisements only now and
    /// then: events come at once, advertisements not before `from` — with
    /// the first change offered after it, or at `from` when nothing more is
    /// offered (the mirror's connection thread keeps that deadline, see
    /// ``holdDeadline``: no timer per batch), or at ``release()``. nil: no
    /// hold. `wakeAtEnd`: at the end even with nothing to give (an empty
    /// batch), for a consumer that has something of its own due then.
    /// `atTheLatest`: when nothing more is offered, the hold ends then
    /// instead of at `from` — while changes keep coming, the first after
    /// `from` ends it, so the connection thread's deadline, a wake-up of its
    /// own, is only the last resort when a flood stops.
    public func next(advertisementsFrom from: ContinuousClock.Instant?, wakeAtEnd: Bool = false,
                     atTheLatest: ContinuousClock.Instant? = nil) async -> Batch? {
        if let ready = inner.withLock({ s -> Batch?? in
            if s.finished { return .some(nil) }
            s.advertisementsFrom = s.released ? nil : from
            s.wakeAtEnd = wakeAtEnd
            s.atTheLatest = atTheLatest
            s.released = false
            return s.ready(now()) ? .some(take(&s)) : nil
        }) { return ready }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (c: UnsafeContinuation<Batch?, Never>) in
                let (handed, deadline): (Batch??, Bool) = inner.withLock { s in
                    if s.finished || Task.isCancelled { s.finished = true; return (.some(nil), false) }
                    if s.ready(now()) { return (.some(take(&s)), false) }
                    s.waiter = c
                    return (nil, s.deadline != nil)
                }
                if let handed { c.resume(returning: handed) }
                // The connection thread may be waiting already, for longer.
                if deadline { deadlineChanged() }
            }
        } onCancel: {
            finish()
        }
    }

    /// Ends the feed: a waiting consumer gets nil, the mirror drops it.
    public func finish() {
        let w = inner.withLock { s -> UnsafeContinuation<Batch?, Never>? in
            s.finished = true
            defer { s.waiter = nil }
            return s.waiter
        }
        w?.resume(returning: nil)
    }
}
