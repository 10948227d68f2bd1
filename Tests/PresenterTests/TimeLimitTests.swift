import Foundation
import Synchronization
import Testing
@testable import Domain

/// `withTimeLimit` and its timer: the limit holds, and a limit that was not
/// reached costs nothing afterwards (a cancelled `Task.sleep` kept its task
/// and what it captured until the deadline: megabytes at a command flood).
@Suite(.timeLimit(.minutes(1))) struct TimeLimitTests {
    final class Payload: Sendable {}

    @Test func aTimerFiresOnceUnlessCancelledAndCancellingReleasesWhatItHolds() async throws {
        let fired = Atomic<Int>(0)
        let timer = OneShotTimer(after: .milliseconds(20)) { fired.add(1, ordering: .relaxed) }
        // A deadline per wait, generous: the dispatch queue's thread may wait
        // seconds for a core while the rest of the suite runs (one 5 s
        // deadline for all three waits ran out in a full-suite run).
        var deadline = ContinuousClock.now + .seconds(30)
        while fired.load(ordering: .relaxed) == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        try await Task.sleep(for: .milliseconds(50))
        #expect(fired.load(ordering: .relaxed) == 1)
        timer.cancel()   // after firing: nothing happens

        weak var held: Payload?
        do {
            let payload = Payload()
            held = payload
            let late = OneShotTimer(after: .seconds(3_600)) { _ = payload; fired.add(1, ordering: .relaxed) }
            late.cancel()
        }
        // libdispatch releases a cancelled source's handler on its queue, right after.
        deadline = ContinuousClock.now + .seconds(30)
        while held != nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(held == nil, "a cancelled hour-long timer released its closure, not an hour later")
        #expect(fired.load(ordering: .relaxed) == 1)
        // Out-of-range delays are clamped, never trap.
        OneShotTimer(after: .seconds(Int64.max)) {}.cancel()
        let now = OneShotTimer(after: .seconds(-5)) { fired.add(1, ordering: .relaxed) }
        deadline = ContinuousClock.now + .seconds(30)
        while fired.load(ordering: .relaxed) == 1, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(fired.load(ordering: .relaxed) == 2)
        now.cancel()
    }

    @Test func theOperationsValueOrNilAtTheLimitWithoutWaitingForIt() async throws {
        #expect(await withTimeLimit(.seconds(10)) { 42 } == 42)
        let start = ContinuousClock.now
        // An operation that ignores cancellation does not hold the caller.
        // It waits without holding a thread (a blocking loop here took one
        // of the 2-core machine's two pool threads for its whole length and
        // made this and other suites' timing fail under load), for 5 s: a
        // caller back within 4 s did not wait for it.
        let slow: Int? = await withTimeLimit(.milliseconds(50)) {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                DispatchQueue.global().asyncAfter(deadline: .now() + 5) { c.resume() }
            }
            return 1
        }
        #expect(slow == nil)
        #expect(ContinuousClock.now - start < .seconds(4))
    }
}
