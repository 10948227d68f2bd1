// The few POSIX pieces the server needs, wrapped once.
internal import CPosix
import Threads
import Glibc

/// POLLRDHUP (peer closed its writing side) is Linux-specific and not exported
/// by the Glibc module; its value is fixed by the kernel ABI.
let pollReadHangUp = Int16(0x2000)

/// An IPv4 or IPv6 socket address.
enum SocketAddress {
    case v4(sockaddr_in)
    case v6(sockaddr_in6)

    /// An IPv4 or IPv6 literal (IPv6 optionally in brackets), or "localhost"
    /// (the IPv4 loopback address: one listener, and every local client
    /// falls back to it).
    init?(host: String, port: Int) {
        guard (0...65535).contains(port) else { return nil }
        var literal = host
        if literal.hasPrefix("["), literal.hasSuffix("]") { literal = String(literal.dropFirst().dropLast()) }
        if asciiLowercased(literal) == "localhost" { literal = "127.0.0.1" }
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, literal, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = UInt16(port).bigEndian
            self = .v4(v4)
            return
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, literal, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = UInt16(port).bigEndian
            self = .v6(v6)
            return
        }
        return nil
    }

    init?(storage: sockaddr_storage) {
        var storage = storage
        switch Int32(storage.ss_family) {
        case AF_INET:
            self = .v4(withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in.self) })
        case AF_INET6:
            self = .v6(withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in6.self) })
        default:
            return nil
        }
    }

    var family: Int32 {
        switch self {
        case .v4: AF_INET
        case .v6: AF_INET6
        }
    }

    var port: Int {
        switch self {
        case .v4(let a): Int(UInt16(bigEndian: a.sin_port))
        case .v6(let a): Int(UInt16(bigEndian: a.sin6_port))
        }
    }

    /// The numeric host; an IPv4-mapped IPv6 address (a v4 client of a
    /// dual-stack listener) is given in IPv4 form.
    var host: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch self {
        case .v4(var a):
            guard inet_ntop(AF_INET, &a.sin_addr, &text, socklen_t(text.count)) != nil else { return "?" }
        case .v6(var a):
            let bytes = withUnsafeBytes(of: &a.sin6_addr) { Array($0) }
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
                return bytes[12...].map(String.init).joined(separator: ".")
            }
            guard inet_ntop(AF_INET6, &a.sin6_addr, &text, socklen_t(text.count)) != nil else { return "?" }
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// "127.0.0.1:8080", "[::1]:8080".
    var description: String { formatHostPort(host, port) }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        switch self {
        case .v4(var a):
            withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        case .v6(var a):
            withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        }
    }
}

func errnoText(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}

/// Sends everything unless the peer is gone or the socket's send timeout
/// (SO_SNDTIMEO) passes without progress.
func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBytes { raw in
        guard let base = raw.baseAddress else { return true }
        var offset = 0
        while offset < raw.count {
            let n = send(fd, base + offset, raw.count - offset, csystem_msg_nosignal())
            if n > 0 {
                offset += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return false
            }
        }
        return true
    }
}

/// Blocks until one of `fds` is readable (or hung up); the index of the first.
/// No timeout: every caller also has a descriptor that is signalled when it
/// must stop waiting.
func waitReadable(_ fds: [Int32]) -> Int? {
    var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
    while true {
        let rc = poll(&polls, nfds_t(polls.count), -1)
        if rc < 0 {
            if errno == EINTR { continue }
            return nil
        }
        if let index = polls.firstIndex(where: { $0.revents != 0 }) { return index }
    }
}

/// Milliseconds for poll(), rounded up so a wake-up is never early.
func pollMilliseconds(_ duration: Duration) -> Int32 {
    guard duration > .zero else { return 0 }
    let (seconds, attoseconds) = duration.components
    let millis = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    return Int32(clamping: millis)
}

func setTimeout(_ fd: Int32, option: Int32, _ duration: Duration) {
    let (seconds, attoseconds) = duration.components
    var tv = timeval(tv_sec: Int(max(0, seconds)), tv_usec: Int(max(0, attoseconds) / 1_000_000_000_000))
    if tv.tv_sec == 0 && tv.tv_usec == 0 { tv.tv_usec = 1000 }  // zero would mean "never"
    _ = setsockopt(fd, SOL_SOCKET, option, &tv, socklen_t(MemoryLayout<timeval>.size))
}

/// A self-pipe: `signal()` leaves the read end readable (level-triggered)
/// until `drain()`, so a thread can wait for it with poll() alongside sockets.
/// Both ends close when the last owner lets go.
final class WakePipe: Sendable {
    let readFD: Int32
    private let writeFD: Int32

    init?() {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return nil }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        readFD = fds[0]
        writeFD = fds[1]
    }

    deinit {
        close(readFD)
        close(writeFD)
    }

    func signal() {
        var byte: UInt8 = 1
        // EAGAIN means the pipe is full: it is readable already.
        _ = write(writeFD, &byte, 1)
    }

    func drain() {
        var sink = [UInt8](repeating: 0, count: 64)
        while read(readFD, &sink, sink.count) > 0 {}
    }
}

/// A detached POSIX thread running `body` (not the Swift concurrency pool:
/// connection threads block in poll/recv/send), with a small stack.
func spawnThread(name: String, stackSize: Int = 512 * 1024, _ body: @escaping () -> Void) -> Bool {
    do {
        try DetachedThread.start(name: name, stackSize: stackSize, body)
        return true
    } catch {
        return false
    }
}

/// IMF-fixdate (RFC 9110 §5.6.7): "Sun, 06 Nov 1994 08:49:37 GMT".
func httpDate(_ time: time_t = Glibc.time(nil)) -> String {
    var t = time
    var parts = tm()
    gmtime_r(&t, &parts)
    let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
    let day = days[Int(parts.tm_wday) % 7], month = months[Int(parts.tm_mon) % 12]
    return "\(day), \(two(parts.tm_mday)) \(month) \(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
}
