import Testing

@testable import BLEParsing

/// The btsnoop file framing: header, records, and the errors for files that
/// are not btsnoop, use an unsupported datalink, end early or are corrupt.
/// Layout: Frontline "BTSnoop File Format" (RFC 1761 derived); datalink 2001
/// and its flags: BlueZ src/shared/btsnoop.h (flags = index << 16 | opcode).
@Suite("Capture: btsnoop file")
struct CaptureBtsnoopTests {
    /// A btmon-style file: header + one Disconnection Complete event record.
    static let literalFile: [UInt8] = [
        0x62, 0x74, 0x73, 0x6E, 0x6F, 0x6F, 0x70, 0x00,  // "btsnoop\0"
        0x00, 0x00, 0x00, 0x01,  // version 1
        0x00, 0x00, 0x07, 0xD1,  // datalink 2001 (Linux monitor)
        0x00, 0x00, 0x00, 0x06,  // original length 6
        0x00, 0x00, 0x00, 0x06,  // included length 6
        0x00, 0x00, 0x00, 0x03,  // flags: controller 0, opcode 3 (event)
        0x00, 0x00, 0x00, 0x02,  // cumulative drops 2
        0x00, 0xE2, 0xF7, 0x85, 0xE6, 0x1D, 0x50, 0x00,  // 2024-06-01T12:00:00Z in µs since 0 AD
        0x05, 0x04, 0x00, 0x40, 0x00, 0x13,  // Disconnection Complete: status 0, handle 0x0040, reason 0x13
    ]

    @Test func headerAndRecordFields() throws {
        var reader = try BtsnoopReader(Self.literalFile)
        #expect(reader.version == 1)
        #expect(reader.datalink == .linuxMonitor)
        let record = try #require(try reader.next())
        #expect(record.number == 1)
        #expect(record.offset == 16)
        #expect(record.dataOffset == 40)
        #expect(record.originalLength == 6)
        #expect(record.flags == 3)
        #expect(record.cumulativeDrops == 2)
        #expect(record.timestamp == 0x00E2_F785_E61D_5000)
        #expect(record.unixMicroseconds == 1_717_243_200_000_000)
        #expect(!record.isTruncated)
        #expect(Array(record.data) == [0x05, 0x04, 0x00, 0x40, 0x00, 0x13])
        #expect(try reader.next() == nil)
        #expect(reader.recordCount == 1)
    }

    @Test func epochConstantIsTheUnixEpoch() {
        // 0x00E03AB44A676000 is 2000-01-01 (BlueZ btsnoop.c); 946684800 s later than 1970-01-01.
        #expect(Btsnoop.unixEpochTimestamp == 0x00E0_3AB4_4A67_6000 - 946_684_800 * 1_000_000)
    }

    @Test func headerOnlyHasNoRecords() throws {
        var reader = try BtsnoopReader(Array(Self.literalFile.prefix(16)))
        #expect(try reader.next() == nil)
    }

    @Test func badMagic() {
        var bytes = Self.literalFile
        bytes[3] = 0x70  // "btspoop"
        let error = captureError { () throws(CaptureError) in _ = try BtsnoopReader(bytes) }
        #expect(error?.kind == .badMagic)
        #expect(error?.record == nil)
        #expect(error?.offset == 0)
        #expect(error?.found == "627473706f6f7000")
    }

    @Test func shortFileThatIsNotBtsnoopIsBadMagic() {
        let error = captureError { () throws(CaptureError) in _ = try BtsnoopReader(Array("PK\u{03}\u{04}".utf8)) }
        #expect(error?.kind == .badMagic)
    }

    @Test func truncatedHeader() {
        let error = captureError { () throws(CaptureError) in _ = try BtsnoopReader(Array(Self.literalFile.prefix(10))) }
        #expect(error?.kind == .truncated)
        #expect(error?.record == nil)
        #expect(error?.offset == 10)
        #expect(error?.description == "btsnoop header at byte offset 10: truncated: expected a 16-byte file header, found 10 bytes")
    }

    @Test func unsupportedVersion() {
        var bytes = Self.literalFile
        bytes[11] = 2
        let error = captureError { () throws(CaptureError) in _ = try BtsnoopReader(bytes) }
        #expect(error?.kind == .unsupportedVersion)
        #expect(error?.offset == 8)
        #expect(error?.found == "2")
    }

    @Test("unsupported datalinks", arguments: [(UInt32(1003), "HCI BCSP (1003)"), (1004, "HCI three-wire UART (H5, 1004)"),
                                               (2002, "BlueZ simulator (2002)"), (201, "201")])
    func unsupportedDatalink(_ code: UInt32, _ found: String) {
        let bytes = Snoop.header(code) + Array(Self.literalFile[16...])
        let error = captureError { () throws(CaptureError) in _ = try BtsnoopReader(bytes) }
        #expect(error?.kind == .unsupportedDatalink)
        #expect(error?.offset == 12)
        #expect(error?.found == found)
    }

