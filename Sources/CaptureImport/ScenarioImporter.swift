import BLEParsing
import Vocabulary

/// Turns a ``CaptureTimeline`` (BLEParsing) into a simulator scenario
/// (docs/SCENARIOS.md), so a recorded session can be replayed by
/// `blecompanion simulate`.
///
/// Mapping:
/// - every remote device becomes a device; its first advertisement gives the
///   initial properties (name, manufacturer data, service data, UUIDs, RSSI,
///   TX power, appearance) and each later advertisement that changes what
///   BlueZ would show becomes an `advertising.timeline` event. Like
///   bluetoothd, manufacturer and service data are merged by key and UUIDs
///   accumulate; scan responses add to the advertisement before them.
///   Times are seconds since the capture's first record. A device first seen
///   later than the first record starts with `advertisingAtStart: false` and
///   a `present: true` event.
/// - a discovered GATT layout becomes `gatt`: services, characteristics
///   (flags from the declaration's properties, the first value read as
///   `value`, a read that only failed as `readError`), descriptors (with the
///   value read, the CCCD as read/write 0000); notifications and indications
///   of a characteristic become its `notifications.timeline`, counted from
///   the write that enabled them (or the first one, if that write was not
///   captured).
///
/// This module knows the scenario format only as JSON text: it does not
/// import the simulator (its tests load the output through it).
public enum ScenarioImporter {
    public struct Options: Sendable {
        /// The scenario's `name`.
        public var name: String
        /// File name of the capture, for `description`.
        public var sourceName: String

        /// Stop converting once the scenario's text is sure to pass this many
        /// bytes (``Result/exceedsSizeLimit``): a capture too large to
        /// simulate is refused without building all of it.
        public var sizeLimit: Int

        public init(name: String, sourceName: String, sizeLimit: Int = .max) {
            self.name = name
            self.sourceName = sourceName
            self.sizeLimit = sizeLimit
        }
    }

    /// What the import produced and left out, for the command's report.
    public struct Summary: Equatable, Sendable {
        public struct Device: Equatable, Sendable {
            public var address: String
            public var name: String?
            public var advertisementEvents: Int
            public var services: Int
            public var characteristics: Int
            public var notificationEvents: Int
        }

        public var datalink: BtsnoopDatalink
        public var records: Int
        public var devices: [Device]
        /// Things in the capture the scenario cannot express, with counts.
        public var notes: [String]
        public var unknownPackets: [String: Int]
        public var malformedPackets: [CaptureIssue]
        public var malformedCount: Int

        /// A human-readable report, one line per entry.
        public var lines: [String] {
            var out = ["\(records) record\(records == 1 ? "" : "s"), datalink \(datalink); \(devices.count) device\(devices.count == 1 ? "" : "s")"]
            for d in devices {
                var line = "  \(d.address)"
                if let name = d.name { line += " \"\(name)\"" }
                line += ": \(d.advertisementEvents) advertisement event\(d.advertisementEvents == 1 ? "" : "s")"
                if d.services > 0 {
                    line += ", GATT \(d.services) service\(d.services == 1 ? "" : "s") / \(d.characteristics) characteristic\(d.characteristics == 1 ? "" : "s")"
                }
                if d.notificationEvents > 0 {
                    line += ", \(d.notificationEvents) notification\(d.notificationEvents == 1 ? "" : "s")"
                }
                out.append(line)
            }
            for n in notes { out.append("note: " + n) }
            let unknownTotal = unknownPackets.values.reduce(0, +)
            if unknownTotal > 0 {
                out.append("packets not used: \(unknownTotal)")
                for (kind, count) in unknownPackets.sorted(by: { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }) {
                    out.append("  \(count) × \(kind)")
                }
            }
            if malformedCount > 0 {
                out.append("malformed packets: \(malformedCount)")
                for issue in malformedPackets.prefix(10) { out.append("  " + issue.description) }
                if malformedCount > 10 { out.append("  … and \(malformedCount - 10) more") }
            }
            return out
        }
    }

    public struct Result: Sendable {
        public var scenario: JSONValue
        public var summary: Summary
        /// The timeline events alone passed ``Options/sizeLimit``: conversion
        /// stopped there, and `scenario` is incomplete.
        public var exceedsSizeLimit = false
    }

