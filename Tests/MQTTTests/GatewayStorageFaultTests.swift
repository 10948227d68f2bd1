import Domain
import Foundation
import GRDB
import MQTT
import Testing
import TestSupport
@testable import Gateway

/// The gateway's SQLite stores refusing writes (what a full disk, a
/// read-only remount or an I/O error look like to it), made real by another
/// connection: triggers that fail every insert, update and delete, dropped
/// again to "free the disk". Before, the first failed outbox delete ended
/// the publisher for good, silently, with `/healthz` still `ok`.
@Suite(.serialized, .timeLimit(.minutes(2))) struct GatewayStorageFaultTests {
    static let ruuvi = "blecompanion/test/cbb8334c884f"

    /// Every write to `tables` of the file fails with `message` while `on`.
    static func refuseWrites(_ path: String, tables: [String], on: Bool) throws {
        let db = try secondConnection(to: path)
        try db.writeWithoutTransaction { db in
            for table in tables {
                for event in ["INSERT", "UPDATE", "DELETE"] {
                    let name = "refuse_\(table)_\(event.lowercased())"
                    try db.execute(sql: on
                        ? "CREATE TRIGGER \(name) BEFORE \(event) ON \(table) BEGIN SELECT RAISE(FAIL, 'disk full (test)'); END"
                        : "DROP TRIGGER IF EXISTS \(name)")
                }
            }
        }
    }

    @Test func storageErrorsAreCountedLoggedAsDegradedAndPublishingResumesWhenTheyEnd() async throws {
        try await withBroker { broker in
            // Values and device rows written every second (the default, a minute, is longer than this test).
            var retention = RetentionPolicy()
            retention.minimumInterval = 1
            let gateway = try await GatewayHarness.start(try demoScenario(), broker: broker, retention: retention)
            let runtime = gateway.runtime
            let api = GatewayHTTPAPI(runtime: runtime, token: nil)
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("blecompanion/test/+/state", qos: .atLeastOnce))
            _ = await inbox.wait { $0.filter { $0.topic == "\(Self.ruuvi)/state" }.count >= 2 }
            #expect(api.health().status == .ok)

            // Messages wait in the outbox while the broker is away; then the disk "fills".
            try await broker.pause()
            #expect(await eventually(20) { runtime.queue.depth >= 3 })
            let outbox = gateway.directory.appendingPathComponent("outbox.sqlite").path
            let readings = gateway.directory.appendingPathComponent("readings.sqlite").path
            try Self.refuseWrites(outbox, tables: ["outbox"], on: true)
            try Self.refuseWrites(readings, tables: ["device", "reading"], on: true)
            try await broker.resume()

            // The broker takes the backlog but its rows cannot be deleted, new
            // messages cannot be stored, readings cannot be recorded: each is
            // counted, and health says which store fails.
            #expect(await eventually(20) {
                let m = runtime.metrics.current
                return m.queueRefused > 0 && m.storageFailures[.outbox] != nil && m.storageFailures[.readings] != nil
            })
            let failing = api.health()
            #expect(failing.status == .serviceUnavailable)
            guard case let .bytes(body) = failing.body else { Issue.record("a streamed /healthz"); return }
            let text = String(decoding: body, as: UTF8.self)
            #expect(text.contains("\"status\":\"degraded\"") && text.contains("disk full (test)") && text.contains("outbox"), "\(text)")
            let refused = runtime.metrics.current.queueRefused
            runtime.refreshMetrics()
            let rendered = runtime.metrics.render()
            #expect(rendered.contains("blecompanion_storage_ok{store=\"outbox\"} 0"))
            #expect(rendered.contains("blecompanion_storage_ok{store=\"readings\"} 0"))
            // Refused messages are dropped ones: in the dropped total.
            let dropped = rendered.split(separator: "\n").first { $0.hasPrefix("blecompanion_mqtt_queue_dropped_total ") }
                .flatMap { Int($0.split(separator: " ").last ?? "") }
            #expect((dropped ?? 0) >= refused + runtime.queue.dropped && refused > 0, "\(String(describing: dropped)) vs \(refused)")
            try await Task.sleep(for: .seconds(2))

            // Space again: publishing resumes by itself, health recovers.
            try Self.refuseWrites(outbox, tables: ["outbox"], on: false)
            try Self.refuseWrites(readings, tables: ["device", "reading"], on: false)
            let before = inbox.all.count
            let resumed = await inbox.wait(timeout: .seconds(30)) { $0.count >= before + 3 }
            #expect(resumed.count >= before + 3, "states are published again after the storage recovered")
            #expect(await eventually(30) {
                runtime.metrics.current.storageFailures.isEmpty && runtime.queue.depth < 5
            })
            #expect(api.health().status == .ok)
            #expect(runtime.metrics.current.storageErrors[.outbox, default: 0] > 0)
            await watcher.disconnect()
            await gateway.stop()
        }
    }
}
