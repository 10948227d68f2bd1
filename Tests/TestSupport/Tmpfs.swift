import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A tmpfs mounted for one test: a real size limit (a full disk) or a
/// read-only file system, without touching the machine's disks. Mounting
/// needs root (CI runs as root): ``mount(at:size:readOnly:)`` returns nil
/// when not root, so a test can skip those cells elsewhere.
public final class Tmpfs: @unchecked Sendable {
    public let path: URL
    private var mounted = true

    private init(path: URL) { self.path = path }

    /// Mounts a tmpfs of `size` (e.g. "64k") at `path` (created if needed).
    /// nil when not root; throws when root cannot mount it.
    public static func mount(at path: URL, size: String, readOnly: Bool = false) throws -> Tmpfs? {
        guard getuid() == 0 else { return nil }
        try FileManager.default.createDirectory(at: path, withIntermediateDirectories: true)
        guard Glibc.mount("tmpfs", path.path, "tmpfs", readOnly ? UInt(MS_RDONLY) : 0, "size=\(size)") == 0 else {
            throw BrokerError(description: "cannot mount a tmpfs at \(path.path): \(String(cString: strerror(errno)))")
        }
        return Tmpfs(path: path)
    }

    /// Fills it: writes until the size limit refuses more (ENOSPC).
    public func fill() {
        guard let handle = fopen(path.appendingPathComponent("filler").path, "w") else { return }
        let block = [UInt8](repeating: 0, count: 4096)
        while fwrite(block, 1, block.count, handle) == block.count {}
        fclose(handle)
    }

    /// Makes it read-only, keeping what is on it.
    public func remountReadOnly() throws {
        guard Glibc.mount("tmpfs", path.path, "tmpfs", UInt(MS_REMOUNT | MS_RDONLY), nil) == 0 else {
            throw BrokerError(description: "cannot remount \(path.path) read-only: \(String(cString: strerror(errno)))")
        }
    }

    public func unmount() {
        guard mounted else { return }
        mounted = false
        _ = umount2(path.path, 0)
    }

    deinit { unmount() }
}
