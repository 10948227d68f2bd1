/// Which signal goes to which subscriber: the match rules in use (one bus
/// rule shared by every subscriber with the same rule text), their sinks,
/// and the batching of wake-ups, so that a flood wakes each consumer once
/// per batch rather than once per message.
///
/// Owned by ``ConnectionCore`` and touched on its I/O thread only. A class,
/// not a value: an inline sink runs its handler while the router iterates.
final class SignalRouter {
    final class RuleGroup {
        let rule: DBusMatchRule
        var sinks: [UInt64: any SignalSink] = [:]
        /// The bus has accepted the rule (AddMatch answered).
        var active = false
        /// Subscribers waiting for AddMatch's answer.
        var waiters: [(DBusError?) -> Void] = []
        init(rule: DBusMatchRule) { self.rule = rule }
    }

    /// By rule text (`DBusMatchRule.description`).
    private(set) var groups: [String: RuleGroup] = [:]
    private var ruleOfSink: [UInt64: String] = [:]
    private var pendingWakes: [ObjectIdentifier: any SignalSink] = [:]
    private var deferredDeliveries = 0
    private var firstDeferredAt: UInt64 = 0
    /// Sinks that take signals with their body still in wire form; while
    /// there are none, every signal is decoded on arrival.
    private(set) var onDemandSinks = 0

    // MARK: Subscribers

    /// Adds `sink` under `rule`; returns the rule's group and whether it is
    /// new (the caller then asks the bus for the rule).
    func add(_ sink: any SignalSink, rule: DBusMatchRule) -> (group: RuleGroup, isNew: Bool) {
        let key = rule.description
        ruleOfSink[sink.id] = key
        if sink.onDemand { onDemandSinks += 1 }
        if let group = groups[key] {
            group.sinks[sink.id] = sink
            return (group, false)
        }
        let group = RuleGroup(rule: rule)
        group.sinks[sink.id] = sink
        groups[key] = group
        return (group, true)
    }

    /// Removes the sink `id` and finishes it; returns its group when that
    /// was the group's last sink and nobody waits on it (the caller then
    /// removes the bus rule).
    func remove(sink id: UInt64) -> RuleGroup? {
        guard let key = ruleOfSink.removeValue(forKey: id), let group = groups[key] else { return nil }
        if group.sinks[id]?.onDemand == true { onDemandSinks -= 1 }
        group.sinks[id]?.finish(nil)
        group.sinks[id] = nil
        guard group.sinks.isEmpty, group.waiters.isEmpty else { return nil }
        groups[key] = nil
        return group
    }

    /// Forgets a group the bus refused (or whose sender could not be
    /// tracked); returns the subscribers that waited for it.
    func drop(_ group: RuleGroup) -> [(DBusError?) -> Void] {
        let key = group.rule.description
        if groups[key] === group { groups[key] = nil }
        for (id, _) in group.sinks where ruleOfSink[id] == key {
            ruleOfSink[id] = nil
            if group.sinks[id]?.onDemand == true { onDemandSinks -= 1 }
        }
        let waiters = group.waiters
        group.waiters.removeAll()
        return waiters
    }

    /// Ends every sink with `error` and returns every waiting subscriber
    /// (the connection is gone).
    func removeAll(finishing error: DBusError) -> [(DBusError?) -> Void] {
        var waiters: [(DBusError?) -> Void] = []
        for (_, group) in groups {
            for (_, sink) in group.sinks { sink.finish(error) }
            waiters += group.waiters
            group.waiters.removeAll()
        }
        groups.removeAll()
        ruleOfSink.removeAll()
        onDemandSinks = 0
        return waiters
    }

    // MARK: Delivery

