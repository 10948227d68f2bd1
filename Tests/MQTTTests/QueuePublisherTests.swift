import Foundation
import Testing
import TestSupport
import Domain
import GRDB
import Gateway
@testable import MQTT

/// The outbound queue drained to a real mosquitto: order kept and nothing
/// lost across a broker outage.
@Suite(.timeLimit(.minutes(2))) struct QueuePublisherTests {
    @Test func readingsQueuedWhileTheBrokerIsDownArriveAfterwardsInOrder() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-qp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let queue = try OutboundQueue(path: dir.appendingPathComponent("outbox.sqlite").path)

        try await withBroker { broker in
            var config = MQTTConfiguration(host: "127.0.0.1", port: broker.port)
            config.reconnectDelayMin = 2    // gives the test's new subscriber time to subscribe after the restart
            config.reconnectDelayMax = 2
            let client = try await MQTTClient.connect(config)
            let publisher = QueuePublisher(queue: queue, client: client)
            let running = Task { await publisher.run() }
            defer { running.cancel() }

            let first = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await first.subscribe("gw/#", qos: .atLeastOnce))
            for i in 1...5 { try queue.enqueue(topic: "gw/reading", payload: Array("\(i)".utf8)) }
            let before = await inbox.wait { $0.count >= 5 }
            #expect(before.compactMap(\.text) == ["1", "2", "3", "4", "5"])
            #expect(await eventually(10) { queue.depth == 0 })

            // The broker goes away: what is produced meanwhile waits in SQLite.
            try await broker.pause()
            for i in 6...15 { try queue.enqueue(topic: "gw/reading", payload: Array("\(i)".utf8)) }
            #expect(await eventually(10) { queue.depth == 10 })
            try await broker.resume()
            let second = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let after = Inbox(try await second.subscribe("gw/#", qos: .atLeastOnce))
            let rest = await after.wait { $0.count >= 10 }
            #expect(rest.compactMap(\.text) == (6...15).map(String.init), "every reading, in order")
            #expect(await eventually(10) { queue.depth == 0 })
            #expect(queue.dropped == 0)
            running.cancel()
            await client.disconnect()
            await first.disconnect()
            await second.disconnect()
        }
    }

    /// The broker acknowledged a batch but its rows cannot be deleted (the
    /// disk is full; here a trigger refuses every delete): the publisher
    /// reports it, sends nothing more (that would publish them twice) and
    /// tries again with a growing delay; once deletes work it goes on.
    /// Before, the first failed delete ended it for good.
    @Test func aFailedDeleteIsRetriedAndPublishingGoesOnOnceTheDiskHasRoom() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-qp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("outbox.sqlite").path
        let queue = try OutboundQueue(path: path)
        // A backlog larger than the queue keeps in memory: acknowledgements delete at once.
        let total = OutboundQueue.memoryLimit + 100
        for start in stride(from: 0, to: total, by: 200) {
            try queue.enqueue((start..<min(start + 200, total)).map { OutboundQueue.Outgoing(topic: "gw/reading", payload: Array("\($0)".utf8)) })
        }
        let refuse = try secondConnection(to: path)
        try await refuse.write { try $0.execute(sql: "CREATE TRIGGER full BEFORE DELETE ON outbox BEGIN SELECT RAISE(FAIL, 'disk full (test)'); END") }

        try await withBroker { broker in
            let subscriber = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await subscriber.subscribe("gw/#", qos: .atLeastOnce))
            let client = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let publisher = QueuePublisher(queue: queue, client: client, batch: 64, storageRetry: .milliseconds(50)...(.milliseconds(400)))
            let running = Task { await publisher.run() }
            defer { running.cancel() }

            #expect(await eventually(10) { publisher.storageFailure?.contains("disk full (test)") == true })
            try await Task.sleep(for: .seconds(1))
            #expect(publisher.publishedCount == 64, "nothing beyond the first batch while its rows stay")
            #expect(queue.depth == total)

            try await refuse.write { try $0.execute(sql: "DROP TRIGGER full") }
            let received = await inbox.wait(timeout: .seconds(30)) { $0.count >= total }
            #expect(received.compactMap(\.text) == (0..<total).map(String.init), "every message once, in order")
            #expect(await eventually(10) { queue.depth == 0 && publisher.storageFailure == nil })
            running.cancel()
            await client.disconnect()
            await subscriber.disconnect()
        }
    }
}
