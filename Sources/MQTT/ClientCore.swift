internal import CMosquitto
import Locking
import Synchronization

/// What one client shares with its network thread.
///
/// libmosquitto calls back on the network thread (`NetworkThread`); each
/// callback takes `state` briefly, records what happened and wakes whoever
/// waits. No libmosquitto function is ever called while `state` is held:
/// libmosquitto holds its own mutexes while it calls back (and may call
/// `on_publish` on the publishing thread), so the two locks are never nested.
///
/// Nor is a task woken while `state` is held (resuming a continuation,
/// yielding to a stream): that takes the Swift runtime's lock of the task,
/// and cancelling a task holds that lock while its cancellation handler (or
/// a stream's termination handler) takes `state` — a gateway shutting down
/// deadlocked that way. Such wake-ups are collected as `Wake`s under the
/// lock and run after it.
final class ClientCore: Sendable {
    /// Something to do once `state` is released.
    typealias Wake = @Sendable () -> Void
    enum Ack: Sendable {
        case published
        case subscribed(granted: [Int32])
    }

    enum Kind: Sendable {
        case publish
        case subscribe
    }

    struct Subscription {
        let filter: String
        let qos: MQTTQoS
        let continuation: AsyncStream<MQTTMessage>.Continuation
    }

    /// Publishes whose acknowledgements one caller awaits at once: one
    /// wake-up when the last arrives, not one per PUBACK.
    struct AckBatch {
        let mids: [Int32]
        let topics: [String]
        var pending: Set<Int32>
        let continuation: CheckedContinuation<(acknowledged: Int, error: MQTTError?), Never>

        /// How many from the start were acknowledged.
        var acknowledged: Int { mids.firstIndex(where: pending.contains) ?? mids.count }
        /// What was awaited when it stopped, for the error text.
        var operation: String { "PUBACK for \(topics[min(acknowledged, topics.count - 1)])" }
    }

    struct State {
        var connection: MQTTConnectionState = .disconnected(reason: "not connected yet")
        var closed = false
        var connectWaiter: CheckedContinuation<Result<Void, MQTTError>, Never>?
        var connectOutcome: Result<Void, MQTTError>?
        /// Callers waiting for PUBACK/PUBCOMP or SUBACK, by message id.
        var ackWaiters: [Int32: (kind: Kind, continuation: CheckedContinuation<Result<Ack, MQTTError>, Never>)] = [:]
        /// Acknowledgements that arrived before their caller started waiting
        /// (libmosquitto hands out the id only when `mosquitto_publish` returns).
        var earlyAcks: [Int32: Ack] = [:]
        /// Ids nobody will wait for (QoS 0 publishes, re-subscriptions): their
        /// acknowledgement is dropped instead of kept in `earlyAcks`.
        var unawaited: Set<Int32> = []
        /// Publishes awaited together (`awaitAcks`), by token, and the token
        /// awaiting each of their ids.
        var batches: [Int: AckBatch] = [:]
        var batchOf: [Int32: Int] = [:]
        var subscriptions: [Int: Subscription] = [:]
        var observers: [Int: AsyncStream<MQTTConnectionState>.Continuation] = [:]
        var nextToken = 0
    }

    let endpoint: String
    let protocolVersion: MQTTConfiguration.ProtocolVersion
    let state = Lock(State())
    /// Messages a subscription stream dropped because its consumer was
    /// behind by `subscriptionBufferLimit` (the oldest went).
    let droppedMessages = Atomic<UInt64>(0)

    init(endpoint: String, protocolVersion: MQTTConfiguration.ProtocolVersion) {
        self.endpoint = endpoint
        self.protocolVersion = protocolVersion
    }

    // MARK: Connection state

    /// The connection state now.
    var connection: MQTTConnectionState { state.withLock { $0.connection } }

    /// Runs `body` under the lock, then the wake-ups it collected.
    private func locked<T>(_ body: (inout State, inout [Wake]) -> T) -> T {
        let (result, wakes) = state.withLock { s -> (T, [Wake]) in
            var wakes: [Wake] = []
            let result = body(&s, &wakes)
            return (result, wakes)
        }
        for wake in wakes { wake() }
        return result
    }

