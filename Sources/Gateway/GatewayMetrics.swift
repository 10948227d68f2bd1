import Foundation
import Locking
import Vocabulary

/// What the gateway counts, rendered in the Prometheus text exposition
/// format (version 0.0.4) for `GET /metrics`. Counters only grow; gauges
/// are the current value. Thread-safe. Written through typed methods, one
/// per thing that happens (no open `update` closure, no label strings made
/// up at call sites); read as ``current``.
public final class GatewayMetrics: Sendable {
    /// A SQLite store, the `store` label of the storage metrics.
    public enum Store: String, Sendable, CaseIterable, Comparable {
        case outbox, readings
        public static func < (a: Store, b: Store) -> Bool { a.rawValue < b.rawValue }
    }

    /// What writes to a store: the outbox has two writers (the publishing
    /// loop enqueues, the publisher deletes what the broker acknowledged),
    /// each failing and recovering on its own.
    public enum StorageWriter: String, Sendable, CaseIterable, Comparable {
        case outbox
        case outboxPublisher = "outbox publisher"
        case readings
        public var store: Store { self == .readings ? .readings : .outbox }
        public static func < (a: StorageWriter, b: StorageWriter) -> Bool { a.rawValue < b.rawValue }
    }

    /// How a device command ended: the `result` label.
    public enum CommandResult: String, Sendable { case ok, error, busy }

    /// The labels of `blecompanion_commands_total`.
    public struct CommandKey: Hashable, Sendable, Comparable {
        public var action: String
        public var result: CommandResult
        public static func < (a: CommandKey, b: CommandKey) -> Bool { (a.action, a.result.rawValue) < (b.action, b.result.rawValue) }
    }

    public struct Values: Sendable, Equatable {
        public var advertisements: UInt64 = 0
        /// Advertisements folded into a later one of the same device before publication (overload: latest wins).
        public var advertisementsCoalesced: UInt64 = 0
        /// Times bluetoothd's events outran the device list and it was read again whole.
        public var resynchronizations: UInt64 = 0
        /// Device-list states merged into a later one before the planner took them.
        public var listStatesCoalesced: UInt64 = 0
        public var advertisementsPerSecond: Double = 0
        public var decodeErrors: [String: UInt64] = [:]
        /// Device profiles in force, profile files left out at the last load, reloads.
        public var profilesLoaded = 0
        public var profileFileErrors = 0
        public var profileReloads: UInt64 = 0
        /// Per configured device (bounded by the configuration): the drift before its last sync.
        public var timeSyncDrift: [BluetoothAddress: Double] = [:]
        public var timeSyncs: [Bool: UInt64] = [:]
        public var connections: UInt64 = 0
        public var connectionFailures: UInt64 = 0
        public var queueDepth: Int = 0
        public var queueDropped: Int = 0
        public var published: UInt64 = 0
        public var mqttConnected = false
        public var dbusErrors: UInt64 = 0
        public var bluetoothdAvailable = false
        /// bluetoothd answered its last ping (true until one goes unanswered).
        public var bluetoothdAnswering = true
        public var devicesOnline: Int = 0
        public var commands: [CommandKey: UInt64] = [:]
        /// Messages the outbound queue could not store (SQLite refused the
        /// write: disk full, read-only, I/O error); counted as dropped too.
        public var queueRefused: Int = 0
        /// Messages from the broker (commands) dropped: more arrived than were taken.
        public var mqttReceivedDropped: UInt64 = 0
        /// Failed writes by store.
        public var storageErrors: [Store: UInt64] = [:]
        /// The writers failing now, with the last error (empty: all is well).
        public var storageFailures: [StorageWriter: String] = [:]
        /// Fleet mode only (nil: a gateway on its own; not rendered).
        public var fleet: Fleet?
        public init() {}
    }

    /// What a fleet member sent, received and holds.
    public struct Fleet: Sendable, Equatable {
        public var owned = 0
        public var batchesSent: UInt64 = 0
        public var batchesReceived: UInt64 = 0
        public var claimsSent: UInt64 = 0
        public var refused: UInt64 = 0
    }

    private struct Sample { var at: Date; var count: UInt64 }
    private let values = Lock(Values())
    private let samples = Lock<[Sample]>([])
    /// The rate is over this window.
    private let window: TimeInterval = 60

    public init() {}

    public var current: Values { values.withLock { $0 } }

    private func update(_ change: (inout Values) -> Void) { values.withLock { change(&$0) } }

    /// What the device repository counted so far (totals, not increments).
    public func recordTimeSync(_ address: BluetoothAddress, drift: Double?, ok: Bool) {
        values.withLock {
            if let drift { $0.timeSyncDrift[address] = drift }
            $0.timeSyncs[ok, default: 0] &+= 1
        }
    }

    public func recordProfiles(loaded: Int, fileErrors: Int, reload: Bool) {
        values.withLock {
            $0.profilesLoaded = loaded
            $0.profileFileErrors = fileErrors
            if reload { $0.profileReloads &+= 1 }
        }
    }