    /// The bytes the timeline events will take at least (their compact
    /// form, which the pretty text also uses for them), against the limit.
    struct SizeBudget {
        let limit: Int
        var spent = 0
        var exceeded: Bool { spent > limit }
        mutating func spend(_ event: JSONValue) {
            if limit < .max { spent &+= event.compact.utf8.count }
        }
    }

    /// The scenario's limit on times (seconds).
    static let maxSeconds: Int64 = 1_000_000

    public static func convert(_ timeline: CaptureTimeline, options: Options) -> Result {
        var builder = Builder(options: options)
        for device in timeline.devices {
            builder.add(device.advertisements, firstTimestamp: timeline.firstTimestamp)
            if builder.exceedsSizeLimit { break }
        }
        return builder.finish(timeline)
    }

    /// A conversion fed as the capture is read: advertisements are folded
    /// into each device's timeline events as they come (``add(_:firstTimestamp:)``,
    /// from ``CaptureAnalyzer/takeAdvertisements()``), so what is held is
    /// the scenario being built, not the capture; the rest of the timeline
    /// (devices, GATT, counts) comes at the end (``finish(_:)``).
    public struct Builder: Sendable {
        let options: Options
        var notes = Notes()
        var budget: SizeBudget
        var folds: [BluetoothAddress: AdvertisingFold] = [:]
        /// Timeline events kept as text (false: as trees, for the tests).
        var rendersEvents = true

        public init(options: Options) {
            self.options = options
            budget = SizeBudget(limit: options.sizeLimit)
        }

        /// The timeline events alone have passed ``Options/sizeLimit``: more
        /// input cannot make the scenario loadable; stop reading.
        public var exceedsSizeLimit: Bool { budget.exceeded }

        /// Folds advertisements in, in the order they were received.
        /// `firstTimestamp` is the capture's first record's.
        public mutating func add(_ advertisements: some Sequence<CapturedAdvertisement>, firstTimestamp: Int64?) {
            for a in advertisements {
                guard !budget.exceeded else { return }
                let at = firstTimestamp.map { CaptureTimeline.elapsed(from: $0, to: a.timestamp) } ?? 0
                folds[a.address, default: AdvertisingFold(rendersEvents: rendersEvents)]
                    .add(a, microseconds: at, notes: &notes, budget: &budget)
            }
        }

        /// The scenario: `timeline`'s devices (in its order) with the
        /// advertising folded so far and their GATT layouts.
        public func finish(_ timeline: CaptureTimeline) -> Result {
            var notes = notes
            var root: [(String, JSONValue)] = [
                ("name", .string(options.name)),
                ("description", .string("Imported from \(options.sourceName) by blecompanion import-btsnoop (\(timeline.recordCount) records, \(timeline.datalink))")),
            ]
            if let controller = timeline.controllers.first {
                root.append(("adapters", .array([.object([("id", .string("hci0")), ("address", .string(controller.address.description))])])))
                if timeline.controllers.count > 1 { notes.add("controllers after the first are merged into hci0") }
            }
            var devices: [JSONValue] = []
            var summaries: [Summary.Device] = []
            if !budget.exceeded {
                for device in timeline.devices {
                    let (json, summary) = convert(device, advertising: folds[device.address] ?? AdvertisingFold(), notes: &notes)
                    devices.append(json)
                    summaries.append(summary)
                }
            }
            root.append(("devices", .array(devices)))
            if timeline.droppedPackets > 0 {
                notes.add("the capturer reported \(plural(Int(timeline.droppedPackets), "dropped packet"))")
            }
            if timeline.truncatedRecords > 0 {
                let n = timeline.truncatedRecords
                notes.add("\(plural(n, "record")) cut short by the capture's snap length")
            }
            let summary = Summary(datalink: timeline.datalink, records: timeline.recordCount, devices: summaries, notes: notes.lines,
                                  unknownPackets: timeline.unknownPackets, malformedPackets: timeline.malformedPackets,
                                  malformedCount: timeline.malformedCount)
            return Result(scenario: .object(root), summary: summary, exceedsSizeLimit: budget.exceeded)
        }
    }

    /// "1 record", "2 records".
    static func plural(_ n: Int, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }

    /// Notes counted by text, listed alphabetically (the order they are
    /// found in depends on whether the capture is read whole or streamed).
    struct Notes {
        private var counts: [String: Int] = [:]
        mutating func add(_ text: String, count: Int = 1) {
            counts[text, default: 0] += count
        }
        var lines: [String] { counts.keys.sorted().map { counts[$0, default: 1] > 1 ? "\($0) (\(counts[$0, default: 1])×)" : $0 } }
    }

    // MARK: Advertisements

    /// What BlueZ shows of a device's advertising, merged like bluetoothd does.
    struct AdvertisedState: Equatable {
        var name: String?
        var nameIsComplete = false
        var manufacturerData: [UInt16: [UInt8]] = [:]
        var serviceData: [String: [UInt8]] = [:]
        var uuids: [String] = []
        var rssi: Int?
        var txPower: Int?

        mutating func merge(_ a: CapturedAdvertisement, notes: inout Notes) {
            let (ad, errors) = AdvertisingData.parsePartial(a.data)
            if !errors.isEmpty { notes.add("advertising data with malformed AD structures (kept what parsed)") }
            if let n = ad.localName, ad.localNameIsComplete || !nameIsComplete {
                name = n
                nameIsComplete = ad.localNameIsComplete
            }
            for m in ad.manufacturerData { manufacturerData[m.companyID] = m.data }
            for s in ad.serviceData { serviceData[s.uuid.shortString] = s.data }
            for u in ad.serviceUUIDs.map(\.shortString) where !uuids.contains(u) { uuids.append(u) }
            if let r = a.rssi { rssi = min(max(Int(r), -127), 20) }
            if let t = ad.txPower { txPower = min(max(Int(t), -127), 20) }
        }

        var manufacturerJSON: JSONValue {
            .object(manufacturerData.sorted { $0.key < $1.key }.map { (hexString($0.key), .string(hexString(bytes: $0.value))) })
        }
        var serviceDataJSON: JSONValue {
            .object(serviceData.sorted { $0.key < $1.key }.map { ($0.key, .string(hexString(bytes: $0.value))) })
        }
        var uuidsJSON: JSONValue { .array(uuids.map { .string($0) }) }

        /// The members that differ from `old` (all set ones when `old` is nil).
        func members(since old: AdvertisedState?) -> [(String, JSONValue)] {
            var out: [(String, JSONValue)] = []
            if let rssi, rssi != old?.rssi { out.append(("rssi", .int(rssi))) }
            if let txPower, txPower != old?.txPower { out.append(("txPower", .int(txPower))) }
            if let name, name != old?.name { out.append(("name", .string(name))) }
            if !manufacturerData.isEmpty, manufacturerData != old?.manufacturerData { out.append(("manufacturerData", manufacturerJSON)) }
            if !serviceData.isEmpty, serviceData != old?.serviceData { out.append(("serviceData", serviceDataJSON)) }
            if !uuids.isEmpty, uuids != old?.uuids { out.append(("uuids", uuidsJSON)) }
            return out
        }
    }

    /// How deep an advertising timeline event is in the scenario's pretty
    /// text: root 0, `devices` 2, a device 4, its members 6, `advertising`'s
    /// members 8, `timeline`'s events 10.
    static let timelineEventIndent = 10

    /// One device's advertising, folded one advertisement at a time: the
    /// first one's properties, then an event wherever what BlueZ shows changes.
    struct AdvertisingFold: Sendable {
        var received = 0
        var state = AdvertisedState()
        /// The first advertisement merged (the device's initial properties).
        var initial = AdvertisedState()
        var appearance: UInt16?
        var lastAt: Int64 = 0
        /// When the first one came (microseconds from the capture's start).
        var firstAt: Int64?
        var events: [JSONValue] = []
        /// Change events in `events` (the first may say `present`).
        var changes = 0
        var connectable = false
        /// Past the scenario's time limit: later ones are left out.
        var stopped = false
        /// Events are kept as text (the tests compare with trees).
        var rendersEvents = true