    /// Delivers `message` to every sink whose rule matches; `ownerOf`
    /// answers for rules that name a well-known sender. Returns how many
    /// matches could not be checked or delivered because the body did not
    /// decode (counted as malformed by the caller).
    func route(_ message: DBusMessage, _ decoded: inout DecodedOnce, ownerOf: (String) -> String?) -> Int {
        var undecodable = 0
        for (_, group) in groups where !group.sinks.isEmpty {
            let matched: Bool
            if group.rule.needsArguments {
                guard let eager = decoded.get(message) else { undecodable += 1; continue }
                matched = group.rule.matches(eager, ownerOf: ownerOf)
            } else {
                matched = group.rule.matches(message, ownerOf: ownerOf)
            }
            guard matched else { continue }
            for (_, sink) in group.sinks {
                let wake: Bool
                if sink.onDemand || !message.isBodyDeferred {
                    wake = sink.deliver(message)
                } else {
                    guard let eager = decoded.get(message) else { undecodable += 1; continue }
                    wake = sink.deliver(eager)
                }
                guard wake else { continue }
                if pendingWakes.isEmpty { firstDeferredAt = monotonicNanoseconds() }
                pendingWakes[ObjectIdentifier(sink)] = sink
            }
            deferredDeliveries += 1
        }
        return undecodable
    }

    /// Deliveries wait for their consumers to be woken.
    var hasPendingWakes: Bool { !pendingWakes.isEmpty }

    /// A batch is big or old enough to wake its consumers without waiting
    /// for the socket to run dry: 256 deliveries, or 2 ms since the first.
    /// `now` is read only when a delivery waits (no clock call per loop
    /// turn otherwise).
    func batchIsDue(now: @autoclosure () -> UInt64) -> Bool {
        if deferredDeliveries >= 256 { return true }
        guard !pendingWakes.isEmpty else { return false }
        let time = now()
        return time > firstDeferredAt && time - firstDeferredAt > 2_000_000
    }

    /// Wakes every consumer that has deliveries waiting.
    func flushWakes() {
        let sinks = pendingWakes
        pendingWakes.removeAll(keepingCapacity: true)
        deferredDeliveries = 0
        for (_, sink) in sinks { sink.wake() }
    }
}

/// The decoded form of an on-demand signal, made at most once and only
/// if a consumer needs values (no copies of the message otherwise).
struct DecodedOnce {
    private var eager: DBusMessage?
    private var failed = false
    mutating func get(_ original: DBusMessage) -> DBusMessage? {
        if !original.isBodyDeferred { return original }
        if let eager { return eager }
        if failed { return nil }
        do {
            var m = original
            m.body = try original.decodedBody()
            m.rawBody = nil
            eager = m
            return m
        } catch {
            failed = true
            return nil
        }
    }
}

// MARK: Subscribing (the bus side)

extension ConnectionCore {
    /// Adds a sink for `rule`: the first subscriber of a rule text asks the
    /// bus (AddMatch, after following the rule's well-known sender if it
    /// names one); later ones share it. `ready` runs once the bus has it.
    func addSinkOnLoop(_ sink: any SignalSink, rule: DBusMatchRule, ready: @escaping (DBusError?) -> Void) {
        assertOnLoop()
        if dead { ready(.disconnected); return }
        let (group, isNew) = router.add(sink, rule: rule)
        if !isNew {
            if group.active { ready(nil) } else { group.waiters.append(ready) }
            return
        }
        group.waiters.append(ready)
        let key = rule.description
        let addMatch = { [self] in
            busCallOnLoop("AddMatch", [.string(key)]) { [self] result in
                switch result {
                case .success:
                    group.active = true
                    let waiters = group.waiters
                    group.waiters.removeAll()
                    for w in waiters { w(nil) }
                case let .failure(error):
                    for w in router.drop(group) { w(error) }
                }
            }
        }
        if let name = rule.wellKnownSender {
            trackNameOnLoop(name) { [self] error in
                if let error {
                    for w in router.drop(group) { w(error) }
                } else {
                    addMatch()
                }
            }
        } else {
            addMatch()
        }
    }

    func removeSinkOnLoop(id: UInt64) {
        assertOnLoop()
        guard let group = router.remove(sink: id) else { return }
        if group.active, !dead {
            busCallOnLoop("RemoveMatch", [.string(group.rule.description)]) { _ in }
        }
        if let name = group.rule.wellKnownSender { untrackNameOnLoop(name) }
    }
}
