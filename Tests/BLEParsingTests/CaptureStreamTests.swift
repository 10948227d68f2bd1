import Foundation
import Testing

@testable import BLEParsing

/// `BtsnoopStream` reads a capture in pieces: whatever the piece size, it
/// must give the records and the errors the whole-file reader gives, with
/// the same record numbers and file offsets.
@Suite("Capture: btsnoop read as it arrives")
struct CaptureStreamTests {
    struct Seen: Equatable {
        var number, offset: Int
        var flags, drops, original: UInt32
        var timestamp: Int64
        var data: [UInt8]
        init(_ r: BtsnoopRecord) {
            (number, offset, flags, drops, original, timestamp, data) =
                (r.number, r.offset, r.flags, r.cumulativeDrops, r.originalLength, r.timestamp, Array(r.data))
        }
    }

    /// Feeds `bytes` in pieces of `size`; the records and the error.
    static func stream(_ bytes: [UInt8], pieces size: Int) -> (records: [Seen], error: CaptureError?) {
        var stream = BtsnoopStream()
        var records: [Seen] = []
        do throws(CaptureError) {
            var at = 0
            while at < bytes.count {
                stream.append(bytes[at..<min(at + size, bytes.count)])
                at += size
                while let r = try stream.next() { records.append(Seen(r)) }
            }
            try stream.finish()
            return (records, nil)
        } catch {
            return (records, error)
        }
    }

    static func fixtures() throws -> [[UInt8]] {
        try FileManager.default.contentsOfDirectory(atPath: Snoop.capturesDirectory.path)
            .filter { $0.hasSuffix(".btsnoop") }.sorted()
            .map { Array(try Data(contentsOf: Snoop.capturesDirectory.appendingPathComponent($0))) }
    }

    @Test(arguments: [1, 7, 24, 25, 4096, 1 << 20])
    func everyFixtureGivesTheReadersRecordsWhateverThePieceSize(size: Int) throws {
        let files = try Self.fixtures()
        #expect(files.count >= 3)
        for bytes in files {
            let whole = readAll(bytes)
            #expect(whole.error == nil)
            let streamed = Self.stream(bytes, pieces: size)
            #expect(streamed.error == nil)
            #expect(streamed.records == whole.records.map(Seen.init))
            #expect(!streamed.records.isEmpty)
        }
    }

    /// Cut anywhere, corrupted anywhere: the same error as the whole-file
    /// reader, and the same records before it.
    @Test func cutOrCorruptFilesGiveTheReadersErrors() throws {
        let bytes = try #require(try Self.fixtures().first)
        var cases: [[UInt8]] = (0..<min(bytes.count, 400)).map { Array(bytes.prefix($0)) }
        for at in stride(from: 0, to: min(bytes.count, 600), by: 3) {
            var bad = bytes
            bad[at] ^= 0xA5
            cases.append(bad)
        }
        var errors = 0
        for file in cases {
            let whole = readAll(file)
            for size in [1, 5, 64] {
                let streamed = Self.stream(file, pieces: size)
                #expect(streamed.error == whole.error, "\(file.count) bytes, pieces of \(size)")
                #expect(streamed.records == whole.records.map(Seen.init))
            }
            if whole.error != nil { errors += 1 }
        }
        #expect(errors > 400)
    }

    /// Something that is plainly not btsnoop is refused at its first bytes,
    /// not after the whole file has been read.
    @Test func notBtsnoopIsRefusedAtOnce() {
        var stream = BtsnoopStream()
        stream.append(Array("PK\u{03}\u{04}\u{14}\u{00}\u{00}\u{00}".utf8))
        let error = captureError { () throws(CaptureError) in _ = try stream.next() }
        #expect(error?.kind == .badMagic)
    }

    /// Memory stays about one piece: the stream drops what it has returned.
    /// A file of 200 000 records read in 64 KiB pieces never holds more than
    /// a few pieces.
    @Test func onlyTheUnreadPartIsKept() throws {
        let record = try #require(try readAll(Self.fixtures()[0]).records.first)
        var one: [UInt8] = []
        one += withUnsafeBytes(of: record.originalLength.bigEndian, Array.init)
        one += withUnsafeBytes(of: UInt32(record.data.count).bigEndian, Array.init)
        one += withUnsafeBytes(of: record.flags.bigEndian, Array.init)
        one += withUnsafeBytes(of: UInt32(0).bigEndian, Array.init)
        one += withUnsafeBytes(of: record.timestamp.bigEndian, Array.init)
        one += Array(record.data)
        let header = Array(try Self.fixtures()[0].prefix(16))
        var stream = BtsnoopStream()
        stream.append(header)
        var piece: [UInt8] = []
        var count = 0, largest = 0
        for _ in 0..<200_000 {
            piece += one
            if piece.count >= 65_536 {
                stream.append(piece)
                piece.removeAll(keepingCapacity: true)
                while try stream.next() != nil { count += 1 }
                largest = max(largest, stream.bufferedBytes)
            }
        }
        stream.append(piece)
        while try stream.next() != nil { count += 1 }
        try stream.finish()
        #expect(count == 200_000)
        #expect(largest <= 4 * 65_536 + one.count, "held \(largest) bytes")
    }
}
