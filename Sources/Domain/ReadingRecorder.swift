import BLEParsing
import BlueZ
import Foundation
import Synchronization

/// Stores the readings the device repository publishes: for each device
/// whose readings changed (and that is watched, when a watch list is given),
/// one record in the readings store. Failures are kept for the event log,
/// never thrown away silently.
public final class ReadingRecorder: Sendable {
    private let task: Task<Void, Never>
    private let failure = StateStore<String?>(nil)

    public init(repository: any DeviceRepository, store: ReadingStore,
                watched: @escaping @Sendable () -> Set<BluetoothAddress>? = { nil },
                now: @escaping @Sendable () -> Date = { Date() }) {
        let snapshots = repository.snapshots()
        let failure = self.failure
        task = Task {
            var previous: [DeviceID: [Reading]] = [:]
            var version: UInt64?
            for await snapshot in snapshots {
                let wanted = watched()
                var changed: [DeviceRecord] = []
                // Only the devices that changed, when this recorder saw the snapshot before.
                let candidates: [DeviceRecord]
                if let ids = snapshot.changes(since: version) {
                    candidates = ids.compactMap { snapshot.record($0) }
                } else {
                    candidates = Array(snapshot.devices)
                }
                version = snapshot.version
                for device in candidates where !device.readings.isEmpty && !device.remembered {
                    if let wanted, !wanted.contains(device.id.address) { continue }
                    guard previous[device.id] != device.readings else { continue }
                    changed.append(device)
                }
                guard !changed.isEmpty else { continue }
                // One transaction per snapshot; remembered as stored only once it was.
                do throws(DomainError) {
                    try store.record(changed, at: now())
                    for device in changed { previous[device.id] = device.readings }
                    if failure.state != nil { failure.update { $0 = nil } }
                } catch {
                    failure.update { $0 = error.description }
                }
            }
        }
    }

    deinit { task.cancel() }

    /// The current failure to store readings (nil while all is well: set
    /// when a write fails, cleared by the next one that succeeds).
    public func failures() -> AsyncStream<String?> { failure.states() }
    public var lastFailure: String? { failure.state }
}
