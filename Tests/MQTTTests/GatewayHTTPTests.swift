import BlueZ
import Foundation
import Testing
import TestSupport
@testable import Gateway

/// One HTTP exchange through curl (a real client): status and body.
struct HTTPExchange {
    var status: Int
    var body: String
    var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] }
}

func curl(_ method: String, _ url: String, token: String? = nil, body: String? = nil, maxTime: Int = 20) async throws -> HTTPExchange {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("curl-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let out = dir.appendingPathComponent("body").path
    var arguments = ["-s", "-S", "-o", out, "-w", "%{http_code}", "-X", method, "--max-time", "\(maxTime)"]
    if let token { arguments += ["-H", "Authorization: Bearer \(token)"] }
    if let body { arguments += ["-H", "Content-Type: application/json", "--data-binary", body] }
    arguments.append(url)
    let statusFile = dir.appendingPathComponent("status").path
    let pid = try spawn("/usr/bin/curl", arguments, stdout: statusFile)
    _ = try await offPool { waitForExit(pid) }
    let status = Int((try? String(contentsOfFile: statusFile, encoding: .utf8)) ?? "") ?? 0
    return HTTPExchange(status: status, body: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "")
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct GatewayHTTPTests {
    static let ruuvi = "CB:B8:33:4C:88:4F"

    func withGateway(token: String? = nil, _ body: (GatewayHarness, String) async throws -> Void) async throws {
        let port = try freeLoopbackPort()
        let gateway = try await GatewayHarness.start(try demoScenario(), broker: nil,
                                                     http: .init(host: "127.0.0.1", port: port, token: token))
        do {
            try await gateway.runtime.startHTTP()
            try await body(gateway, "http://127.0.0.1:\(port)")
        } catch {
            await gateway.stop()
            throw error
        }
        await gateway.stop()
    }

    /// Polls until `condition` holds for a response (the scan needs a moment).
    func eventually(_ request: () async throws -> HTTPExchange, _ condition: (HTTPExchange) -> Bool) async throws -> HTTPExchange {
        let deadline = ContinuousClock.now + .seconds(15)
        var last = try await request()
        while !condition(last), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(200))
            last = try await request()
        }
        return last
    }

    @Test func devicesHistoryHealthAndMetrics() async throws {
        try await withGateway { gateway, base in
            let health = try await eventually({ try await curl("GET", "\(base)/healthz") }) { $0.status == 200 }
            #expect(health.status == 200)
            #expect(health.json?["status"] as? String == "ok")
            #expect(health.json?["mqtt"] as? String == "off")

            let list = try await eventually({ try await curl("GET", "\(base)/api/devices") }) { r in
                // Listed by the presenter and published (online) by the planner, which follows it.
                (r.json?["devices"] as? [[String: Any]])?.contains { $0["address"] as? String == Self.ruuvi && $0["online"] as? Bool == true } == true
            }
            let ruuvi = try #require((list.json?["devices"] as? [[String: Any]])?.first { $0["address"] as? String == Self.ruuvi })
            #expect((ruuvi["readings"] as? [String: Any])?["temperature"] is Double)
            #expect(ruuvi["online"] as? Bool == true)

            let detail = try await curl("GET", "\(base)/api/devices/cbb8334c884f")
            #expect(detail.status == 200)
            #expect(detail.json?["name"] as? String == "Ruuvi 884F")

            // History: what the recorder stored, in a time range.
            let history = try await eventually({ try await curl("GET", "\(base)/api/devices/\(Self.ruuvi)/history?kind=temperature") }) { r in
                ((r.json?["series"] as? [[String: Any]])?.first?["points"] as? [Any])?.isEmpty == false
            }
            let series = try #require(history.json?["series"] as? [[String: Any]])
            #expect(series.count == 1)
            #expect(series.first?["kind"] as? String == "temperature")
            let past = try await curl("GET", "\(base)/api/devices/\(Self.ruuvi)/history?from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z")
            #expect(past.status == 200)
            #expect((past.json?["series"] as? [[String: Any]])?.allSatisfy { ($0["points"] as? [Any])?.isEmpty == true } == true)

            let metrics = try await curl("GET", "\(base)/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.body.contains("# TYPE blecompanion_advertisements_total counter"))
            #expect(metrics.body.contains("blecompanion_bluetoothd_available 1"))
            let advertisements = metrics.body.split(separator: "\n").first { $0.hasPrefix("blecompanion_advertisements_total ") }
            #expect((advertisements?.split(separator: " ").last).flatMap { Int($0) } ?? 0 > 0)
            _ = gateway
        }
    }

    @Test func malformedRequestsGet4xxWithAMessage() async throws {
        try await withGateway { _, base in
            let badTime = try await curl("GET", "\(base)/api/devices/\(Self.ruuvi)/history?from=yesterday")
            #expect(badTime.status == 400)
            #expect((badTime.json?["error"] as? String)?.contains("\"from\" must be an ISO 8601 time") == true, "\(badTime.body)")
            let reversed = try await curl("GET", "\(base)/api/devices/\(Self.ruuvi)/history?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z")
            #expect(reversed.status == 400)
            // Numbers that would trap when converted: refused, and the gateway keeps answering.
            for value in ["1e20", "-1e20", "1e300", "-1", "253402300800", "inf", "nan", "-inf"] {
                for name in ["from", "to"] {
                    let huge = try await curl("GET", "\(base)/api/devices/\(Self.ruuvi)/history?\(name)=\(value)")
                    #expect(huge.status == 400, "\(name)=\(value): \(huge.status) \(huge.body)")
                    #expect((huge.json?["error"] as? String)?.contains("expected a time between") == true, "\(huge.body)")
                }
            }
            let alive = try await curl("GET", "\(base)/healthz")
            #expect(alive.status == 200 || alive.status == 503, "still answering after the hostile times: \(alive.status)")
            let kind = try await curl("GET", "\(base)/api/devices/\(Self.ruuvi)/history?kind=warmth")
            #expect(kind.status == 400)
            #expect((kind.json?["error"] as? String)?.contains("unknown reading kind \"warmth\"") == true)
            let address = try await curl("GET", "\(base)/api/devices/not-an-address")
            #expect(address.status == 400)
            let unknown = try await curl("GET", "\(base)/api/devices/11:22:33:44:55:66")
            #expect(unknown.status == 404)
            let route = try await curl("GET", "\(base)/api/nothing")
            #expect(route.status == 404)
            let method = try await curl("DELETE", "\(base)/api/devices")
            #expect(method.status == 405)
            let command = try await curl("POST", "\(base)/api/devices/\(Self.ruuvi)/actions", body: #"{"action":"explode"}"#)
            #expect(command.status == 400)
            #expect((command.json?["error"] as? String)?.contains("unknown action \"explode\"") == true)
            let notJSON = try await curl("POST", "\(base)/api/devices/\(Self.ruuvi)/actions", body: "connect")
            #expect(notJSON.status == 400)
        }
    }

    @Test func actionsRunThroughThePresenter() async throws {
        try await withGateway { gateway, base in
            let strap = "E4:5F:01:AA:10:01"
            _ = await gateway.runtime.list.states().first { $0.devices.value?.contains { $0.id.address.description == strap } == true }
            let connect = try await curl("POST", "\(base)/api/devices/\(strap)/actions", body: #"{"action":"connect","id":"h1"}"#)
            #expect(connect.status == 200, "\(connect.body)")
            #expect(connect.json?["ok"] as? Bool == true)
            let read = try await curl("POST", "\(base)/api/devices/\(strap)/actions", body: #"{"action":"read","characteristic":"2a19"}"#)
            #expect(read.status == 200, "\(read.body)")
            #expect(read.json?["value"] as? String == "5b")
            #expect((read.json?["readings"] as? [String: Any])?["battery"] as? Double == 91)
            let refused = try await curl("POST", "\(base)/api/devices/\(strap)/actions", body: #"{"action":"write","characteristic":"2a39","value":"07"}"#)
            #expect(refused.status == 502)
            #expect(refused.json?["ok"] as? Bool == false)
            let detail = try await curl("GET", "\(base)/api/devices/\(strap)")
            #expect(detail.json?["connected"] as? Bool == true)
            #expect((detail.json?["services"] as? [Any])?.isEmpty == false)
        }
    }

    @Test func serverSentEventsCarryStatesAsTheyArePublished() async throws {
        try await withGateway { _, base in
            _ = try await eventually({ try await curl("GET", "\(base)/healthz") }) { $0.status == 200 }
            // curl keeps the stream open for 4 s and writes what arrived.
            let stream = try await curl("GET", "\(base)/api/events", maxTime: 4)
            let events = stream.body.components(separatedBy: "\n\n").filter { $0.contains("event: state") }
            #expect(events.count >= 2, "\(stream.body.prefix(400))")
            let data = events.compactMap { $0.split(separator: "\n").first { $0.hasPrefix("data: ") }?.dropFirst(6) }
            #expect(data.contains { $0.contains(#""address":"CB:B8:33:4C:88:4F""#) })
        }
    }

    @Test func aTokenIsEnforcedAndRequiredOffLoopback() async throws {
        try await withGateway(token: "s3cret") { _, base in
            let without = try await curl("GET", "\(base)/api/devices")
            #expect(without.status == 401)
            let wrong = try await curl("GET", "\(base)/api/devices", token: "guess")
            #expect(wrong.status == 401)
            let with = try await curl("GET", "\(base)/api/devices", token: "s3cret")
            #expect(with.status == 200)
            let metrics = try await curl("GET", "\(base)/metrics")
            #expect(metrics.status == 401)
            let health = try await curl("GET", "\(base)/healthz")
            #expect(health.status != 401, "health checks need no token")
        }
        // Any address but loopback without a token: the runtime refuses to listen.
        let gateway = try await GatewayHarness.start(try demoScenario(), broker: nil,
                                                     http: .init(host: "0.0.0.0", port: try freeLoopbackPort(), token: nil))
        await #expect(throws: GatewayStartError.self) { try await gateway.runtime.startHTTP() }
        do { try await gateway.runtime.startHTTP() } catch {
            #expect(error.description.contains("bearer token"))
        }
        #expect(gateway.runtime.httpPort == nil)
        await gateway.stop()
    }
}
