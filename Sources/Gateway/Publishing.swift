import Bounds
import BLEParsing
import BlueZ
import Domain
import Foundation
import Locking
import Vocabulary

/// The key a reading has in the state JSON and in discovery ids: the kind
/// (`temperature`), or kind and label (`blood_pressure_systolic`) with the
/// label reduced to `[a-z0-9_]` so it also works as `value_json.<key>`.
public enum ReadingKey {
    public static func key(for reading: Reading) -> String {
        guard let label = reading.label, !label.isEmpty else { return reading.kind.rawValue }
        return reading.kind.rawValue + "_" + TopicSafe.key(label)
    }

    /// The readings that are published, with their keys: the first reading
    /// of each key, and only finite numbers (NaN/±inf mean "no value").
    public static func published(_ readings: [Reading]) -> [(key: String, reading: Reading)] {
        var out: [(key: String, reading: Reading)] = []
        out.reserveCapacity(readings.count)
        for reading in readings {
            guard StatePayload.Layout.writable(reading) else { continue }
            let key = key(for: reading)
            // A device has a handful of readings: a scan is cheaper than hashing.
            guard !out.contains(where: { $0.key == key }) else { continue }
            out.append((key, reading))
        }
        return out
    }
}

/// A device's state as one JSON object, keys sorted:
/// `{"address":"AA:…","format":"ruuvi","humidity":45.25,"last_seen":"2026-…Z","name":…,"rssi":-70,"temperature":21.5}`.
///
/// Absent name, RSSI or format are `null` (the shape does not change);
/// readings whose value is not a finite number are left out.
public enum StatePayload {
    /// The fixed members; reading keys never collide with them (kinds are
    /// not among these names, labelled keys carry the kind as a prefix).
    public static let fixedKeys: Set<String> = ["address", "name", "rssi", "format", "last_seen", "gateway", "room"]

    /// Whether `key` is one of ``fixedKeys`` (compared, not hashed: this
    /// runs for every reading of every state message).
    static func isFixed(_ key: String) -> Bool {
        switch key {
        case "address", "name", "rssi", "format", "last_seen", "gateway", "room": true
        default: false
        }
    }

    /// `last_seen` is the record's, or `at` when the record has none.
    /// `extra`: members after the fixed ones (fleet mode's `gateway` and `room`).
    public static func json(for record: DeviceRecord, at: Date, extra: [(String, FieldValue)] = []) -> [UInt8] {
        Layout(record, extra: extra).write(record, at: at, extra: extra)
    }

    /// ``json(for:at:extra:)`` with the member order kept in `layout` from
    /// the last message of the same device: looked up again (in `shared`)
    /// only when the record's readings (kinds, labels, which are written)
    /// or the extra keys differ from those it was made for, which for a
    /// sensor that keeps sending the same frame is never. The same bytes
    /// either way (`StatePayloadTests`).
    public static func json(for record: DeviceRecord, at: Date, extra: [(String, FieldValue)] = [],
                            reusing layout: inout Layout?, shared: inout Layouts) -> [UInt8] {
        let fitting: Layout
        if let layout, layout.fits(record, extra: extra) {
            fitting = layout
        } else {
            fitting = shared.layout(for: record, extra: extra)
            layout = fitting
        }
        return fitting.write(record, at: at, extra: extra)
    }

    /// The layouts in use, one per shape of record, shared by every device
    /// of that shape: a gateway hearing 10 000 RuuviTags keeps one, not one
    /// per device (one each was 10 MiB at 10 000 devices). At most
    /// ``capacity``; past that the table starts again (devices keep the one
    /// they hold until their shape changes).
    public struct Layouts: Sendable {
        private var byShape: [Layout.Shape: Layout] = [:]
        public static let capacity = 64
        public init() {}

        /// How many are kept (tests).
        var count: Int { byShape.count }

        mutating func layout(for record: DeviceRecord, extra: [(String, FieldValue)]) -> Layout {
            let shape = Layout.Shape(record, extra: extra)
            if let known = byShape[shape] { return known }
            let made = Layout(record, extra: extra, shape: shape)
            if byShape.count >= Self.capacity { byShape.removeAll(keepingCapacity: true) }
            byShape[shape] = made
            return made
        }
    }

