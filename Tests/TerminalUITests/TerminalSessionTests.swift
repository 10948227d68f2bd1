import Testing
@testable import TerminalUI
#if canImport(Glibc)
import Glibc
#endif

/// A pseudo-terminal: the session gets the slave (as a program gets its
/// terminal); the test plays the terminal emulator on the master.
final class PTY {
    let master: Int32
    let slave: Int32

    init() throws {
        var m: Int32 = -1, s: Int32 = -1
        guard openpty(&m, &s, nil, nil, nil) == 0 else { throw TerminalError.system(call: "openpty", errno: errno) }
        master = m
        slave = s
    }

    deinit {
        close(master)
        close(slave)
    }

    func attributes() -> termios {
        var t = termios()
        _ = tcgetattr(slave, &t)
        return t
    }

    func setSize(width: Int, height: Int) {
        var ws = winsize(ws_row: UInt16(height), ws_col: UInt16(width), ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(master, UInt(TIOCSWINSZ), &ws)
    }

    func type(_ s: String) {
        let bytes = Array(s.utf8)
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    /// What the session wrote, read until `done` says so or `timeout` ms pass without a byte.
    func read(timeout: Int32 = 2000, until done: ([UInt8]) -> Bool = { _ in false }) -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !done(out) {
            var pfd = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, timeout) > 0 else { break }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(master, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            out += buffer[0..<n]
        }
        return out
    }

    func read(expecting bytes: [UInt8]) -> [UInt8] {
        read { $0.count >= bytes.count }
    }
}

private func same(_ a: termios, _ b: termios) -> Bool {
    var a = a, b = b
    return a.c_iflag == b.c_iflag && a.c_oflag == b.c_oflag && a.c_cflag == b.c_cflag && a.c_lflag == b.c_lflag
        && withUnsafeBytes(of: &a.c_cc) { x in withUnsafeBytes(of: &b.c_cc) { y in x.elementsEqual(y) } }
}

private func cc(_ t: termios, _ index: Int32) -> UInt8 {
    var t = t
    return withUnsafeBytes(of: &t.c_cc) { $0[Int(index)] }
}

private let enter = Array("\u{1B}[?1049h\u{1B}[?25l\u{1B}[?1000h\u{1B}[?1002h\u{1B}[?1006h\u{1B}[?2004h".utf8)
private let leave = Array("\u{1B}[?2004l\u{1B}[?1006l\u{1B}[?1002l\u{1B}[?1000l\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l".utf8)

@Suite(.timeLimit(.minutes(1))) struct TerminalSessionTests {
    @Test func openEntersRawModeAndTheAlternateScreen() throws {
        let pty = try PTY()
        let before = pty.attributes()
        #expect(before.c_lflag & tcflag_t(ICANON | ECHO) != 0)
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
        let raw = pty.attributes()
        #expect(raw.c_lflag & tcflag_t(ICANON) == 0)
        #expect(raw.c_lflag & tcflag_t(ECHO) == 0)
        #expect(raw.c_lflag & tcflag_t(ISIG) == 0)
        #expect(raw.c_iflag & tcflag_t(ICRNL | IXON) == 0)
        #expect(raw.c_oflag & tcflag_t(OPOST) == 0)
        #expect(cc(raw, VMIN) == 1 && cc(raw, VTIME) == 0)
        #expect(pty.read(expecting: enter) == enter)
        session.restore()
    }

    @Test func withoutMouseNoMouseReporting() throws {
        let pty = try PTY()
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, mouse: false, handleSignals: false)
        let expected = Array("\u{1B}[?1049h\u{1B}[?25l\u{1B}[?2004h".utf8)
        #expect(pty.read(expecting: expected) == expected)
        session.restore()
        let back = Array("\u{1B}[?2004l\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l".utf8)
        #expect(pty.read(expecting: back) == back)
    }

    @Test func restorePutsEverythingBackAndIsIdempotent() throws {
        let pty = try PTY()
        let before = pty.attributes()
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
        _ = pty.read(expecting: enter)
        session.restore()
        #expect(same(pty.attributes(), before))
        #expect(pty.read(expecting: leave) == leave)
        session.restore()
        #expect(same(pty.attributes(), before))
        #expect(pty.read(timeout: 100).isEmpty, "a second restore writes nothing")
    }

