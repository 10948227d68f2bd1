import Testing

@testable import BLEParsing

/// HCI packets from literal bytes laid out as Bluetooth Core v5.4 Vol 4
/// Part E describes them, read through each btsnoop datalink.
@Suite("Capture: HCI packets")
struct CaptureHCITests {
    static func record(_ data: [UInt8], flags: UInt32) -> BtsnoopRecord {
        BtsnoopRecord(number: 1, offset: 16, originalLength: UInt32(data.count), flags: flags, cumulativeDrops: 0,
                      timestamp: Snoop.t0, data: data[...])
    }

    static func event(_ bytes: [UInt8]) throws -> HCIEvent {
        let frame = try CaptureFrame.decode(record(bytes, flags: 3), datalink: .linuxMonitor)
        guard case let .event(code, parameters) = frame.packet else { throw DecodeError.unsupported(context: "test", what: "not an event") }
        return try HCIEvent.decode(code: code, parameters: parameters)
    }

    // MARK: LE Advertising Report (§7.7.65.2)

    /// BTHome v2 temperature 25.06 °C / humidity 50.55 % (bthome-ble
    /// test_bthome_temperature_humidity) from A4:C1:38:8D:18:B2.
    static let bthomeReport: [UInt8] = [
        0x3E, 0x1A,  // LE Meta, 26 parameter bytes
        0x02,  // Subevent_Code: LE Advertising Report
        0x01,  // Num_Reports
        0x00,  // Event_Type: ADV_IND
        0x00,  // Address_Type: public
        0xB2, 0x18, 0x8D, 0x38, 0xC1, 0xA4,  // Address, least significant byte first
        0x0E,  // Data_Length 14
        0x02, 0x01, 0x06,  // AD: Flags
        0x0A, 0x16, 0xD2, 0xFC, 0x40, 0x02, 0xCA, 0x09, 0x03, 0xBF, 0x13,  // AD: Service Data 0xFCD2
        0xC4,  // RSSI -60 dBm
    ]

    @Test func legacyAdvertisingReport() throws {
        let event = try Self.event(Self.bthomeReport)
        guard case let .advertisingReports(reports) = event else { Issue.record("got \(event)"); return }
        #expect(reports.count == 1)
        let r = try #require(reports.first)
        #expect(r.format == .legacy)
        #expect(r.address.description == "A4:C1:38:8D:18:B2")
        #expect(r.addressType == .publicDevice)
        #expect(r.rssi == -60)
        #expect(r.txPower == nil)
        #expect(r.isConnectable)
        #expect(!r.isScanResponse)
        #expect(r.dataStatus == .complete)
        #expect(r.data == Snoop.hex("020106 0a16d2fc4002ca0903bf13"))
    }

    @Test func twoReportsInOneEventAndRSSINotAvailable() throws {
        let bytes: [UInt8] = [
            0x3E, 0x1D, 0x02,
            0x02,  // Num_Reports 2; each report's fields follow one another
            0x03, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0xC0,  // ADV_NONCONN_IND, random, C0:00:00:00:00:01
            0x03, 0x02, 0x01, 0x04,  // Data_Length 3: Flags 0x04
            0xB0,  // RSSI -80
            0x04, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,  // SCAN_RSP, public, 00:00:00:00:00:02
            0x04, 0x03, 0x09, 0x48, 0x69,  // Data_Length 4: Complete Local Name "Hi"
            0x7F,  // RSSI 127: not available
        ]
        guard case let .advertisingReports(reports) = try Self.event(bytes) else { Issue.record("not reports"); return }
        #expect(reports.count == 2)
        #expect(reports[0].address.description == "C0:00:00:00:00:01")
        #expect(reports[0].addressType == .random)
        #expect(!reports[0].isConnectable)
        #expect(reports[0].rssi == -80)
        #expect(reports[1].isScanResponse)
        #expect(reports[1].data == [0x03, 0x09, 0x48, 0x69])
        #expect(reports[1].rssi == nil)
    }

