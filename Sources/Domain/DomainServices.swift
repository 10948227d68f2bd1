import BlueZ
import Foundation
import Vocabulary

/// The composition root of the domain layer: the repositories and services
/// over one bluetoothd connection and one reading store, built in one place
/// for both front ends (the dashboard and the gateway), so that they cannot
/// drift apart in how they are wired. What does differ between them is a
/// field of ``Configuration`` with the reason next to it.
public struct DomainServices: Sendable {
    public let client: BlueZClient
    public let store: ReadingStore
    public let adapters: BlueZAdapterRepository
    public let devices: BlueZDeviceRepository
    public let control: BlueZDeviceControl
    public let manager: ConnectionManager
    public let recorder: ReadingRecorder

    public struct Configuration: Sendable {
        /// The adapter by name (`hci0`); nil: the first bluetoothd lists.
        public var adapter: String?
        /// Each device's key for encrypted advertisements, read at every decode.
        public var bindkeys: @Sendable (BluetoothAddress) -> [UInt8]?
        /// Show what the reading store remembers for a device bluetoothd
        /// knows but that has not been heard since the start. The dashboard
        /// does (a list that is not empty for the first seconds); a gateway
        /// does not, since it would publish remembered readings as new.
        public var showRemembered: Bool
        /// Only devices offering one of these services; empty: every device.
        public var services: Set<String>
        /// How often the device repository publishes a snapshot at most:
        /// for the dashboard, its frame interval (`DashboardApp.frameInterval`,
        /// 33 ms), so that a flood brings one state per frame.
        public var publishInterval: Duration
        /// RSSI samples kept per device for the detail view's history (0: none).
        public var rssiHistory: Int
        /// The device profiles in force; the front end replaces them on a reload.
        public var profiles: ProfileSource
        /// While no detail view subscribes, how long the device control lets
        /// advertisements gather between two of its batches
        /// (``BlueZDeviceControl``'s `unwatchedPause`). The dashboard keeps
        /// 100 ms (about one RSSI sample per device and pause for the history
        /// a detail view shows when opened); a gateway keeps no history, and
        /// what it waits for is only when each device was last heard.
        public var unwatchedPause: Duration = .milliseconds(100)

        /// The dashboard's defaults.
        public init(adapter: String? = nil, bindkeys: @escaping @Sendable (BluetoothAddress) -> [UInt8]? = { _ in nil },
                    showRemembered: Bool = true, services: Set<String> = [], publishInterval: Duration = .milliseconds(33),
                    rssiHistory: Int = 120, profiles: ProfileSource = ProfileSource()) {
            self.profiles = profiles
            self.adapter = adapter
            self.bindkeys = bindkeys
            self.showRemembered = showRemembered
            self.services = services
            self.publishInterval = publishInterval
            self.rssiHistory = rssiHistory
        }
    }

    /// Wires the services; nothing waits on bluetoothd here (each service
    /// follows the mirror from now on).
    public static func open(client: BlueZClient, store: ReadingStore, configuration c: Configuration) -> DomainServices {
        // A database that cannot list what it remembers shows nothing
        // remembered; the reading store reports its own failures when written.
        let remembered = c.showRemembered ? ((try? store.rememberedDevices()) ?? []) : []
        let adapters = BlueZAdapterRepository(client: client)
        let devices = BlueZDeviceRepository(client: client, adapter: c.adapter, remembered: remembered, bindkeys: c.bindkeys,
                                            scanner: adapters, services: c.services, publishInterval: c.publishInterval,
                                            profiles: c.profiles)
        return DomainServices(
            client: client, store: store, adapters: adapters, devices: devices,
            control: BlueZDeviceControl(client: client, rssiHistory: c.rssiHistory, bindkeys: c.bindkeys, profiles: c.profiles,
                                        unwatchedPause: c.unwatchedPause),
            manager: ConnectionManager(backend: BlueZConnectionBackend(client: client)),
            recorder: ReadingRecorder(repository: devices, store: store))
    }
}
