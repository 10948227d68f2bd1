import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Our end of a SOCK_SEQPACKET pair handed out by AcquireWrite or
/// AcquireNotify. A dispatch read source wakes us only when the client
/// writes or closes its end (no polling).
final class AcquiredSocket: @unchecked Sendable {
    // `fd` and `source` are set once in init; the source is thread-safe.
    let fd: Int32
    private let source: any DispatchSourceRead

    /// Makes a socket pair; returns our end and the descriptor for the client.
    static func make(onMessage: @escaping @Sendable ([UInt8]) -> Void,
                     onClose: @escaping @Sendable () -> Void) -> (AcquiredSocket, Int32)? {
        var fds: [Int32] = [-1, -1]
        // Non-blocking on both ends, as bluetoothd's gatt-client makes them:
        // a client that reads the descriptor as it came gets EAGAIN, not a wait.
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &fds) == 0 else { return nil }
        return (AcquiredSocket(fd: fds[0], onMessage: onMessage, onClose: onClose), fds[1])
    }

    private init(fd: Int32, onMessage: @escaping @Sendable ([UInt8]) -> Void, onClose: @escaping @Sendable () -> Void) {
        self.fd = fd
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: DispatchQueue(label: "blecompanion.sim.socket"))
        self.source = source
        source.setEventHandler { [weak self] in
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 {
                onMessage(Array(buffer[0..<n]))
            } else if n == 0 || (errno != EAGAIN && errno != EINTR) {
                self?.source.cancel()
                onClose()
            }
        }
        source.setCancelHandler { _ = Glibc.close(fd) }
        source.resume()
    }

    /// Sends one datagram (a notification); false if the client is gone.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } == bytes.count
    }

    /// Closes our end (the client sees a hang-up).
    func close() { source.cancel() }

    deinit { source.cancel() }
}