    private func setConnection(_ new: MQTTConnectionState, in s: inout State, _ wakes: inout [Wake]) {
        guard s.connection != new else { return }
        s.connection = new
        let observers = Array(s.observers.values)
        wakes.append { for o in observers { o.yield(new) } }
    }

    /// on_connect: CONNACK arrived with `rc` (0 accepted). Returns the filters
    /// to subscribe again (a new network connection starts without them
    /// unless the broker kept the session; subscribing twice is harmless).
    func connackArrived(rc: Int32) -> [(String, MQTTQoS)] {
        let outcome: Result<Void, MQTTError>
        if rc == 0 {
            outcome = .success(())
        } else {
            outcome = .failure(.refused(endpoint: endpoint, reason: connackText(rc)))
        }
        return locked { s, wakes in
            guard !s.closed else { return [] }
            resolveConnect(outcome, in: &s, &wakes)
            guard rc == 0 else {
                setConnection(.disconnected(reason: "\(endpoint) refused the connection: \(connackText(rc))"), in: &s, &wakes)
                return []
            }
            // Packets queued before the connection dropped were discarded with
            // it: their callbacks will not come.
            s.unawaited.removeAll()
            setConnection(.connected, in: &s, &wakes)
            var best: [String: MQTTQoS] = [:]
            for sub in s.subscriptions.values { best[sub.filter] = max(best[sub.filter] ?? sub.qos, sub.qos) }
            return best.map { ($0.key, $0.value) }
        }
    }

    /// on_disconnect: `rc` 0 when we asked for it.
    func connectionEnded(rc: Int32) {
        let reason = rc == 0 ? "disconnected by the client" : "connection to \(endpoint) lost: \(errorText(rc))"
        let endpoint = self.endpoint
        locked { s, wakes in
            resolveConnect(.failure(.connectionFailed(endpoint: endpoint, reason: "connection closed before CONNACK (\(errorText(rc)))")), in: &s, &wakes)
            setConnection(.disconnected(reason: reason), in: &s, &wakes)
            // A SUBSCRIBE whose SUBACK did not come will never be answered (the
            // reconnect subscribes again under a new id): tell its caller.
            // Publishes stay: libmosquitto sends QoS ≥ 1 messages again.
            for (mid, w) in s.ackWaiters where w.kind == .subscribe {
                s.ackWaiters[mid] = nil
                let c = w.continuation
                wakes.append { c.resume(returning: .failure(.connectionLost(endpoint: endpoint, operation: "SUBACK"))) }
            }
        }
    }

    private func resolveConnect(_ outcome: Result<Void, MQTTError>, in s: inout State, _ wakes: inout [Wake]) {
        guard s.connectOutcome == nil else { return }
        s.connectOutcome = outcome
        if let w = s.connectWaiter {
            s.connectWaiter = nil
            wakes.append { w.resume(returning: outcome) }
        }
    }

