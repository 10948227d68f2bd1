import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A finished child process: its exit status and everything it printed.
struct ScriptRun: Sendable {
    let status: Int32
    let output: String
}

/// Runs a script of the repository to completion, on a thread of its own.
///
/// The thread unblocks every signal first: it was created from a thread of
/// the concurrency pool, whose libdispatch mask blocks nearly all signals,
/// and a child inherits the mask of the thread that spawns it — the
/// script's own children (a dbus-daemon, stand-in services) would then
/// ignore the SIGTERM that is meant to stop them.
func runScript(_ relativePath: String, _ arguments: [String] = []) async throws -> ScriptRun {
    try await offPool {
        var none = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: repositoryRoot + "/" + relativePath)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: repositoryRoot)
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return ScriptRun(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }
}

@Suite struct DeployTests {
    /// The whole check of the deployment files (unit, udev rule, D-Bus
    /// policy on a private bus, sysusers, staged installs) passes.
    @Test func verifyDeployPasses() async throws {
        let run = try await runScript("scripts/verify-deploy")
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains(" passed, 0 failed"), "\(run.output)")
        #expect(!run.output.contains("FAIL"), "\(run.output)")
    }

    @Test func udevCheckerRejectsEveryRuleOfTheBrokenFile() async throws {
        let run = try await runScript("scripts/check-udev-rules", ["fixtures/deploy/broken.rules"])
        #expect(run.status == 1, "\(run.output)")
        // Each rule there (lines 6 to 22, and 24 continued on 25) has one mistake.
        let reported = Set(run.output.split(separator: "\n").compactMap { line -> Int? in
            guard let match = line.firstMatch(of: /broken\.rules:(\d+):/) else { return nil }
            return Int(match.1)
        })
        #expect(reported == [6, 8, 10, 12, 14, 16, 18, 20, 22, 24], "\(run.output)")
    }

    @Test func udevCheckerAcceptsOurRuleAndRejectsAWrongOperator() async throws {
        let good = try await runScript("scripts/check-udev-rules", ["udev/90-blecompanion.rules"])
        #expect(good.status == 0, "\(good.output)")
        #expect(good.output.isEmpty)

        // Our rule with the match written as an assignment: a classic slip.
        let directory = try TemporaryDirectory()
        let ours = try String(contentsOfFile: repositoryRoot + "/udev/90-blecompanion.rules", encoding: .utf8)
        let slipped = ours.replacingOccurrences(of: #"SUBSYSTEM=="bluetooth""#, with: #"SUBSYSTEM="bluetooth""#)
        #expect(slipped != ours)
        let path = directory.file("slipped.rules")
        try slipped.write(toFile: path, atomically: true, encoding: .utf8)
        let bad = try await runScript("scripts/check-udev-rules", [path])
        #expect(bad.status == 1)
        #expect(bad.output.contains("SUBSYSTEM does not take '='"), "\(bad.output)")
    }
}
