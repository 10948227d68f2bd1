import BlueZ
import DBus
import Foundation
import Locking

/// Whether bluetoothd still answers: an `org.freedesktop.DBus.Peer.Ping`
/// every `interval`, `timeout` to answer (libdbus answers it from
/// bluetoothd's main loop). A bluetoothd that is stopped (SIGSTOP),
/// deadlocked or swamped keeps its bus name, so the mirror sees nothing
/// wrong while every device goes quiet; this turns it into a state front
/// ends show (the gateway's `/healthz` and metric, the dashboard's header).
///
/// `true` while it answers or is not on the bus at all (its absence is the
/// mirror's own signal, and a new bluetoothd starts out answering). The
/// pings stop when the value is released. Idle cost: one call per interval.
public final class BluetoothdLiveness: Sendable {
    public let interval: Duration
    public let timeout: Duration
    private let store = StateStore(true, bufferLimit: 4)
    private let task: Lock<Task<Void, Never>?> = Lock(nil)

    public init(client: BlueZClient, interval: Duration, timeout: Duration) {
        self.interval = interval
        self.timeout = timeout
        let store = self.store
        let pinger = Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: interval) } catch { return }
                guard client.mirror.snapshot().available else {
                    store.update { $0 = true }
                    continue
                }
                var answered = true
                do {
                    _ = try await client.connection.call(destination: BlueZInterface.service, path: "/",
                                                         interface: "org.freedesktop.DBus.Peer", member: "Ping", timeout: timeout)
                } catch DBusError.remote {
                    // An error reply is an answer too.
                } catch {
                    if Task.isCancelled { return }
                    answered = false
                }
                store.update { $0 = answered }
            }
        }
        task.withLock { $0 = pinger }
    }

    /// Whether it answered the last ping.
    public var answering: Bool { store.state }

    /// The current value, then every change.
    public func states() -> AsyncStream<Bool> { store.states() }

    deinit { task.withLock { $0?.cancel() } }
}
