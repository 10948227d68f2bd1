import BLEParsing
import Foundation
import Glibc
import Testing
import TestSupport

/// `blecompanion capture`: what it does depends on the kernel, and every case is asserted.
@Suite(.timeLimit(.minutes(1))) struct CaptureCLITests {
    @Test func capturesOrSaysPreciselyWhyNot() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("capture-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("hci.btsnoop").path
        let run = try await DoctorCLI.run(["capture", "--out", out, "--duration", "1"], timeout: 30)
        switch DoctorCLI.kernelBluetoothErrno() {
        case EAFNOSUPPORT?:
            // This machine: no Bluetooth in the kernel.
            #expect(run.status == 69)
            #expect(run.stderr.contains("this kernel has no Bluetooth support"), "\(run.stderr)")
            #expect(run.stderr.contains("EAFNOSUPPORT"))
            #expect(!FileManager.default.fileExists(atPath: out), "no empty capture left behind")
        case let code? where code == EPERM || code == EACCES:
            #expect(run.status == 69)
            #expect(run.stderr.contains("CAP_NET_RAW"), "\(run.stderr)")
        case nil where geteuid() != 0:
            // Bluetooth and the raw socket open, but the monitor bind still needs the capability.
            #expect(run.status == 0 || (run.status == 69 && run.stderr.contains("CAP_NET_RAW")), "\(run.stderr)")
        default:
            // A kernel with Bluetooth and the capability: a readable capture.
            #expect(run.status == 0, "\(run.stderr)")
            let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: out)))
            var reader = try BtsnoopReader(bytes)
            #expect(reader.datalink == .linuxMonitor)
            while try reader.next() != nil {}
        }
    }

    @Test func badArgumentsAreUsageErrors() async throws {
        let run = try await DoctorCLI.run(["capture", "--out", "/tmp/x.btsnoop", "--duration=-3"], timeout: 30)
        #expect(run.status == 64)
        #expect(run.stderr.contains("--duration: expected a number of seconds > 0, got -3"), "\(run.stderr)")
    }
}
