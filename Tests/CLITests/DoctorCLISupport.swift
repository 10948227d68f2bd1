import Foundation
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Locates and runs the built `blecompanion` executable for the doctor CLI tests.
enum DoctorCLI {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// The built `blecompanion` (see TestSupport's `builtExecutable`).
    static func executable() throws -> String { try builtExecutable("blecompanion") }

    /// Runs the executable on a thread of its own, so a test waiting for a
    /// child never holds one of the few cooperative-pool threads (two on a
    /// 2-core machine: two blocked tests would stall every async test).
    static func run(_ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60) async throws -> Run {
        try await offPool { try runBlocking(arguments, environment: environment, timeout: timeout) }
    }

    /// Runs the executable, blocking the calling thread; fails (throws) rather
    /// than hangs if it runs longer than `timeout` seconds. Only for threads
    /// that are not the cooperative pool's (inside `offPool`).
    static func runBlocking(_ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try executable())
        process.arguments = arguments
        if let environment { process.environment = environment }
        let outPipe = Pipe()
        let errPipe = Pipe()
        process.standardOutput = outPipe
        process.standardError = errPipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read both pipes to EOF concurrently with the child so it never blocks on a full pipe.
        let outBox = DataBox()
        let errBox = DataBox()
        let group = DispatchGroup()
        for (pipe, box) in [(outPipe, outBox), (errPipe, errBox)] {
            group.enter()
            let handle = pipe.fileHandleForReading
            // A thread of its own: Dispatch's global workers may all be blocked in waits like this one.
            Thread {
                box.set(handle.readDataToEndOfFile())
                group.leave()
            }.start()
        }
        if group.wait(timeout: .now() + timeout) == .timedOut {
            process.terminate()
            throw TimedOut(arguments: arguments, seconds: timeout)
        }
        process.waitUntilExit()
        return Run(status: process.terminationStatus,
                   stdout: String(decoding: outBox.get(), as: UTF8.self),
                   stderr: String(decoding: errBox.get(), as: UTF8.self))
    }

    struct TimedOut: Error, CustomStringConvertible {
        var arguments: [String]
        var seconds: Double
        var description: String { "blecompanion \(arguments.joined(separator: " ")) did not finish within \(seconds) s" }
    }

    final class DataBox: @unchecked Sendable {
        private let lock = NSLock()
        private var data = Data()
        func set(_ value: Data) { lock.lock(); data = value; lock.unlock() }
        func get() -> Data { lock.lock(); defer { lock.unlock() }; return data }
    }

    /// The kernel's own answer to socket(AF_BLUETOOTH, SOCK_RAW, BTPROTO_HCI): nil when it opens.
    static func kernelBluetoothErrno() -> Int32? {
        let fd = socket(31, Int32(SOCK_RAW.rawValue), 1)
        if fd >= 0 {
            close(fd)
            return nil
        }
        return errno
    }
}