        mutating func add(_ a: CapturedAdvertisement, microseconds: Int64, notes: inout Notes, budget: inout SizeBudget) {
            if a.report.isConnectable { connectable = true }
            guard !stopped else { return }
            received += 1
            let previous = state
            state.merge(a, notes: &notes)
            if appearance == nil { appearance = AdvertisingData.parsePartial(a.data).0.appearance }
            let at = max(microseconds, lastAt)
            if at > maxSeconds * 1_000_000 {
                notes.add("advertisements later than \(maxSeconds) s left out")
                stopped = true
                return
            }
            if received == 1 {
                initial = state
                firstAt = microseconds
                if at > 0 { events.append(.object([("at", .seconds(microseconds: at)), ("present", .bool(true))])) }
                lastAt = at
                return
            }
            let changed = state.members(since: previous)
            guard !changed.isEmpty else { return }
            let event = JSONValue.object([("at", .seconds(microseconds: at))] + changed)
            budget.spend(event)
            if budget.exceeded {
                stopped = true
                return
            }
            // Kept as its text: a long timeline as trees took six times
            // the memory of its text.
            events.append(rendersEvents ? event.rendered(indent: ScenarioImporter.timelineEventIndent) : event)
            changes += 1
            lastAt = at
        }
    }

    static func convert(_ d: CapturedDevice, advertising fold: AdvertisingFold, notes: inout Notes) -> (JSONValue, Summary.Device) {
        var members: [(String, JSONValue)] = [
            ("address", .string(d.address.description)),
            ("addressType", .string(d.addressType.isRandom ? "random" : "public")),
        ]
        let initial = fold.initial
        let appearance = fold.appearance
        let events = fold.events
        let gattName = deviceNameFromGATT(d)
        if let name = initial.name ?? gattName { members.append(("name", .string(name))) }
        if let appearance { members.append(("appearance", .int(appearance))) }
        if let rssi = initial.rssi { members.append(("rssi", .int(rssi))) }
        if let tx = initial.txPower { members.append(("txPower", .int(tx))) }
        if !initial.manufacturerData.isEmpty { members.append(("manufacturerData", initial.manufacturerJSON)) }
        if !initial.serviceData.isEmpty { members.append(("serviceData", initial.serviceDataJSON)) }
        if !initial.uuids.isEmpty { members.append(("uuids", initial.uuidsJSON)) }
        let connectable = fold.connectable || !d.connections.isEmpty
        if !connectable { members.append(("connectable", .bool(false))) }
        if let first = fold.firstAt, first > 0 {
            members.append(("advertisingAtStart", .bool(false)))
        }
        if fold.received == 0 {
            members.append(("comment", .string("connected in the capture without an advertisement being captured; advertises from the start so discovery finds it")))
        }
        if !events.isEmpty { members.append(("advertising", .object([("timeline", .array(events))]))) }
        if let mtu = d.mtu, (23...517).contains(mtu) { members.append(("mtu", .int(mtu))) }

        var characteristics = 0
        var notifications = 0
        if !d.services.isEmpty {
            let (gatt, count, notified) = convertGATT(d, notes: &notes)
            members.append(("gatt", gatt))
            characteristics = count
            notifications = notified
        }
        if !d.unplacedCharacteristics.isEmpty {
            notes.add("characteristics outside every discovered service left out", count: d.unplacedCharacteristics.count)
        }
        let writes = d.values.filter { $0.kind == .write || $0.kind == .writeCommand }.count
        if writes > 0 { notes.add("writes by the client are not replayed", count: writes) }
        let summary = Summary.Device(address: d.address.description, name: initial.name ?? gattName, advertisementEvents: events.count,
                                     services: d.services.count, characteristics: characteristics, notificationEvents: notifications)
        return (.object(members), summary)
    }

    /// The Device Name characteristic (0x2A00) value, if it was read.
    static func deviceNameFromGATT(_ d: CapturedDevice) -> String? {
        for s in d.services {
            for c in s.characteristics where c.uuid == BluetoothUUID(uuid16: 0x2A00) {
                if let v = d.values.first(where: { $0.handle == c.valueHandle && $0.kind == .read && $0.offset == 0 }) {
                    let text = String(decoding: v.value.prefix { $0 != 0 }, as: UTF8.self)
                    return text.isEmpty ? nil : text
                }
            }
        }
        return nil
    }

    // MARK: GATT

    static let cccd = BluetoothUUID(uuid16: 0x2902)

