import BLEParsing
import BlueZ
import Foundation
import GRDB
import Locking
import Vocabulary

/// How long readings are kept at which resolution.
///
/// The default keeps a year of readings from 100 devices small: with one
/// stored value per series per minute at most, a series holds ~1 440 raw
/// rows (1 day), ~2 160 hourly rows (90 days) and ~275 daily rows — about
/// 3 900 rows; 100 devices × 3 kinds ≈ 1.2 M rows of ~40 bytes, ~50 MB.
public struct RetentionPolicy: Sendable, Equatable {
    /// At most one stored value per series in this many seconds.
    public var minimumInterval: TimeInterval = 60
    /// Raw values are kept this long, then averaged per hour.
    public var rawFor: TimeInterval = 86_400
    /// Hourly averages are kept this long, then averaged per day.
    public var hourlyFor: TimeInterval = 90 * 86_400
    /// Nothing older than this is kept.
    public var keepFor: TimeInterval = 2 * 365 * 86_400
    public init() {}
}

/// One point of a reading's history: a value, or an average of `samples`.
public struct ReadingPoint: Sendable, Equatable {
    public var at: Date
    public var value: Double
    public var samples: Int
    public init(at: Date, value: Double, samples: Int = 1) {
        self.at = at
        self.value = value
        self.samples = samples
    }
}

/// One series of a device's history (a reading kind, and its label when a
/// device has several, e.g. two probes), oldest first.
public struct ReadingSeries: Sendable, Equatable {
    public var kind: ReadingKind
    public var label: String
    public var points: [ReadingPoint]
    public init(kind: ReadingKind, label: String, points: [ReadingPoint]) {
        self.kind = kind
        self.label = label
        self.points = points
    }
}

/// Reading history, as presenters see it: queries plus a revision per device
/// that grows with every write, so a screen reloads exactly when its
/// device's history changed.
public protocol ReadingHistory: Sendable {
    /// The current revisions first, then every change.
    func revisions() -> AsyncStream<[DeviceID: UInt64]>
    /// Every series of `device` since `since`, sorted by kind and label.
    func series(of device: DeviceID, since: Date) throws(DomainError) -> [ReadingSeries]
}

/// Readings and the devices we remember, in a SQLite file (GRDB, WAL mode:
/// a crash mid-write leaves the last committed state).
public final class ReadingStore: ReadingHistory {
    private let pool: DatabasePool
    public let policy: RetentionPolicy
    /// What the store remembers of each device it recorded lately, in one
    /// table (one key per device, not one per kind of bookkeeping: three
    /// tables keyed by device were ~0.9 KB a device at 10 000 devices,
    /// heaptrack 2026-11-29). Bounded: an entry with nothing waiting, no
    /// row written within ``rowInterval`` and every series older than
    /// `minimumInterval` says nothing (absent means the same), so the
    /// sweep once per ``rowInterval`` drops it, and devices that come and
    /// go (random addresses) do not accumulate.
    private let devices = Lock(Devices())
    private struct Devices {
        var entries: [DeviceID: DeviceEntry] = [:]
        var lastSweep: Date?
    }
    private struct DeviceEntry {
        /// When each series was last stored (a device has a handful).
        var series: [SeriesTime] = []
        /// The device row as last written (nil: not within ``rowInterval``).
        var row: RowWrite?
        /// The latest readings waiting to be written with the row, and when
        /// they were heard (only while name and format equal `row`'s).
        var pending: (readings: [Reading], at: Date)?
    }
    /// 16 bytes: a series is its kind and its label's hash (0: no label).
    /// Two labels of one kind on one device with the same 32-bit hash would
    /// share a rate limit, so one of them could skip a minute's value; no
    /// decoder or profile gives a device more than a few labels.
    private struct SeriesTime {
        let kind: ReadingKind
        let label: UInt32
        var at: Date

