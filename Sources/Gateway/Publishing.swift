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
    ///
    /// Written straight into the payload: one array of scalar members, sorted
    /// by key, then their bytes — the same bytes ``SortedJSON`` writes for
    /// these members (`StatePayloadTests` compares the two), without the
    /// `.nested` value it copies to sort, the list of published readings and
    /// the address as a `String` (a state message per advertisement: it was
    /// 6 % of the gateway's CPU, docs/PERFORMANCE.md, nineteenth pass).
    public static func json(for record: DeviceRecord, at: Date, extra: [(String, FieldValue)] = []) -> [UInt8] {
        var members: [(key: String, plainKey: Bool, value: Member)] = []
        members.reserveCapacity(extra.count + 5 + record.readings.count)
        for (key, value) in extra { members.append((key, false, .other(value))) }
        let readingsStart = members.count + 5
        members.append(("address", true, .address(record.id.address)))
        members.append(("name", true, record.name.map { .string($0) } ?? .null))
        members.append(("rssi", true, record.rssi.map { .int(Int64($0)) } ?? .null))
        members.append(("format", true, record.format.map { .string($0) } ?? .null))
        members.append(("last_seen", true, .string(ISO8601UTC.string(record.lastSeen ?? at))))
        // The first reading of each key, finite numbers only (``ReadingKey/published(_:)``).
        for reading in record.readings {
            let value: Member
            switch reading.value {
            case let .number(v):
                guard v.isFinite else { continue }
                value = .number(v)
            case let .bool(b): value = .bool(b)
            case let .text(t): value = .string(t)
            }
            let key = ReadingKey.key(for: reading)
            guard !isFixed(key), !members[readingsStart...].contains(where: { $0.key == key }) else { continue }
            members.append((key, true, value))
        }
        // `<` orders these keys as their UTF-8 bytes (``SortedJSON``'s order):
        // they are ASCII (reading keys are `[a-z0-9_]`, the rest fixed), and
        // it compares short strings as integers.
        members.sort { $0.key < $1.key }
        var out: [UInt8] = []
        out.reserveCapacity(48 + 24 * members.count)
        out.append(UInt8(ascii: "{"))
        for (i, member) in members.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            if member.plainKey {
                // Nothing in these keys needs an escape.
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: member.key.utf8)
                out.append(UInt8(ascii: "\""))
            } else {
                JSON.writeString(member.key, into: &out)
            }
            out.append(UInt8(ascii: ":"))
            switch member.value {
            case let .address(address):
                out.append(UInt8(ascii: "\""))
                address.appendDescription(to: &out)
                out.append(UInt8(ascii: "\""))
            case let .string(text): JSON.writeString(text, into: &out)
            case let .number(v): JSON.appendNumber(v, to: &out)
            case let .int(n): JSON.appendDecimal(n, to: &out)
            case let .bool(b): out.append(contentsOf: (b ? "true" : "false").utf8)
            case .null: out.append(contentsOf: "null".utf8)
            case let .other(value): JSON.write(SortedJSON.sorted(value), into: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// A member's value: written straight from what the record holds.
    enum Member {
        case address(BluetoothAddress)
        case string(String)
        case number(Double)
        case int(Int64)
        case bool(Bool)
        case null
        case other(FieldValue)
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