    public func recordDeviceList(decodeErrors: [String: UInt64], coalesced: UInt64, resynchronizations: UInt64) {
        update {
            $0.decodeErrors = decodeErrors
            $0.advertisementsCoalesced = coalesced
            $0.resynchronizations = resynchronizations
        }
    }

    /// A device-list state merged into a later one before the planner took it.
    public func countListStateCoalesced() { update { $0.listStatesCoalesced &+= 1 } }

    public func recordBluetoothd(available: Bool) { update { $0.bluetoothdAvailable = available } }
    public func recordBluetoothd(answering: Bool) { update { $0.bluetoothdAnswering = answering } }
    public func countDBusError() { update { $0.dbusErrors &+= 1 } }

    /// A watched device's connection attempt ended.
    public func countConnection(established: Bool) {
        update { if established { $0.connections &+= 1 } else { $0.connectionFailures &+= 1 } }
    }

    public func recordDevicesOnline(_ count: Int) { update { $0.devicesOnline = count } }

    func recordFleet(_ s: FleetCoordinator.Statistics) {
        update {
            $0.fleet = Fleet(owned: s.owned, batchesSent: s.batchesSent, batchesReceived: s.batchesReceived,
                             claimsSent: s.claimsSent, refused: s.refused)
        }
    }

    /// The outbound queue's depth and how many it dropped (totals).
    public func recordQueue(depth: Int, dropped: Int) { update { $0.queueDepth = depth; $0.queueDropped = dropped } }

    /// Messages the outbox could not store (counted as dropped too).
    public func countRefused(_ messages: Int) { update { $0.queueRefused &+= messages } }

    /// The MQTT link's state and totals; nil leaves a value as it is.
    public func recordMQTT(connected: Bool? = nil, published: UInt64? = nil, receivedDropped: UInt64? = nil) {
        update {
            if let connected { $0.mqttConnected = connected }
            if let published { $0.published = published }
            if let receivedDropped { $0.mqttReceivedDropped = receivedDropped }
        }
    }

    /// A writer's write failed (`reason`) or worked (nil). Returns the
    /// writer's previous failure (nil: it was working) and how many messages
    /// the outbox refused so far, for the log line that says it changed.
    @discardableResult
    public func recordStorage(_ writer: StorageWriter, failed reason: String?) -> (previous: String?, refused: Int) {
        values.withLock { v in
            let previous = v.storageFailures[writer]
            if reason != nil { v.storageErrors[writer.store, default: 0] &+= 1 }
            v.storageFailures[writer] = reason
            return (previous, v.queueRefused)
        }
    }

    /// Records the advertisement counter at `now` and recomputes the rate
    /// over the last minute of samples (a sample at most every second).
    public func recordAdvertisements(_ total: UInt64, at now: Date) {
        let rate: Double = samples.withLock { s in
            if let last = s.last, now.timeIntervalSince(last.at) < 1 {
                s[s.count - 1].count = max(last.count, total)
            } else {
                s.append(Sample(at: now, count: total))
            }
            while s.count > 2, let first = s.first, now.timeIntervalSince(first.at) > window { s.removeFirst() }
            guard let first = s.first, let last = s.last, last.at > first.at, last.count >= first.count else { return 0 }
            return Double(last.count - first.count) / last.at.timeIntervalSince(first.at)
        }
        values.withLock {
            $0.advertisements = total
            $0.advertisementsPerSecond = rate
        }
    }

    public func countCommand(_ action: String, ok: Bool, busy: Bool = false) {
        let key = CommandKey(action: action, result: busy ? .busy : ok ? .ok : .error)
        values.withLock { $0.commands[key, default: 0] &+= 1 }
    }

