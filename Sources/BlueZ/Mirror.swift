import DBus
import Locking
import Synchronization

/// One live mirror of bluetoothd's object tree over one connection.
///
/// Start-up order makes it race-free: the signal rules (InterfacesAdded,
/// InterfacesRemoved, PropertiesChanged, all from `org.bluez`) are in place
/// before GetManagedObjects is called. Signals that bluetoothd sent before
/// its reply (a lower message serial) are already part of the reply and are
/// dropped; later ones are applied on top. After that the tree changes only
/// through signals — nothing is polled.
///
/// When `org.bluez` loses its owner the snapshot becomes empty and
/// ``BlueZSnapshot/available`` false; when bluetoothd returns, the tree is
/// enumerated again and ``BlueZEvent/availability(_:)`` reports it.
public final class BlueZMirror: Sendable {
    public let connection: DBusConnection

    private struct State {
        var snapshot = BlueZSnapshot()
        /// Set while an enumeration is in flight: signals wait here with
        /// their serials until the reply says which ones it already holds.
        var pending: [DBusMessage]? = []
        var owner: String?
        var subscribers: [UInt64: Subscriber] = [:] {
            // Kept as a list too: each signal hands the list on (a reference),
            // where copying the dictionary's values cost an array per signal.
            didSet { subscriberList = Array(subscribers.values) }
        }
        private(set) var subscriberList: [Subscriber] = []
        var feeds: [UInt64: BlueZChangeFeed] = [:]
        var nextSubscriber: UInt64 = 0
        var waiters: [UInt64: (check: @Sendable (BlueZSnapshot, UInt64) -> Bool, resume: @Sendable () -> Void)] = [:]
        var changes: UInt64 = 0
        /// Why the last enumeration failed, if it did.
        var problem: BlueZError?
        /// A change was applied but made no event (nobody listens): waiters
        /// must still be checked.
        var appliedUnheard = false
    }

    private let state = Lock(State())
    private let droppedCounter = Atomic<UInt64>(0)
    private let frozen = Atomic<Bool>(false)
    private let registrations = Lock<[DBusSignalHandlerRegistration]>([])
    /// The feeds' hold deadlines, kept by the connection's thread.
    private let feedDeadline = Lock<DBusLoopDeadline?>(nil)
    private let ownerTask = Lock<Task<Void, Never>?>(nil)

    private init(connection: DBusConnection) {
        self.connection = connection
    }

    deinit {
        ownerTask.withLock { $0?.cancel() }
        state.withLock { s in
            for (_, sub) in s.subscribers { sub.continuation.finish() }
            for (_, feed) in s.feeds { feed.finish() }
        }
    }

    /// Subscribes, enumerates and starts following bluetoothd. Returns once
    /// the first enumeration is done (or bluetoothd was found absent).
    public static func start(connection: DBusConnection) async throws(BlueZError) -> BlueZMirror {
        let mirror = BlueZMirror(connection: connection)
        do {
            let objectManager = DBusMatchRule(sender: BlueZInterface.service, interface: BlueZInterface.objectManager, path: .root)
            let properties = DBusMatchRule(sender: BlueZInterface.service, interface: BlueZInterface.properties,
                                           member: "PropertiesChanged", pathNamespace: BlueZInterface.managerPath)
            let a = try await connection.addSignalHandler(matching: objectManager) { [weak mirror] m in mirror?.received(m) }
            let b = try await connection.addSignalHandler(matching: properties) { [weak mirror] m in mirror?.received(m) }
            mirror.registrations.withLock { $0 = [a, b] }
            // Feeds are offered changes on that thread, so it can end their
            // holds too: it is awake anyway while a flood lasts.
            let deadline = try await connection.addLoopDeadline(
                next: { [weak mirror] in mirror?.earliestFeedDeadline() },
                due: { [weak mirror] in mirror?.feedDeadlinesCame() })
            mirror.feedDeadline.withLock { $0 = deadline }
            let owners = try await connection.nameOwnerChanges(of: BlueZInterface.service)
            var iterator = owners.makeAsyncIterator()
            let first = try await iterator.next() ?? nil
            try await mirror.ownerChanged(to: first)
            let task = Task { [weak mirror] in
                do {
                    while let owner = try await iterator.next() {
                        guard let mirror else { return }
                        do {
                            try await mirror.ownerChanged(to: owner)
                        } catch {
                            mirror.state.withLock { $0.problem = BlueZError.from(error) }
                        }
                    }
                } catch {}
                mirror?.ownerChanged(toNothing: ())
            }
            mirror.ownerTask.withLock { $0 = task }
        } catch {
            throw .from(error)
        }
        return mirror
    }

