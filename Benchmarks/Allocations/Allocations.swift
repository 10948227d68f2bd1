import BLEParsing
import Benchmark
@_spi(Benchmarks) import BlueZ
import Dashboard
import DBus
import Domain
import Foundation
import Gateway
import Presenters
import TerminalUI
import Vocabulary

/// Heap allocations per advertisement in each incremental step of the
/// pipeline (issue 16), at 100 and at 10 000 devices: the step must cost the
/// same however many devices are around. Malloc counts are deterministic, so
/// the thresholds in `Thresholds/` are compared in CI
/// (`scripts/check-allocations`): more allocations than the baseline fail the
/// run. Each sample is one advertisement; preparing its input is not counted
/// (`startMeasurement()` after it).
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.mallocCountTotal],
        warmupIterations: 20,
        maxDuration: .seconds(3),
        maxIterations: 400,
        // A malloc count is exact; one or two more at p90 than the stored
        // baseline is noise from the runtime's own caches, more is a change.
        thresholds: [.mallocCountTotal: .init(absolute: [.p50: 2, .p90: 2])]
    )
    for devices in [100, 10_000] {
        Benchmark("mirror-ingest-\(devices)") { benchmark, fixture in
            fixture.ingestOne(benchmark)
        } setup: {
            try MirrorFixture(devices: devices)
        }
        Benchmark("device-list-presenter-\(devices)") { benchmark, fixture in
            await fixture.presentOne(benchmark)
        } setup: {
            try await ListFixture(devices: devices)
        }
        Benchmark("publish-planner-\(devices)") { benchmark, fixture in
            fixture.planOne(benchmark)
        } setup: {
            try PlannerFixture(devices: devices)
        }
        Benchmark("dashboard-frame-\(devices)") { benchmark, fixture in
            fixture.drawOne(benchmark)
        } setup: {
            try FrameFixture(devices: devices)
        }
    }
}

// MARK: The devices

/// Device `i` of the benchmarks: C0:FE:ii:ii:ii:01 on hci0.
enum Fleet {
    static let adapter = AdapterID(path: "/org/bluez/hci0")
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    static func address(_ i: Int) throws -> BluetoothAddress {
        BluetoothAddress(value: 0xC0FE_0000_0001 | UInt64(i & 0xFF_FFFF) << 8)  // C0:FE:xx:xx:xx:01
    }

    static func id(_ i: Int) throws -> DeviceID { DeviceID(adapter: adapter, address: try address(i)) }

    /// A RuuviTag RAWv2 payload (company 0x0499) whose temperature bytes
    /// carry `step`, so that consecutive advertisements differ in content.
    static func ruuvi(step: Int) -> [UInt8] {
        [0x05, 0x12, UInt8(step & 0x7F), 0x53, 0x94, 0xC3, 0x7C, 0x00, 0x04, 0xFF, 0xFC, 0x04, 0x0C, 0xAC,
         0x36, 0x42, 0x00, 0xCD, 0xCB, 0xB8, 0x33, 0x4C, 0x88, 0x4F]
    }

    static func record(_ i: Int, step: Int = 0) throws -> DeviceRecord {
        DeviceRecord(id: try id(i), name: "Tag \(i)", rssi: rssi(i, step: step), format: "ruuvi",
                     readings: readings(i, step: step), lastSeen: start)
    }

    static func rssi(_ i: Int, step: Int) -> Int16 { Int16(-40 - (i + step) % 55) }

    static func readings(_ i: Int, step: Int) -> [Reading] {
        [Reading(.temperature, 20 + Double((i + step) % 50) / 10, unit: "°C"),
         Reading(.humidity, 40 + Double(i % 30), unit: "%"), Reading(.battery, 90, unit: "%")]
    }

    static func row(_ record: DeviceRecord) -> DeviceListPresenter.Row {
        DeviceListPresenter.Row(id: record.id, title: record.name ?? record.id.address.description, rssi: record.rssi,
                                format: record.format, readings: record.readings, lastSeen: record.lastSeen)
    }
}

// MARK: Mirror ingest: wire bytes → decoded message → the mirror's tree

