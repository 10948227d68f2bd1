import Foundation
import Testing
import GRDB
@testable import Domain

/// The gateway's outbound queue on a real SQLite file.
@Suite final class OutboundQueueTests {
    let dir: URL
    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-outbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    // Every test's directory goes when the test ends, whichever way (a
    // `defer` in each test had been forgotten in three of them).
    deinit { try? FileManager.default.removeItem(at: dir) }
    var path: String { dir.appendingPathComponent("outbox.sqlite").path }

    /// Values bound through the C API come back as they went in, read from
    /// the file by a second queue: an empty payload (what clears a retained
    /// topic) stays an empty blob rather than NULL, an empty or non-ASCII
    /// topic keeps its bytes, every QoS and retain flag and the time survive.
    @Test func boundValuesRoundTripThroughTheFile() throws {
        let t0 = Date(timeIntervalSince1970: 1_800_000_000.25)
        let sent = [
            OutboundQueue.Outgoing(topic: "homeassistant/sensor/x/config", payload: [], retain: true, qos: 1),
            OutboundQueue.Outgoing(topic: "", payload: [0, 1, 0xFF], retain: false, qos: 0),
            OutboundQueue.Outgoing(topic: "küche/température/°C", payload: Array("{\"t\":21.5}".utf8), retain: false, qos: 2),
        ]
        do {
            let q = try OutboundQueue(path: path)
            try q.enqueue(sent, at: t0)
        }
        let read = try OutboundQueue(path: path).oldest(10)
        #expect(read.map(\.topic) == sent.map(\.topic))
        #expect(read.map(\.payload) == sent.map(\.payload))
        #expect(read.map(\.retain) == [true, false, false])
        #expect(read.map(\.qos) == [1, 0, 2])
        #expect(read.allSatisfy { $0.enqueuedAt == t0 })
    }

    /// The stores' connections, writer and readers, keep a small page cache
    /// (``DatabasePool/storeConfiguration()``), not SQLite's 2 000 KiB each.
    @Test func storeConnectionsKeepASmallPageCache() throws {
        let pool = try DatabasePool(path: path, configuration: DatabasePool.storeConfiguration())
        let written = try pool.write { db in try Int.fetchOne(db, sql: "PRAGMA cache_size") }
        let read = try pool.read { db in try Int.fetchOne(db, sql: "PRAGMA cache_size") }
        #expect(written == -DatabasePool.pageCacheKiB)
        #expect(read == -DatabasePool.pageCacheKiB)
        #expect(DatabasePool.pageCacheKiB < 2_000)
    }

    /// The rows kept in memory (the steady state) and those read from
    /// SQLite (a backlog past `memoryLimit`, or one found at open) give the
    /// same messages, and the queue goes back to memory once drained.
    @Test func memoryAndSQLiteReadsAgreeThroughABacklog() throws {
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        let q = try OutboundQueue(path: path, capacity: 5_000)
        func batch(_ range: Range<Int>) -> [OutboundQueue.Outgoing] {
            range.map { OutboundQueue.Outgoing(topic: "t/\($0)", payload: Array("\($0)".utf8), retain: $0 % 2 == 0, qos: $0 % 3) }
        }
        try q.enqueue(batch(0..<10), at: t0)
        let fromMemory = try q.oldest(4)
        #expect(fromMemory.map(\.topic) == ["t/0", "t/1", "t/2", "t/3"])
        // Past the limit: the same oldest rows, now from SQLite.
        let more = OutboundQueue.memoryLimit + 50
        for start in stride(from: 10, to: 10 + more, by: 100) { try q.enqueue(batch(start..<min(start + 100, 10 + more)), at: t0) }
        #expect(q.depth == 10 + more)
        #expect(try q.oldest(4) == fromMemory)
        // Acknowledged in batches, as the publisher does; the order holds throughout.
        var next = 0
        while q.depth > 0 {
            let page = try q.oldest(64)
            #expect(page.map(\.topic) == (next..<next + page.count).map { "t/\($0)" })
            try q.acknowledge(page.map(\.id))
            next += page.count
        }
        #expect(next == 10 + more)
        // Drained: new messages are served from memory again, the same as a reopened queue reads them.
        try q.enqueue(batch(0..<3), at: t0.addingTimeInterval(1))
        let again = try q.oldest(10)
        #expect(again.map(\.topic) == ["t/0", "t/1", "t/2"] && again.map(\.qos) == [0, 1, 2] && again.map(\.retain) == [true, false, true])
        #expect(try OutboundQueue(path: path).oldest(10) == again)
    }