    /// The tree now.
    public func snapshot() -> BlueZSnapshot { state.withLock { $0.snapshot } }

    /// Reads the tree under the mirror's lock without keeping it: a caller
    /// that holds a ``snapshot()`` while the mirror applies the next signal
    /// makes it copy the whole tree; one that only reads a device does not.
    public func read<T>(_ body: (BlueZSnapshot) -> T) -> T { state.withLock { body($0.snapshot) } }

    /// Why the mirror could not enumerate bluetoothd the last time it tried
    /// (nil after a successful enumeration).
    public var problem: BlueZError? { state.withLock { $0.problem } }

    /// The unique bus name (":1.7") of the bluetoothd this mirror follows,
    /// nil while `org.bluez` has no owner. Changes when bluetoothd restarts,
    /// so it tells calls from the current bluetoothd from stale ones.
    public var serviceOwner: String? { state.withLock { $0.owner } }

    /// How many signals have been applied so far (for benchmarks and tests).
    package var appliedChanges: UInt64 { state.withLock { $0.changes } }

    /// Every change from now on. A consumer that falls more than
    /// `bufferCapacity` events behind loses the oldest and should re-read
    /// ``snapshot()`` (the mirror itself never loses anything).
    ///
    /// `where`: only the events it accepts are delivered (it runs on the
    /// thread that applies the signal, so it must be quick). A consumer that
    /// cares about few events does not wake for each advertisement.
    public func events(bufferCapacity: Int = 4096,
                       where filter: (@Sendable (BlueZEvent) -> Bool)? = nil) -> AsyncStream<BlueZEvent> {
        let (stream, continuation) = AsyncStream<BlueZEvent>.makeStream(bufferingPolicy: .bufferingNewest(bufferCapacity))
        let id = state.withLock { s -> UInt64 in
            s.nextSubscriber += 1
            s.subscribers[s.nextSubscriber] = Subscriber(continuation: continuation, filter: filter)
            return s.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Every change from now on, advertisements folded per device (see
    /// ``BlueZChangeFeed``): for a consumer that reads the mirror's state of
    /// each changed device instead of the values each signal carried.
    public func feed(eventCapacity: Int = 4096) -> BlueZChangeFeed {
        let deadline = self.feedDeadline
        let feed = BlueZChangeFeed(eventCapacity: eventCapacity, deadlineChanged: { deadline.withLock { $0 }?.changed() })
        state.withLock { s in
            s.nextSubscriber += 1
            s.feeds[s.nextSubscriber] = feed
        }
        return feed
    }

    private func earliestFeedDeadline() -> ContinuousClock.Instant? {
        state.withLock { s in
            var earliest: ContinuousClock.Instant?
            for feed in s.feeds.values {
                if let d = feed.holdDeadline, earliest.map({ d < $0 }) ?? true { earliest = d }
            }
            return earliest
        }
    }

    private func feedDeadlinesCame() {
        let feeds = state.withLock { Array($0.feeds.values) }
        for feed in feeds { feed.holdEnded() }
    }

    /// Waits until `condition` holds for the snapshot (checked now and after
    /// every change), e.g. a device's ServicesResolved. Throws
    /// ``BlueZError/timedOut(_:)`` after `timeout`.
    public func wait(
        for what: String, timeout: Duration = .seconds(30),
        until condition: @escaping @Sendable (BlueZSnapshot) -> Bool
    ) async throws(BlueZError) {
        try await waitForState(what, timeout: timeout) { snapshot, _ in condition(snapshot) }
    }

    /// Waits until at least `count` signals have been applied in total
    /// (see ``appliedChanges``); for benchmarks and tests.
    package func waitForAppliedChanges(_ count: UInt64, timeout: Duration = .seconds(60)) async throws(BlueZError) {
        try await waitForState("\(count) applied changes", timeout: timeout) { _, applied in applied >= count }
    }

    private func waitForState(
        _ what: String, timeout: Duration, _ condition: @escaping @Sendable (BlueZSnapshot, UInt64) -> Bool
    ) async throws(BlueZError) {
        let id: UInt64? = state.withLock { s in
            if condition(s.snapshot, s.changes) { return nil }
            s.nextSubscriber += 1
            return s.nextSubscriber
        }
        guard let id else { return }
        let resumed = Lock(false)
        let timer = Lock<Task<Void, Never>?>(nil)
        let outcome: Bool = await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                let once: @Sendable (Bool) -> Void = { value in
                    let first = resumed.withLock { done -> Bool in
                        if done { return false }
                        done = true
                        return true
                    }
                    guard first else { return }
                    timer.withLock { $0?.cancel() }
                    c.resume(returning: value)
                }
                let satisfiedNow = state.withLock { s -> Bool in
                    if condition(s.snapshot, s.changes) { return true }
                    s.waiters[id] = (condition, { once(true) })
                    return false
                }
                if satisfiedNow { once(true); return }
                let task = Task {
                    try? await Task.sleep(for: timeout)
                    if Task.isCancelled { return }
                    self.state.withLock { _ = $0.waiters.removeValue(forKey: id) }
                    once(false)
                }
                timer.withLock { $0 = task }
                // Resumed before the timer was stored: stop it now.
                if resumed.withLock({ $0 }) { task.cancel() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
        if Task.isCancelled { throw .cancelled }
        if !outcome { throw .timedOut(what) }
    }

    // MARK: Internals

    private func ownerChanged(to owner: String?) async throws {
        guard let owner else {
            ownerChanged(toNothing: ())
            return
        }
        state.withLock { s in
            s.owner = owner
            s.pending = []
        }
        // bluetoothd takes its name a moment before its ObjectManager is
        // attached: an UnknownObject/UnknownMethod answer then means "not
        // yet", so ask again with growing pauses (about 6 s in all).
        var reply: DBusMessage?
        var delay = Duration.milliseconds(25)
        for attempt in 0..<9 {
            do {
                reply = try await connection.call(destination: BlueZInterface.service, path: .root,
                                                  interface: BlueZInterface.objectManager, member: "GetManagedObjects",
                                                  replyDecoding: .onDemand)
                break
            } catch {
                let mapped = BlueZError.from(error)
                let sameOwner = state.withLock { $0.owner == owner }
                guard case .notFound = mapped, sameOwner, attempt < 8 else {
                    // bluetoothd left again before answering (the owner stream
                    // will say so), or it answers but not as BlueZ does.
                    state.withLock { if $0.owner == owner { $0.pending = nil } }
                    throw mapped
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(1))
            }
        }
        guard let answer = reply else { throw BlueZError.unavailable }
        reply = nil
        let (tree, sender, serial): (BlueZSnapshot, String?, UInt32)
        do {
            (tree, sender, serial) = try Self.tree(from: consume answer)
        } catch {
            state.withLock { $0.pending = nil }
            throw error
        }
        publish { s in
            guard s.owner == owner else { return [] }
            s.snapshot = tree
            s.problem = nil
            var events: [BlueZEvent] = [.resynchronized, .availability(true)]
            for m in s.pending ?? [] where m.sender == sender && m.serial > serial {
                events += self.apply(m, to: &s)
            }
            s.pending = nil
            return events
        }
    }

    /// The tree a GetManagedObjects reply describes, with the reply's sender
    /// and serial; the reply itself is released on return.
    private static func tree(from reply: consuming DBusMessage) throws(BlueZError) -> (BlueZSnapshot, String?, UInt32) {
        guard reply.signature.rawValue == "a{oa{sa{sv}}}" else {
            throw BlueZError.unexpectedReply("GetManagedObjects returned \"\(reply.signature)\" instead of \"a{oa{sa{sv}}}\"")
        }
        do {
            // Read in place, object by object (the body was left undecoded);
            // a reply that was decoded anyway (it carried fds) is read whole.
            if let tree = try reply.withBodyReader(sharingStrings: true, { (r: inout DBusBodyReader) throws(DBusError) in
                try BlueZSnapshot(managedObjects: &r)
            }) {
                return (tree, reply.sender, reply.serial)
            }
            guard let body = reply.body.first else { throw DBusError.malformedMessage("no argument") }
            return (try BlueZSnapshot(managedObjects: body), reply.sender, reply.serial)
        } catch {
            throw BlueZError.unexpectedReply("GetManagedObjects: \(error)")
        }
    }

    private func ownerChanged(toNothing _: Void) {
        publish { s in
            let was = s.snapshot.available
            s.owner = nil
            s.pending = nil
            s.snapshot.markUnavailable()
            return was ? [.availability(false)] : []
        }
    }

    /// For a process that is stopping: from now on signals are dropped as
    /// they arrive, so the tree stays as it is and no event is published.
    /// Under a flood of advertisements this is what lets the stopping
    /// process's own calls (unregister the agent, stop discovery) get their
    /// replies behind the backlog, and its tasks run: applying every queued
    /// signal kept both cores busy for seconds after SIGTERM. Cannot be undone.
    public func freeze() { frozen.store(true, ordering: .relaxed) }

    /// Runs on the connection's I/O thread for every matching signal.
    private func received(_ message: DBusMessage) {
        if frozen.load(ordering: .relaxed) { return }
        publish { s in
            if s.pending != nil {
                s.pending?.append(message)
                return []
            }
            guard s.snapshot.available else { return [] }
            return self.apply(message, to: &s)
        }
    }

    private func apply(_ m: DBusMessage, to s: inout State) -> [BlueZEvent] {
        guard let applied = s.snapshot.apply(m) else { return [] }
        s.changes &+= 1
        switch applied {
        case let .interfacesAdded(object, interfaces):
            return [.interfacesAdded(object, interfaces.keys.sorted())]
        case let .interfacesRemoved(object, names):
            return [.interfacesRemoved(object, names)]
        case let .propertiesChanged(path, interface, entries, invalidated):
            // A dictionary for the event is built only when someone listens.
            guard !s.subscribers.isEmpty || !s.feeds.isEmpty else {
                s.appliedUnheard = true
                return []
            }
            var changed: [String: DBusValue] = [:]
            for e in entries {
                guard case let .string(k) = e.key else { continue }
                changed[k] = e.value.unwrappingOneVariant
            }
            return [.changed(path, interface: interface, changed, invalidated: invalidated)]
        case let .deviceChanged(id, changed, invalidated):
            guard !s.subscribers.isEmpty || !s.feeds.isEmpty else {
                s.appliedUnheard = true
                return []
            }
            return [.deviceChanged(id, PropertyChanges(changed, invalidated: invalidated))]
        }
    }

    struct Subscriber {
        let continuation: AsyncStream<BlueZEvent>.Continuation
        let filter: (@Sendable (BlueZEvent) -> Bool)?
    }

    /// Mutates the state under the lock, then delivers the resulting events
    /// and wakes satisfied waiters outside it.
    private func publish(_ body: (inout State) -> [BlueZEvent]) {
        let (events, subscribers, feeds, ready): ([BlueZEvent], [Subscriber], [UInt64: BlueZChangeFeed], [@Sendable () -> Void]) = state.withLock { s in
            let events = body(&s)
            let applied = s.appliedUnheard
            s.appliedUnheard = false
            guard !events.isEmpty || applied else { return ([], [], [:], []) }
            if s.waiters.isEmpty && events.isEmpty { return ([], [], [:], []) }
            var ready: [@Sendable () -> Void] = []
            for (id, w) in s.waiters where w.check(s.snapshot, s.changes) {
                ready.append(w.resume)
                s.waiters[id] = nil
            }
            return (events, s.subscriberList, events.isEmpty ? [:] : s.feeds, ready)
        }
        var ended: [UInt64] = []
        for (id, feed) in feeds where !feed.offer(events) { ended.append(id) }
        if !ended.isEmpty { state.withLock { s in for id in ended { s.feeds[id] = nil } } }
        var dropped: UInt64 = 0
        for sub in subscribers {
            for e in events where sub.filter?(e) ?? true {
                if case .dropped = sub.continuation.yield(e) { dropped += 1 }
            }
        }
        if dropped > 0 { droppedCounter.add(dropped, ordering: .relaxed) }
        for r in ready { r() }
    }

    /// Events a subscriber's full buffer dropped (its oldest went to make
    /// room), over every subscriber, ever. A consumer that sees it move has
    /// missed events and reads the snapshot again instead of trusting them.
    public var droppedEvents: UInt64 { droppedCounter.load(ordering: .relaxed) }
}
