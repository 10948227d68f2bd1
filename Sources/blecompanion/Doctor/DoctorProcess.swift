import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Result of running a helper program (e.g. `bluetoothd --version`).
struct ProcessOutcome: Sendable, Equatable {
    enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signalled(Int32)
        case timedOut
        case failedToStart(String)
    }

    var termination: Termination
    /// Combined stdout and stderr, trimmed.
    var output: String
}

enum DoctorProcess {
    /// Runs `path arguments…` with stdin from /dev/null and stdout+stderr captured.
    /// Never waits longer than `timeout`: a child still running is terminated (SIGTERM,
    /// then SIGKILL) and reported as `.timedOut`. Output beyond what the pipe buffers
    /// (64 KiB) is not needed for version strings.
    static func run(_ path: String, _ arguments: [String], timeout: Duration = .seconds(5)) async -> ProcessOutcome {
        var process = Process()
        var pipe = Pipe()
        // ETXTBSY: the file is open for writing somewhere (a package upgrade
        // replacing bluetoothd; a test that has just written its stand-in
        // while another thread forks). That passes within moments: try again
        // for up to a second before calling it a failure to start.
        var attempts = 0
        while true {
            process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
            pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            process.standardInput = FileHandle.nullDevice
            do {
                try process.run()
                break
            } catch where isTextFileBusy(error) && attempts < 20 {
                attempts += 1
                try? await Task.sleep(for: .milliseconds(50))
            } catch {
                return ProcessOutcome(termination: .failedToStart(String(describing: error)), output: "")
            }
        }
        // The child has its own copy of the write end; drop ours so the read end sees EOF.
        try? pipe.fileHandleForWriting.close()

        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var timedOut = false
        while process.isRunning {
            if clock.now >= deadline {
                timedOut = true
                process.terminate()
                try? await Task.sleep(for: .milliseconds(200))
                if process.isRunning { _ = kill(process.processIdentifier, SIGKILL) }
                break
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        if !timedOut { process.waitUntilExit() }

        let output = drainNonBlocking(pipe.fileHandleForReading.fileDescriptor)
        try? pipe.fileHandleForReading.close()
        let text = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if timedOut { return ProcessOutcome(termination: .timedOut, output: text) }
        switch process.terminationReason {
        case .exit: return ProcessOutcome(termination: .exited(process.terminationStatus), output: text)
        case .uncaughtSignal: return ProcessOutcome(termination: .signalled(process.terminationStatus), output: text)
        @unknown default: return ProcessOutcome(termination: .exited(process.terminationStatus), output: text)
        }
    }

    /// Foundation reports a failed spawn as a Cocoa error wrapping the POSIX
    /// one (NSUnderlyingError).
    private static func isTextFileBusy(_ error: any Error) -> Bool {
        let ns = error as NSError
        if ns.domain == NSPOSIXErrorDomain { return ns.code == Int(ETXTBSY) }
        guard let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError else { return false }
        return underlying.domain == NSPOSIXErrorDomain && underlying.code == Int(ETXTBSY)
    }

    /// Reads whatever is buffered in the pipe without blocking, so a grandchild that
    /// inherited the write end cannot make the doctor hang.
    private static func drainNonBlocking(_ fd: Int32) -> [UInt8] {
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while result.count < 65536 {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n > 0 { result.append(contentsOf: chunk[0..<n]); continue }
            if n < 0 && errno == EINTR { continue }
            break  // 0 = EOF, or EAGAIN / other error: nothing more available now
        }
        return result
    }
}