    @Test func keepsOrderAcrossReopeningAndRemovesWhatWasAcknowledged() throws {
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        var ids: [Int64] = []
        do {
            let q = try OutboundQueue(path: path)
            for i in 0..<5 {
                ids.append(try q.enqueue(topic: "blecompanion/gw/dev\(i)/state", payload: Array("{\"n\":\(i)}".utf8), at: t0.addingTimeInterval(Double(i))))
            }
            #expect(ids == ids.sorted() && Set(ids).count == 5)
            #expect(q.depth == 5)
            try q.acknowledge(ids[0])
            try q.acknowledge(ids[1])
        }
        // A restart (the broker was away): the rest is still there, oldest first, bytes intact.
        let q = try OutboundQueue(path: path)
        #expect(q.depth == 3)
        let left = try q.oldest(10)
        #expect(left.map(\.id) == Array(ids[2...]))
        #expect(left.map { String(decoding: $0.payload, as: UTF8.self) } == ["{\"n\":2}", "{\"n\":3}", "{\"n\":4}"])
        #expect(left.first?.enqueuedAt == t0.addingTimeInterval(2) && left.first?.qos == 1 && left.first?.retain == false)
        // New ids continue after the old ones, even after the newest was acknowledged.
        try q.acknowledge(ids[4])
        let next = try q.enqueue(topic: "t", payload: [0xFF, 0x00], retain: true, qos: 2)
        #expect(next > ids[4])
        #expect(try q.oldest(1).map(\.id) == [ids[2]])
        #expect(try q.oldest(10).last?.payload == [0xFF, 0x00])
        try q.acknowledge(9_999)                      // unknown: nothing happens
        #expect(q.depth == 3)
    }

    /// Acknowledged rows are deleted a run of consecutive ids per statement;
    /// whatever the ids look like, exactly their rows go: out of order,
    /// repeated, with gaps, without a row, at the end of the id range.
    @Test func acknowledgedIdsDeleteExactlyTheirRows() throws {
        let queue = try DatabaseQueue()
        try OutboundQueue.migrator.migrate(queue)
        try queue.write { db in
            for id in 1...20 {
                try db.execute(sql: "INSERT INTO outbox (id, topic, payload, retain, qos, enqueuedAt) VALUES (?, 't', x'', 0, 1, 0)",
                               arguments: [id])
            }
            let removed = try OutboundQueue.deleteRows([3, 4, 5, 9, 7, 8, 8, 15, 30, 1, Int64.max, 20, 19], db)
            #expect(try Int64.fetchAll(db, sql: "SELECT id FROM outbox ORDER BY id") == [2, 6, 10, 11, 12, 13, 14, 16, 17, 18])
            #expect(removed == 10)
            #expect(try OutboundQueue.deleteRows([], db) == 0)
        }
    }

    /// An acknowledgement leaves the queue at once, and its row the file by
    /// the next enqueue's transaction, by a flush of its own within twice
    /// `acknowledgementDelay`, or at `flushAcknowledged()`; until then a
    /// crash (here: a second connection reading the file) would publish it
    /// again, never lose one that was not acknowledged.
    @Test func acknowledgedRowsLeaveTheFileWithTheNextWriteOrSoonAfter() async throws {
        let q = try OutboundQueue(path: path)
        // Read-only: a second queue on the file would write (its migration
        // check, its flush when released) and could make the queue's own
        // deferred flush fail with SQLITE_BUSY, which the test would then
        // see as rows left behind.
        func rowsInFile() throws -> [String] {
            var config = Configuration()
            config.readonly = true
            return try DatabaseQueue(path: path, configuration: config).read { db in
                try String.fetchAll(db, sql: "SELECT topic FROM outbox ORDER BY id LIMIT 100")
            }
        }
        let ids = try q.enqueue((0..<4).map { OutboundQueue.Outgoing(topic: "a/\($0)", payload: [UInt8($0)]) })
        try q.acknowledge([ids[0], ids[1]])
        #expect(q.depth == 2)
        #expect(try q.oldest(10).map(\.topic) == ["a/2", "a/3"])
        #expect(try rowsInFile() == ["a/0", "a/1", "a/2", "a/3"])      // deferred
        // The next enqueue takes them out in its transaction.
        try q.enqueue(topic: "a/4", payload: [4])
        #expect(try rowsInFile() == ["a/2", "a/3", "a/4"])
        #expect(q.depth == 3)
        // With nothing enqueued after it, a flush of its own does, soon.
        try q.acknowledge([ids[2]])
        #expect(try rowsInFile() == ["a/2", "a/3", "a/4"])
        // 20 s, not 5: in the full suite on 2 cores the flush's timer task
        // was measured waiting up to 4.7 s for a thread of the cooperative
        // pool (other suites block theirs), and 5 s failed now and then.
        let deadline = ContinuousClock.now + .seconds(20)
        while try rowsInFile() != ["a/3", "a/4"], ContinuousClock.now < deadline {
            try await Task.sleep(for: OutboundQueue.acknowledgementDelay / 5)
        }
        #expect(try rowsInFile() == ["a/3", "a/4"])
        // At shutdown, at once.
        try q.acknowledge([ids[3]])
        try q.flushAcknowledged()
        #expect(try rowsInFile() == ["a/4"])
        #expect(q.depth == 1)
        #expect(try q.oldest(10).map(\.topic) == ["a/4"])
        // More than a batch's worth at once is deleted in the acknowledging transaction.
        let many = try q.enqueue((0..<(OutboundQueue.acknowledgementBatch + 1)).map { OutboundQueue.Outgoing(topic: "m/\($0)", payload: []) })
        try q.acknowledge(many)
        #expect(try rowsInFile() == ["a/4"])
        #expect(q.depth == 1)
    }

