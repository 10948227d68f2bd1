import Foundation
import Testing

@testable import BLEParsing

/// The committed fixtures/captures files: equal to their generator, readable
/// to the end, and — cut anywhere near a record boundary — an error that
/// names the right record and byte offset.
@Suite("Capture: fixtures")
struct CaptureFixtureTests {
    static let names = CaptureFixtures.all.map(\.name)

    static func generated(_ name: String) -> [UInt8] {
        CaptureFixtures.all.first { $0.name == name }?.bytes ?? []
    }

    @Test("committed file equals the generator", arguments: names)
    func committedMatchesGenerator(_ name: String) throws {
        let url = Snoop.capturesDirectory.appendingPathComponent(name)
        let bytes = Self.generated(name)
        if ProcessInfo.processInfo.environment["RECORD_CAPTURE_FIXTURES"] == "1" {
            try FileManager.default.createDirectory(at: Snoop.capturesDirectory, withIntermediateDirectories: true)
            try Data(bytes).write(to: url)
        }
        let stored = try Data(contentsOf: url)
        #expect(Array(stored) == bytes, "\(name) differs from CaptureFixtures (RECORD_CAPTURE_FIXTURES=1 rewrites it)")
    }

    @Test("every record reads", arguments: names)
    func readsToTheEnd(_ name: String) throws {
        let (records, error) = readAll(Self.generated(name))
        #expect(error == nil)
        #expect(records.count >= 5)
        #expect(records.map(\.number) == Array(1...records.count))
    }

    /// Cutting the file at each record's first byte ends the file cleanly
    /// after the record before; one byte later the record header is cut
    /// (error at the record's offset); one byte earlier the record before is
    /// cut in its data (or its header, when it has no data).
    @Test("cut at every record boundary ±1", arguments: names)
    func truncatedAtEveryBoundary(_ name: String) throws {
        let bytes = Self.generated(name)
        let records = try Snoop.boundaries(bytes)
        var starts = records.map(\.start)
        starts.append(bytes.count)  // the end of the file is a boundary too
        for (k, start) in starts.enumerated() {
            // Exactly at the boundary: k records, no error.
            let clean = readAll(Array(bytes.prefix(start)))
            #expect(clean.error == nil, "\(name) cut at \(start)")
            #expect(clean.records.count == k, "\(name) cut at \(start)")

            // One byte into record k+1's header.
            if k < records.count {
                let (_, error) = readAll(Array(bytes.prefix(start + 1)))
                #expect(error?.kind == .truncated)
                #expect(error?.record == k + 1, "\(name) cut at \(start + 1)")
                #expect(error?.offset == start, "\(name) cut at \(start + 1)")
                #expect(error?.found == "1")
            }

            // One byte before the boundary: the previous record (or the file header) is short.
            let (_, error) = readAll(Array(bytes.prefix(start - 1)))
            #expect(error?.kind == .truncated, "\(name) cut at \(start - 1)")
            if k == 0 {
                #expect(error?.record == nil)
                #expect(error?.offset == Btsnoop.headerSize - 1)
            } else {
                let previous = records[k - 1]
                #expect(error?.record == k, "\(name) cut at \(start - 1)")
                if previous.length > 0 {
                    #expect(error?.offset == previous.data, "\(name) cut at \(start - 1)")
                    #expect(error?.found == "\(previous.length - 1)")
                } else {
                    #expect(error?.offset == previous.start, "\(name) cut at \(start - 1)")
                    #expect(error?.found == "23")
                }
            }
        }
    }

    @Test("flipping a length byte makes the record corrupt or the next one misplaced", arguments: names)
    func corruptLength(_ name: String) throws {
        var bytes = Self.generated(name)
        let records = try Snoop.boundaries(bytes)
        let second = try #require(records.dropFirst().first)
        bytes[second.start + 4] = 0xFF  // included length 0xFF0000xx > original
        let (read, error) = readAll(bytes)
        #expect(read.count == 1)
        #expect(error?.kind == .corruptRecord)
        #expect(error?.record == 2)
        #expect(error?.offset == second.start + 4)
    }
}
