import Dispatch

/// Runs `operation` and returns what it returns, or nil when `limit` passes
/// first or the caller is cancelled. The operation is then cancelled and not
/// waited for: unlike a task group, a step that ignores cancellation (a call
/// into a library blocked on a dead peer) cannot hold the caller. Shutdown
/// steps and device commands use it, so they end in bounded time whatever
/// is broken.
///
/// The limit is a ``OneShotTimer``, not a sleeping task: a cancelled
/// `Task.sleep` keeps its task and timer until the deadline would have
/// passed, so a gateway answering thousands of commands a minute, each with
/// a 60 s limit, held megabytes of finished commands (found with
/// heaptrack: 4 MB in 13 170 sleeps).
public func withTimeLimit<T: Sendable>(_ limit: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
    // The first value in wins; the other side's yield is dropped.
    let (outcome, continuation) = AsyncStream.makeStream(of: T?.self, bufferingPolicy: .bufferingOldest(1))
    let work = Task {
        continuation.yield(await operation())
        continuation.finish()
    }
    let timer = OneShotTimer(after: limit) {
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

/// Calls `fire` once, `delay` from now, unless cancelled first. Cancelling
/// removes the timer at once (a dispatch timer source), so what `fire`
/// captured is released then, not when the delay would have ended.
public final class OneShotTimer: Sendable {
    /// libdispatch's sources may be cancelled from any thread (and more than once).
    nonisolated(unsafe) private let source: any DispatchSourceTimer

    public init(after delay: Duration, _ fire: @escaping @Sendable () -> Void) {
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + Self.interval(delay))
        // Cancelling releases the handler, and with it the timer it captures.
        timer.setEventHandler { [timer] in
            fire()
            timer.cancel()
        }
        timer.resume()
        source = timer
    }

    /// A duration as a dispatch interval, in range: below zero is now, and
    /// beyond 100 years is 100 years (`DispatchTime` adds in UInt64 nanoseconds).
    static func interval(_ d: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = d.components
        guard seconds >= 0 else { return .nanoseconds(0) }
        let limit: Int64 = 100 * 365 * 86_400
        guard seconds < limit else { return .seconds(Int(limit)) }
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    public func cancel() { source.cancel() }

    deinit { source.cancel() }
}
