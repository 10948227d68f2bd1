import BlueZ
import Foundation
import Locking
import Vocabulary

/// The devices the user watches (kept connected and recorded) and how each
/// one's connection is doing.
public protocol WatchList: Sendable {
    /// Every watched device with its connection status, current first.
    func watches() -> AsyncStream<[BluetoothAddress: ConnectionStatus]>
    func setWatched(_ on: Bool, _ address: BluetoothAddress) throws(DomainError)
}

/// The watch list over the settings file and the connection manager: the
/// settings are the source of truth (a change by any presenter, or by
/// another process editing the file and restarting us, applies here), the
/// manager keeps each watched device connected on `adapter`.
public final class WatchService: WatchList {
    private let settings: SettingsStore
    private let manager: ConnectionManager
    private let store = StateStore<[BluetoothAddress: ConnectionStatus]>([:])
    private let tasks = Lock<[Task<Void, Never>]>([])

    /// `notify`: characteristic UUIDs whose notifications are re-enabled after
    /// every reconnect, per device.
    public init(settings: SettingsStore, manager: ConnectionManager, adapter: AdapterID,
                notify: @escaping @Sendable (BluetoothAddress) -> [String] = { _ in [] }) {
        self.settings = settings
        self.manager = manager
        let store = self.store
        let watchedNow = WatchedSet()
        let settingsChanges = settings.changes()
        let statuses = manager.statuses()
        let follow = Task {
            for await s in settingsChanges {
                let wanted = Set(s.watched)
                let (added, removed) = watchedNow.value.withLock { w -> (Set<BluetoothAddress>, Set<BluetoothAddress>) in
                    defer { w = wanted }
                    return (wanted.subtracting(w), w.subtracting(wanted))
                }
                for a in removed { manager.unwatch(DeviceID(adapter: adapter, address: a)) }
                for a in added.sorted() { manager.watch(DeviceID(adapter: adapter, address: a), notify: notify(a)) }
                store.update { m in
                    for a in removed { m[a] = nil }
                    for a in added where m[a] == nil { m[a] = .idle }
                }
            }
        }
        let publish = Task {
            for await all in statuses {
                let wanted = watchedNow.value.withLock { $0 }
                store.update { m in
                    for (id, status) in all where id.adapter == adapter && wanted.contains(id.address) { m[id.address] = status }
                }
            }
        }
        tasks.withLock { $0 = [follow, publish] }
    }

    deinit { tasks.withLock { for t in $0 { t.cancel() } } }

    public func watches() -> AsyncStream<[BluetoothAddress: ConnectionStatus]> { store.states() }

    public func setWatched(_ on: Bool, _ address: BluetoothAddress) throws(DomainError) {
        try settings.update { s in
            if on {
                if !s.watched.contains(address) { s.watched.append(address) }
            } else {
                s.watched.removeAll { $0 == address }
            }
        }
    }
}

private final class WatchedSet: Sendable {
    let value = Lock<Set<BluetoothAddress>>([])
}
