// One call at start-up that picks the log format and level for the process.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging
import Synchronization

public enum LoggingBootstrap {
    private static let done = Atomic<Bool>(false)

    /// Installs the process's log handlers: JSON lines (`JSONLogHandler`) or
    /// plain text (`TextLogHandler`), at `level`, on the sink (stderr).
    ///
    /// - Parameter json: `true` or `false` to choose; `nil` chooses JSON when
    ///   the sink is not a terminal (a systemd service, a pipe, a file) and
    ///   text when a person is watching.
    /// - Returns: false when logging had already been bootstrapped (swift-log
    ///   allows it once per process; a second call changes nothing).
    @discardableResult
    public static func bootstrap(level: Logger.Level, json: Bool? = nil, sink: LogSink = .standardError) -> Bool {
        guard done.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return false
        }
        LoggingSystem.bootstrap(makeFactory(level: level, json: usesJSON(json, fileDescriptor: sink.fileDescriptor), sink: sink))
        return true
    }

    /// Whether `bootstrap` would write JSON for this choice and descriptor.
    public static func usesJSON(_ json: Bool?, fileDescriptor: Int32) -> Bool {
        json ?? (isatty(fileDescriptor) == 0)
    }

    /// The handler factory `bootstrap` installs, for callers that install it
    /// themselves (tests, or a logging system with several backends).
    public static func makeFactory(level: Logger.Level, json: Bool, sink: LogSink) -> @Sendable (String) -> any LogHandler {
        if json {
            return { label in JSONLogHandler(label: label, level: level, sink: sink) }
        }
        return { label in TextLogHandler(label: label, level: level, sink: sink) }
    }
}
