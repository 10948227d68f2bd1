import Testing

@testable import BLEParsing

/// Deterministic garbage into the capture parser: flipped bytes in the
/// fixtures and random packets into each decoder must give a timeline or a
/// typed error whose position lies inside the input — never a trap.
@Suite("Capture: robustness")
struct CaptureRobustnessTests {
    @Test("flipped bytes in a fixture", arguments: CaptureFixtures.all.map(\.name))
    func flippedBytes(_ name: String) {
        let original = CaptureFixtures.all.first { $0.name == name }?.bytes ?? []
        var rng = SeededGenerator(seed: UInt64(original.count))
        var timelines = 0
        var errors = 0
        for _ in 0..<300 {
            var bytes = original
            for _ in 0..<(1 + Int(rng.next() % 4)) {
                let i = Int(rng.next() % UInt64(bytes.count))
                bytes[i] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
            }
            do {
                let t = try CaptureAnalyzer.analyze(bytes)
                timelines += 1
                #expect(t.recordCount > 0)
                #expect(t.malformedPackets.allSatisfy { $0.offset >= 16 && $0.offset < bytes.count })
            } catch {
                errors += 1
                #expect(error.offset >= 0 && error.offset <= bytes.count, "\(error)")
                #expect(error.record.map { $0 >= 1 } ?? true)
            }
        }
        #expect(timelines + errors == 300)
        #expect(timelines > 0)
    }

    @Test func randomPacketsThroughEveryDatalink() {
        var rng = SeededGenerator(seed: 8)
        var decoded = 0
        for n in 0..<3000 {
            let length = Int(rng.next() % 48)
            var data = [UInt8](repeating: 0, count: length)
            for i in 0..<length { data[i] = UInt8(truncatingIfNeeded: rng.next()) }
            // Mostly well-formed headers, so the inner decoders see the garbage.
            if length >= 3, n % 2 == 0 {
                data[0] = [0x04, 0x02, 0x01][n % 3]
                if data[0] == 0x04 { data[1] = [0x3E, 0x05, 0x0E][n % 3]; data[2] = UInt8(length - 3) }
                if data[0] == 0x02, length >= 5 { data[3] = UInt8(length - 5); data[4] = 0 }
            }
            let record = BtsnoopRecord(number: n + 1, offset: 16, originalLength: UInt32(length), flags: UInt32(rng.next() % 6),
                                       cumulativeDrops: 0, timestamp: Snoop.t0, data: data[...])
            for datalink in [BtsnoopDatalink.hciUART, .hciUnencapsulated, .linuxMonitor] {
                var analyzer = CaptureAnalyzer(datalink: datalink)
                analyzer.add(record)
                let t = analyzer.finish()
                #expect(t.recordCount == 1)
                if t.malformedCount == 0 { decoded += 1 }
                for issue in t.malformedPackets {
                    #expect(issue.error.offset.map { $0 >= 0 && $0 <= length } ?? true, "\(issue)")
                }
            }
        }
        #expect(decoded > 0)
    }

    @Test func randomATTPDUs() {
        var rng = SeededGenerator(seed: 4)
        var ok = 0
        for _ in 0..<5000 {
            let length = 1 + Int(rng.next() % 30)
            var pdu = [UInt8](repeating: 0, count: length)
            for i in 0..<length { pdu[i] = UInt8(truncatingIfNeeded: rng.next()) }
            pdu[0] = [0x01, 0x05, 0x07, 0x09, 0x0B, 0x11, 0x1B, 0x23, 0xD2, 0x08][Int(rng.next() % 10)]
            do {
                _ = try ATTPDU.decode(pdu)
                ok += 1
            } catch {
                #expect(error.offset.map { $0 >= 0 && $0 <= length } ?? true, "\(error)")
            }
        }
        #expect(ok > 0)
    }
}
