import Foundation

@testable import BLEParsing
import Vocabulary

/// Builds btsnoop files and HCI packets for the capture tests and the
/// committed fixtures. Lengths are computed; the layouts are the ones cited
/// in each function (btsnoop: Frontline BTSnoop file format; HCI/L2CAP/ATT:
/// Bluetooth Core v5.4).
enum Snoop {
    static func be32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: v >> (24 - 8 * UInt32($0))) } }
    static func be64(_ v: Int64) -> [UInt8] {
        let u = UInt64(bitPattern: v)
        return (0..<8).map { UInt8(truncatingIfNeeded: u >> (56 - 8 * UInt64($0))) }
    }
    static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    /// 2024-06-01T12:00:00Z as a btsnoop timestamp (µs since 0 AD).
    static let t0: Int64 = Btsnoop.unixEpochTimestamp + 1_717_243_200 * 1_000_000

    /// "btsnoop\0", version 1, datalink.
    static func header(_ datalink: UInt32) -> [UInt8] { Btsnoop.magic + be32(1) + be32(datalink) }

    /// original length, included length, flags, cumulative drops, timestamp, data.
    static func record(_ data: [UInt8], flags: UInt32, at timestamp: Int64 = t0, original: UInt32? = nil, drops: UInt32 = 0) -> [UInt8] {
        be32(original ?? UInt32(data.count)) + be32(UInt32(data.count)) + be32(flags) + be32(drops) + be64(timestamp) + data
    }

    // MARK: HCI packets (Vol 4 Part E §5.4)

    /// `Opcode (2) | Parameter_Total_Length (1) | parameters`.
    static func command(_ opcode: UInt16, _ parameters: [UInt8] = []) -> [UInt8] {
        le16(opcode) + [UInt8(parameters.count)] + parameters
    }
    /// `Event_Code (1) | Parameter_Total_Length (1) | parameters`.
    static func event(_ code: UInt8, _ parameters: [UInt8]) -> [UInt8] { [code, UInt8(parameters.count)] + parameters }
    /// LE Meta event (0x3E) with a subevent code.
    static func leMeta(_ subevent: UInt8, _ parameters: [UInt8]) -> [UInt8] { event(0x3E, [subevent] + parameters) }
    /// `Handle | PB << 12 | BC << 14 (2) | Data_Total_Length (2) | data`.
    static func acl(handle: UInt16, pb: UInt16, _ data: [UInt8]) -> [UInt8] {
        le16(handle | pb << 12) + le16(UInt16(data.count)) + data
    }
    /// L2CAP basic frame: `Length (2) | CID (2) | payload` (Vol 3 Part A §3.1).
    static func l2cap(_ cid: UInt16, _ payload: [UInt8]) -> [UInt8] { le16(UInt16(payload.count)) + le16(cid) + payload }

    /// One legacy LE Advertising Report (§7.7.65.2) in an LE Meta event.
    static func advertisingReport(type: UInt8 = 0x00, addressType: UInt8, address: String, data: [UInt8], rssi: Int8) -> [UInt8] {
        leMeta(0x02, [1, type, addressType] + air(address) + [UInt8(data.count)] + data + [UInt8(bitPattern: rssi)])
    }

    /// One LE Extended Advertising Report (§7.7.65.13) in an LE Meta event.
    static func extendedReport(eventType: UInt16, addressType: UInt8, address: String, sid: UInt8 = 0x01, txPower: Int8 = 127,
                               rssi: Int8, data: [UInt8]) -> [UInt8] {
        leMeta(0x0D, [1] + le16(eventType) + [addressType] + air(address) + [0x01, 0x00, sid, UInt8(bitPattern: txPower),
                                                                               UInt8(bitPattern: rssi)]
                   + le16(0) + [0x00] + [0, 0, 0, 0, 0, 0] + [UInt8(data.count)] + data)
    }

    /// Air-order (little-endian) bytes of "AA:BB:CC:DD:EE:FF".
    static func air(_ address: String) -> [UInt8] {
        address.split(separator: ":").compactMap { UInt8($0, radix: 16) }.reversed()
    }

    static func address(_ text: String) -> BluetoothAddress {
        (try? BluetoothAddress(text)) ?? BluetoothAddress(value: 0)
    }

    static func hex(_ text: String) -> [UInt8] { (try? parseHex(text)) ?? [] }

    // MARK: Reading

    /// Record boundaries of a well-formed file: (start offset, data offset, included length).
    static func boundaries(_ bytes: [UInt8]) throws -> [(start: Int, data: Int, length: Int)] {
        var reader = try BtsnoopReader(bytes)
        var out: [(Int, Int, Int)] = []
        while let r = try reader.next() { out.append((r.offset, r.dataOffset, r.data.count)) }
        return out
    }

    static let repositoryRoot: URL = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }()

    static let capturesDirectory = repositoryRoot.appendingPathComponent("fixtures/captures")
}

/// Runs `body` and returns the CaptureError it throws (nil when it does not throw).
func captureError(_ body: () throws(CaptureError) -> Void) -> CaptureError? {
    do {
        try body()
        return nil
    } catch {
        return error
    }
}

/// Reads every record of `bytes`; the error if the file is not readable.
func readAll(_ bytes: [UInt8]) -> (records: [BtsnoopRecord], error: CaptureError?) {
    var records: [BtsnoopRecord] = []
    do {
        var reader = try BtsnoopReader(bytes)
        while let r = try reader.next() { records.append(r) }
        return (records, nil)
    } catch {
        return (records, error)
    }
}
