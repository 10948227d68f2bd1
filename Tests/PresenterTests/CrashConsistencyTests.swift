import Foundation
import GRDB
import Testing
import TestSupport
import BlueZ
@testable import Domain
import Vocabulary

/// Kills a process in the middle of writing readings (SIGKILL, no clean-up)
/// and checks the database: intact, and holding every record it reported
/// committed (whole records only).
@Suite struct CrashConsistencyTests {
    @Test func killedWriterLeavesAConsistentDatabase() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("readings.sqlite").path

        // The writer is run and killed on a thread of its own: this waits on a
        // child, which must not hold one of the cooperative pool's threads.
        let executable = try Self.writerExecutable()
        let (reason, committed) = try await offPool { () throws -> (Process.TerminationReason, Int) in
            let writer = Process()
            writer.executableURL = executable
            writer.arguments = [path]
            let out = Pipe()
            writer.standardOutput = out
            writer.standardError = FileHandle.nullDevice
            try writer.run()
            // Read progress lines until a few hundred records are committed, then kill.
            var buffer = Data()
            var committed = 0
            let handle = out.fileHandleForReading
            while committed < 300 {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                let lines = String(decoding: buffer, as: UTF8.self).split(separator: "\n")
                if let last = lines.last(where: { $0.hasPrefix("committed ") }), let n = Int(last.dropFirst(10)) { committed = n }
            }
            kill(writer.processIdentifier, SIGKILL)
            writer.waitUntilExit()
            return (writer.terminationReason, committed)
        }
        #expect(reason == .uncaughtSignal)
        #expect(committed >= 300)

        let db = try DatabaseQueue(path: path)
        let check = try await db.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }
        #expect(check == "ok")
        let temperatures = try await db.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM reading WHERE kind = 'temperature'") } ?? 0
        let humidities = try await db.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM reading WHERE kind = 'humidity'") } ?? 0
        // Each record is one transaction: both readings or neither.
        #expect(temperatures == humidities)
        #expect(temperatures >= committed)
        // And the store opens it again and keeps working.
        let store = try ReadingStore(path: path)
        let device = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("CB:B8:33:4C:88:4F"))
        #expect(try store.history(of: device, kind: .temperature).count == temperatures)
    }

    /// The readings-writer built next to the test bundle.
    static func writerExecutable() throws -> URL {
        var dir = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        for _ in 0..<4 {
            dir = dir.deletingLastPathComponent()
            let candidate = dir.appendingPathComponent("readings-writer")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw DomainError("readings-writer not found next to the test bundle (build with `swift build --build-tests`)")
    }
}
