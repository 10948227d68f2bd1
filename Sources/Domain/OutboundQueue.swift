import Foundation
import GRDB
import GRDBSQLite
import Locking

/// A message waiting to be published (MQTT topic, payload, flags).
public struct QueuedMessage: Sendable, Equatable {
    /// Increases with every enqueue, never reused: the publishing order.
    public let id: Int64
    public var topic: String
    public var payload: [UInt8]
    public var retain: Bool
    public var qos: Int
    public var enqueuedAt: Date

    public init(id: Int64, topic: String, payload: [UInt8], retain: Bool, qos: Int, enqueuedAt: Date) {
        self.id = id
        self.topic = topic
        self.payload = payload
        self.retain = retain
        self.qos = qos
        self.enqueuedAt = enqueuedAt
    }
}

/// Messages for the broker, kept in SQLite until the broker has them, so
/// nothing is lost while it is unreachable or the process restarts: the
/// gateway enqueues, publishes the oldest first, and removes each once it is
/// acknowledged. Bounded: beyond `capacity` the oldest are dropped and
/// counted (the count survives restarts and is reported, never silent).
public final class OutboundQueue: Sendable {
    private let pool: DatabasePool
    public let capacity: Int
    private let depthStore: StateStore<Int>
    /// The rows in the table, counted once at open and kept by the writes
    /// (the only writer of the file is this object: one queue per file and process).
    private let count: Lock<Int>
    /// The dropped count, read once at open and kept by `enqueue` next to the
    /// table's (metrics read it after every depth change: no query each time).
    private let droppedCount: Lock<Int>
    /// The table's rows in memory while they are few (all of them, or
    /// `complete` is false and reads go to SQLite): in steady state the
    /// publisher takes what was just enqueued without a query. Changed
    /// only when a write commits, in commit order.
    private let memory: Lock<Memory>
    private struct Memory {
        var messages: [QueuedMessage] = []
        var complete: Bool
    }
    /// At most this many rows are kept in memory.
    public static let memoryLimit = 1_024
    /// Acknowledged messages whose rows are still in the file (see
    /// ``acknowledge(_:)``), and whether a flush is scheduled or failed.
    /// Changed only on the serialized writer.
    private let unflushed = Lock(Unflushed())
    private struct Unflushed {
        var ids: [Int64] = []
        var scheduled = false
        var failure: String?
        /// Transactions that deleted acknowledged rows, and their count when
        /// the pending flush was scheduled.
        var deletions = 0
        var deletionsWhenScheduled = 0
    }
    /// An acknowledgement's row is deleted by the next enqueue's transaction
    /// or, when none comes, on its own, at the latest twice this long after
    /// it: a flush finding that an enqueue deleted rows since it was
    /// scheduled leaves the younger ones to the next enqueue and looks again
    /// this long later (while readings flow, acknowledged rows then never
    /// need a transaction of their own).
    public static let acknowledgementDelay: Duration = .milliseconds(250)
    /// At most this many acknowledged rows wait for that.
    public static let acknowledgementBatch = 256

    /// Opens (creating as needed) the queue at `path`.
    public init(path: String, capacity: Int = 100_000) throws(DomainError) {
        self.capacity = max(1, capacity)
        do {
            pool = try DatabasePool(path: path, configuration: DatabasePool.storeConfiguration())
            try OutboundQueue.migrator.migrate(pool)
            let (count, dropped) = try pool.read { db in
                (try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") ?? 0,
                 try Int.fetchOne(db, sql: "SELECT value FROM outboxStats WHERE key = 'dropped'") ?? 0)
            }
            depthStore = StateStore(count, bufferLimit: 16)
            self.count = Lock(count)
            droppedCount = Lock(dropped)
            memory = Lock(Memory(complete: count == 0))
        } catch {
            throw DomainError("cannot open the outbound queue \(path): \(error)", cause: error)
        }
    }