    @Test func droppingTheSessionRestoresTheTerminal() throws {
        let pty = try PTY()
        let before = pty.attributes()
        do {
            let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
            _ = session.size
        }
        #expect(same(pty.attributes(), before))
        #expect(pty.read(expecting: enter + leave) == enter + leave)
    }

    @Test func keysTypedOnTheTerminalArriveAsEventsAndTheStreamEndsOnRestore() async throws {
        let pty = try PTY()
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
        var events = session.events().makeAsyncIterator()
        pty.type("q\u{1B}[A\u{1B}[<0;3;2M\u{1B}[200~hi\u{1B}[201~")
        #expect(await events.next() == .key(.character("q")))
        #expect(await events.next() == .key(.up))
        #expect(await events.next() == .mouse(MouseEvent(kind: .press(button: 0), x: 2, y: 1)))
        #expect(await events.next() == .paste("hi"))
        // A lone ESC becomes the Escape key after the reader's short poll timeout.
        pty.type("\u{1B}")
        #expect(await events.next() == .key(.escape))
        // A sequence split across writes still decodes.
        pty.type("\u{1B}[")
        pty.type("3~")
        #expect(await events.next() == .key(.delete))
        session.restore()
        #expect(await events.next() == nil)
    }

    @Test func sizeComesFromTheTerminal() throws {
        let pty = try PTY()
        pty.setSize(width: 132, height: 43)
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
        #expect(session.size == (132, 43))
        pty.setSize(width: 0, height: 0)
        #expect(session.size == (80, 24), "unknown size: the 80×24 default")
        session.restore()
    }

    @Test func writeWritesEverything() throws {
        let pty = try PTY()
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
        _ = pty.read(expecting: enter)
        var r = Renderer(colorMode: .ansi16)
        var b = Buffer(width: 20, height: 3)
        b.put("温度 21.5 °C", x: 1, y: 1, style: Style(foreground: .cyan))
        let frame = r.frame(b)
        session.write(frame)
        #expect(pty.read(expecting: frame) == frame)
        session.restore()
    }

    @Test func aPipeIsNotATerminal() throws {
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let pty = try PTY()
        #expect(throws: TerminalError.notATerminal(fd: fds[1])) {
            try TerminalSession.open(input: pty.slave, output: fds[1], handleSignals: false)
        }
        #expect(TerminalError.notATerminal(fd: 1).description.contains("not a terminal"))
        // Nothing was changed on the terminal that was a terminal.
        #expect(pty.read(timeout: 100).isEmpty)
    }
}

/// Tests that send the process signals or stop it: one at a time.
@Suite(.serialized, .timeLimit(.minutes(1))) struct TerminalSessionSignalTests {
    @Test func sigwinchDeliversTheNewSize() async throws {
        let pty = try PTY()
        pty.setSize(width: 100, height: 30)
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: true)
        var events = session.events().makeAsyncIterator()
        kill(getpid(), SIGWINCH)
        #expect(await events.next() == .resize(width: 100, height: 30))
        session.restore()
    }

    /// `suspend()` gives the terminal back and stops the process; a helper
    /// process continues it 0.2 s later, and the session takes the terminal again.
    @Test func suspendAndResume() async throws {
        let pty = try PTY()
        let before = pty.attributes()
        let session = try TerminalSession.open(input: pty.slave, output: pty.slave, handleSignals: false)
        var events = session.events().makeAsyncIterator()
        _ = pty.read(expecting: enter)
        var pid = pid_t()
        let script = "sleep 0.2; kill -CONT \(getpid())"
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sh"), strdup("-c"), strdup(script), nil]
        defer { for p in argv { free(p) } }
        #expect(posix_spawn(&pid, "/bin/sh", nil, nil, argv, environ) == 0)
        session.suspend()
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        #expect(await events.next() == .resumed)
        #expect(pty.read(expecting: leave + enter) == leave + enter)
        let raw = pty.attributes()
        #expect(raw.c_lflag & tcflag_t(ICANON | ECHO) == 0)
        session.restore()
        #expect(same(pty.attributes(), before))
    }
}
