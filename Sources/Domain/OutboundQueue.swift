import Foundation
import GRDB
import Synchronization

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

    /// Opens (creating as needed) the queue at `path`.
    public init(path: String, capacity: Int = 100_000) throws(DomainError) {
        self.capacity = max(1, capacity)
        do {
            pool = try DatabasePool(path: path)
            try OutboundQueue.migrator.migrate(pool)
            let count = try pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") ?? 0 }
            depthStore = StateStore(count, bufferLimit: 16)
        } catch {
            throw DomainError("cannot open the outbound queue \(path): \(error)")
        }
    }

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

    /// Appends a message; if the queue is then over capacity, drops the
    /// oldest and counts them. One transaction.
    @discardableResult
    public func enqueue(topic: String, payload: [UInt8], retain: Bool = false, qos: Int = 1, at time: Date = Date()) throws(DomainError) -> Int64 {
        guard (0...2).contains(qos) else { throw DomainError("QoS must be 0, 1 or 2, not \(qos)") }
        let capacity = self.capacity
        do {
            let (id, _) = try pool.write { db -> (Int64, Int) in
                try db.execute(sql: "INSERT INTO outbox (topic, payload, retain, qos, enqueuedAt) VALUES (?, ?, ?, ?, ?)",
                               arguments: [topic, Data(payload), retain, qos, time.timeIntervalSince1970])
                let id = db.lastInsertedRowID
                let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") ?? 0
                var depth = count
                if count > capacity {
                    let excess = count - capacity
                    try db.execute(sql: "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT ?)", arguments: [excess])
                    try db.execute(sql: "UPDATE outboxStats SET value = value + ? WHERE key = 'dropped'", arguments: [excess])
                    depth = capacity
                }
                // Inside the (serialized) write: concurrent producers publish their
                // depths in commit order, so the last one published is the current one.
                depthStore.update { $0 = depth }
                return (id, depth)
            }
            return id
        } catch {
            throw DomainError("cannot queue a message for \(topic): \(error)")
        }
    }

    /// The oldest `limit` messages, in publishing order.
    public func oldest(_ limit: Int) throws(DomainError) -> [QueuedMessage] {
        do {
            return try pool.read { db in
                try Row.fetchAll(db, sql: "SELECT id, topic, payload, retain, qos, enqueuedAt FROM outbox ORDER BY id LIMIT ?",
                                 arguments: [max(0, limit)]).map { row in
                    let payload: Data = row["payload"]
                    return QueuedMessage(id: row["id"], topic: row["topic"], payload: [UInt8](payload), retain: row["retain"],
                                         qos: row["qos"], enqueuedAt: Date(timeIntervalSince1970: row["enqueuedAt"]))
                }
            }
        } catch {
            throw DomainError("cannot read the outbound queue: \(error)")
        }
    }

    /// Removes a message the broker acknowledged (a no-op if it is gone).
    public func acknowledge(_ id: Int64) throws(DomainError) {
        do {
            try pool.write { db in
                try db.execute(sql: "DELETE FROM outbox WHERE id = ?", arguments: [id])
                let depth = try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") ?? 0
                depthStore.update { $0 = depth }   // in commit order, as in `enqueue`
            }
        } catch {
            throw DomainError("cannot remove message \(id) from the outbound queue: \(error)")
        }
    }

    /// Messages waiting now.
    public var depth: Int { depthStore.state }
    /// The current depth first, then every change (for metrics).
    public func depths() -> AsyncStream<Int> { depthStore.states() }

    /// How many messages were dropped because the queue was full, ever.
    public func dropped() throws(DomainError) -> Int {
        do {
            return try pool.read { db in try Int.fetchOne(db, sql: "SELECT value FROM outboxStats WHERE key = 'dropped'") ?? 0 }
        } catch {
            throw DomainError("cannot read the outbound queue's counters: \(error)")
        }
    }
}
