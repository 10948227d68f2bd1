import Domain
import MQTT
import Synchronization

/// Drains the outbound queue to the broker, oldest first: each message is
/// removed from the queue only after the broker acknowledged it, so a broker
/// outage or a restart loses nothing and keeps the order. Sleeps while the
/// queue is empty (woken by its depth changing) and while disconnected
/// (woken by the client's state) — no polling.
public final class QueuePublisher: Sendable {
    private let queue: OutboundQueue
    private let client: MQTTClient
    private let batch: Int
    private let failures = StateStore<String?>(nil)
    private let storage = StateStore<String?>(nil)
    private let acknowledged = Atomic<UInt64>(0)
    /// After a storage error the next try waits this long, doubling up to `storageRetryMax`.
    private let storageRetryMin: Duration
    private let storageRetryMax: Duration

    /// Messages the broker acknowledged since this publisher started.
    public var publishedCount: UInt64 { acknowledged.load(ordering: .relaxed) }

    public init(queue: OutboundQueue, client: MQTTClient, batch: Int = Int(MQTTClient.inFlightLimit),
                storageRetry: ClosedRange<Duration> = .seconds(1)...(.seconds(30))) {
        self.queue = queue
        self.client = client
        self.batch = max(1, batch)
        storageRetryMin = max(.milliseconds(1), storageRetry.lowerBound)
        storageRetryMax = max(storageRetryMin, storageRetry.upperBound)
    }

    /// The last publishing failure (nil while all is well), for the event log and metrics.
    public func lastFailures() -> AsyncStream<String?> { failures.states() }
    /// The outbound queue's storage failing now (nil while it reads and
    /// deletes fine): the current value first, then every change.
    public func storageFailures() -> AsyncStream<String?> { storage.states() }
    public var storageFailure: String? { storage.state }

    /// Waits before the next try after a storage error (`delay` doubles
    /// each time, up to the maximum). False when cancelled meanwhile.
    private func backOff(_ error: DomainError, _ delay: inout Duration) async -> Bool {
        failures.update { $0 = error.description }
        storage.update { $0 = error.description }
        let wait = delay
        delay = min(storageRetryMax, delay * 2)
        do { try await Task.sleep(for: wait) } catch { return false }
        return true
    }

    /// The storage answered again: no failure, the delay back to its minimum.
    private func storageAnswered(_ retry: inout Duration) {
        storage.update { $0 = nil }
        retry = storageRetryMin
    }

    /// Runs until cancelled.
    public func run() async {
        var depths = queue.depths().makeAsyncIterator()
        var states = client.states().makeAsyncIterator()
        var connected = false
        // A storage error (disk full, I/O error) never ends the loop: it is
        // reported and tried again with a growing delay, so publishing
        // resumes by itself once the disk has room again.
        var retry = storageRetryMin
        while !Task.isCancelled {
            if !connected {
                // Wait for the client to (re)connect.
                guard let s = await states.next() else { return }
                connected = s == .connected
                continue
            }
            let pending: [QueuedMessage]
            do { pending = try queue.oldest(batch) } catch {
                guard await backOff(error, &retry) else { return }
                continue
            }
            if storage.state != nil { storageAnswered(&retry) }
            if pending.isEmpty {
                // Nothing to send: wait for the queue to grow (or give up on cancellation).
                guard let depth = await depths.next() else { return }
                _ = depth
                continue
            }
            // Pipelined: the batch goes out at once, and the acknowledged
            // prefix leaves the queue in one transaction.
            let (acknowledged, error) = await client.publish(pending.map {
                MQTTMessage(topic: $0.topic, payload: $0.payload, qos: MQTTQoS(rawValue: $0.qos) ?? .atLeastOnce, retain: $0.retain)
            })
            if acknowledged > 0 {
                self.acknowledged.add(UInt64(acknowledged), ordering: .relaxed)
                // The broker has them: until their rows are gone nothing more
                // is sent (that would publish them again), however long it takes.
                let ids = pending.prefix(acknowledged).map(\.id)
                while true {
                    do throws(DomainError) { try queue.acknowledge(ids); break } catch {
                        guard await backOff(error, &retry) else { return }
                    }
                }
                if storage.state != nil { storageAnswered(&retry) }
            }
            if let error {
                // The rest stays in the queue; sent again once the client is
                // back. Start over from the client's current state (a fresh
                // stream yields it first); a failure while still connected
                // waits a second before trying again.
                failures.update { $0 = error.description }
                connected = false
                states = client.states().makeAsyncIterator()
                if case .connected? = await states.next() {
                    try? await Task.sleep(for: .seconds(1))
                    connected = true
                }
                continue
            }
            if connected { failures.update { $0 = nil } }
        }
    }
}