        /// FNV-1a over the label's UTF-8 bytes, never 0. Worked out for every
        /// labelled reading of every advertisement: a label is a few bytes,
        /// and `hashValue` (SipHash) cost ~210 instructions each.
        static func label(_ label: String?) -> UInt32 {
            guard let label, !label.isEmpty else { return 0 }
            var hash: UInt32 = 2_166_136_261
            for byte in label.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
            return hash | 1
        }
    }
    /// Devices remembered now (tests: the table stays bounded).
    var rememberedSeries: Int { devices.withLock { $0.entries.count } }
    /// The device rows (last seen, latest readings): each written at most once
    /// per ``rowInterval`` unless its name or format changed or values are
    /// stored with it; in between its latest readings wait in the entry, and
    /// every ``rowInterval`` whatever waits is written with the next call
    /// (and at ``flushPendingRows()``, `rememberedDevices()` and deinit).
    /// Before, every advertisement batch rewrote the row of every device in
    /// it: at 200 changes/s, a transaction and a JSON encoding per device per
    /// batch for values nobody reads until the next start.
    private struct RowWrite {
        var at: Date
        var name: String?
        var format: String?
    }
    /// A device's row is at most this old in the file while it is heard.
    public var rowInterval: TimeInterval { min(policy.minimumInterval, 60) }
    /// Rows waiting now (tests).
    var pendingRows: Int { devices.withLock { $0.entries.values.reduce(0) { $0 + ($1.pending == nil ? 0 : 1) } } }
    private let revision = StateStore<[DeviceID: UInt64]>([:], bufferLimit: 16)

