import BLEParsing
import DBus
import Foundation
@testable import ScenarioFormat
import Testing

@testable import BlueZSimulator
@testable import CaptureImport
import Vocabulary

let repositoryRoot: URL = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return url
}()

/// Reads fixtures/captures/`name`, analyzes and converts it.
func importFixture(_ name: String) throws -> (timeline: CaptureTimeline, result: ScenarioImporter.Result) {
    let bytes = Array(try Data(contentsOf: repositoryRoot.appendingPathComponent("fixtures/captures/\(name)")))
    let timeline = try CaptureAnalyzer.analyze(bytes)
    return (timeline, ScenarioImporter.convert(timeline, options: .init(name: "imported", sourceName: name)))
}

/// The converted scenario as the simulator reads it.
func simulatorScenario(_ result: ScenarioImporter.Result) throws -> Scenario {
    try Scenario.parse(result.scenario.text, fileName: "imported.json")
}

func uuid(_ short: String) -> String { "0000\(short)-0000-1000-8000-00805f9b34fb" }

/// Captures → scenario JSON → the simulator's own scenario parser: the
/// output must load unchanged and say what the capture showed.
@Suite("Capture import: scenario")
struct ScenarioImportTests {
    @Test func monitorCaptureBecomesAdvertisementTimelines() throws {
        let (_, result) = try importFixture("bthome-pvvx-monitor.btsnoop")
        let s = try simulatorScenario(result)
        #expect(s.name == "imported")
        #expect(s.adapters.map(\.address) == ["00:1A:7D:DA:71:13"])
        #expect(s.devices.map(\.address) == ["A4:C1:38:8D:18:B2", "58:2D:34:12:33:DC"])

        let bthome = s.devices[0]
        #expect(bthome.addressType == "public")
        #expect(bthome.rssi == -60)
        #expect(bthome.name == nil)  // the name comes with the scan response, as an event
        #expect(bthome.serviceData == [uuid("fcd2"): Snoop.hex("4002ca0903bf13")])
        #expect(!bthome.advertisingAtStart)
        let events = try #require(bthome.advertising?.events)
        #expect(events.map(\.at) == [0.1, 0.101, 1.1])
        #expect(events[0].present == true)
        #expect(events[1].name == "DIY-sensor")
        #expect(events[1].rssi == -61)
        #expect(events[1].serviceData == nil)
        #expect(events[2].rssi == -62)
        #expect(events[2].serviceData == [uuid("fcd2"): Snoop.hex("4004138a01")])

        let pvvx = s.devices[1]
        #expect(pvvx.serviceData == [uuid("181a"): Snoop.hex("dc3312342d582f09aa173d0b4b7c05")])
        let pvvxEvents = try #require(pvvx.advertising?.events)
        #expect(pvvxEvents.map(\.at) == [0.25, 2.25])
        #expect(pvvxEvents[1].serviceData == [uuid("181a"): Snoop.hex("dc3312342d582909c017350b4a8c05")])
        #expect(pvvxEvents[1].rssi == -70)
        #expect(s.devices.allSatisfy { $0.gatt.isEmpty })
    }

    @Test func h4CaptureBecomesAGATTDatabaseWithNotifications() throws {
        let (_, result) = try importFixture("heart-rate-h4.btsnoop")
        let s = try simulatorScenario(result)
        #expect(s.adapters.count == 1)  // the simulator's default: no controller in an H4 log
        let d = try #require(s.devices.first)
        #expect(s.devices.count == 1)
        #expect(d.address == "F3:4A:9E:21:7C:05")
        #expect(d.addressType == "random")
        #expect(d.name == "HRM-Demo")
        #expect(d.uuids == [uuid("180d")])
        #expect(d.rssi == -58)
        #expect(d.connectable)
        #expect(d.mtu == 247)
        #expect(d.advertising?.events.map(\.at) == [0.12])

        #expect(d.gatt.map(\.uuid) == [uuid("1800"), uuid("180d"), uuid("180f")])
        #expect(d.gatt.allSatisfy { $0.primary })
        let hr = d.gatt[1].characteristics
        #expect(hr.map(\.uuid) == [uuid("2a37"), uuid("2a38"), uuid("2a39")])
        #expect(hr.map(\.flags) == [["notify"], ["read"], ["write"]])
        #expect(hr[0].descriptors.map(\.uuid) == [uuid("2902")])
        #expect(hr[0].descriptors.first?.flags == ["read", "write"])
        #expect(hr[1].value == [0x01])
        #expect(d.gatt[0].characteristics.first?.value == Array("HRM-Demo".utf8))
        #expect(d.gatt[2].characteristics.first?.value == [0x57])
        #expect(d.gatt[2].characteristics.first?.flags == ["read", "notify"])
        // Enabled at 1.0 s, notified at 2, 3 and 4 s.
        let notifications = try #require(hr[0].notifications)
        #expect(notifications.events.map(\.at) == [1, 2, 3])
        #expect(notifications.events.map(\.value) == [Snoop.hex("16485401EC02"), Snoop.hex("06AA"), Snoop.hex("00AA")])
        #expect(notifications.repeatEvery == nil)

        #expect(result.summary.devices.first?.notificationEvents == 3)
        #expect(result.summary.notes == ["writes by the client are not replayed"])
        #expect(result.summary.lines.contains("  F3:4A:9E:21:7C:05 \"HRM-Demo\": 1 advertisement event, GATT 3 services / 6 characteristics, 3 notifications"))
        #expect(result.summary.lines.contains("  1 × L2CAP CID 0x0005"))
    }

