import Testing

@testable import BLEParsing

/// Whole captures into timelines: the three fixture captures, and small
/// H4 files for the cases the fixtures do not show.
@Suite("Capture: analyzer")
struct CaptureAnalyzerTests {
    // MARK: Fixtures

    @Test func monitorCaptureAdvertisements() throws {
        let t = try CaptureAnalyzer.analyze(CaptureFixtures.bthomePvvxMonitor())
        #expect(t.datalink == .linuxMonitor)
        #expect(t.recordCount == 13)
        #expect(t.controllers == [CapturedController(index: 0, address: Snoop.address("00:1A:7D:DA:71:13"), name: "hci0")])
        #expect(t.devices.map(\.address.description) == [CaptureFixtures.bthomeAddress, CaptureFixtures.pvvxAddress])

        let bthome = try #require(t.device(Snoop.address(CaptureFixtures.bthomeAddress)))
        #expect(bthome.addressType == .publicDevice)
        #expect(bthome.advertisements.map(\.record) == [5, 6, 8])
        #expect(bthome.advertisements.map(\.rssi) == [-60, -61, -62])
        #expect(bthome.advertisements.map { t.seconds($0.timestamp) } == [0.1, 0.101, 1.1])
        #expect(bthome.advertisements[0].data == Snoop.hex("020106 0a16d2fc 4002ca0903bf13"))
        #expect(bthome.advertisements[1].report.isScanResponse)
        #expect(bthome.services.isEmpty)

        let pvvx = try #require(t.device(Snoop.address(CaptureFixtures.pvvxAddress)))
        #expect(pvvx.advertisements.count == 2)
        let joined = try #require(pvvx.advertisements.last)
        #expect(joined.format == .extended)
        #expect(joined.record == 9)  // the first fragment's record and time
        #expect(t.seconds(joined.timestamp) == 2.25)
        #expect(joined.data == Snoop.hex("020106 12161a18") + CaptureFixtures.pvvx2)

        #expect(t.unknownPackets == [
            "monitor open index": 1, "HCI command 0x200c": 2, "HCI event 0x0e Command Complete": 1,
            "HCI event 0xff Vendor": 1, "monitor system note": 1,
        ])
        #expect(t.malformedCount == 0)
    }

    @Test func h4CaptureGATTLayoutAndValues() throws {
        let t = try CaptureAnalyzer.analyze(CaptureFixtures.heartRateH4())
        #expect(t.datalink == .hciUART)
        #expect(t.devices.count == 1)
        let d = try #require(t.devices.first)
        #expect(d.address.description == CaptureFixtures.heartRateAddress)
        #expect(d.addressType == .random)
        #expect(d.advertisements.count == 1)
        #expect(d.mtu == 247)
        #expect(d.connections.count == 1)
        #expect(d.connections.first?.handle == 0x0040)
        #expect(d.connections.first.map { t.seconds($0.connected) } == 0.45)
        #expect(d.connections.first?.disconnected.map { t.seconds($0) } == 5.0)

        #expect(d.services.map(\.uuid.shortString) == ["1800", "180d", "180f"])
        #expect(d.services.map(\.handle) == [0x0001, 0x0008, 0x0010])
        #expect(d.services.allSatisfy { $0.primary })
        let hr = d.services[1]
        #expect(hr.characteristics.map(\.uuid.shortString) == ["2a37", "2a38", "2a39"])
        #expect(hr.characteristics.map(\.valueHandle) == [0x000A, 0x000D, 0x000F])
        #expect(hr.characteristics.map(\.flags) == [["notify"], ["read"], ["write"]])
        #expect(hr.characteristics[0].descriptors == [CapturedDescriptor(handle: 0x000B, uuid: 0x2902)])
        #expect(hr.characteristics[1].descriptors.isEmpty)
        #expect(d.services[2].characteristics.first?.flags == ["read", "notify"])
        #expect(d.services[2].characteristics.first?.descriptors.map(\.handle) == [0x0013])
        #expect(d.unplacedCharacteristics.isEmpty)

        #expect(d.values.map(\.kind) == [.read, .read, .read, .write, .notification, .notification, .notification])
        #expect(d.values.map(\.handle) == [0x0003, 0x000D, 0x0012, 0x000B, 0x000A, 0x000A, 0x000A])
        #expect(d.values[0].value == Array("HRM-Demo".utf8))
        #expect(d.values[3].value == [0x01, 0x00])
        #expect(Array(d.values.suffix(3).map(\.value)) == CaptureFixtures.heartRateValues)
        #expect(d.values.suffix(3).map { t.seconds($0.timestamp) } == [2.0, 3.0, 4.0])
        #expect(d.attErrors == [CapturedATTError(timestamp: Snoop.t0 + 600_000, record: 12, requestOpcode: 0x10, handle: 0x0014, error: 0x0A)])

        #expect(t.unknownPackets["L2CAP CID 0x0005"] == 1)
        #expect(t.unknownPackets["HCI event 0x13 Number Of Completed Packets"] == 1)
        #expect(t.unknownPackets["HCI command 0x200d"] == 1)
        #expect(t.unknownPackets["HCI event 0x0f Command Status"] == 1)
        #expect(t.malformedCount == 0)
    }

    @Test func unencapsulatedCaptureCountsWhatItCannotUse() throws {
        let t = try CaptureAnalyzer.analyze(CaptureFixtures.xiaomiH1())
        #expect(t.datalink == .hciUnencapsulated)
        #expect(t.recordCount == 5)
        #expect(t.truncatedRecords == 1)
        #expect(t.devices.map(\.address.description) == [CaptureFixtures.xiaomiAddress])
        #expect(t.devices.first?.advertisements.map(\.rssi) == [-67, -70])
        #expect(t.unknownPackets == ["HCI command 0x200b": 1, "ACL data on a connection without LE Connection Complete": 1])
        #expect(t.malformedCount == 1)
        #expect(t.malformedPackets.first?.record == 4)
        #expect(t.malformedPackets.first?.error.kind == .truncated)
        #expect(t.malformedPackets.first?.description.hasPrefix("record 4 (byte offset ") == true)
    }

    // MARK: Small H4 captures

    static let peer = "C0:11:22:33:44:55"

    /// An H4 capture: a connection to `peer` on handle 0x0040, then `att` PDUs
    /// (true = sent by us).
    static func connected(_ att: [(sent: Bool, pdu: [UInt8])], extra: [[UInt8]] = []) -> [UInt8] {
        var w = CaptureFixtures.Writer(datalink: 1002)
        w.add([0x04] + Snoop.leMeta(0x01, [0x00, 0x40, 0x00, 0x00, 0x01] + Snoop.air(peer) + [0x18, 0, 0, 0, 0xC8, 0, 0]),
              flags: 3, ms: 0)
        for (n, a) in att.enumerated() {
            w.add([0x02] + Snoop.acl(handle: 0x40, pb: a.sent ? 0 : 2, Snoop.l2cap(4, a.pdu)), flags: a.sent ? 0 : 1, ms: Int64(n + 1))
        }
        for (n, e) in extra.enumerated() { w.add([0x04] + e, flags: 3, ms: Int64(100 + n)) }
        return w.bytes
    }

    @Test func readBlobPartsJoinTheRead() throws {
        let t = try CaptureAnalyzer.analyze(Self.connected([
            (true, [0x0A, 0x03, 0x00]), (false, [0x0B, 0x41, 0x42]),
            (true, [0x0C, 0x03, 0x00, 0x02, 0x00]), (false, [0x0D, 0x43, 0x44]),
            (true, [0x0C, 0x03, 0x00, 0x09, 0x00]), (false, [0x0D, 0x5A]),  // does not continue the value: kept apart
        ]))
        let values = try #require(t.devices.first?.values)
        #expect(values.map(\.value) == [[0x41, 0x42, 0x43, 0x44], [0x5A]])
        #expect(values.map(\.offset) == [0, 9])
    }

    @Test func localServerTrafficIsCountedNotModelled() throws {
        let t = try CaptureAnalyzer.analyze(Self.connected([
            (false, [0x0A, 0x03, 0x00]), (true, [0x0B, 0x01]),  // the peer reads our database
            (true, [0x1B, 0x05, 0x00, 0x01]),  // we notify
            (false, [0x52, 0x07, 0x00, 0x01]),  // the peer writes without response
        ]))
        let d = try #require(t.devices.first)
        #expect(d.values.isEmpty)
        #expect(t.unknownPackets["ATT Read Response (0x0b) from the local server"] == 1)
        #expect(t.unknownPackets["ATT Handle Value Notification (0x1b) from the local server"] == 1)
        #expect(t.unknownPackets["ATT Write Command (0x52) from the remote client"] == 1)
    }

    @Test func responsesWithoutRequestsAndMismatches() throws {
        let t = try CaptureAnalyzer.analyze(Self.connected([
            (false, [0x0B, 0x01]),  // no request
            (true, [0x0A, 0x03, 0x00]), (false, [0x05, 0x01, 0x0B, 0x00, 0x02, 0x29]),  // wrong response kind
            (false, [0x1D, 0x12, 0x00, 0x57]), (true, [0x1E]),  // indication and our confirmation
            (false, [0x23, 0x0A, 0x00, 0x01, 0x00, 0x48, 0x12, 0x00, 0x01, 0x00, 0x56]),
            (false, [0x09, 0x07]),  // malformed: length but no entry
        ]))
        let d = try #require(t.devices.first)
        #expect(d.values.map(\.kind) == [.indication, .notification, .notification])
        #expect(d.values.map(\.handle) == [0x12, 0x0A, 0x12])
        #expect(t.unknownPackets["ATT Read Response (0x0b) without a request"] == 1)
        #expect(t.unknownPackets["ATT Find Information Response (0x05) not matching its request ATT Read Request (0x0a)"] == 1)
        #expect(t.unknownPackets["ATT Handle Value Confirmation (0x1e)"] == 1)
        #expect(t.malformedCount == 1)
        #expect(t.malformedPackets.first?.record == 8)
    }

    @Test func findByTypeValueAndSecondaryServicesAndUnplacedCharacteristics() throws {
        let t = try CaptureAnalyzer.analyze(Self.connected([
            // Find By Type Value: primary service 0x180F at 0x0020–0x0023.
            (true, [0x06, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28, 0x0F, 0x18]), (false, [0x07, 0x20, 0x00, 0x23, 0x00]),
            // Read By Group Type for secondary services (0x2801): 0x0030–0x0031, 128-bit UUID.
            (true, [0x10, 0x01, 0x00, 0xFF, 0xFF, 0x01, 0x28]),
            (false, [0x11, 0x14, 0x30, 0x00, 0x31, 0x00] + (0..<16).map { UInt8($0) }),
            // Characteristics: one in 0x180F, one outside every service.
            (true, [0x08, 0x01, 0x00, 0xFF, 0xFF, 0x03, 0x28]),
            (false, [0x09, 0x07, 0x21, 0x00, 0x12, 0x22, 0x00, 0x19, 0x2A, 0x41, 0x00, 0x02, 0x42, 0x00, 0x00, 0x2A]),
            // Read Using Characteristic UUID (Read By Type 0x2A19): a value.
            (true, [0x08, 0x20, 0x00, 0x23, 0x00, 0x19, 0x2A]), (false, [0x09, 0x03, 0x22, 0x00, 0x64]),
        ]))
        let d = try #require(t.devices.first)
        #expect(d.services.map(\.uuid.shortString) == ["180f", "0f0e0d0c-0b0a-0908-0706-050403020100"])
        #expect(d.services.map(\.primary) == [true, false])
        #expect(d.services[0].characteristics.map(\.uuid.shortString) == ["2a19"])
        #expect(d.unplacedCharacteristics.map(\.handle) == [0x0041])
        #expect(d.values == [CapturedValueEvent(timestamp: Snoop.t0 + 8000, record: 9, handle: 0x22, value: [0x64], kind: .read, offset: 0)])
    }

    @Test func extendedFragmentsThatNeverCompleteAreKept() throws {
        var w = CaptureFixtures.Writer(datalink: 1002)
        w.add([0x04] + Snoop.extendedReport(eventType: 0x0020, addressType: 0x01, address: Self.peer, rssi: -40, data: [0x02, 0x01]),
              flags: 3, ms: 0)
        w.add([0x04] + Snoop.extendedReport(eventType: 0x0000, addressType: 0xFF, address: "00:00:00:00:00:00", rssi: -40, data: []),
              flags: 3, ms: 1)
        let t = try CaptureAnalyzer.analyze(w.bytes)
        #expect(t.devices.first?.advertisements.first?.data == [0x02, 0x01])
        #expect(t.devices.first?.advertisements.first?.report.dataStatus == .incompleteTruncated)
        #expect(t.unknownPackets == ["extended advertising data left incomplete": 1, "anonymous advertisement": 1])
    }

    @Test func failedConnectionsAndUnknownDisconnections() throws {
        var w = CaptureFixtures.Writer(datalink: 1002)
        w.add([0x04] + Snoop.leMeta(0x01, [0x3E, 0x40, 0x00, 0x00, 0x01] + Snoop.air(Self.peer) + [0x18, 0, 0, 0, 0xC8, 0, 0]),
              flags: 3, ms: 0)
        w.add([0x04] + Snoop.event(0x05, [0x00, 0x41, 0x00, 0x13]), flags: 3, ms: 1)
        let t = try CaptureAnalyzer.analyze(w.bytes)
        #expect(t.devices.isEmpty)
        #expect(t.unknownPackets == ["HCI LE Connection Complete (failed)": 1, "HCI Disconnection Complete for an unknown connection": 1])
    }

    @Test func extremeTimestampsSaturate() throws {
        var w = CaptureFixtures.Writer(datalink: 1002)
        w.bytes += Snoop.record([0x01] + Snoop.command(0x0C03), flags: 2, at: Int64.min)
        w.bytes += Snoop.record([0x04] + Snoop.advertisingReport(addressType: 0, address: Self.peer, data: [], rssi: -40),
                                flags: 3, at: Int64.max)
        let t = try CaptureAnalyzer.analyze(w.bytes)
        let ad = try #require(t.devices.first?.advertisements.first)
        #expect(t.microseconds(ad.timestamp) == Int64.max)
        #expect(t.seconds(ad.timestamp) > 9e12)
        #expect(CaptureTimeline.elapsed(from: 5, to: 2) == 0)
        #expect(CaptureTimeline.elapsed(from: 2, to: 5) == 3)
    }

    @Test func reconnectionOnTheSameHandleStartsClean() throws {
        // A fragment left open before the disconnection must not swallow the next connection's first frame.
        var w = CaptureFixtures.Writer(datalink: 1002)
        let connect = [0x04] + Snoop.leMeta(0x01, [0x00, 0x40, 0x00, 0x00, 0x01] + Snoop.air(Self.peer) + [0x18, 0, 0, 0, 0xC8, 0, 0])
        w.add(connect, flags: 3, ms: 0)
        w.add([0x02] + Snoop.acl(handle: 0x40, pb: 2, [0x09, 0x00, 0x04, 0x00, 0x1B]), flags: 1, ms: 1)
        w.add([0x04] + Snoop.event(0x05, [0x00, 0x40, 0x00, 0x08]), flags: 3, ms: 2)
        w.add(connect, flags: 3, ms: 3)
        w.add([0x02] + Snoop.acl(handle: 0x40, pb: 1, [0xAA]), flags: 1, ms: 4)
        w.add([0x02] + Snoop.acl(handle: 0x40, pb: 2, Snoop.l2cap(4, [0x1B, 0x0A, 0x00, 0x48])), flags: 1, ms: 5)
        let t = try CaptureAnalyzer.analyze(w.bytes)
        let d = try #require(t.devices.first)
        #expect(d.connections.count == 2)
        #expect(d.connections[0].disconnected != nil)
        #expect(d.values.map(\.value) == [[0x48]])
        #expect(t.unknownPackets == ["L2CAP continuation without a start": 1])
    }
}
