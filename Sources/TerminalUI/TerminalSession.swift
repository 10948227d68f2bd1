import Dispatch
import Locking
import Threads
#if canImport(Glibc)
import Glibc
#endif

/// Why a terminal session could not start.
public enum TerminalError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file descriptor is not a terminal (a pipe, a file, /dev/null).
    case notATerminal(fd: Int32)
    /// A system call failed.
    case system(call: String, errno: Int32)

    public var description: String {
        switch self {
        case .notATerminal(let fd):
            let which = fd == 0 ? "standard input" : fd == 1 ? "standard output" : "file descriptor \(fd)"
            return "\(which) is not a terminal (a full-screen session needs one)"
        case .system(let call, let code):
            return "\(call) failed: \(String(cString: strerror(code)))"
        }
    }
}

/// A terminal in full-screen mode: raw input, the alternate screen, no
/// cursor, mouse and bracketed-paste reporting; and the way back.
///
/// `open` saves the terminal's settings and switches modes; `restore()`
/// puts everything back (idempotent; also run by `deinit`). Signals are
/// handled so the terminal is never left in raw mode: SIGINT, SIGTERM and
/// SIGHUP restore it, then deliver `.terminate(signal:)` and end the stream
/// (if the process is still running 2 s later, the signal is sent again
/// with its default action; so is a second one); SIGTSTP restores it and
/// stops the process (SIGSTOP); SIGCONT switches the modes back on and
/// delivers `.resumed`; SIGWINCH delivers `.resize`. The signal sources
/// stay installed for the life of the process (see `SignalHub`); with no
/// session open, the signals that had their default action get it.
///
/// Input is read by a dedicated thread that blocks in `poll()` — with no
/// timeout, or 50 ms while an ESC waits to be told apart from the start of
/// a sequence — and decoded by `InputParser`.
public final class TerminalSession: Sendable {
    public let inputFD: Int32
    public let outputFD: Int32
    private let core: Core