    /// Waits for the first CONNACK (or failure), at most `timeout`.
    func awaitConnack(timeout: Duration) async -> Result<Void, MQTTError> {
        let endpoint = self.endpoint
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            self?.locked { s, wakes in self?.resolveConnect(.failure(.timedOut(endpoint: endpoint, operation: "CONNECT")), in: &s, &wakes) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { c in
            let ready = state.withLock { s -> Result<Void, MQTTError>? in
                if let outcome = s.connectOutcome { return outcome }
                s.connectWaiter = c
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
    }

    // MARK: Acknowledgements by message id

    func ackArrived(mid: Int32, _ ack: Ack) {
        locked { s, wakes in
            if let token = s.batchOf.removeValue(forKey: mid) {
                // One lookup, and the batch changed where it is (an ack per
                // message: a copy of it and a second lookup were ~2 000
                // instructions each time).
                guard let i = s.batches.index(forKey: token) else { return }
                s.batches.values[i].pending.remove(mid)
                if s.batches.values[i].pending.isEmpty {
                    let batch = s.batches.remove(at: i).value
                    wakes.append { batch.continuation.resume(returning: (batch.mids.count, nil)) }
                }
                return
            }
            if let w = s.ackWaiters.removeValue(forKey: mid) {
                let c = w.continuation
                wakes.append { c.resume(returning: .success(ack)) }
                return
            }
            if s.unawaited.remove(mid) == nil { s.earlyAcks[mid] = ack }
        }
    }

    /// Waits for the PUBACK/PUBCOMP of every id in `mids` (published in this
    /// order, to `topics`), woken once when the last has arrived. Returns how
    /// many from the start were acknowledged and, when not all were, why the
    /// wait ended (the client closed, the task was cancelled): as many
    /// one-by-one `awaitAck`s would, without a wake-up per acknowledgement.
    func awaitAcks(_ mids: [Int32], topics: [String]) async -> (acknowledged: Int, error: MQTTError?) {
        guard !mids.isEmpty, mids.count == topics.count else { return (mids.count, nil) }
        let endpoint = self.endpoint
        let token = state.withLock { s -> Int in
            s.nextToken += 1
            return s.nextToken
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { c in
                let answer = state.withLock { s -> (acknowledged: Int, error: MQTTError?)? in
                    var batch = AckBatch(mids: mids, topics: topics, pending: [], continuation: c)
                    for mid in mids where s.earlyAcks.removeValue(forKey: mid) == nil { batch.pending.insert(mid) }
                    if batch.pending.isEmpty { return (mids.count, nil) }
                    if s.closed { return (batch.acknowledged, .closed(endpoint: endpoint)) }
                    if Task.isCancelled {
                        s.unawaited.formUnion(batch.pending)
                        return (batch.acknowledged, .cancelled(endpoint: endpoint, operation: batch.operation))
                    }
                    for mid in batch.pending { s.batchOf[mid] = token }
                    s.batches[token] = batch
                    return nil
                }
                if let answer { c.resume(returning: answer) }
            }
        } onCancel: {
            // Runs holding the task's runtime lock: take `state`, wake nobody under it.
            let ended = state.withLock { s -> AckBatch? in
                guard let batch = s.batches.removeValue(forKey: token) else { return nil }
                for mid in batch.pending {
                    s.batchOf[mid] = nil
                    s.unawaited.insert(mid)
                }
                return batch
            }
            if let ended {
                ended.continuation.resume(returning: (ended.acknowledged, .cancelled(endpoint: endpoint, operation: ended.operation)))
            }
        }
    }

    /// Nobody waits for `mid`'s acknowledgement.
    func forget(mid: Int32) {
        state.withLock { s in
            if s.earlyAcks.removeValue(forKey: mid) == nil { s.unawaited.insert(mid) }
        }
    }

    func awaitAck(mid: Int32, kind: Kind, operation: String) async -> Result<Ack, MQTTError> {
        let endpoint = self.endpoint
        return await withTaskCancellationHandler {
            await withCheckedContinuation { c in
                let answer = state.withLock { s -> Result<Ack, MQTTError>? in
                    if let ack = s.earlyAcks.removeValue(forKey: mid) { return .success(ack) }
                    if s.closed { return .failure(.closed(endpoint: endpoint)) }
                    if Task.isCancelled {
                        s.unawaited.insert(mid)
                        return .failure(.cancelled(endpoint: endpoint, operation: operation))
                    }
                    s.ackWaiters[mid] = (kind, c)
                    return nil
                }
                if let answer { c.resume(returning: answer) }
            }
        } onCancel: {
            // Runs holding the task's runtime lock: take `state`, wake nobody under it.
            let waiter = state.withLock { s -> CheckedContinuation<Result<Ack, MQTTError>, Never>? in
                guard let w = s.ackWaiters.removeValue(forKey: mid) else { return nil }
                s.unawaited.insert(mid)
                return w.continuation
            }
            waiter?.resume(returning: .failure(.cancelled(endpoint: endpoint, operation: operation)))
        }
    }

    // MARK: Subscriptions and observers

    /// nil when the client is closed.
    func addSubscription(filter: String, qos: MQTTQoS, continuation: AsyncStream<MQTTMessage>.Continuation) -> Int? {
        state.withLock { s in
            guard !s.closed else { return nil }
            s.nextToken += 1
            s.subscriptions[s.nextToken] = Subscription(filter: filter, qos: qos, continuation: continuation)
            return s.nextToken
        }
    }

    /// Removes a subscription; returns its filter when no other subscription
    /// of the client still uses it (so it should be unsubscribed), nil otherwise.
    func removeSubscription(_ token: Int) -> String? {
        state.withLock { s in
            guard let sub = s.subscriptions.removeValue(forKey: token), !s.closed else { return nil }
            return s.subscriptions.values.contains { $0.filter == sub.filter } ? nil : sub.filter
        }
    }

    func messageArrived(_ message: MQTTMessage) {
        let subs = state.withLock { s in s.subscriptions.values.map { ($0.filter, $0.continuation) } }
        for (filter, continuation) in subs where topicMatches(filter: filter, topic: message.topic) {
            if case .dropped = continuation.yield(message) { droppedMessages.add(1, ordering: .relaxed) }
        }
    }

    func addObserver(_ continuation: AsyncStream<MQTTConnectionState>.Continuation) -> Int? {
        locked { s, wakes in
            let now = s.connection
            wakes.append { continuation.yield(now) }
            guard !s.closed else { return nil }
            s.nextToken += 1
            s.observers[s.nextToken] = continuation
            return s.nextToken
        }
    }

    func removeObserver(_ token: Int) {
        state.withLock { s in _ = s.observers.removeValue(forKey: token) }
    }

    /// `disconnect()` began: the network thread reconnects no more.
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Marks the client closed; false when it already was.
    func beginClose() -> Bool {
        state.withLock { s in
            guard !s.closed else { return false }
            s.closed = true
            return true
        }
    }

    /// After the network thread stopped: answers every waiter and ends every stream.
    func finishAll() {
        let endpoint = self.endpoint
        let (subs, observers) = locked { s, wakes in
            s.closed = true
            setConnection(.disconnected(reason: "disconnected by the client"), in: &s, &wakes)
            resolveConnect(.failure(.closed(endpoint: endpoint)), in: &s, &wakes)
            let waiting = s.ackWaiters.values.map(\.continuation)
            wakes.append { for c in waiting { c.resume(returning: .failure(.closed(endpoint: endpoint))) } }
            s.ackWaiters.removeAll()
            let batches = Array(s.batches.values)
            wakes.append { for b in batches { b.continuation.resume(returning: (b.acknowledged, .closed(endpoint: endpoint))) } }
            s.batches.removeAll()
            s.batchOf.removeAll()
            s.earlyAcks.removeAll()
            s.unawaited.removeAll()
            let subs = Array(s.subscriptions.values)
            let observers = Array(s.observers.values)
            s.subscriptions.removeAll()
            s.observers.removeAll()
            return (subs, observers)
        }
        // Finished outside the lock: onTermination handlers take it again.
        for sub in subs { sub.continuation.finish() }
        for o in observers { o.finish() }
    }

    // MARK: Text

    func connackText(_ rc: Int32) -> String {
        switch protocolVersion {
        case .v311: return cText(mosquitto_connack_string(rc), orCode: rc)
        case .v5: return cText(mosquitto_reason_string(rc), orCode: rc)
        }
    }
}

/// libmosquitto's success return code.
let mosqOK = Int32(MOSQ_ERR_SUCCESS.rawValue)
let mosqNoConnection = Int32(MOSQ_ERR_NO_CONN.rawValue)

/// libmosquitto's text for one of its return codes (for MOSQ_ERR_ERRNO, the
/// calling thread's errno: call right after the failing function).
func errorText(_ rc: Int32) -> String {
    cText(mosquitto_strerror(rc), orCode: rc)
}

/// libmosquitto's text functions never return NULL, but the C signature allows it.
func cText(_ text: UnsafePointer<CChar>?, orCode rc: Int32) -> String {
    text.map { String(cString: $0) } ?? "code \(rc)"
}

func topicMatches(filter: String, topic: String) -> Bool {
    var result = false
    return mosquitto_topic_matches_sub(filter, topic, &result) == mosqOK && result
}
