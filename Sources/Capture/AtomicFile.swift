#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The text of a NUL-terminated buffer.
func cString(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Why a recording could not be written.
public struct CaptureFileError: Error, Sendable, CustomStringConvertible, Equatable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Writes files the way a recording must be written: a temporary file in
/// the same directory, flushed to disk, then renamed over the target, so
/// the target is either the old file or the complete new one (never half a
/// file, even when the process is killed while writing).
public enum AtomicFile {
    /// Writes `text` to `path` atomically (mode 0644).
    public static func write(_ text: String, to path: String) throws(CaptureFileError) {
        var template = Array((path + ".tmp-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buf -> Int32 in
            guard let base = buf.baseAddress else { return -1 }
            return mkstemp(base)
        }
        guard fd >= 0 else { throw CaptureFileError("cannot write \(path): \(String(cString: strerror(errno)))") }
        let temp = cString(template)
        var failure: String?
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                failure = String(cString: strerror(errno))
                break
            }
            written += n
        }
        if failure == nil && fchmod(fd, 0o644) != 0 { failure = String(cString: strerror(errno)) }
        if failure == nil && fsync(fd) != 0 { failure = String(cString: strerror(errno)) }
        if close(fd) != 0 && failure == nil { failure = String(cString: strerror(errno)) }
        if failure == nil && rename(temp, path) != 0 { failure = String(cString: strerror(errno)) }
        if let failure {
            unlink(temp)
            throw CaptureFileError("cannot write \(path): \(failure)")
        }
    }

    /// Checks that `path` can be written (before a recording starts, so a
    /// typo does not cost the capture): its directory exists and takes a
    /// new file, and `path` is not a directory.
    public static func checkWritable(_ path: String) throws(CaptureFileError) {
        var info = stat()
        if stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR {
            throw CaptureFileError("cannot write \(path): it is a directory")
        }
        var template = Array((path + ".check-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buf -> Int32 in
            guard let base = buf.baseAddress else { return -1 }
            return mkstemp(base)
        }
        guard fd >= 0 else { throw CaptureFileError("cannot write \(path): \(String(cString: strerror(errno)))") }
        close(fd)
        unlink(cString(template))
    }
}
