import Foundation
import Glibc
import TestSupport

/// `GET url` by curl (no redirects, 3 s at most): the status (0 when there
/// was no answer) and the body.
func httpGet(_ url: String) async throws -> (status: Int, body: String) { try await curl(url) }

/// `GET url` every 0.2 s until `condition` holds or `seconds` pass; the last answer.
func httpWait(_ url: String, seconds: Double,
              _ condition: @escaping ((status: Int, body: String)) -> Bool) async throws -> (status: Int, body: String) {
    let deadline = Date().addingTimeInterval(seconds)
    var last = (status: 0, body: "")
    while Date() < deadline {
        last = try await httpGet(url)
        if condition(last) { return last }
        try await Task.sleep(for: .milliseconds(200))
    }
    return last
}

/// `blecompanion gateway` on `bus`, pinging bluetoothd every `pingInterval`
/// seconds (at most 5 s to answer), HTTP on a free loopback port, state and
/// log in `dir`: its pid, `/healthz` URL, port and log file.
func spawnGateway(bus: String, pingInterval: Int, in dir: URL) throws -> (pid: pid_t, health: String, port: Int, log: String) {
    let port = try freeLoopbackPort()
    let config = dir.appendingPathComponent("gateway.yaml")
    try """
        gateway: { id: probe, state_dir: "\(dir.appendingPathComponent("state").path)" }
        bluez: { bus: "\(bus)", ping_interval: \(pingInterval) }
        http: { listen: "127.0.0.1:\(port)" }
        """.write(to: config, atomically: true, encoding: .utf8)
    let log = dir.appendingPathComponent("gateway.log").path
    let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path], stderr: log)
    return (pid, "http://127.0.0.1:\(port)/healthz", port, log)
}
