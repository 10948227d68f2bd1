import Dispatch
import Foundation
import Locking

/// The write end of the socket pair the handler below writes to; set once,
/// before the handler is installed.
nonisolated(unsafe) private var stopSignalWriteEnd: Int32 = -1
/// Signals caught so far (only the handler writes it).
nonisolated(unsafe) private var stopSignalsCaught: Int32 = 0

/// SIGINT and SIGTERM for the commands that run until stopped (`scan`,
/// `notify`, `record`, `simulate`, …), caught from the moment a command
/// first asks for them: a `sigaction` handler writes the signal's number to
/// a socket, and waiters peek at it without consuming it, so a signal that
/// arrives before anyone waits is kept for every later waiter.
///
/// Why not `signal(SIG_IGN)` and a dispatch signal source: a signal that
/// arrived between the two was discarded by the kernel (ignored), and the
/// command ran on after Ctrl-C (found by `FaultMatrixProcessTests`, which
/// signals `scan` at every moment of its start). A second signal while the
/// first one's clean stop is under way ends the process at once (128 +
/// signal).
enum StopSignals {
    private static let readEnd: Int32 = {
        var fds: [Int32] = [-1, -1]
        // Cannot fail short of running out of descriptors at start-up; then
        // the signals keep their default action (the process ends).
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else { return -1 }
        _ = fcntl(fds[1], F_SETFL, O_NONBLOCK)
        stopSignalWriteEnd = fds[1]
        let handler: @convention(c) (Int32) -> Void = { sig in
            // Async-signal-safe only: a write of one byte, or _exit.
            // A second Ctrl-C while the first one's clean stop is under way
            // ends the process at once, as users expect of a stuck command.
            stopSignalsCaught += 1
            if stopSignalsCaught > 1 { _exit(128 + sig) }
            var byte = UInt8(truncatingIfNeeded: sig)
            _ = write(stopSignalWriteEnd, &byte, 1)
        }
        for sig in [SIGINT, SIGTERM] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = handler
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            _ = sigaction(sig, &action, nil)
        }
        return fds[0]
    }()

    /// Installs the handlers (once per process; later calls do nothing).
    static func install() { _ = readEnd }

    /// The first SIGINT or SIGTERM caught so far, if any (does not wait).
    static func caught() -> Int32? {
        let fd = readEnd
        guard fd >= 0 else { return nil }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) == 1 ? Int32(byte) : nil
    }

    /// The first SIGINT or SIGTERM the process got, waiting for one if none
    /// came yet; nil when the waiting task is cancelled first.
    static func wait() async -> Int32? {
        install()
        let fd = readEnd
        let waiter = Waiter()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Int32?, Never>) in
                guard fd >= 0 else {
                    // No socket: the signals kept their default action.
                    waiter.install(c, source: nil)
                    return
                }
                let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: .global())
                source.setEventHandler {
                    var byte: UInt8 = 0
                    // Peek: the byte stays for every other and later waiter.
                    guard recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) == 1 else { return }
                    waiter.finish(Int32(byte))
                }
                waiter.install(c, source: source)
                source.resume()
            }
        } onCancel: {
            waiter.finish(nil)
        }
    }

    /// One wait: resumed once, by a signal or by cancellation (which can
    /// come before the continuation exists).
    private final class Waiter: Sendable {
        /// A dispatch source is thread-safe but not marked Sendable.
        private final class Source: @unchecked Sendable {
            let source: any DispatchSourceRead
            init(_ source: any DispatchSourceRead) { self.source = source }
        }
        private struct State {
            var finished: Int32?? = nil
            var continuation: CheckedContinuation<Int32?, Never>?
            var source: Source?
        }
        private let state = Lock(State())

        func install(_ c: CheckedContinuation<Int32?, Never>, source: (any DispatchSourceRead)?) {
            let box = source.map(Source.init)
            let early = state.withLock { s -> Int32?? in
                if let f = s.finished { return .some(f) }
                s.continuation = c
                s.source = box
                return nil
            }
            if let early {
                source?.cancel()
                c.resume(returning: early)
            }
        }

        func finish(_ value: Int32?) {
            let (c, box) = state.withLock { s -> (CheckedContinuation<Int32?, Never>?, Source?) in
                guard s.finished == nil else { return (nil, nil) }
                s.finished = .some(value)
                defer { s.continuation = nil; s.source = nil }
                return (s.continuation, s.source)
            }
            box?.source.cancel()
            c?.resume(returning: value)
        }
    }
}
