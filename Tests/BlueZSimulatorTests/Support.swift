import DBus
import Foundation
import Locking
@testable import ScenarioFormat
import Testing
@testable import BlueZSimulator

/// The repository root (fixtures live there).
let repositoryRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }
    return url.path
}()

func scenarioPath(_ name: String) -> String { "\(repositoryRoot)/fixtures/scenarios/\(name)" }

func loadScenario(_ name: String) throws -> Scenario { try Scenario.load(path: scenarioPath(name)) }

/// Runs `body` with a private bus, a simulator serving `scenario` on it and a
/// client connection; everything is stopped afterwards.
func withSimulator<T>(_ scenario: Scenario, speed: Double = 1,
                      _ body: (PrivateBus, BlueZSimulator, DBusConnection) async throws -> T) async throws -> T {
    let bus = try PrivateBus.start()
    defer { bus.stop() }
    let sim = BlueZSimulator(scenario: scenario, options: SimulatorOptions(speed: speed))
    try await sim.start(busAddress: bus.address)
    let client = try await DBusConnection.connect(to: .address(bus.address))
    do {
        let result = try await body(bus, sim, client)
        client.close()
        await sim.stop()
        return result
    } catch {
        client.close()
        await sim.stop()
        throw error
    }
}

func proxy(_ c: DBusConnection, _ path: String, _ iface: String) throws -> DBusProxy {
    DBusProxy(connection: c, destination: "org.bluez", path: try ObjectPath(path), interface: iface)
}

/// The error name of a failing call (nil when it succeeds).
func errorName(_ body: () async throws -> Void) async -> String? {
    do {
        try await body()
        return nil
    } catch let e as DBusError {
        return e.remoteName ?? "\(e)"
    } catch {
        return "\(error)"
    }
}

/// Waits until `condition` holds, checking after each signal-free pause.
func eventually(within seconds: Double = 5, _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(50))
    }
    return try await condition()
}

/// Collects signals until `count` arrived or `seconds` passed; returns
/// what arrived either way.
func collect(_ stream: DBusSignalStream, count: Int, within seconds: Double) async throws -> [DBusMessage] {
    let box = MessageBox()
    let reader = Task {
        for try await m in stream {
            if box.append(m) >= count { break }
        }
    }
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline && box.count < count {
        try await Task.sleep(for: .milliseconds(20))
    }
    reader.cancel()
    return box.items
}

/// Collects signals until what arrived satisfies `done` or `seconds`
/// passed; returns what arrived either way. For timelines that a loaded
/// machine may play late: the wait ends as soon as the last expected
/// signal is in, however generous the limit.
func collect(_ stream: DBusSignalStream, within seconds: Double, until done: @escaping @Sendable ([DBusMessage]) -> Bool) async throws -> [DBusMessage] {
    let box = MessageBox()
    let reader = Task {
        for try await m in stream {
            _ = box.append(m)
            if done(box.items) { break }
        }
    }
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline && !done(box.items) {
        try await Task.sleep(for: .milliseconds(20))
    }
    reader.cancel()
    return box.items
}

final class MessageBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [DBusMessage] = []
    func append(_ m: DBusMessage) -> Int { lock.withLock { stored.append(m); return stored.count } }
    var count: Int { lock.withLock { stored.count } }
    var items: [DBusMessage] { lock.withLock { stored } }
}

/// Runs bluetoothctl against `bus`, feeding `script` lines to its stdin
/// with pauses (a line "sleep N" waits N seconds). Returns its output with
/// terminal escapes removed. The process is killed if it outlives `timeout`.
func bluetoothctl(_ arguments: [String], bus: PrivateBus, script: [String] = [], timeout: Double = 20) async throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/bluetoothctl")
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
    env["TERM"] = "dumb"
    process.environment = env
    let out = Pipe()
    let input = Pipe()
    process.standardOutput = out
    process.standardError = out
    process.standardInput = input
    try process.run()
    let pid = process.processIdentifier
    let killer = Task {
        try await Task.sleep(for: .seconds(timeout))
        kill(pid, SIGKILL)
    }
    // Blocking reads and waits run on threads of their own, not on the
    // cooperative pool that the in-process simulator needs.
    let received = Lock(Data())
    let reader = Task {
        await withCheckedContinuation { (c: CheckedContinuation<(Data, Int32), Never>) in
            Thread {
                while true {
                    let chunk = out.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    received.withLock { $0.append(chunk) }
                }
                // Reaped here by pid: Foundation's `waitUntilExit` polls a
                // run loop until its own monitor has seen the exit, and that
                // monitor was seen never to (children left as zombies, the
                // waiting thread spinning at 100 % CPU for the rest of the run).
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                // The exit status as Process.terminationStatus gives it:
                // the exit code, or the signal that ended it.
                let code = status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
                c.resume(returning: (received.withLock { $0 }, code))
            }.start()
        }
    }
    // Commands only once bluetoothctl has reached bluetoothd ("Agent
    // registered"): typed earlier, a loaded machine's bluetoothctl answers
    // them from an empty view ("Device … not available").
    if !script.isEmpty {
        let ready = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < ready,
              !String(decoding: received.withLock { $0 }, as: UTF8.self).contains("Agent registered") {
            try await Task.sleep(for: .milliseconds(50))
        }
    }
    for line in script {
        if line.hasPrefix("sleep "), let s = Double(line.dropFirst(6)) {
            try await Task.sleep(for: .seconds(s))
        } else {
            input.fileHandleForWriting.write(Data((line + "\n").utf8))
        }
    }
    if !script.isEmpty { try? input.fileHandleForWriting.close() }
    let (data, status) = await reader.value
    killer.cancel()
    var text = String(decoding: data, as: UTF8.self)
    // Strip ANSI escapes (colours, line clearing).
    text = text.replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
    text = text.replacingOccurrences(of: "\u{1}|\u{2}", with: "", options: .regularExpression)
    return (status, text)
}
