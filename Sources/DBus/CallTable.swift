import HeapModule

/// The method calls a connection has sent and not yet seen answered: who
/// waits for each reply, and when each gives up.
///
/// A value owned by ``ConnectionCore`` and touched on its I/O thread only.
/// It never runs a completion itself: every method that ends a call hands
/// the call back, and the core runs its completion after the table is
/// consistent again, so a completion may send the next call at once.
struct CallTable {
    struct PendingCall {
        let member: String
        let timeoutMs: Int
        let completion: (Result<DBusMessage, DBusError>) -> Void
        let state: CallState?
        let onCancel: (() -> Void)?
        /// The reply's body stays in wire form (``DBusBodyDecoding/onDemand``).
        var lazyReply = false
    }

    private var pending: [UInt32: PendingCall] = [:]
    private var deadlines = Heap<CallDeadline>()

    var count: Int { pending.count }

    /// When the earliest outstanding call times out (monotonic ns), if any.
    /// A call answered before its deadline may leave its entry in the heap
    /// until then; it wakes the loop once for nothing, never fails a call.
    var earliestDeadline: UInt64? { deadlines.min?.deadline }

    /// Registers a call sent with `serial` at `now`; marks its state started.
    mutating func add(_ call: PendingCall, serial: UInt32, now: UInt64) {
        pending[serial] = call
        let deadline = now + UInt64(max(1, call.timeoutMs)) * 1_000_000
        deadlines.insert(CallDeadline(deadline: deadline, serial: serial, owner: call.state.map { ObjectIdentifier($0) }))
        call.state?.lock.withLock { call.state?.phase = .started(serial: serial) }
    }

    /// Whether the call sent with `serial` wants its reply's body undecoded.
    func wantsLazyReply(_ serial: UInt32?) -> Bool {
        guard let serial else { return false }
        return pending[serial]?.lazyReply ?? false
    }

    /// The call a reply with `replySerial` answers, removed and marked
    /// done; nil for a reply nobody waits for (cancelled, timed out, or
    /// never ours).
    mutating func answer(_ replySerial: UInt32) -> PendingCall? {
        guard let call = pending.removeValue(forKey: replySerial) else { return nil }
        call.state?.lock.withLock { call.state?.phase = .done }
        return call
    }

    /// Abandons the call sent with `serial`: a later reply is discarded.
    mutating func cancel(_ serial: UInt32) -> PendingCall? { answer(serial) }

    /// The next call whose deadline is at or before `now`, removed and
    /// marked done; nil when none is due. A deadline whose serial has since
    /// been answered, or reused by a later call, is dropped on the way.
    mutating func nextExpired(now: UInt64) -> PendingCall? {
        while let top = deadlines.min, top.deadline <= now {
            deadlines.removeMin()
            if let call = pending[top.serial], call.state.map({ ObjectIdentifier($0) }) == top.owner {
                return answer(top.serial)
            }
        }
        return nil
    }

    /// Every outstanding call, removed (the connection is gone).
    mutating func removeAll() -> [PendingCall] {
        let calls = Array(pending.values)
        pending.removeAll()
        deadlines = Heap()
        return calls
    }
}

/// When a pending call times out, in the heap of them (swift-collections'
/// `Heap`, earliest first; the serial breaks ties so the order is the same
/// every run).
struct CallDeadline: Comparable {
    let deadline: UInt64
    let serial: UInt32
    /// The call's cancellation state: a serial reused by a later call is
    /// not timed out for this one.
    let owner: ObjectIdentifier?

    static func < (a: CallDeadline, b: CallDeadline) -> Bool { (a.deadline, a.serial) < (b.deadline, b.serial) }
}
