import Foundation

@testable import BLEParsing

/// The generator of `fixtures/captures/*.btsnoop`. Every payload is a
/// published vector (source next to it, and in fixtures/captures/README.md);
/// the HCI, L2CAP and ATT framing around them is built from the Core v5.4
/// layouts (Snoop helpers). `CaptureFixtureTests` checks that the committed
/// files are exactly these bytes; `RECORD_CAPTURE_FIXTURES=1` rewrites them.
enum CaptureFixtures {
    struct Writer {
        var bytes: [UInt8]
        init(datalink: UInt32) { bytes = Snoop.header(datalink) }
        /// A record `ms` milliseconds after Snoop.t0.
        mutating func add(_ data: [UInt8], flags: UInt32, ms: Int64, original: UInt32? = nil) {
            bytes += Snoop.record(data, flags: flags, at: Snoop.t0 + ms * 1000, original: original)
        }
    }

    static let all: [(name: String, bytes: [UInt8])] = [
        ("bthome-pvvx-monitor.btsnoop", bthomePvvxMonitor()),
        ("heart-rate-h4.btsnoop", heartRateH4()),
        ("xiaomi-h1.btsnoop", xiaomiH1()),
    ]

    // MARK: Shared payloads

    static let bthomeAddress = "A4:C1:38:8D:18:B2"
    /// bthome-ble tests/test_parser_v2.py::test_bthome_temperature_humidity: 25.06 °C, 50.55 %.
    static let bthomeTemperatureHumidity = Snoop.hex("4002ca0903bf13")
    /// bthome-ble tests/test_parser_v2.py::test_mac_as_name: pressure 1008.83 hPa.
    static let bthomePressure = Snoop.hex("4004138a01")
    static let pvvxAddress = "58:2D:34:12:33:DC"
    /// theengs/decoder tests/BLE/test_ble.cpp, cgg1_pvvx_1 and cgg1_pvvx_2 (pvvx custom format on 0x181A).
    static let pvvx1 = Snoop.hex("dc3312342d582f09aa173d0b4b7c05")
    static let pvvx2 = Snoop.hex("dc3312342d582909c017350b4a8c05")
    static let xiaomiAddress = "58:2D:34:3B:2E:BF"
    /// xiaomi-ble tests/test_parser.py::test_Xiaomi_LYWSDCGQ (MiBeacon on 0xFE95).
    static let xiaomiLYWSDCGQ = Snoop.hex("5020aa01a3bf2e3b342d580d1004b40095020a10013b")
    static let heartRateAddress = "F3:4A:9E:21:7C:05"
    /// Heart Rate Measurement values (GATT 0x2A37) from fixtures/vectors/gatt/heart_rate_measurement.json:
    /// SmartGattLib HeartRateMeasurementTest (72 bpm, 2 RR intervals), blevalueparser ContactsSupportedConnected, HR8.
    static let heartRateValues = [Snoop.hex("16485401EC02"), Snoop.hex("06AA"), Snoop.hex("00AA")]

    /// AD structures: Flags (LE General Discoverable, BR/EDR not supported) + one more.
    static func flagsAnd(_ rest: [UInt8]) -> [UInt8] { [0x02, 0x01, 0x06] + rest }
    /// Service Data - 16-bit UUID (AD type 0x16).
    static func serviceData16(_ uuid: UInt16, _ data: [UInt8]) -> [UInt8] {
        [UInt8(3 + data.count), 0x16] + Snoop.le16(uuid) + data
    }
    static func completeName(_ name: String) -> [UInt8] { [UInt8(1 + name.utf8.count), 0x09] + Array(name.utf8) }

    // MARK: btmon (Linux monitor, 2001): BTHome v2 and pvvx thermometers

