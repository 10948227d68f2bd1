
extension RecordCLITests {
    /// Ctrl-C is the ordinary way to end a recording: the file is written, whole.
    @Test func interruptWritesTheRecording() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("ctrl-c.json").path
        let sim = try await SimulatorProcess.start()
        defer { sim.stop() }
        let address = sim.address
        let (status, stderr) = try await offPool { () throws -> (Int32, String) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try DoctorCLI.executable())
            process.arguments = ["record", "--out", out, "--bus", address, "--scan"]
            let err = Pipe()
            process.standardError = err
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            Thread.sleep(forTimeInterval: 1.5)
            process.interrupt()
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, text)
        }
        #expect(status == 0, "\(stderr)")
        #expect(stderr.contains("Wrote \(out)"), "\(stderr)")
        let scenario = try String(contentsOfFile: out, encoding: .utf8)
        #expect(scenario.contains("\"CB:B8:33:4C:88:4F\""), "the Ruuvi tag was recorded")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".tmp-") || $0.contains(".check-") }
        #expect(leftovers.isEmpty, "no temporary files left: \(leftovers)")
    }
}
