/// The btsnoop capture file format (bytes in, records out; no I/O).
///
/// Layout (every integer big-endian):
///
///     file header (16 bytes)
///       0  identification pattern  "btsnoop\0" (62 74 73 6E 6F 6F 70 00)
///       8  version number          uint32, 1
///      12  datalink type           uint32 (BtsnoopDatalink)
///     packet record (24 bytes + included length), repeated to the end of the file
///       0  original length         uint32, length of the packet as captured
///       4  included length         uint32, bytes of it stored in this record (≤ original)
///       8  packet flags            uint32 (meaning depends on the datalink)
///      12  cumulative drops        uint32
///      16  timestamp               int64, microseconds since midnight 1 January 0 AD
///      24  packet data             included-length bytes
///
/// Sources: the BTSnoop file format description (Frontline/Teledyne LeCroy,
/// derived from RFC 1761 snoop), and BlueZ's `src/shared/btsnoop.h` for the
/// datalink codes 2001 (Linux monitor, what `btmon -w` writes: flags =
/// controller index << 16 | monitor opcode) and 2002 (simulator).
public enum Btsnoop {
    /// "btsnoop\0".
    public static let magic: [UInt8] = [0x62, 0x74, 0x73, 0x6E, 0x6F, 0x6F, 0x70, 0x00]
    public static let headerSize = 16
    public static let recordHeaderSize = 24
    /// Microseconds from 0 AD to 1970-01-01T00:00:00Z (the btsnoop timestamp of the Unix epoch).
    public static let unixEpochTimestamp: Int64 = 0x00DC_DDB3_0F2F_8000
    /// The longest packet any supported datalink can carry: an H4 packet type
    /// byte + the 4-byte ACL header + 65535 bytes of ACL data. A record
    /// claiming more than this is corrupt, not a big packet.
    public static let maxPacketLength = 1 + 4 + 65535
}

/// The datalink type of a btsnoop file: what each record's data is.
public enum BtsnoopDatalink: UInt32, Sendable, CaseIterable, CustomStringConvertible {
    /// 1001: HCI packets without a packet type byte; the flags say which (bit 1: command/event, bit 0: direction).
    case hciUnencapsulated = 1001
    /// 1002: HCI UART (H4): a packet type byte, then the packet. Android's HCI snoop log.
    case hciUART = 1002
    /// 1003: HCI BCSP.
    case hciBCSP = 1003
    /// 1004: HCI Three-wire UART (H5).
    case hciThreeWire = 1004
    /// 2001: Linux monitor (BlueZ `btmon -w`): flags = controller index << 16 | opcode.
    case linuxMonitor = 2001
    /// 2002: BlueZ simulator (PHY frames).
    case simulator = 2002

    /// Whether records of this datalink can be read as HCI packets here.
    public var isSupported: Bool {
        switch self {
        case .hciUnencapsulated, .hciUART, .linuxMonitor: return true
        case .hciBCSP, .hciThreeWire, .simulator: return false
        }
    }

    public var description: String {
        switch self {
        case .hciUnencapsulated: return "HCI unencapsulated (H1, 1001)"
        case .hciUART: return "HCI UART (H4, 1002)"
        case .hciBCSP: return "HCI BCSP (1003)"
        case .hciThreeWire: return "HCI three-wire UART (H5, 1004)"
        case .linuxMonitor: return "Linux monitor (btmon, 2001)"
        case .simulator: return "BlueZ simulator (2002)"
        }
    }
}

