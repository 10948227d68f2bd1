import DBus
import Foundation
import Locking
@testable import ScenarioFormat
import Testing
import TestSupport
@testable import BlueZSimulator

// Passive scanning against the simulator with a monitor application written
// here by hand (raw D-Bus, not the BlueZ client): the interface as
// doc/org.bluez.AdvertisementMonitor.rst describes it.

let monitorInterface = "org.bluez.AdvertisementMonitor1"
let monitorManager = "org.bluez.AdvertisementMonitorManager1"
let bthome = "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2"
let ruuviTag = "/org/bluez/hci0/dev_CB_B8_33_4C_88_4F"
let atc = "/org/bluez/hci0/dev_A4_C1_38_5A_1B_2C"
let essSensor = "/org/bluez/hci0/dev_C4_7C_8D_6A_3E_01"
let polar = "/org/bluez/hci0/dev_E4_5F_01_AA_10_01"

/// Every call bluetoothd made on the application's monitors, in order.
final class MonitorCalls: @unchecked Sendable {
    struct Call: Equatable {
        var monitor: String
        var member: String
        var device: String?
    }
    private let lock = NSLock()
    private var items: [Call] = []
    func add(_ c: Call) { lock.withLock { items.append(c) } }
    var all: [Call] { lock.withLock { items } }
    func members(of monitor: String) -> [String] { all.filter { $0.monitor == monitor }.map(\.member) }
    func devices(_ member: String, monitor: String) -> [String] {
        all.filter { $0.monitor == monitor && $0.member == member }.compactMap(\.device)
    }
}

/// A pattern as the Patterns property carries it: (start, AD type, content).
func pattern(_ start: UInt8, _ type: UInt8, _ content: [UInt8]) -> DBusValue {
    .structure([.byte(start), .byte(type), .bytes(content)])
}

func patterns(_ items: [DBusValue]) -> DBusValue { .array(.structure([.byte, .byte, .array(.byte)]), items) }

/// An application: an ObjectManager at `root` (unless `objectManager` is
/// false) and monitor objects with exactly the given properties.
final class MonitorApplication: Sendable {
    let root: ObjectPath
    let calls = MonitorCalls()
    let connection: DBusConnection
    private let manager: DBusObjectManagerRegistration?
    private let objects: Lock<[String: DBusObjectRegistration]> = Lock([:])

    init(_ connection: DBusConnection, root: ObjectPath, objectManager: Bool = true) async throws {
        self.connection = connection
        self.root = root
        manager = objectManager ? try await connection.exportObjectManager(at: root) : nil
    }

    func addMonitor(_ name: String, _ properties: [String: DBusValue]) async throws {
        let calls = self.calls
        let path = try root.appending(name)
        let monitor = path.rawValue
        func recorder(_ member: String, _ hasDevice: Bool) -> DBusMethodDescription {
            DBusMethodDescription(member, inputs: hasDevice ? [.init("device", .objectPath)] : []) { call in
                let device: ObjectPath? = hasDevice ? try call.argument(0) : nil
                calls.add(.init(monitor: monitor, member: member, device: device?.rawValue))
                return []
            }
        }
        let description = DBusInterfaceDescription(monitorInterface, methods: [
            recorder("Release", false), recorder("Activate", false), recorder("DeviceFound", true), recorder("DeviceLost", true),
        ], properties: properties.map { DBusPropertyDescription($0.key, $0.value.type) })
        let registration = try await connection.export(path, interfaces: [DBusExportedInterface(description, values: properties)])
        objects.withLock { $0[name] = registration }
    }

    func removeMonitor(_ name: String) {
        let r = objects.withLock { $0.removeValue(forKey: name) }
        r?.unexport()
    }

    func manager(_ adapter: String = "/org/bluez/hci0") throws -> DBusProxy {
        DBusProxy(connection: connection, destination: "org.bluez", path: try ObjectPath(adapter), interface: monitorManager)
    }

    func register() async throws { _ = try await manager().call("RegisterMonitor", [.objectPath(root)]) }
    func unregister() async throws { _ = try await manager().call("UnregisterMonitor", [.objectPath(root)]) }
}

