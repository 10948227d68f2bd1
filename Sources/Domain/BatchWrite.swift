import GRDB
import GRDBSQLite

extension DatabasePool {
    /// How the gateway's stores (readings, outbox) open their database.
    ///
    /// Each connection's page cache is at most ``pageCacheKiB`` instead of
    /// SQLite's default 2 000 KiB: both stores append (new rows go to the
    /// rightmost pages of a table and of its index) and read back little, so
    /// their hot pages are few; the rest is in the kernel's page cache
    /// anyway. The default let every connection keep ~2 MB per store that a
    /// gateway hearing thousands of devices filled (heaptrack, 5 000
    /// devices: 4.5 MB of SQLite page cache).
    static func storeConfiguration() -> Configuration {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA cache_size = -\(pageCacheKiB)")
        }
        return configuration
    }

    /// A store connection's page cache, in KiB (see ``storeConfiguration()``).
    static let pageCacheKiB = 256

    /// `write(_:)` for the gateway's hot path: the transaction's own
    /// statements prepared once, and work to do once it committed.
    ///
    /// Two GRDB behaviours made every small transaction re-compile SQL
    /// (perf, 2026-11-26: a third of all SQLite time): `write` begins and
    /// commits with `execute(sql:)`, which parses and authorises "BEGIN
    /// IMMEDIATE TRANSACTION" and "COMMIT TRANSACTION" each time; and
    /// `afterNextTransaction` registers a transaction observer, and adding
    /// one drops every cached statement that deletes (GRDB re-decides its
    /// truncate optimisation), so the outbox's cached DELETE was prepared
    /// again for each acknowledgement. Here both transaction statements come
    /// from the statement cache, and `onCommit` work runs after COMMIT
    /// succeeded, still on the serialized writer (so in commit order), with
    /// no observer.
    ///
    /// Semantics otherwise `write`'s: IMMEDIATE, all or nothing (rolled back
    /// when `body` or the commit throws; then no `onCommit` work runs).
    func batchWrite<T>(_ body: (Database, CommitActions) throws -> T) throws -> T {
        try writeWithoutTransaction { db in try db.batchTransaction(body) }
    }
}

extension Database {
    /// ``DatabasePool/batchWrite(_:)`` on a connection already held by the
    /// writer (inside `writeWithoutTransaction`, which is not reentrant).
    func batchTransaction<T>(_ body: (Database, CommitActions) throws -> T) throws -> T {
        let actions = CommitActions()
        try cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        let result: T
        do {
            result = try body(self, actions)
            try cachedStatement(sql: "COMMIT TRANSACTION").execute()
        } catch {
            try? rollback()
            throw error
        }
        for action in actions.list { action() }
        return result
    }
}

/// Work registered inside ``DatabasePool/batchWrite(_:)`` for after its commit.
final class CommitActions {
    fileprivate var list: [() -> Void] = []
    func onCommit(_ action: @escaping () -> Void) { list.append(action) }
}

extension Statement {
    /// Runs this statement once with `bind` binding its parameters through
    /// the C API. GRDB's `execute(arguments:)` boxes each value in a
    /// `DatabaseValue` first; at a row per advertisement that was half the
    /// outbox's insert. Only for statements used no other way.
    func executeBound(_ db: Database, _ bind: (OpaquePointer) -> Int32) throws {
        let handle = sqliteStatement
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        var rc = bind(handle)
        if rc == SQLITE_OK { rc = sqlite3_step(handle) }
        let ok = rc == SQLITE_DONE || rc == SQLITE_ROW
        let message = ok ? "" : String(cString: sqlite3_errmsg(db.sqliteConnection))
        sqlite3_reset(handle)
        guard ok else { throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: message, sql: sql) }
    }
}

/// Binds text and blobs for ``Statement/executeBound(_:_:)``: SQLite copies
/// them before the call returns (SQLITE_TRANSIENT).
enum Bind {
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    static func text(_ handle: OpaquePointer, _ index: Int32, _ value: String) -> Int32 {
        var value = value
        return value.withUTF8 { utf8 in
            // A zero-length value with a null pointer would be bound as NULL.
            guard let base = utf8.baseAddress, !utf8.isEmpty else { return sqlite3_bind_text(handle, index, "", 0, transient) }
            return sqlite3_bind_text64(handle, index, base, UInt64(utf8.count), transient, UInt8(SQLITE_UTF8))
        }
    }

    static func blob(_ handle: OpaquePointer, _ index: Int32, _ value: [UInt8]) -> Int32 {
        value.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return sqlite3_bind_zeroblob(handle, index, 0) }
            return sqlite3_bind_blob64(handle, index, base, UInt64(bytes.count), transient)
        }
    }
}
