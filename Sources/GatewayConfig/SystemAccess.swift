#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The few system calls the loader makes: reading files named in the
/// configuration and the host name (the default gateway id).
enum SystemAccess {
    /// Why a file could not be read, as the C library words it ("No such file or directory").
    struct ReadFailure: Error {
        var text: String
    }

    /// Files bigger than this are not configuration, secrets or certificates.
    static let maximumFileSize = 4 << 20

    static func readFile(_ path: String) -> Result<[UInt8], ReadFailure> {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return .failure(lastError()) }
        defer { _ = close(descriptor) }
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(lastError())
            }
            if count == 0 { return .success(contents) }
            contents.append(contentsOf: chunk[0..<count])
            if contents.count > maximumFileSize {
                return .failure(ReadFailure(text: "larger than \(maximumFileSize >> 20) MiB"))
            }
        }
    }

    static func hostName() -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return nil }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        let name = String(decoding: bytes, as: UTF8.self)
        return name.isEmpty ? nil : name
    }

    private static func lastError() -> ReadFailure {
        let code = errno
        guard let text = strerror(code) else { return ReadFailure(text: "errno \(code)") }
        return ReadFailure(text: String(cString: text))
    }

    /// Paths named inside a configuration file, relative to its directory.
    struct Files {
        /// `nil`: relative paths stay relative (to the current directory).
        var baseDirectory: String?

        func resolve(_ path: String) -> String {
            guard !path.hasPrefix("/"), let base = baseDirectory, base != "." else { return path }
            return base.hasSuffix("/") ? base + path : base + "/" + path
        }

        func read(_ path: String) -> Result<[UInt8], ReadFailure> {
            SystemAccess.readFile(resolve(path))
        }
    }
}