/// BTHome (service data 0xFCD2), Ruuvi (company 0x0499), pvvx (service data 0x181A).
let decodableMonitor: [String: DBusValue] = [
    "Type": .string("or_patterns"),
    "Patterns": patterns([pattern(0, 0x16, [0xD2, 0xFC]), pattern(0, 0xFF, [0x99, 0x04]), pattern(0, 0x16, [0x1A, 0x18])]),
]

@Suite(.serialized, .timeLimit(.minutes(1))) struct MonitorTests {
    @Test func managerOnlyWithExperimentalInterfaces() async throws {
        try await withSimulator(try loadScenario("test-passive.json")) { _, _, client in
            let objects = try await client.managedObjects(destination: "org.bluez")
            let manager = try #require(objects["/org/bluez/hci0"]?[monitorManager])
            #expect(manager["SupportedMonitorTypes"] == .array(.string, [.string("or_patterns")]))
            #expect(manager["SupportedFeatures"] == .array(.string, []))
            #expect(objects["/org/bluez/hci0"]?["org.bluez.Adapter1"] != nil)
        }
        // Without "experimental": true, bluetoothd has no such interface.
        try await withSimulator(try loadScenario("test-basic.json")) { _, _, client in
            let objects = try await client.managedObjects(destination: "org.bluez")
            #expect(objects["/org/bluez/hci0"]?["org.bluez.Adapter1"] != nil)
            #expect(objects["/org/bluez/hci0"]?[monitorManager] == nil)
            let app = try await MonitorApplication(client, root: "/test/app")
            #expect(await errorName { try await app.register() } == "org.freedesktop.DBus.Error.UnknownInterface")
        }
    }

    @Test func activeMonitorReportsMatchingDevicesWithoutDiscovery() async throws {
        // The pvvx thermometer stops advertising 3 s after the simulator started (the
        // fixture's time). On a loaded machine the monitor was activated later than
        // that (a CI run: its object was there, DeviceFound never came); here it stops
        // at 8 s, so DeviceFound comes first however slow the start.
        var scenario = try loadScenario("test-passive.json")
        scenario.stopAdvertising("A4:C1:38:5A:1B:2C", at: 8)
        try await withSimulator(scenario) { _, _, client in
            // Nothing is reported before anyone scans, actively or passively.
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await client.managedObjects(destination: "org.bluez").keys.filter { $0.rawValue.contains("dev_") }.isEmpty)

            let app = try await MonitorApplication(client, root: "/test/app")
            try await app.addMonitor("m0", decodableMonitor)
            try await app.register()
            // Registering the same root again from the same client: AlreadyExists.
            #expect(await errorName { try await app.register() } == "org.bluez.Error.AlreadyExists")
            let m0 = "/test/app/m0"
            #expect(try await eventually { app.calls.members(of: m0).contains("Activate") })

            #expect(try await eventually {
                let o = try await client.managedObjects(destination: "org.bluez")
                return try [bthome, ruuviTag, atc].allSatisfy { o[try ObjectPath($0)] != nil }
            })
            let objects = try await client.managedObjects(destination: "org.bluez")
            // The device objects look as during discovery: data and RSSI.
            let device = try #require(objects[try ObjectPath(bthome)]?["org.bluez.Device1"])
            #expect(device["ServiceData"] != nil)
            #expect(device["RSSI"] != nil)
            #expect(objects["/org/bluez/hci0"]?["org.bluez.Adapter1"]?["Discovering"] == .boolean(false))

            // Updates keep coming without discovery (the BTHome timeline changes its data every 0.2 s).
            let changes = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                           member: "PropertiesChanged", path: try ObjectPath(bthome)))
            let updates = try await collect(changes, count: 2, within: 3)
            #expect(updates.contains { ((try? $0.argument(1, as: [String: DBusValue].self)) ?? [:])["ServiceData"] != nil })

            // 0x181A only in a UUID list, and another company's data, match no pattern.
            let later = try await client.managedObjects(destination: "org.bluez")
            #expect(later[try ObjectPath(essSensor)] == nil)
            #expect(later[try ObjectPath(polar)] == nil)

            // DeviceFound once per device, however often it advertises.
            #expect(app.calls.devices("DeviceFound", monitor: m0).sorted() == [atc, bthome, ruuviTag].sorted())
            #expect(app.calls.members(of: m0).filter { $0 == "Activate" }.count == 1)

            // The pvvx thermometer stops advertising at 8 s: DeviceLost, then it ages out (1 s).
            #expect(try await eventually(within: 15) { app.calls.devices("DeviceLost", monitor: m0) == [atc] })
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(atc)] == nil })
        }
    }

    @Test func unregisterReleasesAndStopsUpdates() async throws {
        try await withSimulator(try loadScenario("test-passive.json")) { _, _, client in
            let app = try await MonitorApplication(client, root: "/test/app")
            try await app.addMonitor("m0", decodableMonitor)
            try await app.register()
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(bthome)] != nil })
            try await app.unregister()
            #expect(try await eventually { app.calls.members(of: "/test/app/m0").contains("Release") })
            #expect(await errorName { try await app.unregister() } == "org.bluez.Error.DoesNotExist")

            // No more advertisements are reported: the BTHome data (changing every 0.2 s) stays put...
            let changes = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties",
                                                                           member: "PropertiesChanged", path: try ObjectPath(bthome)))
            let updates = try await collect(changes, count: 1, within: 0.8)
            #expect(updates.isEmpty, "\(updates.map(\.body))")
            // ...and the devices age out like after discovery (1 s; the window is wide because
            // the suite runs beside the overload tests, which saturate both cores).
            #expect(try await eventually(within: 15) { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(bthome)] == nil })
        }
    }

    @Test func refusedMonitorsAreReleasedNotActivated() async throws {
        try await withSimulator(try loadScenario("test-passive.json")) { _, _, client in
            let app = try await MonitorApplication(client, root: "/test/app")
            let good = pattern(0, 0x16, [0xD2, 0xFC])
            let bad: [String: [String: DBusValue]] = [
                "oldTypeName": ["Type": .string("patterns_with_logic_or"), "Patterns": patterns([good])],
                "noPatterns": ["Type": .string("or_patterns"), "Patterns": patterns([])],
                "pastTheEnd": ["Type": .string("or_patterns"), "Patterns": patterns([pattern(30, 0x16, [0xD2, 0xFC])])],
                "unassignedType": ["Type": .string("or_patterns"), "Patterns": patterns([pattern(0, 0x50, [0x01])])],
                "emptyContent": ["Type": .string("or_patterns"), "Patterns": patterns([pattern(0, 0x16, [])])],
                "seventeen": ["Type": .string("or_patterns"), "Patterns": patterns(Array(repeating: good, count: 17))],
                // bluetoothd 5.66's one-byte command length wraps at 8 patterns.
                "eight": ["Type": .string("or_patterns"), "Patterns": patterns(Array(repeating: good, count: 8))],
                "rssiOutOfRange": ["Type": .string("or_patterns"), "Patterns": patterns([good]), "RSSIHighThreshold": .int16(50)],
                "rssiWrongType": ["Type": .string("or_patterns"), "Patterns": patterns([good]), "RSSILowTimeout": .int32(5)],
            ]
            for (name, properties) in bad { try await app.addMonitor(name, properties) }
            try await app.addMonitor("fine", ["Type": .string("or_patterns"), "Patterns": patterns(Array(repeating: good, count: 7)),
                                              "RSSILowThreshold": .int16(-90), "RSSIHighThreshold": .int16(-80),
                                              "RSSILowTimeout": .uint16(5), "RSSIHighTimeout": .uint16(1), "RSSISamplingPeriod": .uint16(0)])
            // bluetoothd answers the registration itself with success...
            try await app.register()
            // ...releases each monitor it cannot use, and activates the rest.
            #expect(try await eventually { app.calls.members(of: "/test/app/fine").contains("Activate") })
            #expect(try await eventually { bad.keys.allSatisfy { app.calls.members(of: "/test/app/\($0)") == ["Release"] } },
                    "\(app.calls.all)")
            #expect(try await eventually { app.calls.devices("DeviceFound", monitor: "/test/app/fine") == [bthome] })
            #expect(!app.calls.members(of: "/test/app/fine").contains("Release"))
        }
    }

    @Test func monitorsExportedLaterAndApplicationsWithoutObjectManager() async throws {
        try await withSimulator(try loadScenario("test-passive.json")) { _, _, client in
            // No ObjectManager at the root: the registration still succeeds, with no monitors.
            let bare = try await MonitorApplication(client, root: "/test/bare", objectManager: false)
            try await bare.register()
            try await bare.unregister()

            // A monitor exported after the registration is picked up (InterfacesAdded).
            let app = try await MonitorApplication(client, root: "/test/app")
            try await app.register()
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await client.managedObjects(destination: "org.bluez")[try ObjectPath(ruuviTag)] == nil)
            try await app.addMonitor("ruuvi", ["Type": .string("or_patterns"), "Patterns": patterns([pattern(0, 0xFF, [0x99, 0x04])])])
            #expect(try await eventually { app.calls.members(of: "/test/app/ruuvi").sorted() == ["Activate", "DeviceFound"] })
            #expect(app.calls.devices("DeviceFound", monitor: "/test/app/ruuvi") == [ruuviTag])
            #expect(try await client.managedObjects(destination: "org.bluez")[try ObjectPath(bthome)] == nil, "not matched by this monitor")

            // Removing the object ends the monitor without Release; its devices age out.
            app.removeMonitor("ruuvi")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(ruuviTag)] == nil })
            #expect(app.calls.members(of: "/test/app/ruuvi").sorted() == ["Activate", "DeviceFound"])
        }
    }

    @Test func advertisingDataIsBuiltAsTheADStructuresItStandsFor() async throws {
        let scenario = try Scenario.parse("""
        { "devices": [ { "address": "00:00:00:00:00:01", "name": "Thing", "txPower": -4, "appearance": 833,
                         "uuids": ["180d", "a92ee200-5501-11e4-916c-0800200c9a66"],
                         "serviceData": { "fcd2": "40", "12345678": "01" },
                         "manufacturerData": { "0x004c": "0215" } } ] }
        """)
        let sim = BlueZSimulator(scenario: scenario)
        let d = DeviceState(spec: scenario.devices[0], index: 0, adapterPath: "/org/bluez/hci0")
        let structures = await sim.advertisingStructures(d)
        let byType = Dictionary(structures.map { ($0.type, $0.data) }, uniquingKeysWith: { a, _ in a })
        #expect(byType[0x01] == [0x06])
        #expect(byType[0x09] == Array("Thing".utf8))
        #expect(byType[0x0A] == [0xFC])
        #expect(byType[0x19] == [0x41, 0x03])
        #expect(byType[0x03] == [0x0D, 0x18])
        #expect(byType[0x07] == [0x66, 0x9a, 0x0c, 0x20, 0x00, 0x08, 0x6c, 0x91, 0xe4, 0x11, 0x01, 0x55, 0x00, 0xe2, 0x2e, 0xa9])
        #expect(byType[0x16] == [0xD2, 0xFC, 0x40])
        #expect(byType[0x20] == [0x78, 0x56, 0x34, 0x12, 0x01])
        #expect(byType[0xFF] == [0x4C, 0x00, 0x02, 0x15])
        // A pattern may start inside the data: iBeacon's type bytes after the company id.
        #expect(BlueZSimulator.matches([MonitorPattern(start: 2, adType: 0xFF, content: [0x02, 0x15])], structures))
        #expect(!BlueZSimulator.matches([MonitorPattern(start: 3, adType: 0xFF, content: [0x02, 0x15])], structures))
        #expect(!BlueZSimulator.matches([MonitorPattern(start: 0, adType: 0x16, content: [0x1A, 0x18])], structures))
    }
}