    /// A state message's members in key order, each as the bytes before its
    /// value (`{"key":` or `,"key":`) and where the value comes from, made
    /// for one shape of record (immutable, shared by the devices of that
    /// shape, ``Layouts``): the order, the keys and the duplicate and
    /// non-finite readings left out are worked out once, and each message
    /// of that shape writes values only (a state message per advertisement:
    /// sorting the members and making the reading keys again each time was
    /// 40 % of the message; docs/PERFORMANCE.md, twenty-first pass).
    public final class Layout: Sendable {
        /// What the layout depends on: per reading its kind, label and
        /// whether it is written, and the extra members' keys.
        struct Shape: Hashable, Sendable {
            struct Item: Hashable, Sendable {
                var kind: ReadingKind
                var label: String?
                /// Not a non-finite number (those are never written).
                var writable: Bool
            }
            var readings: [Item]
            var extraKeys: [String]

            init(_ record: DeviceRecord, extra: [(String, FieldValue)]) {
                readings = record.readings.map { Item(kind: $0.kind, label: $0.label, writable: Layout.writable($0)) }
                extraKeys = extra.map(\.0)
            }
        }

        private enum Source: Sendable {
            case address, name, rssi, format, lastSeen
            case extra(Int)
            case reading(Int)
        }

        private let shape: Shape
        /// Every member's bytes before its value, one after the other.
        private let prefixes: [UInt8]
        /// Members in key order: where its prefix ends in `prefixes`, and its value.
        private let members: [(prefixEnd: Int, source: Source)]

        convenience init(_ record: DeviceRecord, extra: [(String, FieldValue)]) {
            self.init(record, extra: extra, shape: Shape(record, extra: extra))
        }

        /// `shape`: `record`'s and `extra`'s.
        init(_ record: DeviceRecord, extra: [(String, FieldValue)], shape: Shape) {
            self.shape = shape
            var keyed: [(key: String, plainKey: Bool, source: Source)] = []
            keyed.reserveCapacity(extra.count + 5 + record.readings.count)
            for (i, (key, _)) in extra.enumerated() { keyed.append((key, false, .extra(i))) }
            let readingsStart = keyed.count + 5
            keyed.append(("address", true, .address))
            keyed.append(("name", true, .name))
            keyed.append(("rssi", true, .rssi))
            keyed.append(("format", true, .format))
            keyed.append(("last_seen", true, .lastSeen))
            // The first reading of each key, finite numbers only (``ReadingKey/published(_:)``).
            for (i, reading) in record.readings.enumerated() where shape.readings[i].writable {
                let key = ReadingKey.key(for: reading)
                guard !isFixed(key), !keyed[readingsStart...].contains(where: { $0.key == key }) else { continue }
                keyed.append((key, true, .reading(i)))
            }
            // `<` orders these keys as their UTF-8 bytes (``SortedJSON``'s order):
            // they are ASCII (reading keys are `[a-z0-9_]`, the rest fixed), and
            // it compares short strings as integers.
            keyed.sort { $0.key < $1.key }
            var prefixes: [UInt8] = []
            var members: [(prefixEnd: Int, source: Source)] = []
            members.reserveCapacity(keyed.count)
            for (i, member) in keyed.enumerated() {
                prefixes.append(i == 0 ? UInt8(ascii: "{") : UInt8(ascii: ","))
                if member.plainKey {
                    // Nothing in these keys needs an escape.
                    prefixes.append(UInt8(ascii: "\""))
                    prefixes.append(contentsOf: member.key.utf8)
                    prefixes.append(UInt8(ascii: "\""))
                } else {
                    JSON.writeString(member.key, into: &prefixes)
                }
                prefixes.append(UInt8(ascii: ":"))
                members.append((prefixes.count, member.source))
            }
            self.prefixes = prefixes
            self.members = members
        }

        /// Whether `reading` is ever written: not a non-finite number (the
        /// one rule for state messages, ``ReadingKey/published(_:)`` and the
        /// planner's content).
        static func writable(_ reading: Reading) -> Bool {
            if case let .number(v) = reading.value { return v.isFinite }
            return true
        }

        /// Whether `record` and `extra` have the shape this was made for.
        func fits(_ record: DeviceRecord, extra: [(String, FieldValue)]) -> Bool {
            guard record.readings.count == shape.readings.count, extra.count == shape.extraKeys.count else { return false }
            for (reading, s) in zip(record.readings, shape.readings) {
                guard reading.kind == s.kind, Self.writable(reading) == s.writable, reading.label == s.label else { return false }
            }
            for (member, key) in zip(extra, shape.extraKeys) where member.0 != key { return false }
            return true
        }