    /// What `btmon -w` writes while bluetoothd scans: controller announcement,
    /// scan commands, legacy reports (with a scan response), one extended
    /// report split in two fragments, and records the importer does not use.
    static func bthomePvvxMonitor() -> [UInt8] {
        var w = Writer(datalink: 2001)
        // Monitor opcodes (BlueZ btsnoop.h): 0 new index, 2 command, 3 event, 8 open index, 12 system note.
        w.add([0x00, 0x01] + Snoop.air("00:1A:7D:DA:71:13") + Array("hci0".utf8) + [0, 0, 0, 0], flags: 0, ms: 0)
        w.add([], flags: 8, ms: 1)
        w.add(Snoop.command(0x200C, [0x01, 0x00]), flags: 2, ms: 2)  // LE Set Scan Enable: on, no duplicate filter
        w.add(Snoop.event(0x0E, [0x01, 0x0C, 0x20, 0x00]), flags: 3, ms: 3)  // Command Complete
        w.add(Snoop.advertisingReport(type: 0x00, addressType: 0x00, address: bthomeAddress,
                                      data: flagsAnd(serviceData16(0xFCD2, bthomeTemperatureHumidity)), rssi: -60), flags: 3, ms: 100)
        w.add(Snoop.advertisingReport(type: 0x04, addressType: 0x00, address: bthomeAddress, data: completeName("DIY-sensor"), rssi: -61),
              flags: 3, ms: 101)
        w.add(Snoop.advertisingReport(type: 0x00, addressType: 0x00, address: pvvxAddress,
                                      data: flagsAnd(serviceData16(0x181A, pvvx1)), rssi: -71), flags: 3, ms: 250)
        w.add(Snoop.advertisingReport(type: 0x00, addressType: 0x00, address: bthomeAddress,
                                      data: flagsAnd(serviceData16(0xFCD2, bthomePressure)), rssi: -62), flags: 3, ms: 1100)
        // Extended report (connectable, extended PDU) in two fragments: data status 01, then 00.
        let ad = flagsAnd(serviceData16(0x181A, pvvx2))
        w.add(Snoop.extendedReport(eventType: 0x0021, addressType: 0x00, address: pvvxAddress, rssi: -70, data: Array(ad.prefix(10))),
              flags: 3, ms: 2250)
        w.add(Snoop.extendedReport(eventType: 0x0001, addressType: 0x00, address: pvvxAddress, rssi: -70, data: Array(ad.dropFirst(10))),
              flags: 3, ms: 2251)
        w.add(Snoop.event(0xFF, [0x01, 0x02]), flags: 3, ms: 2300)  // vendor event
        w.add(Array("capture fixture\0".utf8), flags: 12, ms: 2400)  // system note
        w.add(Snoop.command(0x200C, [0x00, 0x00]), flags: 2, ms: 3000)
        return w.bytes
    }

    // MARK: Android HCI snoop log (H4, 1002): heart-rate strap over GATT

    /// An Android-style H4 log: scan, connect (LE Enhanced Connection
    /// Complete), GATT discovery of Generic Access, Heart Rate and Battery
    /// (one response split over two ACL fragments), reads, enabling
    /// notifications, three Heart Rate Measurement notifications, an LE
    /// signaling packet, disconnect. Handles follow a typical server layout.
    static func heartRateH4() -> [UInt8] {
        var w = Writer(datalink: 1002)
        // H4 flags: bit 0 = received, bit 1 = command/event.
        func command(_ opcode: UInt16, _ p: [UInt8], _ ms: Int64) { w.add([0x01] + Snoop.command(opcode, p), flags: 2, ms: ms) }
        func event(_ bytes: [UInt8], _ ms: Int64) { w.add([0x04] + bytes, flags: 3, ms: ms) }
        func sent(_ att: [UInt8], _ ms: Int64) {
            w.add([0x02] + Snoop.acl(handle: 0x0040, pb: 0b00, Snoop.l2cap(0x0004, att)), flags: 0, ms: ms)
        }
        func received(_ att: [UInt8], _ ms: Int64) {
            w.add([0x02] + Snoop.acl(handle: 0x0040, pb: 0b10, Snoop.l2cap(0x0004, att)), flags: 1, ms: ms)
        }
        let le16 = Snoop.le16
        command(0x200C, [0x01, 0x00], 0)
        event(Snoop.advertisingReport(type: 0x00, addressType: 0x01, address: heartRateAddress,
                                      data: flagsAnd([0x03, 0x03, 0x0D, 0x18] + completeName("HRM-Demo")), rssi: -58), 120)
        command(0x200D, [UInt8](repeating: 0, count: 25), 400)  // LE Create Connection (parameters not used)
        event(Snoop.event(0x0F, [0x00, 0x01, 0x0D, 0x20]), 401)  // Command Status
        // LE Enhanced Connection Complete: handle 0x0040, central, random peer, interval 24.
        event(Snoop.leMeta(0x0A, [0x00] + le16(0x0040) + [0x00, 0x01] + Snoop.air(heartRateAddress)
                                + [UInt8](repeating: 0, count: 12) + le16(24) + le16(0) + le16(200) + [0x00]), 450)
        sent([0x02] + le16(517), 500)  // Exchange MTU Request
        received([0x03] + le16(247), 520)  // Exchange MTU Response
        sent([0x10] + le16(0x0001) + le16(0xFFFF) + le16(0x2800), 540)  // Read By Group Type Request: primary services
        // Response (length 6): Generic Access 0x0001–0x0007, Heart Rate 0x0008–0x000F, Battery 0x0010–0x0013,
        // split over a start (PB 0b10) and a continuation (PB 0b01) fragment.
        let services = Snoop.l2cap(0x0004, [0x11, 0x06] + le16(0x0001) + le16(0x0007) + le16(0x1800)
                                            + le16(0x0008) + le16(0x000F) + le16(0x180D) + le16(0x0010) + le16(0x0013) + le16(0x180F))
        w.add([0x02] + Snoop.acl(handle: 0x0040, pb: 0b10, Array(services.prefix(12))), flags: 1, ms: 560)
        w.add([0x02] + Snoop.acl(handle: 0x0040, pb: 0b01, Array(services.dropFirst(12))), flags: 1, ms: 561)
        sent([0x10] + le16(0x0014) + le16(0xFFFF) + le16(0x2800), 580)
        received([0x01, 0x10] + le16(0x0014) + [0x0A], 600)  // Error Response: Attribute Not Found
        // Characteristic declarations (Read By Type 0x2803), entries Handle | Properties | Value Handle | UUID.
        sent([0x08] + le16(0x0001) + le16(0x0007) + le16(0x2803), 620)
        received([0x09, 0x07] + le16(0x0002) + [0x02] + le16(0x0003) + le16(0x2A00)
                 + le16(0x0004) + [0x02] + le16(0x0005) + le16(0x2A01), 640)  // Device Name, Appearance (read)
        sent([0x08] + le16(0x0008) + le16(0x000F) + le16(0x2803), 660)
        received([0x09, 0x07] + le16(0x0009) + [0x10] + le16(0x000A) + le16(0x2A37)  // Heart Rate Measurement (notify)
                 + le16(0x000C) + [0x02] + le16(0x000D) + le16(0x2A38)  // Body Sensor Location (read)
                 + le16(0x000E) + [0x08] + le16(0x000F) + le16(0x2A39), 680)  // Heart Rate Control Point (write)
        sent([0x08] + le16(0x0010) + le16(0x0013) + le16(0x2803), 700)
        received([0x09, 0x07] + le16(0x0011) + [0x12] + le16(0x0012) + le16(0x2A19), 720)  // Battery Level (read, notify)
        // Descriptors (Find Information, format 0x01): the CCCDs.
        sent([0x04] + le16(0x000B) + le16(0x000B), 740)
        received([0x05, 0x01] + le16(0x000B) + le16(0x2902), 760)
        sent([0x04] + le16(0x0013) + le16(0x0013), 780)
        received([0x05, 0x01] + le16(0x0013) + le16(0x2902), 800)
        // Reads.
        sent([0x0A] + le16(0x0003), 820)
        received([0x0B] + Array("HRM-Demo".utf8), 840)
        sent([0x0A] + le16(0x000D), 860)
        received([0x0B, 0x01], 880)  // Body Sensor Location: 0x01 Chest (Heart Rate Service spec)
        sent([0x0A] + le16(0x0012), 900)
        received([0x0B, 0x57], 920)  // Battery Level 87 %
        // Enable notifications: Write Request 0x0001 to the CCCD.
        sent([0x12] + le16(0x000B) + [0x01, 0x00], 1000)
        received([0x13], 1020)
        for (n, value) in heartRateValues.enumerated() {
            received([0x1B] + le16(0x000A) + value, 2000 + Int64(n) * 1000)
        }
        event(Snoop.event(0x13, [0x01] + le16(0x0040) + le16(1)), 4100)  // Number Of Completed Packets
        // LE signaling (CID 0x0005): Connection Parameter Update Request (code 0x12, id 1, length 8).
        w.add([0x02] + Snoop.acl(handle: 0x0040, pb: 0b10, Snoop.l2cap(0x0005, [0x12, 0x01] + le16(8) + le16(24) + le16(40)
                                                                              + le16(0) + le16(500))), flags: 1, ms: 4200)
        event(Snoop.event(0x05, [0x00] + le16(0x0040) + [0x13]), 5000)  // Disconnection Complete: remote user terminated
        return w.bytes
    }