/// One PropertiesChanged (RSSI + ManufacturerData) as bluetoothd sends it
/// for every advertisement: decoded from its bytes and applied to the tree,
/// what `BlueZMirror` does on the D-Bus I/O thread.
final class MirrorFixture: @unchecked Sendable {
    var snapshot = BlueZSnapshot()
    let decoder = DBusMessageDecoder()
    /// Two advertisements per device (alternating content), marshalled.
    let messages: [[[UInt8]]]
    var next = 0

    init(devices: Int) throws {
        _ = snapshot.apply(DBusMessage(
            kind: .signal, path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded",
            body: [.objectPath("/org/bluez/hci0"), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                DBusDictEntry(.string("org.bluez.Adapter1"), .dictionary(key: .string, value: .variant, [
                    DBusDictEntry(.string("Address"), .variant(.string("00:11:22:33:44:55"))),
                    DBusDictEntry(.string("Powered"), .variant(.boolean(true))),
                ])),
            ])]))
        var messages: [[[UInt8]]] = []
        for i in 0..<devices {
            let address = try Fleet.address(i)
            let path = try ObjectPath("/org/bluez/hci0/dev_" + address.description.replacingOccurrences(of: ":", with: "_"))
            let added = snapshot.apply(DBusMessage(
                kind: .signal, path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded",
                body: [.objectPath(path), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                    DBusDictEntry(.string("org.bluez.Device1"), .dictionary(key: .string, value: .variant, [
                        DBusDictEntry(.string("Address"), .variant(.string(address.description))),
                        DBusDictEntry(.string("AddressType"), .variant(.string("random"))),
                        DBusDictEntry(.string("Name"), .variant(.string("Tag \(i)"))),
                        DBusDictEntry(.string("Adapter"), .variant(.objectPath("/org/bluez/hci0"))),
                        DBusDictEntry(.string("RSSI"), .variant(.int16(-60))),
                    ])),
                ])]))
            guard added != nil else { throw BenchmarkSetupError("device \(i) was not added") }
            messages.append(try (0..<2).map { step in
                try DBusMessage(
                    kind: .signal, serial: UInt32(2 * i + step + 1), path: path,
                    interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", sender: ":1.7",
                    body: [
                        .string("org.bluez.Device1"),
                        .dictionary(key: .string, value: .variant, [
                            DBusDictEntry(.string("RSSI"), .variant(.int16(Fleet.rssi(i, step: step)))),
                            DBusDictEntry(.string("ManufacturerData"), .variant(.dictionary(key: .uint16, value: .variant, [
                                DBusDictEntry(.uint16(0x0499), .variant(.bytes(Fleet.ruuvi(step: step)))),
                            ]))),
                        ]),
                        .array(.string, []),
                    ]).marshalled()
            })
        }
        self.messages = messages
    }

    func ingestOne(_ benchmark: Benchmark) {
        let bytes = messages[next % messages.count][(next / messages.count) % 2]
        next += 1
        benchmark.startMeasurement()
        let message: DBusMessage
        do { message = try decoder.decode(bytes) } catch {
            benchmark.error("decoding failed: \(error)")
            return
        }
        let applied = snapshot.apply(message)
        benchmark.stopMeasurement()
        if applied == nil { benchmark.error("the advertisement was not applied") }
    }
}

// MARK: Device-list presenter: repository snapshot → rows moved → state

/// A repository that publishes what the benchmark hands it, numbered and
/// keyed as `BlueZDeviceRepository` publishes: one changed device per snapshot.
final class FedRepository: DeviceRepository, @unchecked Sendable {
    let stream: AsyncStream<DeviceListSnapshot>
    let continuation: AsyncStream<DeviceListSnapshot>.Continuation

    init() { (stream, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64)) }
    func snapshots() -> AsyncStream<DeviceListSnapshot> { stream }
    func setScanning(_ on: Bool) async throws(DomainError) {}
}

final class ListFixture: @unchecked Sendable {
    let repository = FedRepository()
    let presenter: DeviceListPresenter
    var states: AsyncStream<DeviceListPresenter.State>.Iterator
    var records: ChunkedArray<DeviceRecord>
    let positions: [DeviceID: Int]
    let devices: Int
    var version: UInt64 = 1
    var next = 0