    @Test func beyondCapacityTheOldestAreDroppedAndCounted() throws {
        do {
            let q = try OutboundQueue(path: path, capacity: 3)
            for i in 0..<7 { try q.enqueue(topic: "t/\(i)", payload: [UInt8(i)]) }
            #expect(q.depth == 3)
            #expect(try q.oldest(10).map(\.topic) == ["t/4", "t/5", "t/6"])
            #expect(q.dropped == 4)
        }
        // The counter survives a restart.
        let q = try OutboundQueue(path: path, capacity: 3)
        #expect(q.dropped == 4)
        #expect(throws: DomainError("QoS must be 0, 1 or 2, not 3")) { try q.enqueue(topic: "t", payload: [], qos: 3) }
    }

    @Test func aBatchIsQueuedWholeOrNotAtAllAndTheDepthFollowsTheTable() throws {
        let q = try OutboundQueue(path: path, capacity: 10)
        let ids = try q.enqueue((0..<4).map { OutboundQueue.Outgoing(topic: "b/\($0)", payload: [UInt8($0)]) })
        #expect(ids.count == 4 && ids == ids.sorted())
        #expect(q.depth == 4)
        // One bad message refuses the whole batch: nothing of it is queued.
        let mixed = [OutboundQueue.Outgoing(topic: "ok", payload: []), OutboundQueue.Outgoing(topic: "bad", payload: [], qos: 3)]
        #expect(throws: DomainError("QoS must be 0, 1 or 2, not 3")) { try q.enqueue(mixed) }
        #expect(q.depth == 4)
        #expect(try q.oldest(10).map(\.topic) == ["b/0", "b/1", "b/2", "b/3"])
        // Acknowledging a batch, with an unknown id among them, counts only what was there.
        try q.acknowledge([ids[0], 9_999, ids[2]])
        #expect(q.depth == 2)
        #expect(try q.oldest(10).map(\.topic) == ["b/1", "b/3"])
        // Over capacity inside one batch: the oldest go, counted.
        try q.enqueue((0..<12).map { OutboundQueue.Outgoing(topic: "c/\($0)", payload: []) })
        #expect(q.depth == 10)
        #expect(q.dropped == 4)
        #expect(try q.oldest(1).map(\.topic) == ["c/2"])
        // The depth kept in memory is the table's row count, also after reopening.
        let reopened = try OutboundQueue(path: path, capacity: 10)
        #expect(reopened.depth == 10)
        #expect(try reopened.oldest(100).count == 10)
    }

    @Test func concurrentProducersGetDistinctIncreasingIds() async throws {
        let q = try OutboundQueue(path: path)
        let ids = try await withThrowingTaskGroup(of: [Int64].self) { group in
            for p in 0..<4 {
                group.addTask {
                    var mine: [Int64] = []
                    for i in 0..<25 { mine.append(try q.enqueue(topic: "p\(p)", payload: [UInt8(i)])) }
                    return mine
                }
            }
            var all: [[Int64]] = []
            for try await part in group { all.append(part) }
            return all
        }
        // Each producer's own messages keep their order; no id is shared.
        for part in ids { #expect(part == part.sorted()) }
        #expect(Set(ids.flatMap { $0 }).count == 100)
        #expect(q.depth == 100)
        let stored = try q.oldest(200)
        #expect(stored.map(\.id) == stored.map(\.id).sorted())
    }

    @Test func aBadPathSaysWhichFile() {
        #expect(throws: DomainError.self) { try OutboundQueue(path: "/nonexistent-dir/x/outbox.sqlite") }
        do {
            _ = try OutboundQueue(path: "/nonexistent-dir/x/outbox.sqlite")
        } catch {
            #expect(error.description.contains("/nonexistent-dir/x/outbox.sqlite"))
        }
    }
}
