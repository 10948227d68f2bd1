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
        /// (``next(advertisementsFrom:)``); nil: at once.
        var advertisementsFrom: ContinuousClock.Instant?
        /// ``release()`` was called: the next wait holds nothing either.
        var released = false
        var finished = false

        /// Whether the batch goes to the consumer now: events (and a loss)
        /// at once, advertisements once their hold is over.
        func ready() -> Bool {
            if !batch.events.isEmpty || batch.lost { return true }
            guard !batch.advertised.isEmpty else { return false }
            guard let from = advertisementsFrom else { return true }
            return ContinuousClock.now >= from
        }
    }

    private let inner = Lock(Inner())
    private let eventCapacity: Int

    init(eventCapacity: Int) {
        self.eventCapacity = max(1, eventCapacity)
    }

    /// Whether `event` is an advertisement only: a Device1 change of
    /// advertisement properties, with one of RSSI or the data among them and
    /// nothing invalidated.
    public static func advertisement(_ event: BlueZEvent) -> DeviceID? {
        guard case let .deviceChanged(id, changes) = event, changes.invalidated.isEmpty else { return nil }
        var content = false
        for key in changes.values.keys {
            guard let p = DeviceProperty(rawValue: key), DeviceProperty.advertisement.contains(p) else { return nil }
            if p != .txPower { content = true }
        }
        return content ? id : nil
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
            guard let w = s.waiter, s.ready() else { return (true, nil) }
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
    /// the first change offered after it, so no timer wakes anyone (while
    /// nothing more arrives they wait, folded per device, until the next
    /// change or ``release()``). nil: no hold.
    public func next(advertisementsFrom from: ContinuousClock.Instant?) async -> Batch? {
        if let ready = inner.withLock({ s -> Batch?? in
            if s.finished { return .some(nil) }
            s.advertisementsFrom = s.released ? nil : from
            s.released = false
            return s.ready() ? .some(take(&s)) : nil
        }) { return ready }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (c: UnsafeContinuation<Batch?, Never>) in
                let now: Batch?? = inner.withLock { s in
                    if s.finished || Task.isCancelled { s.finished = true; return .some(nil) }
                    if s.ready() { return .some(take(&s)) }
                    s.waiter = c
                    return nil
                }
                if let now { c.resume(returning: now) }
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