/// A capture file that cannot be read: which record (1-based, as btmon and
/// Wireshark number them; `nil` for the file header), the byte offset in the
/// file where the bad field starts, and why.
///
///     btsnoop record 3 at byte offset 88: truncated: expected 24 bytes of record header, found 10
public struct CaptureError: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: String, Equatable, Hashable, Sendable {
        /// The file does not start with "btsnoop\0".
        case badMagic = "bad_magic"
        /// A version other than 1.
        case unsupportedVersion = "unsupported_version"
        /// A datalink type this reader cannot turn into HCI packets.
        case unsupportedDatalink = "unsupported_datalink"
        /// The file ends inside the header or a record.
        case truncated
        /// A record's lengths are impossible (included > original, or longer than any HCI packet).
        case corruptRecord = "corrupt_record"
    }

    public var kind: Kind
    /// 1-based record number; nil when the problem is in the file header.
    public var record: Int?
    /// Byte offset in the file of the field that is wrong (or where the data ran out).
    public var offset: Int
    public var expected: String
    public var found: String

    public init(kind: Kind, record: Int?, offset: Int, expected: String, found: String) {
        self.kind = kind
        self.record = record
        self.offset = offset
        self.expected = expected
        self.found = found
    }

    public var description: String {
        let place = record.map { "btsnoop record \($0)" } ?? "btsnoop header"
        let what: String
        switch kind {
        case .badMagic: what = "not a btsnoop file"
        case .unsupportedVersion: what = "unsupported version"
        case .unsupportedDatalink: what = "unsupported datalink"
        case .truncated: what = "truncated"
        case .corruptRecord: what = "corrupt record"
        }
        return "\(place) at byte offset \(offset): \(what): expected \(expected), found \(found)"
    }
}

/// One packet record of a btsnoop file.
public struct BtsnoopRecord: Sendable {
    /// 1-based position in the file.
    public let number: Int
    /// Byte offset of the record header in the file.
    public let offset: Int
    public let originalLength: UInt32
    public let flags: UInt32
    public let cumulativeDrops: UInt32
    /// Microseconds since midnight 1 January 0 AD, as stored.
    public let timestamp: Int64
    /// The included bytes: a slice of what was read (of the file for
    /// ``BtsnoopReader``); its indices are not file offsets, ``dataOffset`` is.
    public let data: ArraySlice<UInt8>

    /// Byte offset of the packet data in the file.
    public var dataOffset: Int { offset + Btsnoop.recordHeaderSize }
    /// The record holds fewer bytes than the packet had (snap length).
    public var isTruncated: Bool { UInt32(data.count) < originalLength }
    /// Microseconds since the Unix epoch.
    public var unixMicroseconds: Int64 { timestamp &- Btsnoop.unixEpochTimestamp }
}

/// Reads the header, then hands out records one at a time.
///
///     var reader = try BtsnoopReader(bytes)
///     while let record = try reader.next() { … }
///
/// Every error names the record and the file offset (``CaptureError``).
public struct BtsnoopReader: Sendable {
    public let bytes: [UInt8]
    public let version: UInt32
    public let datalink: BtsnoopDatalink
    /// Offset of the next record header.
    public private(set) var offset: Int
    /// Number of records returned so far.
    public private(set) var recordCount = 0

    /// Checks the 16-byte header. Only datalinks that carry HCI packets
    /// (1001, 1002, 2001) are accepted.
    public init(_ bytes: [UInt8]) throws(CaptureError) {
        self.bytes = bytes
        (version, datalink) = try BtsnoopReader.header(bytes)
        self.offset = Btsnoop.headerSize
    }

    /// The file header's version and datalink; `bytes` is the file from its
    /// start (all of it, or at least the header).
    static func header(_ bytes: [UInt8]) throws(CaptureError) -> (UInt32, BtsnoopDatalink) {
        if bytes.count < Btsnoop.headerSize {
            // Say "bad magic" when what is there already differs from it.
            let prefix = bytes.prefix(Btsnoop.magic.count)
            if !Btsnoop.magic.starts(with: prefix) {
                throw CaptureError(kind: .badMagic, record: nil, offset: 0, expected: "\"btsnoop\\0\"",
                                   found: hexString(bytes: prefix))
            }
            throw CaptureError(kind: .truncated, record: nil, offset: bytes.count,
                               expected: "a 16-byte file header", found: "\(bytes.count) bytes")
        }
        guard bytes[0..<8].elementsEqual(Btsnoop.magic) else {
            throw CaptureError(kind: .badMagic, record: nil, offset: 0, expected: "\"btsnoop\\0\"",
                               found: hexString(bytes: bytes[0..<8]))
        }
        let version = BtsnoopReader.u32(bytes, 8)
        guard version == 1 else {
            throw CaptureError(kind: .unsupportedVersion, record: nil, offset: 8, expected: "version 1", found: "\(version)")
        }
        let code = BtsnoopReader.u32(bytes, 12)
        guard let datalink = BtsnoopDatalink(rawValue: code) else {
            throw CaptureError(kind: .unsupportedDatalink, record: nil, offset: 12,
                               expected: "1001 (HCI), 1002 (H4 UART) or 2001 (Linux monitor)", found: "\(code)")
        }
        guard datalink.isSupported else {
            throw CaptureError(kind: .unsupportedDatalink, record: nil, offset: 12,
                               expected: "1001 (HCI), 1002 (H4 UART) or 2001 (Linux monitor)", found: "\(datalink)")
        }
        return (version, datalink)
    }

