#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed system call: which call, and the `errno` it left behind.
///
/// `description` reads like "socket(AF_BLUETOOTH, SOCK_RAW, BTPROTO_HCI) failed with
/// EAFNOSUPPORT (Address family not supported by protocol)".
public struct SystemCallError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The call as a person would write it, e.g. `ioctl(HCIGETDEVLIST)` or `open(/sys/...)`.
    public let call: String
    /// The raw `errno` value.
    public let code: Int32

    public init(call: String, code: Int32) {
        self.call = call
        self.code = code
    }

    init(call: String, code: ErrnoCode) {
        self.init(call: call, code: code.value)
    }

    /// Symbolic name such as `EAFNOSUPPORT`, or `errno 123` when the value is not in the table.
    public var errnoName: String { SystemCallError.symbolicName(of: code) }

    /// The C library's text for the error (`strerror`).
    public var message: String {
        guard let text = strerror(code) else { return "unknown error" }
        return String(cString: text)
    }

    public var description: String { "\(call) failed with \(errnoName) (\(message))" }

    static func symbolicName(of code: Int32) -> String {
        switch code {
        case EPERM: return "EPERM"
        case ENOENT: return "ENOENT"
        case EINTR: return "EINTR"
        case EIO: return "EIO"
        case ENXIO: return "ENXIO"
        case EBADF: return "EBADF"
        case EAGAIN: return "EAGAIN"
        case ENOMEM: return "ENOMEM"
        case EACCES: return "EACCES"
        case EFAULT: return "EFAULT"
        case EBUSY: return "EBUSY"
        case ENODEV: return "ENODEV"
        case ENOTDIR: return "ENOTDIR"
        case EISDIR: return "EISDIR"
        case EINVAL: return "EINVAL"
        case ENFILE: return "ENFILE"
        case EMFILE: return "EMFILE"
        case ENOTTY: return "ENOTTY"
        case ENOSYS: return "ENOSYS"
        case ENOBUFS: return "ENOBUFS"
        case EPROTONOSUPPORT: return "EPROTONOSUPPORT"
        case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT"
        case EOPNOTSUPP: return "EOPNOTSUPP"
        case EAFNOSUPPORT: return "EAFNOSUPPORT"
        case ENETDOWN: return "ENETDOWN"
        case ETIMEDOUT: return "ETIMEDOUT"
        case EHOSTDOWN: return "EHOSTDOWN"
        case EALREADY: return "EALREADY"
        case ERFKILL: return "ERFKILL"
        default: return "errno \(code)"
        }
    }
}

/// An `errno` value as an `Error`, for `Result`.
struct ErrnoCode: Error, Equatable {
    let value: Int32
}

/// Runs `body` until it either succeeds or fails with something other than `EINTR`.
///
/// `body` follows the C convention: it returns -1 and sets `errno` on failure.
/// Returns the successful result, or the `errno` of the final failure.
func retryingEINTR<T: BinaryInteger>(_ body: () -> T) -> Result<T, ErrnoCode> {
    while true {
        let result = body()
        if result != -1 { return .success(result) }
        let code = errno
        if code == EINTR { continue }
        return .failure(ErrnoCode(value: code))
    }
}

/// Same as `retryingEINTR` for calls that return a pointer (NULL on failure).
func retryingEINTR<P>(pointer body: () -> P?) -> Result<P, ErrnoCode> {
    while true {
        if let value = body() { return .success(value) }
        let code = errno
        if code == EINTR { continue }
        return .failure(ErrnoCode(value: code))
    }
}

/// Closes a descriptor once. On Linux the descriptor is released even when `close`
/// reports `EINTR`, so retrying could close a descriptor another thread just opened;
/// this is the one call deliberately not retried.
func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

/// File system helpers over POSIX calls with `EINTR` retries, used for sysfs.
enum POSIXFile {
    /// Reads a whole (small) file. Errors name the call, the path and errno.
    static func read(path: String, limit: Int = 64 * 1024) -> Result<[UInt8], SystemCallError> {
        let opened = retryingEINTR { open(path, O_RDONLY | O_CLOEXEC) }
        let fd: Int32
        switch opened {
        case .success(let value): fd = value
        case .failure(let code): return .failure(SystemCallError(call: "open(\(path))", code: code))
        }
        defer { closeDescriptor(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < limit {
            let count = chunk.withUnsafeMutableBytes { buffer in
                retryingEINTR { Glibc.read(fd, buffer.baseAddress, buffer.count) }
            }
            switch count {
            case .failure(let code):
                return .failure(SystemCallError(call: "read(\(path))", code: code))
            case .success(0):
                return .success(bytes)
            case .success(let n):
                bytes.append(contentsOf: chunk[0..<n])
            }
        }
        return .success(Array(bytes.prefix(limit)))
    }

    /// Whether `path` exists and is a directory (following symlinks).
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        let result = retryingEINTR { stat(path, &info) }
        guard case .success = result else { return false }
        return (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Names in a directory, without "." and "..", sorted.
    static func list(directory path: String) -> Result<[String], SystemCallError> {
        let opened = retryingEINTR(pointer: { opendir(path) })
        let dir: OpaquePointer
        switch opened {
        case .success(let value): dir = value
        case .failure(let code): return .failure(SystemCallError(call: "opendir(\(path))", code: code))
        }
        defer { _ = closedir(dir) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(dir) else {
                let code = errno
                if code == EINTR { continue }
                if code != 0 { return .failure(SystemCallError(call: "readdir(\(path))", code: code)) }
                break
            }
            let name = withUnsafeMutablePointer(to: &entry.pointee.d_name) { field in
                // In place, up to its NUL: the record can end before the
                // field's 256 bytes do (copying the whole field read past
                // the end of readdir's buffer; AddressSanitizer caught it).
                field.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: field.pointee)) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return .success(names.sorted(by: naturalOrder))
    }

    /// Orders "rfkill2" before "rfkill10" and "hci1" before "hci10".
    static func naturalOrder(_ lhs: String, _ rhs: String) -> Bool {
        func split(_ s: String) -> (String, Int?) {
            let digits = s.reversed().prefix { $0.isASCII && $0.isNumber }
            let stem = String(s.dropLast(digits.count))
            return (stem, digits.isEmpty ? nil : Int(String(digits.reversed())))
        }
        let (ls, ln) = split(lhs)
        let (rs, rn) = split(rhs)
        if ls != rs { return lhs < rhs }
        switch (ln, rn) {
        case let (l?, r?) where l != r: return l < r
        default: return lhs < rhs
        }
    }
}
