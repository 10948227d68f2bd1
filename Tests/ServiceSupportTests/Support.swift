import Foundation
import Logging
import Locking
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct SupportError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
    static func posix(_ call: String) -> SupportError { SupportError("\(call): \(String(cString: strerror(errno)))") }
}

/// Runs blocking work (poll, waitpid, joining threads) on a thread of its
/// own: never on the cooperative pool, nor on Dispatch's global queue.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { c in
        Thread { c.resume(with: Result { try body() }) }.start()
    }
}

/// Whether `task` finishes within `limit` (it is not cancelled by this).
func finishes(_ task: Task<Void, Never>, within limit: Duration) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask { await task.value; return true }
        group.addTask { try? await Task.sleep(for: limit); return false }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}

/// A fresh directory under /tmp, removed when released. Short on purpose:
/// a Unix socket path must fit in 108 bytes.
final class TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        var template = Array("/tmp/svcsupport.XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ buffer in buffer.baseAddress.flatMap { mkdtemp($0) } }) else {
            throw SupportError.posix("mkdtemp")
        }
        path = String(cString: made)
    }

    func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A datagram socket standing in for systemd's notification socket.
final class DatagramReceiver: Sendable {
    let fd: Int32
    private let boundPath: String?

    /// Bound to a socket file at `path`.
    convenience init(path: String) throws {
        try self.init(addressBytes: Array(path.utf8), boundPath: path)
    }

    /// Bound to `name` in the abstract namespace (the address starts with a NUL byte).
    convenience init(abstractName name: String) throws {
        try self.init(addressBytes: [0] + Array(name.utf8), boundPath: nil)
    }

    private init(addressBytes: [UInt8], boundPath: String?) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SupportError.posix("socket") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: addressBytes.prefix($0.count)) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + addressBytes.count)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else {
            let error = SupportError.posix("bind")
            close(fd)
            throw error
        }
        self.fd = fd
        self.boundPath = boundPath
    }

    /// Waits up to `timeoutMilliseconds` for one datagram (blocking: call it off the pool).
    func receive(timeoutMilliseconds: Int32) -> String? {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, timeoutMilliseconds) == 1 else { return nil }
        return receiveNow()
    }

    /// One datagram if one is queued, else nil (never blocks).
    func receiveNow() -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard count >= 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    /// Everything queued now.
    func drain() -> [String] {
        var all: [String] = []
        while let next = receiveNow() { all.append(next) }
        return all
    }

    deinit {
        close(fd)
        if let boundPath { unlink(boundPath) }
    }
}

/// A log handler that keeps what it is given, for asserting that something was logged.
struct CapturingLogHandler: LogHandler {
    struct Entry: Sendable {
        let level: Logger.Level
        let message: String
        let metadata: Logger.Metadata
    }

    final class Store: Sendable {
        let entries = Lock<[Entry]>([])
        var all: [Entry] { entries.withLock { $0 } }
    }

    let store: Store
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        store.entries.withLock { $0.append(Entry(level: event.level, message: event.message.description, metadata: event.metadata ?? [:])) }
    }

    static func logger() -> (Logger, Store) {
        let store = Store()
        return (Logger(label: "test") { _ in CapturingLogHandler(store: store) }, store)
    }
}

/// A file that a `LogSink` writes to, read back as lines.
final class LogFile: Sendable {
    let path: String
    let fd: Int32

    init(in directory: TemporaryDirectory, name: String = "log.jsonl") throws {
        path = directory.file(name)
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SupportError.posix("open") }
    }

    var contents: Data { (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data() }

    /// The file split at newlines; the last element is what followed the last newline (empty when whole).
    var lines: [Data] { contents.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { Data($0) } }

    deinit { close(fd) }
}

/// The repository's root (this file is Tests/ServiceSupportTests/Support.swift).
let repositoryRoot: String = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
