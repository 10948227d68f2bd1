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
    /// Devices whose last stored readings it remembers (tests: bounded by
    /// the devices in the list, not by every device ever seen).
    private let remembered = Count()
    var rememberedDevices: Int { remembered.value.load(ordering: .relaxed) }
    private final class Count: Sendable { let value = Atomic<Int>(0) }

    public init(repository: any DeviceRepository, store: ReadingStore,
                watched: @escaping @Sendable () -> Set<BluetoothAddress>? = { nil },
                now: @escaping @Sendable () -> Date = { Date() }) {
        let snapshots = repository.snapshots()
        let failure = self.failure
        let remembered = self.remembered
        task = Task {
            var previous: [DeviceID: [Reading]] = [:]
            var version: UInt64?
            for await snapshot in snapshots {
                let wanted = watched()
                var changed: [DeviceRecord] = []
                // Only the devices that changed, when this recorder saw the snapshot before.
                let candidates: [DeviceRecord]
                if let ids = snapshot.changes(since: version) {
                    candidates = ids.compactMap { id in
                        let record = snapshot.record(id)
                        if record == nil { previous[id] = nil }   // gone from the list: forgotten
                        return record
                    }
                } else {
                    candidates = Array(snapshot.devices)
                    // A whole list: whatever is not in it is forgotten (random
                    // addresses come and go for ever; this table must not grow with them).
                    // (O(devices), as reading a whole list already is.)
                    let present = Set(candidates.map(\.id))
                    previous = previous.filter { present.contains($0.key) }
                }
                defer { remembered.value.store(previous.count, ordering: .relaxed) }
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
