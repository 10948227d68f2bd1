internal import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one system call of a bus connection's receive path: a non-blocking
/// `recvmsg` on the socket (with any `SCM_RIGHTS` descriptors) straight into
/// the ``WireFramer``'s buffer. Loop thread only.
final class SocketReader {
    enum Outcome: Equatable {
        case received
        case wouldBlock
        case endOfStream
        case failed(String)
    }

    let socket: Int32
    private let scratchFDs = UnsafeMutablePointer<Int32>.allocate(capacity: Int(CDBUS_MAX_FDS_PER_READ))

    init(socket: Int32) { self.socket = socket }

    deinit { scratchFDs.deallocate() }

    /// One read of up to ``WireFramer/chunk`` bytes (more when the buffer has
    /// room) into `framer`.
    func read(into framer: WireFramer) -> Outcome {
        while true {
            var count: Int32 = 0
            var lost: Int32 = 0
            let n = framer.fill { space in
                cdbus_recv_with_fds(socket, space.baseAddress, UInt(space.count), scratchFDs, &count, &lost)
            }
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
                return .failed("read from the bus socket failed: \(String(cString: strerror(e)))")
            }
            framer.addDescriptors(UnsafeBufferPointer(start: scratchFDs, count: Int(count)))
            if lost != 0 {
                return .failed("file descriptors passed with a message were lost (too many in one read)")
            }
            return n == 0 ? .endOfStream : .received
        }
    }
}