    init(devices: Int) async throws {
        self.devices = devices
        var list: [DeviceRecord] = []
        var positions: [DeviceID: Int] = [:]
        for i in 0..<devices {
            list.append(try Fleet.record(i))
            positions[list[i].id] = i
        }
        records = ChunkedArray(list)
        self.positions = positions
        presenter = DeviceListPresenter(repository: repository, navigator: Navigator(),
                                        expiry: .init(staleAfter: 3600, removeAfter: nil), now: { Fleet.start })
        states = presenter.states().makeAsyncIterator()
        repository.continuation.yield(DeviceListSnapshot(availability: .available, scanning: true, records: records,
                                                         version: version, positions: positions))
        while let state = await states.next() {
            if case let .loaded(rows) = state.devices, rows.count == devices { return }
        }
        throw BenchmarkSetupError("the presenter never listed \(devices) devices")
    }

    func presentOne(_ benchmark: Benchmark) async {
        // Round r gives every device step r % 2 + 1 after its start at step 0:
        // each advertisement differs from the device's previous one.
        let i = next % devices, step = next / devices % 2 + 1
        next += 1
        guard let record = try? Fleet.record(i, step: step) else { return }
        records[i] = record
        version += 1
        let snapshot = DeviceListSnapshot(availability: .available, scanning: true, records: records, version: version,
                                          changed: [record.id], positions: positions)
        benchmark.startMeasurement()
        repository.continuation.yield(snapshot)
        while let state = await states.next() {
            if state.changes?.rows.first?.id == record.id { break }
        }
        benchmark.stopMeasurement()
    }
}

// MARK: Publish planner: one changed row → MQTT messages

final class PlannerFixture: @unchecked Sendable {
    var planner = PublishPlanner(options: .init(topics: GatewayTopics(gatewayID: "bench"), policy: PublishPolicy(minInterval: 0)))
    var rows: ChunkedArray<DeviceListPresenter.Row>
    let devices: Int
    var next = 0

    init(devices: Int) throws {
        self.devices = devices
        rows = ChunkedArray(try (0..<devices).map { Fleet.row(try Fleet.record($0)) })
        let first = planner.update(.loaded(rows), now: Fleet.start)
        // Discovery, availability and state for every device.
        guard first.count >= 3 * devices else { throw BenchmarkSetupError("the planner published \(first.count) messages at start") }
    }

    func planOne(_ benchmark: Benchmark) {
        // Round r gives every device step r % 2 + 1 after its start at step 0:
        // each advertisement differs from the device's previous one.
        let i = next % devices, step = next / devices % 2 + 1
        next += 1
        guard let record = try? Fleet.record(i, step: step) else { return }
        let row = Fleet.row(record)
        rows[i] = row
        let changes = DeviceListPresenter.RowChanges(rows: [row])
        benchmark.startMeasurement()
        let out = planner.update(.loaded(rows), changes: changes, now: Fleet.start)
        benchmark.stopMeasurement()
        if out.isEmpty { benchmark.error("a changed reading published nothing") }
    }
}

// MARK: Dashboard frame: one visible row changed → content → terminal bytes

final class FrameFixture: @unchecked Sendable {
    var view = DashboardView(now: Fleet.start)
    var renderer = Renderer(colorMode: .indexed256)
    var next = 0

    init(devices: Int) throws {
        view.list.devices = .loaded(ChunkedArray(try (0..<devices).map { Fleet.row(try Fleet.record($0)) }))
        view.list.scan = .on
        _ = renderer.frame(DashboardContent.render(view, width: 120, height: 40))
    }

    func drawOne(_ benchmark: Benchmark) {
        next += 1
        guard case var .loaded(rows) = view.list.devices else { return }
        view.list.devices = .loading
        rows[5].rssi = next % 2 == 0 ? -50 : -51
        rows[5].readings[0] = Reading(.temperature, 20 + Double(next % 2) / 10, unit: "°C")
        view.list.devices = .loaded(rows)
        benchmark.startMeasurement()
        let bytes = renderer.frame(DashboardContent.render(view, width: 120, height: 40))
        benchmark.stopMeasurement()
        if bytes.isEmpty { benchmark.error("a changed row drew nothing") }
    }
}

struct BenchmarkSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