        /// The message's bytes: `record` and `extra` must fit (``fits(_:extra:)``).
        func write(_ record: DeviceRecord, at: Date, extra: [(String, FieldValue)]) -> [UInt8] {
            var out: [UInt8] = []
            out.reserveCapacity(prefixes.count + 16 * members.count + 32)
            var start = 0
            prefixes.withUnsafeBufferPointer { keys in
                for (end, source) in members {
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: keys[start..<end]))
                    start = end
                    switch source {
                    case .address:
                        out.append(UInt8(ascii: "\""))
                        record.id.address.appendDescription(to: &out)
                        out.append(UInt8(ascii: "\""))
                    case .name: Self.write(record.name, into: &out)
                    case .rssi:
                        if let rssi = record.rssi { JSON.appendDecimal(Int64(rssi), to: &out) } else { out.append(contentsOf: "null".utf8) }
                    case .format: Self.write(record.format, into: &out)
                    case .lastSeen: JSON.writeString(ISO8601UTC.string(record.lastSeen ?? at), into: &out)
                    case let .extra(i): JSON.write(SortedJSON.sorted(extra[i].1), into: &out)
                    case let .reading(i):
                        switch record.readings[i].value {
                        case let .number(v): JSON.appendNumber(v, to: &out)
                        case let .bool(b): out.append(contentsOf: (b ? "true" : "false").utf8)
                        case let .text(t): JSON.writeString(t, into: &out)
                        }
                    }
                }
            }
            out.append(UInt8(ascii: "}"))
            return out
        }

        private static func write(_ text: String?, into out: inout [UInt8]) {
            if let text { JSON.writeString(text, into: &out) } else { out.append(contentsOf: "null".utf8) }
        }
    }

    /// The state JSON on the device's state topic (not retained: a stale
    /// value after a gateway restart would look current).
    public static func message(for record: DeviceRecord, at: Date, topics: GatewayTopics,
                               extra: [(String, FieldValue)] = []) -> OutgoingMessage {
        OutgoingMessage(topic: topics.state(record.id.address), payload: json(for: record, at: at, extra: extra), retain: false, qos: 0)
    }

    /// What one device's state messages share from one to the next: the
    /// member ``Layout`` (shared with every device of the same shape, see
    /// ``Layouts``). Derived from what the messages are made of, so it is
    /// not part of any value that holds it: any two are equal.
    public struct Reused: Sendable, Equatable {
        var layout: Layout?
        public init() {}
        public static func == (_: Reused, _: Reused) -> Bool { true }
    }

    /// ``message(for:at:topics:extra:)`` reusing the layout of the device's last message.
    public static func message(for record: DeviceRecord, at: Date, topics: GatewayTopics,
                               extra: [(String, FieldValue)] = [], reusing reused: inout Reused,
                               shared: inout Layouts) -> OutgoingMessage {
        OutgoingMessage(topic: topics.state(record.id.address),
                        payload: json(for: record, at: at, extra: extra, reusing: &reused.layout, shared: &shared),
                        retain: false, qos: 0)
    }
}

/// Compact JSON with object members sorted by name (recursively), written by
/// BLEParsing's JSON writer: shortest round-trip numbers, so 21.5 stays
/// `21.5`; non-finite numbers would be `null` but callers leave them out.
enum SortedJSON {
    static func bytes(_ members: [(String, FieldValue)]) -> [UInt8] {
        JSON.bytes(sorted(.nested(members)))
    }

    static func sorted(_ value: FieldValue) -> FieldValue {
        switch value {
        case var .nested(members):
            // A state message's members are scalars: sorted in place, with
            // no copy of each member made only to look inside it.
            if members.contains(where: { $0.1.isContainer }) { members = members.map { ($0.0, sorted($0.1)) } }
            members.sort { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
            return .nested(members)
        case let .list(items):
            return .list(items.map(sorted))
        default:
            return value
        }
    }
}

/// `2026-11-23T01:31:38Z`: whole seconds, UTC (Foundation's ISO 8601 style).
/// Times outside `Bounds.unixTimes` are written as its nearest end.
enum ISO8601UTC {
    private static let style = Date.ISO8601FormatStyle(timeZone: .gmt)
    /// The last second written: a gateway writes the same second for every
    /// message within it, and the format style takes microseconds.
    private static let last = Lock<(second: Int64, text: String)?>(nil)

    static func string(_ date: Date) -> String {
        let second = Bounds.wholeUnixSeconds(date.timeIntervalSince1970)
        if let hit = last.withLock({ $0?.second == second ? $0?.text : nil }) { return hit }
        let text = Date(timeIntervalSince1970: Double(second)).formatted(style)
        last.withLock { $0 = (second, text) }
        return text
    }
}

private extension FieldValue {
    /// A list or an object: members that ``SortedJSON`` looks inside.
    var isContainer: Bool {
        switch self {
        case .list, .nested: true
        default: false
        }
    }
}
