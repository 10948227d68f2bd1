import GRDB

extension DatabasePool {
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
