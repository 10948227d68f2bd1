// Where log lines go: a file descriptor behind a lock, one write(2) per line.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Locking

/// A file descriptor that log handlers write whole lines to.
///
/// Every handler that writes to the same sink shares its lock, so lines from
/// different threads never interleave: each line is handed to one `write(2)`
/// while the lock is held (a short write — a pipe that is nearly full — is
/// continued under the same lock before anyone else may write). The sink does
/// not own the descriptor and never closes it.
public final class LogSink: Sendable {
    public let fileDescriptor: Int32
    private let lock = Lock<Void>(())

    public init(fileDescriptor: Int32) {
        self.fileDescriptor = fileDescriptor
    }

    /// The process's standard error, shared by every handler that logs there.
    public static let standardError = LogSink(fileDescriptor: STDERR_FILENO)
    /// The process's standard output.
    public static let standardOutput = LogSink(fileDescriptor: STDOUT_FILENO)

    /// Writes `line` (which should end in a newline) as one unit. Returns
    /// false when the descriptor refused it; logging never throws or traps.
    @discardableResult
    public func write(line: [UInt8]) -> Bool {
        lock.withLock { _ in
            line.withUnsafeBytes { raw -> Bool in
                guard var base = raw.baseAddress else { return true }
                var remaining = raw.count
                var stalls = 0
                while remaining > 0 {
                    #if canImport(Glibc)
                    let written = Glibc.write(fileDescriptor, base, remaining)
                    #else
                    let written = Musl.write(fileDescriptor, base, remaining)
                    #endif
                    if written > 0 {
                        base += written
                        remaining -= written
                        continue
                    }
                    if written < 0 && errno == EINTR { continue }
                    // A non-blocking descriptor that is full: wait a little for
                    // room, a bounded number of times, rather than spin.
                    if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && stalls < 10 {
                        stalls += 1
                        var entry = pollfd(fd: fileDescriptor, events: Int16(POLLOUT), revents: 0)
                        _ = poll(&entry, 1, 100)
                        continue
                    }
                    return false
                }
                return true
            }
        }
    }
}
