import BLEParsing
import BlueZ
import Foundation
import Synchronization
import Vocabulary

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
        let storeReadings = store
        let failure = self.failure
        let remembered = self.remembered
        task = Task {
            var previous: [DeviceID: [Reading]] = [:]
            var version: UInt64?
            for await snapshot in snapshots {
                let wanted = watched()
                let time = now()
                var failed: String?
                var batch: [DeviceRecord] = []
                // One transaction per snapshot, or per `batchLimit` devices of
                // a large one (a first list of 10 000 devices would otherwise
                // hold every device's values at once); remembered as stored
                // only once it was.
                func store(_ records: [DeviceRecord]) {
                    do throws(DomainError) {
                        try storeReadings.record(records, at: time)
                        for device in records { previous[device.id] = device.readings }
                    } catch {
                        failed = error.description
                    }
                }
                func consider(_ device: DeviceRecord) {
                    guard !device.readings.isEmpty, !device.remembered else { return }
                    if let wanted, !wanted.contains(device.id.address) { return }
                    guard previous[device.id] != device.readings else { return }
                    batch.append(device)
                    if batch.count == Self.batchLimit {
                        store(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                // Only the devices that changed, when this recorder saw the snapshot before.
                if let ids = snapshot.changes(since: version) {
                    for id in ids {
                        if let record = snapshot.record(id) { consider(record) } else { previous[id] = nil }   // gone from the list: forgotten
                    }
                } else {
                    // A whole list: whatever is not in it is forgotten (random
                    // addresses come and go for ever; this table must not grow with them).
                    // (O(devices), as reading a whole list already is.)
                    var present: Set<DeviceID> = []
                    present.reserveCapacity(snapshot.devices.count)
                    for device in snapshot.devices {
                        present.insert(device.id)
                        consider(device)
                    }
                    previous = previous.filter { present.contains($0.key) }
                }
                version = snapshot.version
                if !batch.isEmpty { store(batch) }
                remembered.value.store(previous.count, ordering: .relaxed)
                if let failed {
                    failure.update { $0 = failed }
                } else if failure.state != nil {
                    failure.update { $0 = nil }
                }
            }
        }
    }

    deinit { task.cancel() }

    /// The most devices stored in one transaction.
    static let batchLimit = 512

    /// The current failure to store readings (nil while all is well: set
    /// when a write fails, cleared by the next one that succeeds).
    public func failures() -> AsyncStream<String?> { failure.states() }
    public var lastFailure: String? { failure.state }
}