    @Test func unencapsulatedCaptureAndItsReport() throws {
        let (timeline, result) = try importFixture("xiaomi-h1.btsnoop")
        let s = try simulatorScenario(result)
        let d = try #require(s.devices.first)
        #expect(d.address == "58:2D:34:3B:2E:BF")
        #expect(d.serviceData == [uuid("fe95"): Snoop.hex("5020aa01a3bf2e3b342d580d1004b40095020a10013b")])
        let events = try #require(d.advertising?.events)
        #expect(events.map(\.at) == [0.05, 1.05])
        #expect(events[1].rssi == -70)
        #expect(events[1].serviceData == nil)  // unchanged data is not repeated
        #expect(timeline.malformedCount == 1)
        #expect(result.summary.notes == ["1 record cut short by the capture's snap length"])
        #expect(result.summary.lines.contains("malformed packets: 1"))
        #expect(result.summary.lines.contains { $0.hasPrefix("  record 4 (byte offset 153): HCI event: need") })
    }

    @Test func convertedTextIsStable() throws {
        let (_, result) = try importFixture("xiaomi-h1.btsnoop")
        #expect(result.scenario.text == """
            {
              "name": "imported",
              "description": "Imported from xiaomi-h1.btsnoop by blecompanion import-btsnoop (5 records, HCI unencapsulated (H1, 1001))",
              "devices": [
                {
                  "address": "58:2D:34:3B:2E:BF",
                  "addressType": "public",
                  "rssi": -67,
                  "serviceData": { "fe95": "5020aa01a3bf2e3b342d580d1004b40095020a10013b" },
                  "advertisingAtStart": false,
                  "advertising": {
                    "timeline": [
                      { "at": 0.05, "present": true },
                      { "at": 1.05, "rssi": -70 }
                    ]
                  }
                }
              ]
            }

            """)
    }

    // MARK: The replayed capture on a simulated bluetoothd

    @Test func importedCaptureReplaysOnTheSimulator() async throws {
        let (_, result) = try importFixture("heart-rate-h4.btsnoop")
        let scenario = try simulatorScenario(result)
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let sim = BlueZSimulator(scenario: scenario, options: SimulatorOptions(speed: 4))
        try await sim.start(busAddress: bus.address)
        let client = try await DBusConnection.connect(to: .address(bus.address))
        defer { client.close() }
        let devicePath = "/org/bluez/hci0/dev_F3_4A_9E_21_7C_05"
        let adapter = DBusProxy(connection: client, destination: "org.bluez", path: ObjectPath("/org/bluez/hci0"), interface: "org.bluez.Adapter1")
        try await adapter.call("StartDiscovery")
        var found = false
        for _ in 0..<100 where !found {
            found = try await client.managedObjects(destination: "org.bluez")[try ObjectPath(devicePath)] != nil
            if !found { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(found)
        let device = DBusProxy(connection: client, destination: "org.bluez", path: try ObjectPath(devicePath), interface: "org.bluez.Device1")
        #expect(try await device.property("Name") == .string("HRM-Demo"))
        try await device.call("Connect")
        // Connect replies at link-up, as bluetoothd's does; the GATT objects follow.
        for _ in 0..<250 where try await device.property("ServicesResolved") != .boolean(true) {
            try await Task.sleep(for: .milliseconds(20))
        }
        let objects = try await client.managedObjects(destination: "org.bluez")
        func characteristic(_ short: String) -> ObjectPath? {
            objects.first { $0.value["org.bluez.GattCharacteristic1"]?["UUID"] == .string(uuid(short)) }?.key
        }
        let location = try #require(characteristic("2a38"))
        let read = DBusProxy(connection: client, destination: "org.bluez", path: location, interface: "org.bluez.GattCharacteristic1")
        #expect(try await read.call("ReadValue", [.propertyMap([:])]) == [.bytes([0x01])])

        let measurement = try #require(characteristic("2a37"))
        let changes = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                        member: "PropertiesChanged", path: measurement))
        let hrm = DBusProxy(connection: client, destination: "org.bluez", path: measurement, interface: "org.bluez.GattCharacteristic1")
        try await hrm.call("StartNotify")
        var values: [DBusValue] = []
        let reader = Task {
            var seen: [DBusValue] = []
            for try await m in changes {
                if let v = (try? m.argument(1, as: [String: DBusValue].self))?["Value"] { seen.append(v) }
                if seen.count >= 3 { break }
            }
            return seen
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(5))
            reader.cancel()
        }
        values = (try? await reader.value) ?? []
        timeout.cancel()
        #expect(values == [.bytes(Snoop.hex("16485401EC02")), .bytes(Snoop.hex("06AA")), .bytes(Snoop.hex("00AA"))])
        await sim.stop()
    }
}

/// Small timelines for what the fixtures do not show.
@Suite("Capture import: mapping")
struct ScenarioMappingTests {
    static let address = (try? BluetoothAddress("C0:11:22:33:44:55")) ?? BluetoothAddress(value: 0)

    static func advertisement(_ data: [UInt8], type: UInt8 = 0x00, rssi: Int8? = -50, ms: Int64 = 0) -> CapturedAdvertisement {
        CapturedAdvertisement(timestamp: Snoop.t0 + ms * 1000, record: 1,
                              report: LEAdvertisingReport(format: .legacy, eventType: UInt16(type), addressType: .random, address: address,
                                                          data: data, rssi: rssi))
    }

    static func timeline(_ device: CapturedDevice) -> CaptureTimeline {
        var t = CaptureTimeline(datalink: .hciUART)
        t.firstTimestamp = Snoop.t0
        t.recordCount = 1
        t.devices = [device]
        return t
    }

    static func convert(_ device: CapturedDevice) throws -> (Scenario, ScenarioImporter.Result) {
        let result = ScenarioImporter.convert(timeline(device), options: .init(name: "t", sourceName: "t.btsnoop"))
        return (try simulatorScenario(result), result)
    }

    @Test func conversionStopsOnceTheEventsAloneExceedTheSizeLimit() throws {
        var d = CapturedDevice(address: Self.address, addressType: .random)
        d.advertisements = (0..<200).map { Self.advertisement([0x04, 0xFF, 0x99, 0x04, UInt8($0)], ms: Int64($0) * 100) }
        let whole = ScenarioImporter.convert(Self.timeline(d), options: .init(name: "t", sourceName: "t.btsnoop"))
        #expect(!whole.exceedsSizeLimit)
        let size = whole.scenario.text.utf8.count
        let roomy = ScenarioImporter.convert(Self.timeline(d), options: .init(name: "t", sourceName: "t.btsnoop", sizeLimit: size))
        #expect(!roomy.exceedsSizeLimit && roomy.scenario == whole.scenario)
        // The 199 change events alone take more than 2 000 bytes: stopped, and said so.
        let tight = ScenarioImporter.convert(Self.timeline(d), options: .init(name: "t", sourceName: "t.btsnoop", sizeLimit: 2000))
        #expect(tight.exceedsSizeLimit)
    }

    @Test func nonConnectableAdvertiserAndMergedData() throws {
        var d = CapturedDevice(address: Self.address, addressType: .random)
        // ADV_NONCONN_IND with manufacturer data 0x0499 and TX power; then other company data and a shortened name.
        d.advertisements = [
            Self.advertisement([0x05, 0xFF, 0x99, 0x04, 0x05, 0x12, 0x02, 0x0A, 0xFC], type: 0x03),
            Self.advertisement([0x04, 0xFF, 0x4C, 0x00, 0x02, 0x03, 0x08, 0x52, 0x75], type: 0x03, rssi: nil, ms: 500),
            Self.advertisement([0x04, 0xFF, 0x4C, 0x00, 0x02, 0x03, 0x08, 0x52, 0x75], type: 0x03, rssi: nil, ms: 900),
        ]
        let (s, _) = try Self.convert(d)
        let device = try #require(s.devices.first)
        #expect(!device.connectable)
        #expect(device.advertisingAtStart)
        #expect(device.txPower == -4)
        #expect(device.manufacturerData == [0x0499: [0x05, 0x12]])
        let events = try #require(device.advertising?.events)
        #expect(events.count == 1)  // the third advertisement changes nothing
        #expect(events[0].at == 0.5)
        #expect(events[0].name == "Ru")
        #expect(events[0].manufacturerData == [0x0499: [0x05, 0x12], 0x004C: [0x02]])  // merged by company, as bluetoothd does
        #expect(events[0].rssi == nil)
    }

    @Test func gattOnlyDeviceReadErrorsAndNotificationsWithoutTheFlag() throws {
        var d = CapturedDevice(address: Self.address, addressType: .publicIdentity)
        d.connections = [CapturedConnection(controller: 0, handle: 0x40, connected: Snoop.t0, disconnected: nil, role: 0)]
        d.services = [CapturedService(handle: 1, endHandle: 9, uuid: 0x180F, primary: false, characteristics: [
            CapturedCharacteristic(handle: 2, properties: 0x02, valueHandle: 3, uuid: 0x2A19,
                                   descriptors: [CapturedDescriptor(handle: 4, uuid: 0x2901)]),
            CapturedCharacteristic(handle: 5, properties: 0x02, valueHandle: 6, uuid: 0x2A1A, descriptors: []),
        ])]
        d.attErrors = [CapturedATTError(timestamp: Snoop.t0, record: 2, requestOpcode: 0x0A, handle: 3, error: 0x05)]
        d.values = [
            CapturedValueEvent(timestamp: Snoop.t0, record: 3, handle: 4, value: Array("Level".utf8), kind: .read, offset: 0),
            CapturedValueEvent(timestamp: Snoop.t0, record: 4, handle: 6, value: [0x01], kind: .notification, offset: 0),
        ]
        let (s, result) = try Self.convert(d)
        let device = try #require(s.devices.first)
        #expect(device.addressType == "public")
        #expect(device.advertisingAtStart)
        #expect(device.advertising == nil)
        let service = try #require(device.gatt.first)
        #expect(!service.primary)
        #expect(service.characteristics[0].readError == ErrorSpec(name: "org.bluez.Error.NotPermitted", message: "ATT error 0x05 in the capture"))
        #expect(service.characteristics[0].descriptors.first?.value == Array("Level".utf8))
        #expect(service.characteristics[1].notifications == nil)
        #expect(result.summary.notes == ["notifications of a characteristic without notify/indicate left out"])
    }

    @Test func timesBeyondTheScenarioLimitAreLeftOut() throws {
        var d = CapturedDevice(address: Self.address, addressType: .random)
        d.advertisements = [Self.advertisement([0x02, 0x01, 0x06]),
                            Self.advertisement([0x02, 0x01, 0x06], rssi: -60, ms: 999_999_000),
                            Self.advertisement([0x02, 0x01, 0x06], rssi: -70, ms: 1_000_001_000)]
        var t = Self.timeline(d)
        t.firstTimestamp = Snoop.t0
        let result = ScenarioImporter.convert(t, options: .init(name: "t", sourceName: "t.btsnoop"))
        let s = try simulatorScenario(result)
        #expect(s.devices.first?.advertising?.events.map(\.at) == [999_999])
        #expect(result.summary.notes == ["advertisements later than 1000000 s left out"])
    }

    @Test func readErrorMapping() {
        #expect(ScenarioImporter.readError(0x02)["name"] == .string("org.bluez.Error.NotPermitted"))
        #expect(ScenarioImporter.readError(0x07)["name"] == .string("org.bluez.Error.InvalidArguments"))
        #expect(ScenarioImporter.readError(0x08)["name"] == .string("org.bluez.Error.NotAuthorized"))
        #expect(ScenarioImporter.readError(0x06)["name"] == .string("org.bluez.Error.NotSupported"))
        #expect(ScenarioImporter.readError(0x80)["name"] == .string("org.bluez.Error.Failed"))
    }

    @Test func emptyCaptureIsAScenarioWithoutDevices() throws {
        var t = CaptureTimeline(datalink: .linuxMonitor)
        t.recordCount = 0
        let result = ScenarioImporter.convert(t, options: .init(name: "empty", sourceName: "e.btsnoop"))
        let s = try simulatorScenario(result)
        #expect(s.devices.isEmpty)
        #expect(result.summary.lines == ["0 records, datalink Linux monitor (btmon, 2001); 0 devices"])
    }
}

/// Test-local byte helpers (the BLEParsing test support is another target).
enum Snoop {
    static let t0: Int64 = Btsnoop.unixEpochTimestamp + 1_717_243_200 * 1_000_000
    static func hex(_ text: String) -> [UInt8] { (try? BLEParsing.parseHex(text)) ?? [] }
}

/// `import-btsnoop` reads a block at a time and folds advertisements as it
/// goes (`BtsnoopStream`, `CaptureAnalyzer(keepsAdvertisements: false)`,
/// `ScenarioImporter.Builder`): the scenario must be the one the whole-file
/// conversion gives.
@Suite("Capture import: streamed")
struct StreamedImportTests {
    static func streamed(_ bytes: [UInt8], block: Int, options: ScenarioImporter.Options) throws -> ScenarioImporter.Result {
        var importer = StreamingImport(options: options)
        var at = 0
        while at < bytes.count, try importer.append(bytes[at..<min(at + block, bytes.count)]) { at += block }
        return try importer.finish()
    }

    @Test(arguments: ["bthome-pvvx-monitor.btsnoop", "heart-rate-h4.btsnoop", "xiaomi-h1.btsnoop"])
    func fixturesGiveTheWholeConversionsScenario(name: String) throws {
        let bytes = Array(try Data(contentsOf: repositoryRoot.appendingPathComponent("fixtures/captures/\(name)")))
        let (_, whole) = try importFixture(name)
        for block in [1, 100, 65_536] {
            let result = try Self.streamed(bytes, block: block, options: .init(name: "imported", sourceName: name))
            #expect(result.scenario.text == whole.scenario.text, "\(name) in blocks of \(block)")
            #expect(result.summary == whole.summary)
        }
        #expect(try !simulatorScenario(whole).devices.isEmpty)
        let (timeline, _) = try importFixture(name)
        var trees = ScenarioImporter.Builder(options: .init(name: "imported", sourceName: name))
        trees.rendersEvents = false
        for d in timeline.devices { trees.add(d.advertisements, firstTimestamp: timeline.firstTimestamp) }
        #expect(trees.finish(timeline).scenario.text == whole.scenario.text, "events as text are written as trees are")
    }

    /// Many devices interleaved, data changing each time: the same events
    /// per device; and with a limit the streamed import stops reading as
    /// soon as the events alone pass it.
    @Test func interleavedDevicesAndTheSizeLimit() throws {
        var bytes = BtsnoopWriter.header(datalink: .hciUART)
        for i in 0..<6_000 {
            let d = UInt8(i % 50)
            let man: [UInt8] = [0x05, UInt8((i / 50) % 7), UInt8(i % 3)] + [UInt8](repeating: 0, count: 10)
            let ad: [UInt8] = [2, 0x01, 0x06, UInt8(3 + man.count), 0xFF, 0x99, 0x04] + man
            let report: [UInt8] = [0x02, 1, 0x00, 0x01, d, 0x22, 0x33, 0x44, 0x55, 0xC0, UInt8(ad.count)] + ad + [UInt8(bitPattern: Int8(-40 - i % 9))]
            bytes += BtsnoopWriter.record([0x04, 0x3E, UInt8(report.count)] + report, flags: 3, unixMicroseconds: 1_700_000_000_000_000 + Int64(i) * 1000)
        }
        let timeline = try CaptureAnalyzer.analyze(bytes)
        let whole = ScenarioImporter.convert(timeline, options: .init(name: "t", sourceName: "t"))
        let streamed = try Self.streamed(bytes, block: 4096, options: .init(name: "t", sourceName: "t"))
        #expect(streamed.scenario.text == whole.scenario.text)
        // Events kept as text are written as the trees would be.
        var trees = ScenarioImporter.Builder(options: .init(name: "t", sourceName: "t"))
        trees.rendersEvents = false
        for d in timeline.devices { trees.add(d.advertisements, firstTimestamp: timeline.firstTimestamp) }
        #expect(trees.finish(timeline).scenario.text == whole.scenario.text)
        #expect(whole.summary.devices.count == 50)
        #expect(whole.summary.devices.allSatisfy { $0.advertisementEvents > 50 })

        let limit = whole.scenario.text.utf8.count / 4
        let cut = try Self.streamed(bytes, block: 4096, options: .init(name: "t", sourceName: "t", sizeLimit: limit))
        #expect(cut.exceedsSizeLimit)
        #expect(cut.summary.records < timeline.recordCount, "stopped reading at the limit")
        #expect(ScenarioImporter.convert(timeline, options: .init(name: "t", sourceName: "t", sizeLimit: limit)).exceedsSizeLimit)
    }
}