    static func convertGATT(_ d: CapturedDevice, notes: inout Notes) -> (JSONValue, Int, Int) {
        var services: [JSONValue] = []
        var characteristicCount = 0
        var notificationCount = 0
        for s in d.services {
            var service: [(String, JSONValue)] = [("uuid", .string(s.uuid.shortString))]
            if !s.primary { service.append(("primary", .bool(false))) }
            var characteristics: [JSONValue] = []
            for c in s.characteristics {
                characteristicCount += 1
                var ch: [(String, JSONValue)] = [("uuid", .string(c.uuid.shortString)), ("flags", .array(c.flags.map { .string($0) }))]
                if let read = firstRead(d, handle: c.valueHandle) {
                    ch.append(("value", .string(hexString(bytes: read))))
                } else if let error = d.attErrors.first(where: { $0.handle == c.valueHandle && $0.requestOpcode == 0x0A }) {
                    ch.append(("readError", readError(error.error)))
                }
                var descriptors: [JSONValue] = []
                for desc in c.descriptors {
                    var dj: [(String, JSONValue)] = [("uuid", .string(desc.uuid.shortString))]
                    if desc.uuid == cccd {
                        dj.append(("flags", .array([.string("read"), .string("write")])))
                        dj.append(("value", .string("0000")))
                    } else if let read = firstRead(d, handle: desc.handle) {
                        dj.append(("value", .string(hexString(bytes: read))))
                    }
                    descriptors.append(.object(dj))
                }
                if !descriptors.isEmpty { ch.append(("descriptors", .array(descriptors))) }
                let pushed = d.values.filter { ($0.kind == .notification || $0.kind == .indication) && $0.handle == c.valueHandle }
                if !pushed.isEmpty {
                    if c.properties & 0x30 == 0 {
                        notes.add("notifications of a characteristic without notify/indicate left out", count: pushed.count)
                    } else {
                        let base = subscriptionTime(d, c, before: pushed[0].timestamp) ?? pushed[0].timestamp
                        var last: Int64 = 0
                        var events: [JSONValue] = []
                        for p in pushed {
                            let at = max(CaptureTimeline.elapsed(from: base, to: p.timestamp), last)
                            guard at <= maxSeconds * 1_000_000 else { break }
                            events.append(.object([("at", .seconds(microseconds: at)), ("value", .string(hexString(bytes: p.value)))]))
                            last = at
                        }
                        notificationCount += events.count
                        ch.append(("notifications", .object([("timeline", .array(events))])))
                    }
                }
                characteristics.append(.object(ch))
            }
            service.append(("characteristics", .array(characteristics)))
            services.append(.object(service))
        }
        return (.array(services), characteristicCount, notificationCount)
    }

    /// The first value read from `handle` (read blobs already joined by the analyzer).
    static func firstRead(_ d: CapturedDevice, handle: UInt16) -> [UInt8]? {
        d.values.first { $0.handle == handle && $0.kind == .read && $0.offset == 0 }?.value
    }

    /// When the client last enabled notifications or indications (a write of
    /// 0x0001/0x0002 to the characteristic's CCCD) before `time`.
    static func subscriptionTime(_ d: CapturedDevice, _ c: CapturedCharacteristic, before time: Int64) -> Int64? {
        guard let cccd = c.descriptors.first(where: { $0.uuid == cccd }) else { return nil }
        return d.values.last {
            ($0.kind == .write || $0.kind == .writeCommand) && $0.handle == cccd.handle && $0.timestamp <= time
                && ($0.value.first ?? 0) & 0x03 != 0
        }?.timestamp
    }

    /// An ATT error code (Vol 3 Part F §3.4.1.1) as the org.bluez.Error that
    /// bluetoothd answers ReadValue with (its src/gatt-client.c mapping:
    /// read not permitted and the authentication/encryption errors →
    /// NotPermitted, offset/length → InvalidArguments, authorization →
    /// NotAuthorized, request not supported → NotSupported, others → Failed).
    static func readError(_ code: UInt8) -> JSONValue {
        let name: String
        switch code {
        case 0x02, 0x05, 0x0C, 0x0F: name = "NotPermitted"
        case 0x07, 0x0D: name = "InvalidArguments"
        case 0x08: name = "NotAuthorized"
        case 0x06: name = "NotSupported"
        default: name = "Failed"
        }
        return .object([("name", .string("org.bluez.Error." + name)), ("message", .string("ATT error " + hexString(code) + " in the capture"))])
    }
}
