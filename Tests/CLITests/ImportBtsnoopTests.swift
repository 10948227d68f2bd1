import Foundation
import Glibc
import Testing

/// Runs the real `blecompanion import-btsnoop` on the committed captures
/// (fixtures/captures) and on broken copies of them.
@Suite struct ImportBtsnoopTests {
    static let captures = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/captures")

    static func temporary(_ name: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("import-btsnoop-\(UUID().uuidString)-\(name)")
    }

    @Test func writesTheScenarioAndReports() async throws {
        let out = Self.temporary("hr.json")
        defer { try? FileManager.default.removeItem(at: out) }
        let run = try await DoctorCLI.run(["import-btsnoop", Self.captures.appendingPathComponent("heart-rate-h4.btsnoop").path,
                                     "--out", out.path, "--name", "replay"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("F3:4A:9E:21:7C:05 \"HRM-Demo\": 1 advertisement event, GATT 3 services / 6 characteristics, 3 notifications"))
        #expect(run.stdout.contains("1 × L2CAP CID 0x0005"))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: out)) as? [String: Any])
        #expect(json["name"] as? String == "replay")
        let devices = try #require(json["devices"] as? [[String: Any]])
        #expect(devices.map { $0["address"] as? String } == ["F3:4A:9E:21:7C:05"])
    }

    @Test func quietPrintsNothing() async throws {
        let out = Self.temporary("x.json")
        defer { try? FileManager.default.removeItem(at: out) }
        let run = try await DoctorCLI.run(["import-btsnoop", Self.captures.appendingPathComponent("xiaomi-h1.btsnoop").path,
                                     "--out", out.path, "--quiet"])
        #expect(run.status == 0)
        #expect(run.stdout.isEmpty)
        #expect(FileManager.default.fileExists(atPath: out.path))
    }

    @Test func truncatedCaptureNamesRecordAndOffset() async throws {
        let bytes = try Data(contentsOf: Self.captures.appendingPathComponent("bthome-pvvx-monitor.btsnoop"))
        let cut = Self.temporary("cut.btsnoop")
        let out = Self.temporary("cut.json")
        defer { try? FileManager.default.removeItem(at: cut) }
        // Record 1 (16 + 24 + 16 bytes), record 2 (24 + 0), then 10 bytes into record 3's header.
        try bytes.prefix(16 + 40 + 24 + 10).write(to: cut)
        let run = try await DoctorCLI.run(["import-btsnoop", cut.path, "--out", out.path])
        #expect(run.status == 1)
        #expect(run.stderr == "import-btsnoop: \(cut.path): btsnoop record 3 at byte offset 80: truncated: expected 24 bytes of record header, found 10\n")
        #expect(!FileManager.default.fileExists(atPath: out.path))
    }

    @Test func notACapture() async throws {
        let text = Self.temporary("text.btsnoop")
        defer { try? FileManager.default.removeItem(at: text) }
        try Data("hello, world\n".utf8).write(to: text)
        let run = try await DoctorCLI.run(["import-btsnoop", text.path, "--out", Self.temporary("y.json").path])
        #expect(run.status == 1)
        #expect(run.stderr.contains("btsnoop header at byte offset 0: not a btsnoop file"))
        let missing = try await DoctorCLI.run(["import-btsnoop", "/nonexistent/capture.btsnoop", "--out", Self.temporary("z.json").path])
        #expect(missing.status == 1)
        #expect(missing.stderr.hasPrefix("import-btsnoop: cannot read /nonexistent/capture.btsnoop"))
        let usage = try await DoctorCLI.run(["import-btsnoop", text.path])
        #expect(usage.status == 64)
    }

    /// Not a regular file, or --out naming the capture itself: a clear
    /// error, exit 1, and nothing overwritten (before: Foundation's "error
    /// 256" for a directory, "You don't have permission" for a FIFO as root,
    /// and a capture silently replaced by its scenario).
    @Test func refusesWhatIsNotACaptureFileAndWillNotOverwriteTheCapture() async throws {
        let dir = Self.temporary("dir")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let asDir = try await DoctorCLI.run(["import-btsnoop", dir.path, "--out", dir.appendingPathComponent("a.json").path])
        #expect(asDir.status == 1 && asDir.stderr == "import-btsnoop: \(dir.path) is a directory; give a capture file (btmon -w FILE)\n", "\(asDir.stderr)")
        let fifo = dir.appendingPathComponent("pipe")
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let asFIFO = try await DoctorCLI.run(["import-btsnoop", fifo.path, "--out", dir.appendingPathComponent("b.json").path])
        #expect(asFIFO.status == 1 && asFIFO.stderr.contains("is not a regular file (a FIFO, socket or device)"), "\(asFIFO.stderr)")
        let asDevice = try await DoctorCLI.run(["import-btsnoop", "/dev/zero", "--out", dir.appendingPathComponent("c.json").path])
        #expect(asDevice.status == 1 && asDevice.stderr.contains("/dev/zero is not a regular file"), "\(asDevice.stderr)")
        // The capture as its own output, also through another path to it.
        let capture = dir.appendingPathComponent("hr.btsnoop")
        try FileManager.default.copyItem(at: Self.captures.appendingPathComponent("heart-rate-h4.btsnoop"), to: capture)
        let before = try Data(contentsOf: capture)
        let link = dir.appendingPathComponent("link.btsnoop")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: capture)
        for target in [capture.path, link.path, dir.path + "/./hr.btsnoop"] {
            let same = try await DoctorCLI.run(["import-btsnoop", capture.path, "--out", target])
            #expect(same.status == 1 && same.stderr.contains("is the capture itself"), "\(same.stderr)")
        }
        #expect(try Data(contentsOf: capture) == before, "the capture is untouched")
    }
    /// A capture whose scenario would exceed the simulator's 16 MiB: exit 70,
    /// nothing written. (250 000 advertising reports of 2 000 RuuviTag-like
    /// devices whose data changes each time: ~35 MiB of scenario.)
    @Test func aScenarioTooLargeToLoadIsRefusedWith70() async throws {
        let capture = Self.temporary("big.btsnoop"), out = Self.temporary("big.json")
        defer {
            try? FileManager.default.removeItem(at: capture)
            try? FileManager.default.removeItem(at: out)
        }
        func be32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: v >> (24 - 8 * $0)) } }
        var bytes = Array("btsnoop\0".utf8) + be32(1) + be32(1002)   // HCI UART (H4)
        bytes.reserveCapacity(18_000_000)
        let start: UInt64 = 0x00dc_ddb3_0f2f_8000 + 1_700_000_000 * 1_000_000
        for i in 0..<250_000 {
            let device = UInt8(truncatingIfNeeded: i % 2000), high = UInt8(truncatingIfNeeded: (i % 2000) >> 8)
            let reading = UInt16(4000 + (i / 2000) % 1000)
            let manufacturer: [UInt8] = [0x05, UInt8(reading >> 8), UInt8(reading & 0xFF)] + [UInt8](repeating: 0, count: 21)
            let ad: [UInt8] = [2, 0x01, 0x06, UInt8(3 + manufacturer.count), 0xFF, 0x99, 0x04] + manufacturer
            let report: [UInt8] = [0x02, 1, 0x00, 0x01, device, high, 0x33, 0x44, 0x55, 0xC0, UInt8(ad.count)] + ad + [0xC4]
            let packet: [UInt8] = [0x04, 0x3E, UInt8(report.count)] + report
            let time = start + UInt64(i) * 2000
            bytes += be32(UInt32(packet.count)) + be32(UInt32(packet.count)) + be32(3) + be32(0)
                + be32(UInt32(truncatingIfNeeded: time >> 32)) + be32(UInt32(truncatingIfNeeded: time)) + packet
        }
        try Data(bytes).write(to: capture)
        let run = try await DoctorCLI.run(["import-btsnoop", capture.path, "--out", out.path, "--quiet"])
        #expect(run.status == 70, "\(run.stderr)")
        #expect(run.stderr.contains("would be larger than the 16 MiB the simulator loads; nothing written"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out.path))
    }
}
