import Foundation
import Testing
@testable import DBus

/// Runs `body` against a private dbus-daemon that is always stopped afterwards.
func withBus<T>(_ body: (PrivateBus) async throws -> T) async throws -> T {
    let bus = try PrivateBus.start()
    defer { bus.stop() }
    return try await body(bus)
}

/// Runs an external program, returning its exit status and output.
@discardableResult
func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:], timeout: TimeInterval = 20) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let deadline = Date().addingTimeInterval(timeout)
    // Drain both pipes while waiting so a chatty child cannot block.
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    while process.isRunning && Date() < deadline { usleep(10_000) }
    if process.isRunning { process.terminate() }
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
}

/// The Debian interpreter with python3-dbus and python3-gi.
let systemPython = "/usr/bin/python3"

/// Waits for the first element of a stream, failing after `seconds`.
func first<S: AsyncSequence & Sendable>(_ stream: S, within seconds: Double = 5) async throws -> S.Element? where S.Element: Sendable {
    try await withThrowingTaskGroup(of: S.Element?.self) { group in
        group.addTask {
            for try await element in stream { return element }
            return nil
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let result = try await group.next() ?? nil
        group.cancelAll()
        return result
    }
}

/// Collects `count` elements of a stream, or fewer if `seconds` pass.
func collect<S: AsyncSequence & Sendable>(_ stream: S, count: Int, within seconds: Double = 5) async throws -> [S.Element] where S.Element: Sendable {
    try await withThrowingTaskGroup(of: [S.Element]?.self) { group in
        group.addTask {
            var out: [S.Element] = []
            if count == 0 { return out }
            for try await element in stream {
                out.append(element)
                if out.count == count { break }
            }
            return out
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        let result = try await group.next() ?? nil
        group.cancelAll()
        return result ?? []
    }
}
