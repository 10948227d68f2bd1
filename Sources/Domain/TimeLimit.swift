/// Runs `operation` and returns what it returns, or nil when `limit` passes
/// first or the caller is cancelled. The operation is then cancelled and not
/// waited for: unlike a task group, a step that ignores cancellation (a call
/// into a library blocked on a dead peer) cannot hold the caller. Shutdown
/// steps use it so a process stops in bounded time whatever is broken.
public func withTimeLimit<T: Sendable>(_ limit: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
    // The first value in wins; the other side's yield is dropped.
    let (outcome, continuation) = AsyncStream.makeStream(of: T?.self, bufferingPolicy: .bufferingOldest(1))
    let work = Task {
        continuation.yield(await operation())
        continuation.finish()
    }
    let timer = Task {
        try? await Task.sleep(for: limit)
        continuation.yield(nil)
        continuation.finish()
    }
    defer {
        timer.cancel()
        work.cancel()
    }
    for await value in outcome { return value }
    return nil
}