    /// Closing the queue deletes the deferred acknowledgements' rows (a
    /// reopened queue must not publish them again).
    deinit { try? flushAcknowledged() }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE outbox (
                  id INTEGER PRIMARY KEY AUTOINCREMENT,   -- AUTOINCREMENT: ids are never reused
                  topic TEXT NOT NULL,
                  payload BLOB NOT NULL,
                  retain INTEGER NOT NULL,
                  qos INTEGER NOT NULL,
                  enqueuedAt REAL NOT NULL
                );
                CREATE TABLE outboxStats (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
                INSERT INTO outboxStats (key, value) VALUES ('dropped', 0);
                """)
        }
        return m
    }

    /// A message to append (``enqueue(_:at:)``).
    public struct Outgoing: Sendable, Equatable {
        public var topic: String
        public var payload: [UInt8]
        public var retain: Bool
        public var qos: Int
        public init(topic: String, payload: [UInt8], retain: Bool = false, qos: Int = 1) {
            self.topic = topic
            self.payload = payload
            self.retain = retain
            self.qos = qos
        }
    }

    /// Appends a message; if the queue is then over capacity, drops the
    /// oldest and counts them. One transaction.
    @discardableResult
    public func enqueue(topic: String, payload: [UInt8], retain: Bool = false, qos: Int = 1, at time: Date = Date()) throws(DomainError) -> Int64 {
        let ids = try enqueue([Outgoing(topic: topic, payload: payload, retain: retain, qos: qos)], at: time)
        return ids[0]
    }

    /// Appends `messages` in order, in one transaction with one prepared
    /// statement (a gateway tick's worth of messages costs one commit, not
    /// one each); then drops and counts the oldest beyond capacity. All or
    /// nothing: when it throws, none was queued. Returns their ids.
    @discardableResult
    public func enqueue(_ messages: [Outgoing], at time: Date = Date()) throws(DomainError) -> [Int64] {
        guard !messages.isEmpty else { return [] }
        if let bad = messages.first(where: { !(0...2).contains($0.qos) }) {
            throw DomainError("QoS must be 0, 1 or 2, not \(bad.qos)")
        }
        let capacity = self.capacity
        do {
            return try pool.batchWrite { db, commit -> [Int64] in
                // Acknowledged rows still in the file leave with this transaction
                // (they are no longer in `count`: the table then holds `count` rows).
                try self.deleteUnflushed(db, commit)
                let insert = try db.cachedStatement(sql: "INSERT INTO outbox (topic, payload, retain, qos, enqueuedAt) VALUES (?, ?, ?, ?, ?)")
                var ids: [Int64] = []
                ids.reserveCapacity(messages.count)
                let enqueuedAt = time.timeIntervalSince1970
                for m in messages {
                    try insert.executeBound(db) { h in
                        var rc = Bind.text(h, 1, m.topic)
                        if rc == SQLITE_OK { rc = Bind.blob(h, 2, m.payload) }
                        if rc == SQLITE_OK { rc = sqlite3_bind_int64(h, 3, m.retain ? 1 : 0) }
                        if rc == SQLITE_OK { rc = sqlite3_bind_int64(h, 4, Int64(m.qos)) }
                        if rc == SQLITE_OK { rc = sqlite3_bind_double(h, 5, enqueuedAt) }
                        return rc
                    }
                    ids.append(db.lastInsertedRowID)
                }
                let queued = zip(ids, messages).map { id, m in
                    QueuedMessage(id: id, topic: m.topic, payload: m.payload, retain: m.retain, qos: m.qos, enqueuedAt: time)
                }
                var depth = count.withLock { $0 } + messages.count
                var excess = 0
                if depth > capacity {
                    excess = depth - capacity
                    try db.cachedStatement(sql: "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT ?)")
                        .execute(arguments: [excess])
                    try db.cachedStatement(sql: "UPDATE outboxStats SET value = value + ? WHERE key = 'dropped'")
                        .execute(arguments: [excess])
                    depth = capacity
                }
                // Once committed (a rollback changes nothing), on the serialized
                // writer: the count, the dropped count, the rows in memory and
                // then the depth (which wakes the publisher) change in commit order.
                // The count is kept here and in `acknowledge` only, so it stays
                // the table's row count (no O(n) count(*) per message).
                let limit = Self.memoryLimit
                commit.onCommit { [depth, excess] in
                    self.count.withLock { $0 = depth }
                    if excess > 0 { self.droppedCount.withLock { $0 += excess } }
                    self.memory.withLock { m in
                        guard m.complete else { return }
                        if m.messages.count + queued.count <= limit {
                            m.messages.append(contentsOf: queued)
                            m.messages.removeFirst(min(excess, m.messages.count))
                        } else {
                            m = Memory(complete: false)   // a backlog: read from SQLite until it is gone
                        }
                    }
                    self.depthStore.update { $0 = depth }
                }
                return ids
            }
        } catch {
            throw DomainError("cannot queue \(messages.count == 1 ? "a message for \(messages[0].topic)" : "\(messages.count) messages"): \(error)", cause: error)
        }
    }

    /// The oldest `limit` messages, in publishing order (none without a
    /// query while the queue is empty).
    public func oldest(_ limit: Int) throws(DomainError) -> [QueuedMessage] {
        guard limit > 0, count.withLock({ $0 }) > 0 else { return [] }
        if let kept = memory.withLock({ m in m.complete ? Array(m.messages.prefix(limit)) : nil }) { return kept }
        do {
            return try pool.read { db in
                let select = try db.cachedStatement(sql: "SELECT id, topic, payload, retain, qos, enqueuedAt FROM outbox ORDER BY id LIMIT ?")
                return try Row.fetchAll(select, arguments: [limit]).map { row in
                    let payload: Data = row[2]
                    return QueuedMessage(id: row[0], topic: row[1], payload: [UInt8](payload), retain: row[3],
                                         qos: row[4], enqueuedAt: Date(timeIntervalSince1970: row[5]))
                }
            }
        } catch {
            throw DomainError("cannot read the outbound queue: \(error)", cause: error)
        }
    }

    /// Removes a message the broker acknowledged (a no-op if it is gone).
    public func acknowledge(_ id: Int64) throws(DomainError) {
        try acknowledge([id])
    }

    /// Removes messages the broker acknowledged (ids that are gone are skipped).
    ///
    /// While the queue is short (its rows all in memory) the messages leave
    /// the queue at once (depth, ``oldest(_:)``) but their rows stay in the
    /// file for up to twice ``acknowledgementDelay``: the next enqueue deletes them
    /// in its own transaction, or a flush of its own does when none comes, or
    /// ``flushAcknowledged()`` at shutdown. At a few hundred messages a second
    /// that saves one SQLite transaction per acknowledgement. The cost: after
    /// a crash (not a shutdown), messages acknowledged in the last two
    /// ``acknowledgementDelay``s are published again, as QoS 1 allows; nothing
    /// the broker did not acknowledge is ever lost. With a backlog (rows read
    /// from SQLite) the rows go in this call's own transaction, as do any
    /// left from before when a deferred flush failed (its error is thrown here).
    public func acknowledge(_ ids: [Int64]) throws(DomainError) {
        guard !ids.isEmpty else { return }
        do {
            try pool.writeWithoutTransaction { db in
                let deferred = memory.withLock { $0.complete }
                    && unflushed.withLock { $0.failure == nil && $0.ids.count + ids.count <= Self.acknowledgementBatch }
                if deferred {
                    unflushed.withLock { $0.ids.append(contentsOf: ids) }
                    removeAcknowledged(Set(ids), depth: nil)
                    scheduleFlush()
                    return
                }
                try db.batchTransaction { db, commit in
                    try self.deleteUnflushed(db, commit)
                    let removed = try Self.deleteRows(ids, db)
                    let depth = max(0, count.withLock { $0 } - removed)
                    let gone = Set(ids)
                    commit.onCommit { self.removeAcknowledged(gone, depth: depth) }
                }
            }
        } catch {
            throw DomainError("cannot remove \(ids.count == 1 ? "message \(ids[0])" : "\(ids.count) messages") from the outbound queue: \(error)", cause: error)
        }
    }

    /// Deletes the rows of acknowledged messages that are still in the file
    /// now (the shutdown's last step; otherwise done within twice ``acknowledgementDelay``).
    public func flushAcknowledged() throws(DomainError) {
        do {
            try pool.batchWrite { db, commit in try self.deleteUnflushed(db, commit) }
        } catch {
            throw DomainError("cannot remove acknowledged messages from the outbound queue: \(error)", cause: error)
        }
    }

    /// In a write transaction: deletes the deferred acknowledgements' rows;
    /// once it commits they are forgotten (and a failure with them).
    private func deleteUnflushed(_ db: Database, _ commit: CommitActions) throws {
        let ids = unflushed.withLock { $0.ids }
        guard !ids.isEmpty else { return }
        try Self.deleteRows(ids, db)
        commit.onCommit {
            self.unflushed.withLock { u in
                u.ids.removeFirst(min(ids.count, u.ids.count))   // appended only on the writer: still the prefix
                u.failure = nil
                u.deletions &+= 1
            }
        }
    }

    /// Deletes the rows with these ids (ids without a row are skipped) and
    /// returns how many were deleted. A run of consecutive ids is one
    /// statement (`id BETWEEN first AND last` deletes exactly those ids):
    /// acknowledgements come as the oldest messages in publishing order,
    /// whose ids are consecutive, so a batch of them costs one statement
    /// instead of one each (docs/PERFORMANCE.md, seventeenth pass).
    @discardableResult
    static func deleteRows(_ ids: [Int64], _ db: Database) throws -> Int {
        guard !ids.isEmpty else { return 0 }
        let delete = try db.cachedStatement(sql: "DELETE FROM outbox WHERE id BETWEEN ? AND ?")
        var removed = 0
        var i = 0
        while i < ids.count {
            let first = ids[i]
            var last = first
            i += 1
            while i < ids.count, last < Int64.max, ids[i] == last + 1 {
                last = ids[i]
                i += 1
            }
            try delete.executeBound(db) { h in
                var rc = sqlite3_bind_int64(h, 1, first)
                if rc == SQLITE_OK { rc = sqlite3_bind_int64(h, 2, last) }
                return rc
            }
            removed += db.changesCount
        }
        return removed
    }

    /// On the writer: a flush of the deferred acknowledgements after
    /// ``acknowledgementDelay`` (see there), unless one is pending.
    private func scheduleFlush() {
        let start = unflushed.withLock { u -> Bool in
            guard !u.scheduled else { return false }
            u.scheduled = true
            u.deletionsWhenScheduled = u.deletions
            return true
        }
        guard start else { return }
        startFlushTimer()
    }

    private func startFlushTimer() {
        Task { [weak self] in
            try? await Task.sleep(for: Self.acknowledgementDelay)
            self?.flushDeferred()
        }
    }

    private func flushDeferred() {
        do {
            try pool.writeWithoutTransaction { db in
                // While messages keep coming, an enqueue (every batch) has
                // usually deleted these rows already: then no transaction at
                // all (an empty one still takes and releases the file's locks:
                // 2.7 % of the gateway's CPU at 200 changes/s, perf 2026-11-29).
                enum Next { case nothing, lookAgainLater, deleteNow }
                let next = unflushed.withLock { u -> Next in
                    if u.ids.isEmpty {
                        u.scheduled = false
                        return .nothing
                    }
                    if u.deletions != u.deletionsWhenScheduled {
                        // What was pending when scheduled is gone: these
                        // came after that enqueue.
                        u.deletionsWhenScheduled = u.deletions
                        return .lookAgainLater
                    }
                    u.scheduled = false
                    return .deleteNow
                }
                switch next {
                case .nothing: return
                case .lookAgainLater:
                    startFlushTimer()
                    return
                case .deleteNow: break
                }
                try db.batchTransaction { db, commit in try self.deleteUnflushed(db, commit) }
            }
        } catch {
            // Kept: the next acknowledge deletes them in its own transaction
            // and throws if that fails too.
            unflushed.withLock { $0.failure = "\(error)" }
        }
    }

    /// On the writer, once the messages `gone` left the queue: the count
    /// (`depth`, or minus those found in memory), the rows in memory, then the
    /// depth (which wakes the publisher), as in `enqueue`.
    private func removeAcknowledged(_ gone: Set<Int64>, depth: Int?) {
        let depth = memory.withLock { m -> Int in
            var found = 0
            if m.complete {
                // Usually the oldest: a prefix.
                var k = 0
                while k < m.messages.count, gone.contains(m.messages[k].id) { k += 1 }
                m.messages.removeFirst(k)
                found = k
                if k < gone.count {
                    let before = m.messages.count
                    m.messages.removeAll { gone.contains($0.id) }
                    found += before - m.messages.count
                }
            }
            let d = depth ?? max(0, count.withLock { $0 } - found)
            if !m.complete && d == 0 { m = Memory(complete: true) }   // the backlog is gone: nothing to read
            return d
        }
        count.withLock { $0 = depth }
        depthStore.update { $0 = depth }
    }

    /// Messages waiting now.
    public var depth: Int { depthStore.state }
    /// The current depth first, then every change (for metrics).
    public func depths() -> AsyncStream<Int> { depthStore.states() }

    /// How many messages were dropped because the queue was full, ever
    /// (stored with the queue: the count survives restarts).
    public var dropped: Int { droppedCount.withLock { $0 } }
}