    @Test func legacyDataLongerThan31IsInvalid() throws {
        var bytes = Self.bthomeReport
        bytes[12] = 32
        #expect(throws: DecodeError.invalidValue(context: "HCI LE Meta event", offset: 10, expected: "a legacy Data_Length of at most 31",
                                                 found: "32")) {
            try Self.event(bytes)
        }
    }

    @Test func reportOverrunningTheEventIsTruncated() throws {
        var bytes = Self.bthomeReport
        bytes[12] = 20  // longer than the 15 bytes left
        #expect(throws: DecodeError.truncated(context: "HCI LE Meta event", offset: 11, needed: 20, available: 15,
                                              what: "advertising data")) {
            try Self.event(bytes)
        }
    }

    @Test func zeroReportsIsInvalid() throws {
        #expect(throws: DecodeError.self) { try Self.event([0x3E, 0x02, 0x02, 0x00]) }
    }

    // MARK: LE Extended Advertising Report (§7.7.65.13)

    @Test func extendedAdvertisingReport() throws {
        let bytes: [UInt8] = [
            0x3E, 0x1D, 0x0D,
            0x01,  // Num_Reports
            0x21, 0x00,  // Event_Type: connectable, data status 01 (incomplete, more to come)
            0x01,  // Address_Type: random
            0xDC, 0x33, 0x12, 0x34, 0x2D, 0x58,  // 58:2D:34:12:33:DC
            0x01,  // Primary_PHY: LE 1M
            0x02,  // Secondary_PHY: LE 2M
            0x03,  // Advertising_SID
            0x04,  // TX_Power +4 dBm
            0xB9,  // RSSI -71
            0x00, 0x00,  // Periodic_Advertising_Interval: none
            0x00,  // Direct_Address_Type
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // Direct_Address
            0x03,  // Data_Length
            0x02, 0x01, 0x06,
        ]
        guard case let .extendedAdvertisingReports(reports) = try Self.event(bytes) else { Issue.record("not reports"); return }
        let r = try #require(reports.first)
        #expect(r.format == .extended)
        #expect(r.eventType == 0x0021)
        #expect(r.dataStatus == .incompleteMoreToCome)
        #expect(r.isConnectable)
        #expect(r.address.description == "58:2D:34:12:33:DC")
        #expect(r.addressType == .random)
        #expect(r.primaryPHY == 1)
        #expect(r.secondaryPHY == 2)
        #expect(r.sid == 3)
        #expect(r.txPower == 4)
        #expect(r.rssi == -71)
        #expect(r.periodicInterval == 0)
        #expect(r.directAddress == nil)
        #expect(r.data == [0x02, 0x01, 0x06])
    }

    @Test func extendedReportAnonymousAndScanResponse() throws {
        let anonymous = Snoop.extendedReport(eventType: 0x0008, addressType: 0xFF, address: "00:00:00:00:00:00", rssi: -50, data: [])
        guard case let .extendedAdvertisingReports(reports) = try Self.event(anonymous) else { Issue.record("not reports"); return }
        #expect(reports.first?.addressType == .anonymous)
        #expect(reports.first?.isScanResponse == true)
        #expect(reports.first?.txPower == nil)
    }

    // MARK: Connections (§7.7.65.1, §7.7.65.10, §7.7.5)

    @Test func leConnectionComplete() throws {
        let bytes: [UInt8] = [
            0x3E, 0x13, 0x01,
            0x00,  // Status: success
            0x40, 0x00,  // Connection_Handle 0x0040
            0x00,  // Role: central
            0x01,  // Peer_Address_Type: random
            0x05, 0x7C, 0x21, 0x9E, 0x4A, 0xF3,  // F3:4A:9E:21:7C:05
            0x18, 0x00,  // Connection_Interval 24 × 1.25 ms
            0x00, 0x00,  // Peripheral_Latency
            0xC8, 0x00,  // Supervision_Timeout
            0x00,  // Central_Clock_Accuracy
        ]
        let event = try Self.event(bytes)
        #expect(event == .connectionComplete(LEConnectionComplete(status: 0, handle: 0x40, role: 0, peerAddressType: .random,
                                                                  peerAddress: Snoop.address("F3:4A:9E:21:7C:05"), interval: 24)))
    }

    @Test func leEnhancedConnectionComplete() throws {
        let bytes: [UInt8] = [
            0x3E, 0x1F, 0x0A,
            0x00, 0x41, 0x00, 0x01,  // Status, Connection_Handle 0x0041, Role: peripheral
            0x03,  // Peer_Address_Type: random identity
            0x06, 0x05, 0x04, 0x03, 0x02, 0xC1,  // C1:02:03:04:05:06
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66,  // Local_Resolvable_Private_Address
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // Peer_Resolvable_Private_Address
            0x28, 0x00, 0x00, 0x00, 0xF4, 0x01, 0x01,  // interval 40, latency, timeout, clock accuracy
        ]
        guard case let .connectionComplete(c) = try Self.event(bytes) else { Issue.record("not a connection"); return }
        #expect(c.handle == 0x41)
        #expect(c.role == 1)
        #expect(c.peerAddressType == .randomIdentity)
        #expect(c.peerAddressType.isRandom)
        #expect(c.peerAddress.description == "C1:02:03:04:05:06")
        #expect(c.interval == 40)
    }

    @Test func disconnectionComplete() throws {
        #expect(try Self.event([0x05, 0x04, 0x00, 0x40, 0x00, 0x13]) == .disconnectionComplete(status: 0, handle: 0x40, reason: 0x13))
    }

    @Test func otherEventsAreNamedNotDecoded() throws {
        #expect(try Self.event([0x0E, 0x04, 0x01, 0x0C, 0x20, 0x00]) == .other(code: 0x0E, subevent: nil))
        #expect(try Self.event([0x3E, 0x02, 0x03, 0x00]) == .other(code: 0x3E, subevent: 0x03))
    }

    @Test func eventLengthMustMatchTheRecord() throws {
        #expect(throws: DecodeError.trailingBytes(context: "HCI event", offset: 6, extra: 1)) {
            try CaptureFrame.decode(Self.record([0x05, 0x04, 0x00, 0x40, 0x00, 0x13, 0xFF], flags: 3), datalink: .linuxMonitor)
        }
        #expect(throws: DecodeError.truncated(context: "HCI event", offset: 2, needed: 4, available: 2, what: "event parameters")) {
            try CaptureFrame.decode(Self.record([0x05, 0x04, 0x00, 0x40], flags: 3), datalink: .linuxMonitor)
        }
    }

    // MARK: ACL (§5.4.2) and datalinks

    @Test func aclPacket() throws {
        // Handle 0x0040, PB 0b10 (first automatically flushable), BC 0, length 7: an L2CAP frame on CID 4.
        let acl = try ACLPacket.decode([0x40, 0x20, 0x07, 0x00, 0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00][...])
        #expect(acl.handle == 0x0040)
        #expect(acl.packetBoundary == 0b10)
        #expect(acl.broadcast == 0)
        #expect(acl.isStart)
        #expect(Array(acl.data) == [0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00])
        let continuation = try ACLPacket.decode([0x40, 0x10, 0x01, 0x00, 0xAA][...])
        #expect(!continuation.isStart)
    }

    @Test func monitorDatalinkOpcodesAndIndex() throws {
        let acl: [UInt8] = [0x40, 0x20, 0x00, 0x00]
        let rx = try CaptureFrame.decode(Self.record(acl, flags: 0x0001_0005), datalink: .linuxMonitor)
        #expect(rx.controller == 1)
        guard case let .acl(_, direction) = rx.packet else { Issue.record("not ACL"); return }
        #expect(direction == .received)
        let tx = try CaptureFrame.decode(Self.record(acl, flags: 4), datalink: .linuxMonitor)
        guard case .acl(_, .sent) = tx.packet else { Issue.record("not sent ACL"); return }
        let command = try CaptureFrame.decode(Self.record([0x0C, 0x20, 0x02, 0x01, 0x00], flags: 2), datalink: .linuxMonitor)
        guard case let .command(opcode, parameters) = command.packet else { Issue.record("not a command"); return }
        #expect(opcode == 0x200C)
        #expect(Array(parameters) == [0x01, 0x00])
        // New Index: type, bus, BD_ADDR, name (8 bytes, NUL padded).
        let newIndex = try CaptureFrame.decode(Self.record([0x00, 0x01, 0x13, 0x71, 0xDA, 0x7D, 0x1A, 0x00]
                                                               + Array("hci0".utf8) + [0, 0, 0, 0], flags: 0), datalink: .linuxMonitor)
        guard case let .newIndex(type, bus, address, name) = newIndex.packet else { Issue.record("not new index"); return }
        #expect(type == 0 && bus == 1)
        #expect(address.description == "00:1A:7D:DA:71:13")
        #expect(name == "hci0")
        let note = try CaptureFrame.decode(Self.record(Array("note\0".utf8), flags: 12), datalink: .linuxMonitor)
        #expect(note.packet.kindName == "monitor system note")
    }

    @Test func h4DatalinkPacketTypes() throws {
        let event = try CaptureFrame.decode(Self.record([0x04, 0x05, 0x04, 0x00, 0x40, 0x00, 0x13], flags: 3), datalink: .hciUART)
        guard case .event(0x05, _) = event.packet else { Issue.record("not an event"); return }
        let acl = try CaptureFrame.decode(Self.record([0x02, 0x40, 0x20, 0x00, 0x00], flags: 1), datalink: .hciUART)
        guard case .acl(_, .received) = acl.packet else { Issue.record("not received ACL"); return }
        let sent = try CaptureFrame.decode(Self.record([0x02, 0x40, 0x00, 0x00, 0x00], flags: 0), datalink: .hciUART)
        guard case .acl(_, .sent) = sent.packet else { Issue.record("not sent ACL"); return }
        let odd = try CaptureFrame.decode(Self.record([0x09, 0x00], flags: 0), datalink: .hciUART)
        #expect(odd.packet.kindName == "H4 packet type 0x09")
        #expect(throws: DecodeError.truncated(context: "H4 packet", offset: 0, needed: 1, available: 0, what: "packet type (uint8)")) {
            try CaptureFrame.decode(Self.record([], flags: 0), datalink: .hciUART)
        }
    }

    @Test func unencapsulatedDatalinkFlags() throws {
        // Bit 1: command/event; bit 0: direction (1 = received).
        let command = try CaptureFrame.decode(Self.record([0x03, 0x0C, 0x00], flags: 2), datalink: .hciUnencapsulated)
        guard case .command(0x0C03, _) = command.packet else { Issue.record("not a command"); return }
        let event = try CaptureFrame.decode(Self.record([0x0E, 0x00], flags: 3), datalink: .hciUnencapsulated)
        guard case .event(0x0E, _) = event.packet else { Issue.record("not an event"); return }
        let acl = try CaptureFrame.decode(Self.record([0x01, 0x20, 0x00, 0x00], flags: 1), datalink: .hciUnencapsulated)
        guard case let .acl(packet, .received) = acl.packet else { Issue.record("not received ACL"); return }
        #expect(packet.handle == 1)
    }
}