    // MARK: Unencapsulated HCI (1001): Xiaomi MiBeacon

    /// Flags-only datalink: a command, two reports of a MiBeacon thermometer,
    /// ACL data on a connection the capture never saw open, and one record cut
    /// short by the capturer's snap length (original 20, included 10).
    static func xiaomiH1() -> [UInt8] {
        var w = Writer(datalink: 1001)
        // H1 flags: 0x02 command sent, 0x03 event received, 0x01 ACL received.
        w.add(Snoop.command(0x200B, [0x01, 0x10, 0x00, 0x10, 0x00, 0x00, 0x00]), flags: 2, ms: 0)  // LE Set Scan Parameters
        let ad = flagsAnd([UInt8(3 + xiaomiLYWSDCGQ.count), 0x16, 0x95, 0xFE] + xiaomiLYWSDCGQ)
        w.add(Snoop.advertisingReport(type: 0x00, addressType: 0x00, address: xiaomiAddress, data: ad, rssi: -67), flags: 3, ms: 50)
        w.add(Snoop.acl(handle: 0x0001, pb: 0b10, Snoop.l2cap(0x0004, [0x1B, 0x03, 0x00, 0x01])), flags: 1, ms: 60)
        let cut = Snoop.advertisingReport(type: 0x00, addressType: 0x00, address: xiaomiAddress, data: ad, rssi: -66)
        w.add(Array(cut.prefix(10)), flags: 3, ms: 70, original: UInt32(cut.count))
        w.add(Snoop.advertisingReport(type: 0x00, addressType: 0x00, address: xiaomiAddress, data: ad, rssi: -70), flags: 3, ms: 1050)
        return w.bytes
    }
}