    /// Opens (creating and migrating as needed) the database at `path`.
    public init(path: String, policy: RetentionPolicy = RetentionPolicy()) throws(DomainError) {
        self.policy = policy
        do {
            pool = try DatabasePool(path: path, configuration: DatabasePool.storeConfiguration())
            try ReadingStore.migrator.migrate(pool)
        } catch {
            throw DomainError("cannot open the database \(path): \(error)", cause: error)
        }
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE device (
                  id TEXT PRIMARY KEY NOT NULL,          -- bluetoothd's object path
                  address TEXT NOT NULL,
                  name TEXT,
                  format TEXT,
                  firstSeen REAL NOT NULL,
                  lastSeen REAL NOT NULL
                );
                -- Key columns first, in key order: SQLite 3.40's integrity_check
                -- wrongly reports NULLs in WITHOUT ROWID tables otherwise.
                CREATE TABLE reading (
                  device TEXT NOT NULL REFERENCES device(id) ON DELETE CASCADE,
                  kind TEXT NOT NULL,
                  label TEXT NOT NULL DEFAULT '',
                  resolution INTEGER NOT NULL DEFAULT 0, -- 0 raw, 1 hourly, 2 daily
                  at REAL NOT NULL,                      -- seconds since 1970; bucket start when samples > 1
                  value REAL NOT NULL,
                  samples INTEGER NOT NULL DEFAULT 1,
                  PRIMARY KEY (device, kind, label, resolution, at)
                ) WITHOUT ROWID;
                """)
        }
        m.registerMigration("v2: latest readings per device") { db in
            // JSON (see StoredReading): shown for a remembered device before it is heard again.
            try db.execute(sql: "ALTER TABLE device ADD COLUMN latest TEXT")
        }
        return m
    }

    /// Remembers `record` and stores its numeric readings (at most one per
    /// series per `minimumInterval`). Returns how many values were stored.
    @discardableResult
    public func record(_ record: DeviceRecord, at time: Date) throws(DomainError) -> Int {
        try self.record([record], at: time)
    }

    /// ``record(_:at:)`` for several devices in one transaction, with
    /// prepared statements reused (the cost of a commit is paid once per
    /// batch, not per device), and none when nothing is due: no value (at
    /// most one per series per `minimumInterval`) and no device row (see
    /// ``rowInterval``). All or nothing. Returns how many values were stored.
    @discardableResult
    public func record(_ records: [DeviceRecord], at time: Date) throws(DomainError) -> Int {
        guard !records.isEmpty else { return 0 }
        let interval = rowInterval, minimum = policy.minimumInterval
        var due: [[(String, String, Double)]] = []
        due.reserveCapacity(records.count)
        let writes: [(record: DeviceRecord, at: Date)] = devices.withLock { table in
            var out: [(record: DeviceRecord, at: Date)] = []
            for record in records {
                // Changed in place: one lookup, and the series list is not copied.
                let stored = Self.consider(record, at: time, minimum: minimum, interval: interval,
                                           &table.entries[record.id, default: DeviceEntry()])
                due.append(stored.values)
                if stored.write { out.append((record, time)) }
            }
            if let last = table.lastSweep, time >= last, time.timeIntervalSince(last) < interval { return out }
            // Once per interval: what waited goes now, what was written long
            // enough ago is forgotten (its next record is written at once),
            // and entries that say nothing any more go.
            table.lastSweep = time
            var gone: [DeviceID] = []
            var i = table.entries.startIndex
            while i != table.entries.endIndex {
                let id = table.entries.keys[i]
                if let write = Self.takePending(&table.entries.values[i], id: id) { out.append(write) }
                if let w = table.entries.values[i].row, !(time >= w.at && time.timeIntervalSince(w.at) < interval) {
                    table.entries.values[i].row = nil
                }
                if table.entries.values[i].row == nil,
                   !table.entries.values[i].series.contains(where: { time.timeIntervalSince($0.at) < minimum }) {
                    gone.append(id)
                }
                i = table.entries.index(after: i)
            }
            for id in gone { table.entries[id] = nil }
            return out
        }
        guard !writes.isEmpty else { return 0 }
        var values: [DeviceID: [(String, String, Double)]] = [:]
        for (record, v) in zip(records, due) where !v.isEmpty { values[record.id] = v }
        do {
            try writeRows(writes, values: values)
        } catch {
            // Written again with the device's next record.
            devices.withLock { t in for w in writes { t.entries[w.record.id]?.row = nil } }
            let what = records.count == 1 ? "\(records[0].id.address)" : "\(records.count) devices"
            throw DomainError("cannot store readings of \(what): \(error)", cause: error)
        }
        let changed = zip(records, due).filter { !$0.1.isEmpty }.map(\.0.id)
        // In place: `update` copies the state to compare it afterwards, which
        // for this table (one entry per device ever stored) was a copy and a
        // comparison of 10 000 entries per batch at 10 000 devices. A
        // counter that goes up is a change, so there is nothing to compare.
        if !changed.isEmpty { revision.modify { for id in changed { $0[id, default: 0] += 1 } } }
        return due.reduce(0) { $0 + $1.count }
    }

    /// Device rows and their values, in one transaction.
    private func writeRows(_ writes: [(record: DeviceRecord, at: Date)], values: [DeviceID: [(String, String, Double)]]) throws {
        try pool.batchWrite { db, _ in
            let upsert = try db.cachedStatement(sql: """
                INSERT INTO device (id, address, name, format, firstSeen, lastSeen, latest) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(id) DO UPDATE SET name = coalesce(excluded.name, name),
                  format = coalesce(excluded.format, format), lastSeen = excluded.lastSeen,
                  latest = coalesce(excluded.latest, latest)
                """)
            let insert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO reading (device, kind, label, at, value) VALUES (?, ?, ?, ?, ?)")
            for (record, time) in writes {
                let device = record.id.path.rawValue
                let at = time.timeIntervalSince1970
                try upsert.execute(arguments: [device, record.id.address.description, record.name, record.format, at, at,
                                               StoredReading.encode(record.readings)])
                for (kind, label, value) in values[record.id] ?? [] {
                    try insert.execute(arguments: [device, kind, label, at, value])
                }
            }
        }
    }

    /// One record against its device's entry: the values due (at most one
    /// per series per `minimum`) and whether its row is written now (else
    /// its readings wait in the entry).
    private static func consider(_ record: DeviceRecord, at time: Date, minimum: TimeInterval, interval: TimeInterval,
                                 _ entry: inout DeviceEntry) -> (values: [(String, String, Double)], write: Bool) {
        // One time per reading, kept for as long as the device is: exactly
        // as many as it has (appending one by one doubles).
        if entry.series.isEmpty { entry.series.reserveCapacity(record.readings.count) }
        var values: [(String, String, Double)] = []
        for r in record.readings {
            guard case let .number(v) = r.value, v.isFinite else { continue }
            let label = SeriesTime.label(r.label)
            if let i = entry.series.firstIndex(where: { $0.kind == r.kind && $0.label == label }) {
                guard time.timeIntervalSince(entry.series[i].at) >= minimum else { continue }
                entry.series[i].at = time
            } else {
                entry.series.append(SeriesTime(kind: r.kind, label: label, at: time))
            }
            values.append((r.kind.rawValue, r.label ?? "", v))
        }
        if values.isEmpty, let w = entry.row, w.name == record.name, w.format == record.format,
           time >= w.at, time.timeIntervalSince(w.at) < interval {
            entry.pending = (record.readings, time)
            return (values, false)
        }
        entry.pending = nil
        entry.row = RowWrite(at: time, name: record.name, format: record.format)
        return (values, true)
    }

    /// The row that waits in `entry` (its readings with the name and format
    /// last written), now counted as written; nil when none waits.
    private static func takePending(_ entry: inout DeviceEntry, id: DeviceID) -> (record: DeviceRecord, at: Date)? {
        guard let (readings, at) = entry.pending, let row = entry.row else { return nil }
        entry.pending = nil
        entry.row = RowWrite(at: at, name: row.name, format: row.format)
        return (DeviceRecord(id: id, name: row.name, format: row.format, readings: readings), at)
    }

    /// Writes the device rows that wait (see `rows`) now.
    public func flushPendingRows() throws(DomainError) {
        let writes = devices.withLock { t -> [(record: DeviceRecord, at: Date)] in
            var out: [(record: DeviceRecord, at: Date)] = []
            var i = t.entries.startIndex
            while i != t.entries.endIndex {
                if let write = Self.takePending(&t.entries.values[i], id: t.entries.keys[i]) { out.append(write) }
                i = t.entries.index(after: i)
            }
            return out
        }
        guard !writes.isEmpty else { return }
        do { try writeRows(writes, values: [:]) } catch {
            throw DomainError("cannot store the devices' latest readings: \(error)", cause: error)
        }
    }

    deinit { try? flushPendingRows() }

    public func revisions() -> AsyncStream<[DeviceID: UInt64]> { revision.states() }

    public func series(of device: DeviceID, since: Date) throws(DomainError) -> [ReadingSeries] {
        do {
            let rows = try pool.read { db in
                try Row.fetchAll(db, sql: """
                    SELECT kind, label, at, value, samples FROM reading
                    WHERE device = ? AND at >= ? ORDER BY kind, label, at
                    """, arguments: [device.path.rawValue, since.timeIntervalSince1970])
            }
            var out: [ReadingSeries] = []
            for row in rows {
                let kindText: String = row["kind"]
                guard let kind = ReadingKind(rawValue: kindText) else { continue }   // written by a newer version
                let label: String = row["label"]
                let point = ReadingPoint(at: Date(timeIntervalSince1970: row["at"]), value: row["value"], samples: row["samples"])
                if let last = out.last, last.kind == kind, last.label == label {
                    out[out.count - 1].points.append(point)
                } else {
                    out.append(ReadingSeries(kind: kind, label: label, points: [point]))
                }
            }
            return out
        } catch {
            throw DomainError("cannot read the history of \(device.address): \(error)", cause: error)
        }
    }

    /// The history of one series, oldest first, at every resolution stored.
    public func history(of device: DeviceID, kind: ReadingKind, label: String = "", since: Date = .distantPast) throws(DomainError) -> [ReadingPoint] {
        do {
            return try pool.read { db in
                try Row.fetchAll(db, sql: """
                    SELECT at, value, samples FROM reading
                    WHERE device = ? AND kind = ? AND label = ? AND at >= ? ORDER BY at
                    """, arguments: [device.path.rawValue, kind.rawValue, label, since.timeIntervalSince1970])
                    .map { ReadingPoint(at: Date(timeIntervalSince1970: $0["at"]), value: $0["value"], samples: $0["samples"]) }
            }
        } catch {
            throw DomainError("cannot read the history of \(device.address): \(error)", cause: error)
        }
    }

    /// Devices we remember: name, format, first and last seen, latest readings
    /// (rows whose id is not a device path are skipped).
    public func rememberedDevices() throws(DomainError) -> [RememberedDevice] {
        try flushPendingRows()
        do {
            return try pool.read { db in
                try Row.fetchAll(db, sql: "SELECT id, address, name, format, firstSeen, lastSeen, latest FROM device ORDER BY id").compactMap { row in
                    guard let id = ReadingStore.deviceID(path: row["id"], address: row["address"]) else { return nil }
                    return RememberedDevice(id: id, name: row["name"], format: row["format"],
                                            firstSeen: Date(timeIntervalSince1970: row["firstSeen"]),
                                            lastSeen: Date(timeIntervalSince1970: row["lastSeen"]),
                                            latest: StoredReading.decode(row["latest"]))
                }
            }
        } catch {
            throw DomainError("cannot read remembered devices: \(error)", cause: error)
        }
    }

    /// Applies the retention policy as of `now`: raw → hourly → daily
    /// averages, then drops what is older than `keepFor`. Each step is one
    /// transaction. Returns the number of rows left.
    @discardableResult
    public func compact(now: Date) throws(DomainError) -> Int {
        let t = now.timeIntervalSince1970
        // Only whole buckets that end before each cut-off are averaged.
        let hourlyUpTo = ReadingStore.wholeBuckets(before: t - policy.rawFor, of: 3_600)
        let dailyUpTo = ReadingStore.wholeBuckets(before: t - policy.hourlyFor, of: 86_400)
        let forgetBefore = t - policy.keepFor
        do {
            let changed = try pool.write { db -> [DeviceID] in
                // The devices whose history this changes.
                let affected = try Row.fetchAll(db, sql: """
                    SELECT DISTINCT r.device AS id, d.address AS address FROM reading r JOIN device d ON d.id = r.device
                    WHERE (r.resolution = 0 AND r.at < ?) OR (r.resolution = 1 AND r.at < ?) OR r.at < ?
                    """, arguments: [hourlyUpTo, dailyUpTo, forgetBefore])
                try ReadingStore.downsample(db, from: 0, to: 1, bucket: 3_600, before: hourlyUpTo)
                try ReadingStore.downsample(db, from: 1, to: 2, bucket: 86_400, before: dailyUpTo)
                try db.execute(sql: "DELETE FROM reading WHERE at < ?", arguments: [forgetBefore])
                return affected.compactMap { ReadingStore.deviceID(path: $0["id"], address: $0["address"]) }
            }
            // Whoever shows those histories reloads them.
            if !changed.isEmpty { revision.modify { r in for d in changed { r[d, default: 0] += 1 } } }
            return try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM reading") ?? 0 }
        } catch {
            throw DomainError("cannot compact the readings: \(error)", cause: error)
        }
    }

    /// The device a stored id (its D-Bus path) and address name; nil for a row
    /// that is not a device path.
    static func deviceID(path: String, address addressText: String) -> DeviceID? {
        let parts = path.split(separator: "/")   // org, bluez, hciN, dev_…
        guard parts.count == 4, let adapter = try? AdapterID(name: String(parts[2])),
              let address = try? BluetoothAddress(addressText) else { return nil }
        let id = DeviceID(adapter: adapter, address: address)
        return id.path.rawValue == path ? id : nil
    }

    /// Where the whole buckets of `bucket` seconds that end before `cutoff` end.
    static func wholeBuckets(before cutoff: Double, of bucket: Double) -> Double {
        (cutoff / bucket).rounded(.down) * bucket
    }

    /// Averages rows of resolution `from` before `limit` (a bucket boundary)
    /// into buckets of `bucket` seconds at resolution `to` (weighted by their
    /// sample counts), merging with buckets already there, then deletes the
    /// originals.
    private static func downsample(_ db: Database, from: Int, to: Int, bucket: Double, before limit: Double) throws {
        try db.execute(sql: """
            INSERT INTO reading (device, kind, label, at, value, samples, resolution)
            SELECT device, kind, label, bucketStart, sum(value * samples) / sum(samples), sum(samples), ?
            FROM (SELECT device, kind, label, value, samples, (CAST(at / ? AS INTEGER)) * ? AS bucketStart
                  FROM reading WHERE resolution = ? AND at < ?)
            WHERE true -- (SQLite: an upsert's SELECT needs a WHERE to parse)
            GROUP BY device, kind, label, bucketStart
            ON CONFLICT(device, kind, label, resolution, at) DO UPDATE SET
              value = (value * samples + excluded.value * excluded.samples) / (samples + excluded.samples),
              samples = samples + excluded.samples
            """, arguments: [to, bucket, bucket, from, limit])
        try db.execute(sql: "DELETE FROM reading WHERE resolution = ? AND at < ?", arguments: [from, limit])
    }
}

/// A device as the database remembers it.
public struct RememberedDevice: Sendable, Equatable {
    public var id: DeviceID
    public var name: String?
    public var format: String?
    public var firstSeen: Date
    public var lastSeen: Date
    public var latest: [Reading]
}

/// A reading as stored in `device.latest` (JSON).
struct StoredReading: Codable {
    var kind: String
    var label: String?
    var unit: String?
    var number: Double?
    var bool: Bool?
    var text: String?

    /// The same JSON `JSONEncoder` writes for `[StoredReading]` (absent
    /// values left out), written by BLEParsing's JSON writer: this runs for
    /// every device change the gateway records, and JSONEncoder's
    /// reflection cost a tenth of its CPU.
    static func encode(_ readings: [Reading]) -> String? {
        guard !readings.isEmpty else { return nil }
        return JSON.serialize(.list(readings.map { r -> FieldValue in
            var members: [(String, FieldValue)] = [("kind", .string(r.kind.rawValue))]
            if let label = r.label { members.append(("label", .string(label))) }
            if let unit = r.unit { members.append(("unit", .string(unit))) }
            switch r.value {
            case let .number(v): if v.isFinite { members.append(("number", .number(v))) }
            case let .bool(v): members.append(("bool", .bool(v)))
            case let .text(v): members.append(("text", .string(v)))
            }
            return .nested(members)
        }))
    }

    /// Unreadable JSON or unknown kinds (from a newer version) are skipped, never fatal.
    static func decode(_ text: String?) -> [Reading] {
        guard let text, let stored = try? JSONDecoder().decode([StoredReading].self, from: Data(text.utf8)) else { return [] }
        return stored.compactMap { s in
            guard let kind = ReadingKind(rawValue: s.kind) else { return nil }
            let value: ReadingValue
            if let n = s.number { value = .number(n) } else if let b = s.bool { value = .bool(b) } else if let t = s.text { value = .text(t) } else { return nil }
            return Reading(kind: kind, value: value, unit: s.unit, label: s.label)
        }
    }
}
