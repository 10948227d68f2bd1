import BlueZSimulator
import DBus
import Domain
import Foundation
import Glibc
import MQTT
import Locking
import Testing
import TestSupport

/// A datagram socket standing in for systemd's notify socket: collects what
/// the service sends (READY=1, STOPPING=1, …).
final class NotifySocket: Sendable {
    let path: String
    private let fd: Int32
    /// Shared with the reader thread.
    final class Box: Sendable { let value = Lock<[String]>([]) }
    private let box = Box()

    init(directory: URL) throws {
        path = directory.appendingPathComponent("notify").path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            path.utf8CString.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(raw.count - 1))) }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw BrokerError(description: "bind \(path): \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let socketFD = fd
        let box = self.box
        // A thread of its own, blocking in recv (with a timeout to notice close).
        Thread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = recv(socketFD, &buffer, buffer.count, 0)
                if n > 0 {
                    box.value.withLock { $0.append(String(decoding: buffer[0..<n], as: UTF8.self)) }
                } else if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                    return
                }
            }
        }.start()
    }

    var messages: [String] { box.value.withLock { $0 } }

    func close() { shutdown(fd, Int32(SHUT_RDWR)); Glibc.close(fd) }
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct GatewayProcessTests {
    func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-gwp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    func run(_ arguments: [String], in dir: URL) async throws -> (status: Int32, stdout: String, stderr: String) {
        let out = dir.appendingPathComponent("stdout-\(UUID().uuidString)").path
        let err = dir.appendingPathComponent("stderr-\(UUID().uuidString)").path
        let pid = try spawn(try builtExecutable("blecompanion"), arguments, stdout: out, stderr: err)
        let status = try await offPool { waitForExit(pid) }
        return ((status >> 8) & 0xff, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
                (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
    }

    @Test func badConfigurationExitsWithTheKeyAndLineNamed() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("gateway.yaml")
        try "gateway:\n  id: kitchen\nmqtt:\n  host: 127.0.0.1\n  port: 18830x\n".write(to: file, atomically: true, encoding: .utf8)
        for extra in [[], ["--check-config"]] {
            let result = try await run(["gateway", "--config", file.path] + extra, in: dir)
            #expect(result.status == 78, "EX_CONFIG (\(extra))")
            #expect(result.stderr.contains("mqtt.port"), "\(result.stderr)")
            #expect(result.stderr.contains(":5:"), "the line is named: \(result.stderr)")
        }
        let missing = try await run(["gateway", "--config", dir.appendingPathComponent("nope.yaml").path], in: dir)
        #expect(missing.status == 78)
        #expect(missing.stderr.contains("nope.yaml"))
        let example = packageRoot().appendingPathComponent("fixtures/gateway/demo.yaml").path
        let valid = try await run(["gateway", "--config", example, "--check-config"], in: dir)
        #expect(valid.status == 0, "\(valid.stderr)")
        #expect(valid.stdout.contains("valid"))
    }

    /// A state directory the gateway cannot use: exit 74 (EX_IOERR) at
    /// start, naming the directory and why. A regular file where the
    /// directory should be on every machine; as root, also a directory on a
    /// read-only tmpfs after a first run made its databases.
    @Test func anUnusableStateDirectoryIsRefusedAtStart() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let simulator = BlueZSimulator(scenario: try demoScenario())
        try await simulator.start(busAddress: bus.address)
        func configure(_ state: URL) throws -> URL {
            let config = dir.appendingPathComponent("gateway-\(UUID().uuidString).yaml")
            try """
                gateway: { id: ro, state_dir: "\(state.path)" }
                bluez: { bus: "\(bus.address)" }
                mqtt: { host: 127.0.0.1, port: 1 }
                """.write(to: config, atomically: true, encoding: .utf8)
            return config
        }
        let file = dir.appendingPathComponent("not-a-directory")
        try "x".write(to: file, atomically: true, encoding: .utf8)
        let onFile = try await run(["gateway", "--config", try configure(file).path], in: dir)
        #expect(onFile.status == 74, "\(onFile.stderr)")
        #expect(onFile.stderr.contains("cannot create the state directory \(file.path)"), "\(onFile.stderr)")

        // Mounting needs root; CI runs as root.
        guard let tmpfs = try Tmpfs.mount(at: dir.appendingPathComponent("mnt"), size: "4m") else { return }
        defer { tmpfs.unmount() }
        let state = tmpfs.path.appendingPathComponent("state")
        let config = try configure(state)
        // A first run makes the databases (it cannot reach the broker; SIGTERM ends it).
        let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path],
                            stderr: dir.appendingPathComponent("first.log").path)
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: state.appendingPathComponent("readings.sqlite").path) {
            try await Task.sleep(for: .milliseconds(100))
        }
        kill(pid, SIGTERM)
        _ = try await offPool { waitForExit(pid) }
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("readings.sqlite").path))
        try tmpfs.remountReadOnly()
        // Bounded: a gateway that starts anyway must not hang the suite.
        let second = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path],
                               stderr: dir.appendingPathComponent("read-only.log").path)
        var status: Int32? = nil
        for _ in 0..<100 {
            var raw: Int32 = 0
            if waitpid(second, &raw, WNOHANG) == second { status = (raw >> 8) & 0xff; break }
            try await Task.sleep(for: .milliseconds(100))
        }
        if status == nil {
            kill(second, SIGKILL)
            _ = try await offPool { waitForExit(second) }
        }
        let log = (try? String(contentsOfFile: dir.appendingPathComponent("read-only.log").path, encoding: .utf8)) ?? ""
        #expect(status == 74, "still running after 10 s or another exit (\(String(describing: status))): \(log)")
        #expect(log.contains("the state directory \(state.path) is not writable: Read-only file system"), "\(log)")
    }

    @Test func sigtermIsGracefulFlushesTheQueueAndExitsZero() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let simulator = BlueZSimulator(scenario: try demoScenario())
        try await simulator.start(busAddress: bus.address)
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port))
            let inbox = Inbox(try await watcher.subscribe("blecompanion/proc/#", qos: .atLeastOnce))
            let http = try freeLoopbackPort()
            let config = dir.appendingPathComponent("gateway.yaml")
            try """
                gateway:
                  id: proc
                  state_dir: \(dir.appendingPathComponent("state").path)
                bluez:
                  bus: "\(bus.address)"
                mqtt:
                  host: 127.0.0.1
                  port: \(broker.port)
                http:
                  listen: "127.0.0.1:\(http)"
                """.write(to: config, atomically: true, encoding: .utf8)
            let notify = try NotifySocket(directory: dir)
            defer { notify.close() }
            var environment = ProcessInfo.processInfo.environment
            environment["NOTIFY_SOCKET"] = notify.path
            environment["WATCHDOG_USEC"] = "2000000"
            let stderr = dir.appendingPathComponent("gateway.log").path
            let pid = try spawn(try builtExecutable("blecompanion"), ["gateway", "--config", config.path],
                                environment: environment, stderr: stderr)
            let ruuvi = "blecompanion/proc/cbb8334c884f"
            let seen = await inbox.wait(timeout: .seconds(30)) { all in
                all.contains { $0.topic == "\(ruuvi)/state" } && all.contains { $0.topic == "blecompanion/proc/status" && $0.text == "online" }
            }
            #expect(seen.contains { $0.topic == "\(ruuvi)/state" }, "\((try? String(contentsOfFile: stderr, encoding: .utf8)) ?? "")")
            #expect(notify.messages.contains { $0.contains("READY=1") }, "systemd was told READY: \(notify.messages)")
            // The watchdog is petted at half its interval.
            try await Task.sleep(for: .milliseconds(1500))
            #expect(notify.messages.contains { $0.contains("WATCHDOG=1") }, "\(notify.messages)")

            kill(pid, SIGTERM)
            let status = try await offPool { waitForExit(pid) }
            #expect(status == 0, "exit status 0 after SIGTERM (wait status \(status))")
            #expect(notify.messages.contains { $0.contains("STOPPING=1") }, "\(notify.messages)")
            let end = await inbox.wait { $0.contains { $0.topic == "blecompanion/proc/status" && $0.text == "offline" } }
            #expect(end.last { $0.topic == "blecompanion/proc/status" }?.text == "offline", "clean offline, not only the will")
            #expect(end.last { $0.topic == "\(ruuvi)/status" }?.text == "offline")
            // Nothing left behind in the outbox.
            let queue = try OutboundQueue(path: dir.appendingPathComponent("state/outbox.sqlite").path)
            #expect(queue.depth == 0, "queue flushed before exit")
            // Logs are JSON lines when stderr is not a terminal.
            let lines = ((try? String(contentsOfFile: stderr, encoding: .utf8)) ?? "").split(separator: "\n")
            #expect(!lines.isEmpty)
            #expect(lines.allSatisfy { line in
                ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["level"] != nil
            }, "\(lines.prefix(3))")
            await watcher.disconnect()
        }
        await simulator.stop()
    }
}
