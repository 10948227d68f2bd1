internal import CPosix
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A POSIX thread for work that must not run on Swift's cooperative pool:
/// loops that block in `epoll_wait` or `poll` (a D-Bus connection's I/O
/// thread, the terminal's input reader, the HTTP server's accept and
/// connection threads). One place for starting one — the closure handed
/// through `Unmanaged`, the thread detached, optionally named and given a
/// stack size — instead of a copy in each of those targets.
public enum DetachedThread {
    /// `pthread_create` refused (EAGAIN: the system's thread limit).
    public struct StartError: Error, Sendable, CustomStringConvertible {
        public let errorNumber: Int32
        public var description: String { "cannot start a thread: \(String(cString: strerror(errorNumber)))" }
    }

    /// Runs `body` on a new detached thread named `name` (the kernel keeps
    /// its first 15 bytes; shown by `top -H` and in crash reports)
    /// with `stackSize` bytes of stack (the system default when nil).
    /// `body` is released unrun when the thread cannot be started.
    public static func start(name: String? = nil, stackSize: Int? = nil, _ body: @escaping () -> Void) throws(StartError) {
        final class Entry {
            let name: String?
            let body: () -> Void
            init(_ name: String?, _ body: @escaping () -> Void) {
                self.name = name
                self.body = body
            }
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let entry = Unmanaged.passRetained(Entry(name, body)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, &attributes, { raw in
            guard let raw else { return nil }
            let entry = Unmanaged<Entry>.fromOpaque(raw).takeRetainedValue()
            if let name = entry.name { csystem_set_thread_name(name) }   // the kernel keeps 15 bytes
            entry.body()
            return nil
        }, entry)
        if rc != 0 {
            Unmanaged<Entry>.fromOpaque(entry).release()
            throw StartError(errorNumber: rc)
        }
    }
}
