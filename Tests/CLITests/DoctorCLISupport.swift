import Foundation
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

    enum LocateError: Error, CustomStringConvertible {
        case notFound([String])
        var description: String {
            switch self {
            case .notFound(let tried): return "blecompanion executable not found; looked in: \(tried.joined(separator: ", "))"
            }
        }
    }

    /// The executable next to the running test binary (the build products directory), or
    /// `BLECOMPANION_BIN` when set. Falls back to the package's .build* directories.
    static func executable(filePath: String = #filePath) throws -> String {
        var tried: [String] = []
        func candidate(_ path: String) -> String? {
            tried.append(path)
            return access(path, X_OK) == 0 ? path : nil
        }
        if let override = ProcessInfo.processInfo.environment["BLECOMPANION_BIN"], let found = candidate(override) {
            return found
        }
        // The test binary (…/debug/<Package>PackageTests.xctest) lives in the products directory;
        // walk up a few levels so bundle layouts (…/X.xctest/Contents/MacOS/X) work too.
        var starts: [URL] = [Bundle.main.bundleURL, Bundle.main.executableURL].compactMap { $0 }
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            starts.insert(URL(fileURLWithPath: exe), at: 0)
        }
        for start in starts {
            var directory = start.deletingLastPathComponent()
            for _ in 0..<4 {
                if let found = candidate(directory.appendingPathComponent("blecompanion").path) { return found }
                directory = directory.deletingLastPathComponent()
            }
        }
        // Package root from this file: Tests/CLITests/<file>.
        let root = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        for entry in entries.sorted() where entry.hasPrefix(".build") {
            for config in ["debug", "release"] {
                if let found = candidate(root.appendingPathComponent("\(entry)/\(config)/blecompanion").path) {
                    return found
                }
            }
        }
        throw LocateError.notFound(tried)
    }

    /// Runs the executable; fails (throws) rather than hangs if it runs longer than `timeout` seconds.
    static func run(_ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60) throws -> Run {
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
