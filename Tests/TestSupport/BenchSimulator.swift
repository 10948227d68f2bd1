import Foundation
import Glibc

/// `bench bluez-sim` in its own process on `bus`: `devices` simulated
/// devices, commanded through a FIFO (``flood(_:)``), for tests that need a
/// flood of advertisements from outside their own process.
public final class BenchSimulator: @unchecked Sendable {
    public let pid: pid_t
    private let commands: Int32
    private let output: String

    /// Starts it in `dir` and waits (up to `readyWithin` seconds) until every
    /// device is on the bus.
    public init(bus: String, devices: Int, in dir: URL, readyWithin seconds: Double = 90) async throws {
        let fifo = dir.appendingPathComponent("sim.in").path
        guard mkfifo(fifo, 0o600) == 0 else { throw BrokerError(description: "mkfifo: \(String(cString: strerror(errno)))") }
        // Opened read-write first: the child's open of its end then returns at
        // once (posix_spawn holds the parent until the child has exec'd, so a
        // blocking rendezvous on the FIFO would never end).
        commands = open(fifo, O_RDWR)
        guard commands >= 0 else { throw BrokerError(description: "open \(fifo): \(String(cString: strerror(errno)))") }
        output = dir.appendingPathComponent("sim.out").path
        do {
            pid = try spawn(try builtExecutable("bench"), ["bluez-sim", "--address", bus, "--devices", "\(devices)"],
                            stdin: fifo, stdout: output, stderr: dir.appendingPathComponent("sim.err").path)
        } catch {
            close(commands)
            throw error
        }
        let out = output
        guard await eventually(seconds, { ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("READY") }) else {
            stop()
            throw BrokerError(description: "bench bluez-sim did not list \(devices) devices within \(seconds) s")
        }
    }

    /// `flood N`: N advertisement changes as fast as the bus takes them,
    /// round-robin over the devices (`BlueZSimulator.floodAdvertisements`).
    public func flood(_ changes: Int) {
        let line = "flood \(changes)\n"
        _ = line.withCString { write(commands, $0, strlen($0)) }
    }

    /// Whether the last flood has ended (it prints DONE).
    public var floodDone: Bool {
        ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("DONE")
    }

    public func stop() {
        close(commands)
        kill(pid, SIGKILL)
        _ = waitForExit(pid)
    }
}