    /// The next record, or nil at the end of the file.
    public mutating func next() throws(CaptureError) -> BtsnoopRecord? {
        guard offset < bytes.count else { return nil }
        guard let (record, end) = try BtsnoopReader.record(in: bytes, at: offset, fileOffset: offset, number: recordCount + 1,
                                                          atEndOfFile: true)
        else { return nil }
        offset = end
        recordCount = record.number
        return record
    }

    /// The record starting at `bytes[start]` (file offset `fileOffset`) and
    /// the index just after it; nil when `bytes` ends inside it and more may
    /// come (`atEndOfFile` false). At the end of the file that is an error,
    /// as is a record whose lengths are impossible (known from its header alone).
    static func record(in bytes: [UInt8], at start: Int, fileOffset: Int, number: Int,
                       atEndOfFile: Bool) throws(CaptureError) -> (BtsnoopRecord, Int)? {
        let remaining = bytes.count - start
        guard remaining >= Btsnoop.recordHeaderSize else {
            guard atEndOfFile else { return nil }
            throw CaptureError(kind: .truncated, record: number, offset: fileOffset,
                               expected: "\(Btsnoop.recordHeaderSize) bytes of record header", found: "\(remaining)")
        }
        let original = BtsnoopReader.u32(bytes, start)
        let included = BtsnoopReader.u32(bytes, start + 4)
        let flags = BtsnoopReader.u32(bytes, start + 8)
        let drops = BtsnoopReader.u32(bytes, start + 12)
        let timestamp = Int64(bitPattern: UInt64(BtsnoopReader.u32(bytes, start + 16)) << 32
                              | UInt64(BtsnoopReader.u32(bytes, start + 20)))
        guard original <= UInt32(Btsnoop.maxPacketLength) else {
            throw CaptureError(kind: .corruptRecord, record: number, offset: fileOffset,
                               expected: "an original length of at most \(Btsnoop.maxPacketLength)", found: "\(original)")
        }
        guard included <= original else {
            throw CaptureError(kind: .corruptRecord, record: number, offset: fileOffset + 4,
                               expected: "an included length of at most the original length \(original)", found: "\(included)")
        }
        let dataStart = start + Btsnoop.recordHeaderSize
        let available = bytes.count - dataStart
        guard Int(included) <= available else {
            guard atEndOfFile else { return nil }
            throw CaptureError(kind: .truncated, record: number, offset: fileOffset + Btsnoop.recordHeaderSize,
                               expected: "\(included) bytes of packet data", found: "\(available)")
        }
        let end = dataStart + Int(included)
        let record = BtsnoopRecord(number: number, offset: fileOffset, originalLength: original, flags: flags,
                                   cumulativeDrops: drops, timestamp: timestamp, data: bytes[dataStart..<end])
        return (record, end)
    }

    /// Big-endian uint32 at `i`; callers have checked the length.
    private static func u32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }
}

/// Writes the btsnoop format, bytes out (no I/O): the file header, then one
/// record per packet. With ``BtsnoopDatalink`` 2001 (Linux monitor, as
/// `btmon -w` writes) a record's flags are `index << 16 | opcode`.
public enum BtsnoopWriter {
    /// The 16-byte file header: magic, version 1, datalink.
    public static func header(datalink: BtsnoopDatalink) -> [UInt8] {
        var out = Btsnoop.magic
        out += bigEndian(UInt32(1))
        out += bigEndian(datalink.rawValue)
        return out
    }