    @Test("supported datalinks", arguments: [UInt32(1001), 1002, 2001])
    func supportedDatalinks(_ code: UInt32) throws {
        let reader = try BtsnoopReader(Snoop.header(code))
        #expect(reader.datalink.rawValue == code)
    }

    @Test func includedLongerThanOriginalIsCorrupt() {
        var bytes = Self.literalFile
        bytes[19] = 5  // original 5 < included 6
        let error = captureError { () throws(CaptureError) in
            var reader = try BtsnoopReader(bytes)
            _ = try reader.next()
        }
        #expect(error?.kind == .corruptRecord)
        #expect(error?.record == 1)
        #expect(error?.offset == 20)
        #expect(error?.description == "btsnoop record 1 at byte offset 20: corrupt record: expected an included length of at most the original length 5, found 6")
    }

    @Test func impossibleOriginalLengthIsCorrupt() {
        var bytes = Self.literalFile
        bytes[17] = 0x01  // original 0x00010006 > 65540
        let error = captureError { () throws(CaptureError) in
            var reader = try BtsnoopReader(bytes)
            _ = try reader.next()
        }
        #expect(error?.kind == .corruptRecord)
        #expect(error?.record == 1)
        #expect(error?.offset == 16)
        #expect(error?.found == "65542")
    }

    @Test func truncatedRecordHeader() {
        let error = captureError { () throws(CaptureError) in
            var reader = try BtsnoopReader(Array(Self.literalFile.prefix(26)))
            _ = try reader.next()
        }
        #expect(error?.kind == .truncated)
        #expect(error?.record == 1)
        #expect(error?.offset == 16)
        #expect(error?.description == "btsnoop record 1 at byte offset 16: truncated: expected 24 bytes of record header, found 10")
    }

    @Test func truncatedRecordData() {
        let error = captureError { () throws(CaptureError) in
            var reader = try BtsnoopReader(Array(Self.literalFile.dropLast(2)))
            _ = try reader.next()
        }
        #expect(error?.kind == .truncated)
        #expect(error?.record == 1)
        #expect(error?.offset == 40)
        #expect(error?.expected == "6 bytes of packet data")
        #expect(error?.found == "4")
    }

    @Test func laterRecordsAreNumberedAndPlaced() {
        let second = Snoop.record([0x0E, 0x04, 0x01, 0x0C, 0x20, 0x00], flags: 3, at: Snoop.t0 + 5)
        let bytes = Self.literalFile + second + Array(second.prefix(28))
        let (records, error) = readAll(bytes)
        #expect(records.map(\.number) == [1, 2])
        #expect(records.map(\.offset) == [16, 46])
        #expect(records[1].timestamp - records[0].timestamp == 5)
        #expect(error?.record == 3)
        #expect(error?.offset == 46 + 30 + 24)
        #expect(error?.found == "4")
    }

    @Test func snapLengthRecordsAreMarkedTruncated() throws {
        let bytes = Snoop.header(2001) + Snoop.record([0x05, 0x04], flags: 3, original: 6)
        let (records, error) = readAll(bytes)
        #expect(error == nil)
        #expect(records.first?.isTruncated == true)
        #expect(records.first?.originalLength == 6)
    }
}

/// The writer `blecompanion capture` uses, against the hand-built layout and the reader.
@Suite struct BtsnoopWriterTests {
    @Test func headerAndRecordsMatchTheFormatAndReadBack() throws {
        #expect(BtsnoopWriter.header(datalink: .linuxMonitor) == Snoop.header(2001))
        let event = Snoop.leMeta(0x02, [0x01, 0x00, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x00, 0xC5])
        let unix = Snoop.t0 - Btsnoop.unixEpochTimestamp
        let flags = BtsnoopWriter.monitorFlags(opcode: 3, index: 1)
        #expect(flags == 0x0001_0003)
        let record = BtsnoopWriter.record(event, flags: flags, drops: 2, unixMicroseconds: unix)
        #expect(record == Snoop.record(event, flags: 0x0001_0003, drops: 2))
        var reader = try BtsnoopReader(BtsnoopWriter.header(datalink: .linuxMonitor) + record + record)
        #expect(reader.datalink == .linuxMonitor)
        let first = try #require(try reader.next())
        #expect(Array(first.data) == event)
        #expect(first.flags == flags)
        #expect(first.cumulativeDrops == 2)
        #expect(first.unixMicroseconds == unix)
        #expect(try reader.next() != nil)
        #expect(try reader.next() == nil)
    }
}
