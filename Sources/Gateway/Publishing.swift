import Bounds
import BLEParsing
import BlueZ
import Domain
import Foundation
import Locking

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
            if case let .number(v) = reading.value, !v.isFinite { continue }
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

    /// `last_seen` is the record's, or `at` when the record has none.
    /// `extra`: members after the fixed ones (fleet mode's `gateway` and `room`).
    public static func json(for record: DeviceRecord, at: Date, extra: [(String, FieldValue)] = []) -> [UInt8] {
        var members: [(String, FieldValue)] = []
        members.reserveCapacity(extra.count + 5 + record.readings.count)
        members.append(contentsOf: extra)
        members.append(("address", .string(record.id.address.description)))
        members.append(("name", record.name.map { .string($0) } ?? .null))
        members.append(("rssi", record.rssi.map { .int(Int($0)) } ?? .null))
        members.append(("format", record.format.map { .string($0) } ?? .null))
        members.append(("last_seen", .string(ISO8601UTC.string(record.lastSeen ?? at))))
        for (key, reading) in ReadingKey.published(record.readings) where !fixedKeys.contains(key) {
            switch reading.value {
            case let .number(v): members.append((key, .number(v)))
            case let .bool(b): members.append((key, .bool(b)))
            case let .text(t): members.append((key, .string(t)))
            }
        }
        return SortedJSON.bytes(members)
    }

    /// The state JSON on the device's state topic (not retained: a stale
    /// value after a gateway restart would look current).
    public static func message(for record: DeviceRecord, at: Date, topics: GatewayTopics,
                               extra: [(String, FieldValue)] = []) -> OutgoingMessage {
        OutgoingMessage(topic: topics.state(record.id.address), payload: json(for: record, at: at, extra: extra), retain: false, qos: 0)
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