    /// The exposition text.
    public func render() -> String {
        let v = current
        var out = ""
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: String)]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for s in samples { out += "\(name)\(s.labels) \(s.value)\n" }
        }
        metric("blecompanion_advertisements_total", "counter", "Advertisement events received from bluetoothd.",
               [("", "\(v.advertisements)")])
        metric("blecompanion_advertisements_coalesced_total", "counter",
               "Advertisements replaced by a later one of the same device before they were processed (the latest wins).",
               [("", "\(v.advertisementsCoalesced)")])
        metric("blecompanion_device_list_resynchronizations_total", "counter",
               "Times bluetoothd's events came faster than the device list took them, some were dropped, and the list was read again whole.",
               [("", "\(v.resynchronizations)")])
        metric("blecompanion_device_list_states_coalesced_total", "counter",
               "Device-list states merged into a later one because the publisher was still busy (their changed rows are kept).",
               [("", "\(v.listStatesCoalesced)")])
        metric("blecompanion_advertisements_per_second", "gauge", "Advertisement events per second over the last minute.",
               [("", Self.number(v.advertisementsPerSecond))])
        metric("blecompanion_decode_errors_total", "counter",
               "Advertisement payloads a decoder recognised but could not decode, by format.",
               v.decodeErrors.keys.sorted().map { ("{format=\"\(Self.escape($0))\"}", "\(v.decodeErrors[$0] ?? 0)") })
        metric("blecompanion_profiles", "gauge", "Device profiles in force.", [("", "\(v.profilesLoaded)")])
        metric("blecompanion_profile_file_errors", "gauge",
               "Profile files left out at the last load or reload because of problems (the log names each).",
               [("", "\(v.profileFileErrors)")])
        metric("blecompanion_profile_reloads_total", "counter", "Profile reloads (SIGHUP or POST /api/reload).",
               [("", "\(v.profileReloads)")])
        if !v.timeSyncs.isEmpty {
            metric("blecompanion_timesyncs_total", "counter", "Clock syncs of the devices in devices.timesync, by result.",
                   [("{result=\"ok\"}", "\(v.timeSyncs[true] ?? 0)"), ("{result=\"error\"}", "\(v.timeSyncs[false] ?? 0)")])
            metric("blecompanion_timesync_drift_seconds", "gauge", "A device's clock minus the host's before its last sync (readable clocks only).",
                   v.timeSyncDrift.keys.sorted().map { ("{address=\"\($0)\"}", Self.number(v.timeSyncDrift[$0] ?? 0)) })
        }
        metric("blecompanion_connections_total", "counter", "Connections of watched devices established.", [("", "\(v.connections)")])
        metric("blecompanion_connection_failures_total", "counter", "Connection attempts of watched devices that failed.",
               [("", "\(v.connectionFailures)")])
        metric("blecompanion_mqtt_queue_depth", "gauge", "Messages waiting in the outbound queue.", [("", "\(v.queueDepth)")])
        metric("blecompanion_mqtt_queue_dropped_total", "counter",
               "Messages dropped: the outbound queue was full (the oldest went), or it could not store them (storage error).",
               [("", "\(v.queueDropped + v.queueRefused)")])
        metric("blecompanion_storage_errors_total", "counter", "Writes to a SQLite store that failed (disk full, read-only, I/O error), by store.",
               Store.allCases.map { ("{store=\"\($0.rawValue)\"}", "\(v.storageErrors[$0] ?? 0)") })
        metric("blecompanion_storage_ok", "gauge", "1 while the store's last write succeeded, by store.",
               Store.allCases.map { store in
                   ("{store=\"\(store.rawValue)\"}", v.storageFailures.keys.contains { $0.store == store } ? "0" : "1")
               })
        metric("blecompanion_mqtt_published_total", "counter", "Messages the broker acknowledged.", [("", "\(v.published)")])
        metric("blecompanion_mqtt_received_dropped_total", "counter",
               "Messages from the broker (commands) dropped unanswered because they arrived faster than they were taken (the oldest went).",
               [("", "\(v.mqttReceivedDropped)")])
        metric("blecompanion_mqtt_connected", "gauge", "1 while connected to the MQTT broker.", [("", v.mqttConnected ? "1" : "0")])
        metric("blecompanion_dbus_errors_total", "counter", "D-Bus calls to bluetoothd that failed.", [("", "\(v.dbusErrors)")])
        metric("blecompanion_bluetoothd_available", "gauge", "1 while bluetoothd and the adapter are usable.",
               [("", v.bluetoothdAvailable ? "1" : "0")])
        metric("blecompanion_bluetoothd_answering", "gauge",
               "0 while bluetoothd holds its bus name but did not answer the last ping (bluez.ping_interval): stopped, hung or swamped.",
               [("", v.bluetoothdAnswering ? "1" : "0")])
        metric("blecompanion_devices_online", "gauge", "Published devices currently online.", [("", "\(v.devicesOnline)")])
        metric("blecompanion_commands_total", "counter", "Device commands (MQTT and HTTP) by action and result.",
               v.commands.keys.sorted().map { key in
                   ("{action=\"\(Self.escape(key.action))\",result=\"\(key.result.rawValue)\"}", "\(v.commands[key] ?? 0)")
               })
        if let f = v.fleet {
            metric("blecompanion_fleet_owned", "gauge", "Devices and identities this gateway speaks for in its fleet.", [("", "\(f.owned)")])
            metric("blecompanion_fleet_sightings_sent_total", "counter", "Sighting batches this gateway published.", [("", "\(f.batchesSent)")])
            metric("blecompanion_fleet_sightings_received_total", "counter", "Sighting batches received from the other gateways.",
                   [("", "\(f.batchesReceived)")])
            metric("blecompanion_fleet_claims_total", "counter", "Ownership claims this gateway published.", [("", "\(f.claimsSent)")])
            metric("blecompanion_fleet_refused_total", "counter", "Fleet messages that could not be read (ignored, logged).",
                   [("", "\(f.refused)")])
        }
        return out
    }

    static func number(_ d: Double) -> String {
        guard d.isFinite else { return d.isNaN ? "NaN" : (d > 0 ? "+Inf" : "-Inf") }
        return String(format: "%.3f", d)
    }

    /// Label values escape backslash, double quote and newline.
    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