    /// Opens a session on `input`/`output` (a terminal, or both ends of a
    /// pseudo-terminal's slave in tests). `handleSignals: false` leaves the
    /// process's signal dispositions alone (for tests, and for an
    /// application that handles signals itself and calls `suspend()`,
    /// `resume()` and `restore()`).
    public static func open(input: Int32 = 0, output: Int32 = 1, mouse: Bool = true,
                            handleSignals: Bool = true) throws -> TerminalSession {
        guard isatty(output) == 1 else { throw TerminalError.notATerminal(fd: output) }
        guard isatty(input) == 1 else { throw TerminalError.notATerminal(fd: input) }
        var saved = termios()
        guard tcgetattr(input, &saved) == 0 else { throw TerminalError.system(call: "tcgetattr", errno: errno) }
        var wake: [Int32] = [-1, -1]
        guard pipe(&wake) == 0 else { throw TerminalError.system(call: "pipe", errno: errno) }
        _ = fcntl(wake[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(wake[1], F_SETFD, FD_CLOEXEC)
        let core = Core(input: input, output: output, mouse: mouse, saved: saved, wakeRead: wake[0], wakeWrite: wake[1])
        // Signals before raw mode: one that comes before the handlers are
        // registered ends the process by its default action with the
        // terminal as it was; one that comes after is the session's (a stop
        // closes the core, and `enter` then leaves the terminal alone).
        if handleSignals { SignalHub.shared.attach(core) }
        do {
            try core.enter()
        } catch {
            // Detaches the signals and closes both ends of the wake pipe
            // (once, whether or not a signal closed the core meanwhile).
            core.closeWithoutReader()
            throw error
        }
        if let failure = core.startReader() {
            core.closeWithoutReader()
            throw TerminalError.system(call: "pthread_create", errno: failure)
        }
        return TerminalSession(core: core)
    }

    private init(core: Core) {
        self.core = core
        inputFD = core.input
        outputFD = core.output
    }

    deinit {
        core.close()
    }

    /// Puts the terminal back as `open` found it: mouse and paste reporting
    /// off, cursor shown, main screen, saved termios. Stops reading input
    /// and ends the event stream. Safe to call more than once.
    public func restore() {
        core.close()
    }

    /// Keys, mouse events, pastes and signal events, in order. One consumer;
    /// every call returns the same stream. It ends after `restore()`.
    public func events() -> AsyncStream<TerminalEvent> {
        core.stream
    }

    /// The terminal's size in columns and rows (80×24 when it does not say).
    public var size: (width: Int, height: Int) {
        Self.windowSize(core.output)
    }

    /// Writes all of `bytes` to the output (retrying partial writes and EINTR).
    public func write(_ bytes: [UInt8]) {
        Core.writeAll(core.output, bytes)
    }

    /// Gives the terminal back and stops the process (what Ctrl+Z does in a
    /// shell; in raw mode Ctrl+Z arrives as `.ctrl("z")` instead). When the
    /// process is continued, the modes are switched back on and `.resumed`
    /// is delivered.
    public func suspend() {
        core.suspend()
    }

    /// Switches the modes back on after the terminal was handed to someone
    /// else, and delivers `.resumed` (the SIGCONT handler does this).
    public func resume() {
        core.resume(force: true)
    }

    static func windowSize(_ fd: Int32) -> (width: Int, height: Int) {
        var ws = winsize()
        if ioctl(fd, UInt(TIOCGWINSZ), &ws) == 0, ws.ws_col > 0, ws.ws_row > 0 {
            return (Int(ws.ws_col), Int(ws.ws_row))
        }
        return (80, 24)
    }

    // MARK: Escape sequences (xterm ctlseqs)

    static func enterSequence(mouse: Bool) -> [UInt8] {
        var s = "\u{1B}[?1049h\u{1B}[?25l"
        if mouse { s += "\u{1B}[?1000h\u{1B}[?1002h\u{1B}[?1006h" }
        s += "\u{1B}[?2004h"
        return Array(s.utf8)
    }

    static func leaveSequence(mouse: Bool) -> [UInt8] {
        var s = "\u{1B}[?2004l"
        if mouse { s += "\u{1B}[?1006l\u{1B}[?1002l\u{1B}[?1000l" }
        s += "\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l"
        return Array(s.utf8)
    }
}

// MARK: - The shared state

/// What the session, its reader thread and its signal handlers share. The
/// thread and the handlers hold this, not the session, so dropping the
/// session runs its `deinit`.
final class Core: Sendable {
    let input: Int32
    let output: Int32
    let mouse: Bool
    let saved: termios
    let wakeRead: Int32
    let wakeWrite: Int32
    let stream: AsyncStream<TerminalEvent>
    let continuation: AsyncStream<TerminalEvent>.Continuation

    struct State {
        /// The terminal is in our modes now.
        var entered = false
        /// `close()` ran: never enter again.
        var closed = false
        /// Handed back by SIGTSTP/`suspend()`; SIGCONT re-enters.
        var suspended = false
        /// The reader thread has ended and closed the read end of the wake pipe.
        var readerExited = false
    }
    let state = Lock(State())
    /// Held across `enter` and `leave` (system calls and writes, which the
    /// state lock is not held over), so that a signal's `close()` racing
    /// `open()`'s `enter()` always ends with the terminal left, not raw.
    private let modes = Lock<Void>(())

    init(input: Int32, output: Int32, mouse: Bool, saved: termios, wakeRead: Int32, wakeWrite: Int32) {
        self.input = input
        self.output = output
        self.mouse = mouse
        self.saved = saved
        self.wakeRead = wakeRead
        self.wakeWrite = wakeWrite
        (stream, continuation) = AsyncStream.makeStream(of: TerminalEvent.self, bufferingPolicy: .unbounded)
    }

    // MARK: Modes

    /// Raw mode, alternate screen, hidden cursor, mouse and paste reporting.
    func enter() throws {
        var raw = saved
        // cfmakeraw: no echo, no canonical mode, no signals from keys, no
        // CR/NL translation on input, no output post-processing, 8 bits.
        raw.c_iflag &= ~tcflag_t(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON)
        raw.c_oflag &= ~tcflag_t(OPOST)
        raw.c_lflag &= ~tcflag_t(ECHO | ECHONL | ICANON | ISIG | IEXTEN)
        raw.c_cflag &= ~tcflag_t(CSIZE | PARENB)
        raw.c_cflag |= tcflag_t(CS8)
        // read() returns as soon as one byte is there.
        withUnsafeMutableBytes(of: &raw.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        try modes.withLock { _ throws(TerminalError) in
            // A signal may have closed the core already (open() attaches
            // the signals first): then the terminal stays as it is.
            guard !state.withLock({ $0.closed }) else { return }
            guard tcsetattr(input, TCSANOW, &raw) == 0 else { throw TerminalError.system(call: "tcsetattr", errno: errno) }
            Self.writeAll(output, TerminalSession.enterSequence(mouse: mouse))
            state.withLock { $0.entered = true }
        }
    }

    /// Leaves our modes (if in them): sequences first, then the saved termios.
    func leave() {
        modes.withLock { _ in
            let wasEntered = state.withLock { s in
                defer { s.entered = false }
                return s.entered
            }
            guard wasEntered else { return }
            Self.writeAll(output, TerminalSession.leaveSequence(mouse: mouse))
            var original = saved
            // TCSADRAIN: the sequences above are out before the settings change.
            _ = tcsetattr(input, TCSADRAIN, &original)
        }
    }

    /// Everything back, reader stopped, signal handlers removed, stream ended. Idempotent.
    func close() {
        let first = state.withLock { s in
            defer { s.closed = true }
            return !s.closed
        }
        guard first else { return }
        leave()
        SignalHub.shared.detach(self)
        // Wake the reader; it closes its end and ends the stream. (Under the
        // lock: a reader that has gone has closed the read end, and a write
        // to a pipe nobody reads is SIGPIPE.)
        state.withLock { s in
            if !s.readerExited {
                var byte: UInt8 = 1
                _ = Glibc.write(wakeWrite, &byte, 1)
            }
            Glibc.close(wakeWrite)
        }
    }

    /// When the reader thread could not be started.
    func closeWithoutReader() {
        state.withLock { s in
            s.readerExited = true
            Glibc.close(wakeRead)
        }
        close()
    }

    func suspend() {
        let go = state.withLock { s in
            guard !s.closed, !s.suspended else { return false }
            s.suspended = true
            return true
        }
        guard go else { return }
        leave()
        Self.stopProcess()
        resume(force: false)
    }

    /// Stops the whole process and returns once it is continued.
    ///
    /// `raise`, not `kill(getpid(), …)`: a signal sent to the process is
    /// taken by whichever thread the kernel picks (often the main thread,
    /// waiting in libdispatch's sigsuspend), and until that thread runs this
    /// one carries on — it would take the terminal back before the stop and
    /// then stop with the dashboard on the screen (seen under CPU load). A
    /// signal raised on this thread is acted on as the call returns, and
    /// SIGSTOP, which cannot be caught, blocked or ignored, stops every thread.
    static func stopProcess() {
        raise(SIGSTOP)
    }

    /// Back into our modes after a suspension (or, `force`, whenever not closed).
    func resume(force: Bool) {
        let go = state.withLock { s in
            guard !s.closed, s.suspended || force else { return false }
            s.suspended = false
            return true
        }
        guard go else { return }
        leave()
        do {
            try enter()
        } catch {
            // A background process cannot set the terminal (SIGTTOU stops
            // it first); when it can, there is nothing better to do than go on.
        }
        continuation.yield(.resumed)
    }

    // MARK: Signals

    func handle(_ sig: Int32) {
        switch sig {
        case SIGINT, SIGTERM, SIGHUP:
            // The terminal first: the application may never get to it.
            leave()
            continuation.yield(.terminate(signal: sig))
            close()
            // If the application does not end, the signal does.
            DispatchQueue.global().asyncAfter(deadline: .now() + 2) { SignalHub.defaultAction(sig) }
        case SIGTSTP:
            suspend()
        case SIGCONT:
            resume(force: false)
        case SIGWINCH:
            let size = TerminalSession.windowSize(output)
            continuation.yield(.resize(width: size.width, height: size.height))
        default:
            break
        }
    }

    // MARK: Reading

    /// Starts the input reader's thread; the error number when it cannot.
    func startReader() -> Int32? {
        do {
            try DetachedThread.start(name: "terminal-input") { [self] in readLoop() }
            return nil
        } catch {
            return error.errorNumber
        }
    }

    /// Blocks in poll() on the input and the wake pipe until `close()`.
    private func readLoop() {
        var parser = InputParser()
        var buffer = [UInt8](repeating: 0, count: 4096)
        var fds = [pollfd(fd: input, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
        loop: while true {
            fds[0].revents = 0
            fds[1].revents = 0
            // Only while an ESC waits: 50 ms of silence makes it the Escape key.
            let timeout: Int32 = parser.hasPendingEscape ? 50 : -1
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            if fds[1].revents != 0 { break }
            if ready == 0 {
                for event in parser.flushPendingEscape() { continuation.yield(event) }
                continue
            }
            let revents = Int32(fds[0].revents)
            if revents & Int32(POLLIN) != 0 {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(input, $0.baseAddress, $0.count) }
                if n > 0 {
                    for event in parser.feed(Array(buffer[0..<n])) { continuation.yield(event) }
                    continue
                }
                if n < 0, errno == EINTR || errno == EAGAIN { continue }
                // 0 or an error: the terminal is gone.
                break loop
            }
            if revents & Int32(POLLHUP | POLLERR | POLLNVAL) != 0 { break }
        }
        state.withLock { s in
            s.readerExited = true
            Glibc.close(wakeRead)
        }
        continuation.finish()
    }

    // MARK: Writing

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            guard var p = raw.baseAddress else { return }
            var left = raw.count
            while left > 0 {
                let n = Glibc.write(fd, p, left)
                if n < 0 {
                    if errno == EINTR { continue }
                    if errno == EAGAIN {
                        // A non-blocking descriptor: wait until it takes more.
                        var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                        _ = poll(&pfd, 1, -1)
                        continue
                    }
                    return
                }
                p += n
                left -= n
            }
        }
    }
}

// MARK: - Signals

/// The process's signal handling for terminal sessions, installed once and
/// kept: libdispatch on Linux installs its forwarding handler only the first
/// time a signal gets a source in the process, so cancelling sources and
/// putting dispositions back would break every later session (and any other
/// source for the same signal). Signals go to the most recently opened
/// session that handles signals; with none open, a signal whose
/// disposition was the default gets its default action.
final class SignalHub: Sendable {
    static let shared = SignalHub()
    static let signals = [SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT, SIGWINCH]

    struct State {
        var sources: [DispatchSourceSignal] = []
        /// Signals whose disposition was SIG_DFL before the sources.
        var hadDefault: Set<Int32> = []
        var sessions: [Core] = []
    }
    private let state = Lock(State())
    private let queue = DispatchQueue(label: "TerminalUI.signals")

    func attach(_ core: Core) {
        let registered = DispatchGroup()
        state.withLock { s in
            s.sessions.append(core)
            guard s.sources.isEmpty else { return }
            for sig in Self.signals {
                // The disposition is only read, never set to SIG_IGN first
                // (the Darwin pattern): on Linux libdispatch installs its own
                // handler when the manager thread registers the source, and
                // a signal ignored until then is discarded by the kernel (a
                // SIGTERM in that moment left the gateway running, f1e379c). Until
                // registration the signal keeps its default action, which
                // (the terminal not yet in raw mode, see `open`) is right.
                var previous = sigaction()
                if sigaction(sig, nil, &previous) == 0,
                   previous.__sigaction_handler.sa_handler == nil,
                   previous.sa_flags & SA_SIGINFO == 0 {
                    s.hadDefault.insert(sig)
                }
                let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
                source.setEventHandler { [self] in handle(sig) }
                registered.enter()
                source.setRegistrationHandler { registered.leave() }
                source.resume()
                s.sources.append(source)
            }
        }
        // Registration is asynchronous: a signal sent before it would be
        // lost. Wait (once per process) until the sources are live.
        _ = registered.wait(timeout: .now() + 2)
    }

    func detach(_ core: Core) {
        state.withLock { s in s.sessions.removeAll { $0 === core } }
    }

    private func handle(_ sig: Int32) {
        let (session, hadDefault) = state.withLock { s in (s.sessions.last, s.hadDefault.contains(sig)) }
        if let session {
            session.handle(sig)
        } else if hadDefault {
            Self.defaultAction(sig)
        }
    }

    /// What the signal would have done without us: end or stop the process.
    static func defaultAction(_ sig: Int32) {
        switch sig {
        case SIGINT, SIGTERM, SIGHUP:
            signal(sig, SIG_DFL)
            // To the process, not this thread: Dispatch's threads block signals.
            kill(getpid(), sig)
        case SIGTSTP:
            Core.stopProcess()
        default:
            break
        }
    }
}