    /// One record: original and included length (equal: nothing is cut),
    /// flags, cumulative drops, timestamp (µs since the Unix epoch, stored
    /// as µs since year 0 like every btsnoop file), then the packet.
    public static func record(_ packet: [UInt8], flags: UInt32, drops: UInt32 = 0, unixMicroseconds: Int64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Btsnoop.recordHeaderSize + packet.count)
        let length = UInt32(truncatingIfNeeded: packet.count)
        out += bigEndian(length)
        out += bigEndian(length)
        out += bigEndian(flags)
        out += bigEndian(drops)
        out += bigEndian(UInt64(bitPattern: unixMicroseconds &+ Btsnoop.unixEpochTimestamp))
        out += packet
        return out
    }

    /// The monitor-datalink flags for a packet of `opcode` on controller `index`.
    public static func monitorFlags(opcode: UInt16, index: UInt16) -> UInt32 {
        UInt32(index) << 16 | UInt32(opcode)
    }

    private static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }
}

/// The btsnoop format read as it arrives: bytes are appended in pieces of
/// any size (a file read a block at a time), records come out as soon as
/// they are whole, and only the unread part is kept, so memory is one block
/// plus one record whatever the size of the file. The checks and errors are
/// ``BtsnoopReader``'s, with the same record numbers and file offsets.
///
///     var stream = BtsnoopStream()
///     while let block = read() {
///         stream.append(block)
///         while let record = try stream.next() { … }
///     }
///     try stream.finish()   // the file ended inside a record: an error
public struct BtsnoopStream: Sendable {
    /// Bytes read and not yet returned as records, from ``start``.
    private var buffer: [UInt8] = []
    private var start = 0
    /// File offset of `buffer[0]`.
    private var base = 0
    /// Known once the 16-byte header has arrived (``next()`` checks it).
    public private(set) var datalink: BtsnoopDatalink?
    /// Number of records returned so far.
    public private(set) var recordCount = 0

    public init() {}

    /// Bytes held: read and not yet returned, plus returned ones not yet dropped.
    public var bufferedBytes: Int { buffer.count }

    /// Adds the next bytes of the file.
    public mutating func append(_ bytes: some Collection<UInt8>) {
        // Drop what has been returned once it is most of the buffer, so the
        // buffer stays about one block long without copying on every call.
        if start > 0, start >= buffer.count - start {
            buffer.removeFirst(start)
            base += start
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next whole record, or nil until more bytes are appended. Throws
    /// for a bad header or a record whose lengths are impossible.
    public mutating func next() throws(CaptureError) -> BtsnoopRecord? {
        if datalink == nil {
            guard buffer.count >= Btsnoop.headerSize else {
                // Refuse something that is plainly not btsnoop at once (with
                // the 8 bytes the whole-file reader would show).
                if buffer.count >= Btsnoop.magic.count, !buffer.starts(with: Btsnoop.magic) {
                    _ = try BtsnoopReader.header(buffer)
                }
                return nil
            }
            datalink = try BtsnoopReader.header(buffer).1
            start = Btsnoop.headerSize
        }
        guard start < buffer.count,
              let (record, end) = try BtsnoopReader.record(in: buffer, at: start, fileOffset: base + start,
                                                          number: recordCount + 1, atEndOfFile: false)
        else { return nil }
        start = end
        recordCount = record.number
        // A copy, so that a record kept by the caller does not keep the buffer.
        return BtsnoopRecord(number: record.number, offset: record.offset, originalLength: record.originalLength,
                             flags: record.flags, cumulativeDrops: record.cumulativeDrops, timestamp: record.timestamp,
                             data: ArraySlice(Array(record.data)))
    }

    /// The file has ended: throws if it ended inside the header or a record
    /// (call after ``next()`` has returned nil).
    public func finish() throws(CaptureError) {
        guard let _ = datalink else {
            _ = try BtsnoopReader.header(buffer)
            return
        }
        guard start < buffer.count else { return }
        _ = try BtsnoopReader.record(in: buffer, at: start, fileOffset: base + start, number: recordCount + 1, atEndOfFile: true)
    }
}
