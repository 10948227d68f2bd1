import Foundation
import Testing
@testable import DBus

/// The connection's loop-confined parts on their own, without a bus: the
/// call table's bookkeeping of replies, cancellation and deadlines, and
/// the signal router's matching and wake batching.
@Suite struct ConnectionPartsTests {
    private final class Outcomes: @unchecked Sendable {
        var results: [String] = []
    }

    private func call(_ member: String, timeoutMs: Int, state: CallState? = nil, into outcomes: Outcomes) -> CallTable.PendingCall {
        .init(member: member, timeoutMs: timeoutMs, completion: { result in
            switch result {
            case .success: outcomes.results.append("\(member) ok")
            case let .failure(error): outcomes.results.append("\(member) \(error)")
            }
        }, state: state, onCancel: { outcomes.results.append("\(member) cancelled") })
    }

    @Test func aReplyEndsItsCallOnceAndMarksItsStateDone() {
        var table = CallTable()
        let outcomes = Outcomes()
        let state = CallState()
        table.add(call("Get", timeoutMs: 1_000, state: state, into: outcomes), serial: 7, now: 0)
        guard case .started(serial: 7) = state.lock.withLock({ state.phase }) else {
            Issue.record("the call's state should say it was sent as serial 7")
            return
        }
        #expect(table.answer(8) == nil, "a reply to a serial never sent answers nothing")
        let answered = table.answer(7)
        #expect(answered?.member == "Get")
        guard case .done = state.lock.withLock({ state.phase }) else {
            Issue.record("an answered call's state should be done")
            return
        }
        #expect(table.answer(7) == nil, "a second reply to the same serial is discarded")
        #expect(table.count == 0)
    }

    @Test func deadlinesExpireInOrderAndSkipAnsweredCalls() {
        var table = CallTable()
        let outcomes = Outcomes()
        table.add(call("Slow", timeoutMs: 300, into: outcomes), serial: 1, now: 0)
        table.add(call("Fast", timeoutMs: 100, into: outcomes), serial: 2, now: 0)
        table.add(call("Answered", timeoutMs: 50, into: outcomes), serial: 3, now: 0)
        #expect(table.earliestDeadline == 50_000_000)
        _ = table.answer(3)
        #expect(table.nextExpired(now: 99_999_999) == nil, "nothing is due before the fast call's 100 ms")
        #expect(table.nextExpired(now: 100_000_000)?.member == "Fast")
        #expect(table.nextExpired(now: 100_000_000) == nil)
        #expect(table.nextExpired(now: 400_000_000)?.member == "Slow")
        #expect(table.count == 0)
        #expect(table.earliestDeadline == nil)
    }

    @Test func aSerialReusedByALaterCallIsNotTimedOutForTheEarlierOne() {
        var table = CallTable()
        let outcomes = Outcomes()
        let first = CallState(), second = CallState()
        table.add(call("First", timeoutMs: 100, state: first, into: outcomes), serial: 5, now: 0)
        _ = table.cancel(5)
        table.add(call("Second", timeoutMs: 1_000, state: second, into: outcomes), serial: 5, now: 0)
        #expect(table.nextExpired(now: 200_000_000) == nil, "the first call's deadline belongs to a call already gone")
        #expect(table.count == 1)
        #expect(table.nextExpired(now: 1_000_000_000)?.member == "Second")
    }

    @Test func aZeroTimeoutStillWaitsAMillisecond() {
        var table = CallTable()
        table.add(call("Now", timeoutMs: 0, into: Outcomes()), serial: 1, now: 10)
        #expect(table.earliestDeadline == 1_000_010)
    }

    @Test func removeAllHandsBackEveryCall() {
        var table = CallTable()
        let outcomes = Outcomes()
        for serial in UInt32(1)...3 { table.add(call("C\(serial)", timeoutMs: 100, into: outcomes), serial: serial, now: 0) }
        #expect(Set(table.removeAll().map(\.member)) == ["C1", "C2", "C3"])
        #expect(table.count == 0)
        #expect(table.earliestDeadline == nil)
        #expect(table.nextExpired(now: .max) == nil)
    }

    // MARK: Router

    private final class CountingSink: SignalSink, @unchecked Sendable {
        let id: UInt64
        let onDemand = false
        var delivered: [String] = []
        var wakes = 0
        var finished: DBusError?? = .none
        init(id: UInt64) { self.id = id }
        func deliver(_ message: DBusMessage) -> Bool {
            delivered.append(message.member ?? "")
            return true
        }
        func wake() { wakes += 1 }
        func finish(_ error: DBusError?) { finished = .some(error) }
    }

    private func signal(_ member: String, sender: String = ":1.5") -> DBusMessage {
        DBusMessage(kind: .signal, path: "/org/bluez/hci0", interface: "org.freedesktop.DBus.Properties",
                    member: member, sender: sender, body: [])
    }

    @Test func oneRuleTextIsOneGroupAndTheLastSinkOutRemovesIt() {
        let router = SignalRouter()
        let rule = DBusMatchRule(interface: "org.freedesktop.DBus.Properties")
        let a = CountingSink(id: 1), b = CountingSink(id: 2)
        #expect(router.add(a, rule: rule).isNew)
        #expect(!router.add(b, rule: rule).isNew, "a second subscriber shares the bus rule")
        #expect(router.remove(sink: 1) == nil, "the rule stays while another sink uses it")
        #expect(a.finished != nil, "a removed sink is finished")
        #expect(router.remove(sink: 2)?.rule == rule, "the last sink out hands the rule back for RemoveMatch")
        #expect(router.groups.isEmpty)
    }

