internal import CBluetooth
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One packet from the kernel's HCI monitor channel (what btmon reads):
/// the monitor opcode (command, event, ACL in/out, new/deleted index, …),
/// the controller index, and the packet bytes.
public struct HCIMonitorPacket: Sendable, Equatable {
    public var opcode: UInt16
    public var index: UInt16
    public var data: [UInt8]
    /// When it was read (µs since the Unix epoch).
    public var unixMicroseconds: Int64
}

/// The kernel's HCI monitor channel: every HCI packet of every controller,
/// both directions, as `btmon` sees them. Needs a kernel with Bluetooth and
/// CAP_NET_RAW. Reading blocks in `poll()` on the socket and a stop pipe, so
/// an idle capture costs nothing and ``stop()`` ends it at once.
public final class HCIMonitor: @unchecked Sendable {
    private let fd: Int32
    private let stopPipe: (read: Int32, write: Int32)

    /// Opens and binds the monitor socket. Errors say whether the kernel
    /// lacks Bluetooth (`.kernelUnsupported`) or the process lacks the
    /// capability (`.permissionDenied`).
    public init() throws(HCIError) {
        let type = Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let description = "socket(AF_BLUETOOTH, SOCK_RAW|SOCK_CLOEXEC, BTPROTO_HCI)"
        let opened = retryingEINTR { Glibc.socket(AF_BLUETOOTH, type, BTPROTO_HCI) }
        let fd: Int32
        switch opened {
        case .success(let value): fd = value
        case .failure(let code): throw HCIError.classify(SystemCallError(call: description, code: code))
        }
        var address = sockaddr_hci()
        address.hci_family = sa_family_t(AF_BLUETOOTH)
        address.hci_dev = UInt16(HCI_DEV_NONE)
        address.hci_channel = UInt16(HCI_CHANNEL_MONITOR)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_hci>.size)) }
        }
        if bound != 0 {
            let code = errno
            closeDescriptor(fd)
            throw HCIError.classify(SystemCallError(call: "bind(HCI_CHANNEL_MONITOR)", code: code))
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            let code = errno
            closeDescriptor(fd)
            throw HCIError.classify(SystemCallError(call: "pipe", code: code))
        }
        for end in fds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        self.fd = fd
        self.stopPipe = (fds[0], fds[1])
    }

    deinit {
        closeDescriptor(fd)
        closeDescriptor(stopPipe.read)
        closeDescriptor(stopPipe.write)
    }

    /// Makes a blocked ``next()`` return nil (from any thread).
    public func stop() {
        var byte: UInt8 = 1
        _ = Glibc.write(stopPipe.write, &byte, 1)
    }

    /// The next packet (blocking), or nil once stopped.
    public func next() throws(HCIError) -> HCIMonitorPacket? {
        var buffer = [UInt8](repeating: 0, count: 6 + 65_536)
        while true {
            var polls = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                         pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&polls, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                throw HCIError.classify(SystemCallError(call: "poll(HCI monitor)", code: errno))
            }
            if polls[1].revents != 0 { return nil }
            let n = Glibc.read(fd, &buffer, buffer.count)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw HCIError.classify(SystemCallError(call: "read(HCI monitor)", code: errno))
            }
            // struct hci_mon_hdr: opcode, index, len (little-endian u16 each), then the packet.
            guard n >= 6 else { continue }
            let opcode = UInt16(buffer[0]) | UInt16(buffer[1]) << 8
            let index = UInt16(buffer[2]) | UInt16(buffer[3]) << 8
            let length = Int(UInt16(buffer[4]) | UInt16(buffer[5]) << 8)
            let end = min(n, 6 + length)
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return HCIMonitorPacket(opcode: opcode, index: index, data: Array(buffer[6..<end]),
                                    unixMicroseconds: Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000)
        }
    }
}
