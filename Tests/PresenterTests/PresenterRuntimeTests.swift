import Testing
@testable import Presenters

/// The tasks a presenter runs beside its action queue (commands, pairing,
/// streams it follows): kept while they run, forgotten when they end, and
/// cancelled with the presenter. Before, every finished one was kept: a
/// gateway presenter that ran 40 000 commands held 40 000 tasks.
@Suite(.timeLimit(.minutes(1))) struct PresenterRuntimeTests {
    @Test func finishedTasksAreNotKeptAndRunningOnesAreCancelledWithIt() async throws {
        var runtime: PresenterRuntime<Int>? = PresenterRuntime(label: "test")
        for _ in 0..<1_000 { runtime?.run {} }
        let deadline = ContinuousClock.now + .seconds(10)
        while (runtime?.runningTasks ?? 0) > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(runtime?.runningTasks == 0)

        let (ended, signal) = AsyncStream<Bool>.makeStream()
        runtime?.run {
            try? await Task.sleep(for: .seconds(60))
            signal.yield(Task.isCancelled)
        }
        #expect(runtime?.runningTasks == 1)
        runtime = nil   // the presenter goes: its running task is cancelled
        var endings = ended.makeAsyncIterator()
        #expect(await endings.next() == true)
    }
}