    @Test func matchingSignalsReachTheirSinksAndWakeEachOncePerBatch() {
        let router = SignalRouter()
        let props = CountingSink(id: 1), other = CountingSink(id: 2)
        _ = router.add(props, rule: DBusMatchRule(member: "PropertiesChanged"))
        _ = router.add(other, rule: DBusMatchRule(member: "InterfacesAdded"))
        for _ in 0..<3 {
            var decoded = DecodedOnce()
            #expect(router.route(signal("PropertiesChanged"), &decoded, ownerOf: { _ in nil }) == 0)
        }
        #expect(props.delivered == ["PropertiesChanged", "PropertiesChanged", "PropertiesChanged"])
        #expect(other.delivered.isEmpty)
        #expect(router.hasPendingWakes)
        #expect(props.wakes == 0, "wakes wait for the batch")
        #expect(!router.batchIsDue(now: monotonicNanoseconds()), "3 deliveries within 2 ms are not yet a batch")
        router.flushWakes()
        #expect(props.wakes == 1 && other.wakes == 0)
        #expect(!router.hasPendingWakes)
    }

    @Test func aBatchIsDueAfter256Deliveries() {
        let router = SignalRouter()
        let sink = CountingSink(id: 1)
        _ = router.add(sink, rule: DBusMatchRule(member: "PropertiesChanged"))
        var decoded = DecodedOnce()
        for _ in 0..<255 { _ = router.route(signal("PropertiesChanged"), &decoded, ownerOf: { _ in nil }) }
        #expect(!router.batchIsDue(now: 0), "255 deliveries, timed before the first, are not a batch")
        _ = router.route(signal("PropertiesChanged"), &decoded, ownerOf: { _ in nil })
        #expect(router.batchIsDue(now: 0))
    }

    @Test func aRuleNamingAWellKnownSenderMatchesOnlyThroughItsOwner() {
        let router = SignalRouter()
        let sink = CountingSink(id: 1)
        _ = router.add(sink, rule: DBusMatchRule(sender: "org.bluez"))
        var decoded = DecodedOnce()
        _ = router.route(signal("A", sender: ":1.5"), &decoded, ownerOf: { _ in nil })
        _ = router.route(signal("B", sender: ":1.5"), &decoded, ownerOf: { $0 == "org.bluez" ? ":1.6" : nil })
        _ = router.route(signal("C", sender: ":1.5"), &decoded, ownerOf: { $0 == "org.bluez" ? ":1.5" : nil })
        #expect(sink.delivered == ["C"])
    }

    @Test func theConnectionGoingAwayFinishesSinksAndFailsWaiters() {
        let router = SignalRouter()
        let sink = CountingSink(id: 1)
        let (group, _) = router.add(sink, rule: DBusMatchRule(member: "X"))
        let failures = Outcomes()
        group.waiters.append { failures.results.append("\(String(describing: $0))") }
        let waiters = router.removeAll(finishing: .disconnected)
        for w in waiters { w(.disconnected) }
        #expect(failures.results.count == 1)
        if case .some(.some(.disconnected)) = sink.finished {} else { Issue.record("the sink should end with .disconnected") }
        #expect(router.groups.isEmpty && router.onDemandSinks == 0)
    }
}

/// The connection's I/O thread is a named POSIX thread (`Threads`), seen
/// as `dbus-io` in `top -H`, perf and crash reports.
@Suite struct IOThreadTests {
    private static func threadNames() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
    }

    @Test func aConnectionRunsOnANamedThread() async throws {
        try await withBus { bus in
            let c = try await DBusConnection.connect(to: .address(bus.address))
            // Other tests open connections in parallel: ours is at least one.
            #expect(Self.threadNames().contains("dbus-io"), "\(Self.threadNames())")
            c.close()
        }
    }

    /// The decoder's memo table grows as it learns and keeps every entry
    /// through its growth; once at its limit it stops learning.
    @Test func theMemoTableGrowsAsItLearnsAndStopsAtItsLimit() {
        let table = BytesTable<Int>(capacity: 1_000)
        func key(_ n: Int) -> [UInt8] { Array("/org/bluez/hci0/dev_\(n)".utf8) }
        #expect(table.occupancy.size == 16)
        for n in 0..<1_200 {
            key(n).withUnsafeBytes { table.insert($0, key: String(decoding: key(n), as: UTF8.self), value: n) }
        }
        #expect(table.occupancy.count == 1_000)
        #expect(table.occupancy.size == 2_048)
        for n in 0..<1_000 {
            let found = key(n).withUnsafeBytes { table.lookup($0) }
            #expect(found == n, "entry \(n) lost while the table grew")
        }
        // Past the limit nothing was remembered.
        #expect(key(1_100).withUnsafeBytes { table.lookup($0) } == nil)
        let small = BytesTable<Int>(capacity: 4_096)
        for n in 0..<7 { key(n).withUnsafeBytes { small.insert($0, key: "k\(n)", value: n) } }
        #expect(small.occupancy.size == 16, "a few entries should not take the full table")
    }
}
