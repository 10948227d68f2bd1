import BlueZ
import Foundation
import Locking

/// One thing that happened, as the event log keeps it.
public struct LogEvent: Sendable, Equatable, Identifiable {
    public enum Severity: Int, Sendable, Equatable, Comparable, CaseIterable {
        case info, warning, error
        public static func < (a: Severity, b: Severity) -> Bool { a.rawValue < b.rawValue }
    }

    public enum Kind: Sendable, Equatable {
        case bluetoothdAppeared
        case bluetoothdVanished
        /// bluetoothd keeps its bus name but did not answer a ping within the time (stopped, hung, swamped).
        case bluetoothdNotAnswering(timeout: Duration)
        /// It answers again.
        case bluetoothdAnswering
        case adapterAdded(AdapterID)
        case adapterRemoved(AdapterID)
        case adapterPowered(AdapterID, Bool)
        case deviceConnected(DeviceID)
        case deviceDisconnected(DeviceID)
        case connectionFailed(DeviceID, reason: String)
        case pairingSucceeded(DeviceID)
        case pairingFailed(DeviceID, reason: String)
        /// Readings could not be stored.
        case storageFailed(reason: String)
        case error(String)

        /// The device the event is about, if any.
        public var device: DeviceID? {
            switch self {
            case let .deviceConnected(d), let .deviceDisconnected(d), let .connectionFailed(d, _),
                 let .pairingSucceeded(d), let .pairingFailed(d, _):
                return d
            case .bluetoothdAppeared, .bluetoothdVanished, .bluetoothdNotAnswering, .bluetoothdAnswering,
                 .adapterAdded, .adapterRemoved, .adapterPowered, .storageFailed, .error:
                return nil
            }
        }

        /// How serious the event is unless the caller says otherwise.
        public var defaultSeverity: Severity {
            switch self {
            case .bluetoothdAppeared, .bluetoothdAnswering, .adapterAdded, .deviceConnected, .deviceDisconnected, .pairingSucceeded:
                return .info
            case let .adapterPowered(_, on):
                return on ? .info : .warning
            case .bluetoothdVanished, .bluetoothdNotAnswering, .adapterRemoved, .connectionFailed:
                return .warning
            case .pairingFailed, .storageFailed, .error:
                return .error
            }
        }

        /// One line for the user; the device is shown by `deviceName` when
        /// known, else by its address.
        public func message(deviceName: String?) -> String {
            let who = device.map { d in deviceName.flatMap { $0.isEmpty ? nil : $0 } ?? d.address.description } ?? ""
            switch self {
            case .bluetoothdAppeared: return "bluetoothd is running"
            case .bluetoothdVanished: return "bluetoothd is not running"
            case let .bluetoothdNotAnswering(timeout):
                return "bluetoothd did not answer within \(timeout.components.seconds) s: it is stopped, hung or overloaded"
            case .bluetoothdAnswering: return "bluetoothd answers again"
            case let .adapterAdded(a): return "adapter \(a.name) added"
            case let .adapterRemoved(a): return "adapter \(a.name) removed"
            case let .adapterPowered(a, on): return "adapter \(a.name) powered \(on ? "on" : "off")"
            case .deviceConnected: return "\(who) connected"
            case .deviceDisconnected: return "\(who) disconnected"
            case let .connectionFailed(_, reason): return "connecting to \(who) failed: \(reason)"
            case .pairingSucceeded: return "paired with \(who)"
            case let .pairingFailed(_, reason): return "pairing with \(who) failed: \(reason)"
            case let .storageFailed(reason): return "storing readings failed: \(reason)"
            case let .error(text): return text
            }
        }
    }

    /// Increases by one with every event a log appends (never reused, not
    /// even after `clear()`).
    public let id: UInt64
    public let at: Date
    public let severity: Severity
    public let kind: Kind
    public let message: String

    public init(id: UInt64, at: Date, severity: Severity, kind: Kind, message: String) {
        self.id = id
        self.at = at
        self.severity = severity
        self.kind = kind
        self.message = message
    }

    public var device: DeviceID? { kind.device }
}

/// The log at one moment: the kept events, oldest first.
public struct EventLogSnapshot: Sendable, Equatable {
    public var entries: [LogEvent]
    /// Events dropped (oldest first) to stay within the capacity since the
    /// log was created or last cleared.
    public var dropped: Int

    public init(entries: [LogEvent] = [], dropped: Int = 0) {
        self.entries = entries
        self.dropped = dropped
    }
}

/// What happened, kept in memory: the newest `capacity` events (older ones
/// are dropped and counted). Feeds turn other services' streams into
/// events; each feed runs until its `EventLogFeed` is cancelled or released.
public final class EventLog: Sendable {
    public static let defaultCapacity = 1000

    public let capacity: Int
    private let store = StateStore(EventLogSnapshot(), bufferLimit: 64)
    private let lastID = Lock<UInt64>(0)
    private let now: @Sendable () -> Date
    private let names: @Sendable (DeviceID) -> String?

    /// `names`: a device's name for messages when the feed does not know
    /// it (e.g. ``deviceNames(in:)``).
    public init(capacity: Int = EventLog.defaultCapacity, now: @escaping @Sendable () -> Date = { Date() },
                names: @escaping @Sendable (DeviceID) -> String? = { _ in nil }) {
        self.capacity = max(1, capacity)
        self.now = now
        self.names = names
    }

    /// The current log first, then every change.
    public func entries() -> AsyncStream<EventLogSnapshot> { store.states() }
    public var current: EventLogSnapshot { store.state }

    /// Appends one event; `severity` defaults to the kind's, `deviceName`
    /// to what `names` says.
    @discardableResult
    public func append(_ kind: LogEvent.Kind, severity: LogEvent.Severity? = nil, deviceName: String? = nil) -> LogEvent {
        let message = kind.message(deviceName: deviceName ?? kind.device.flatMap(names))
        let severity = severity ?? kind.defaultSeverity
        // One append at a time: ids and times follow the order of the entries.
        return lastID.withLock { last in
            last += 1
            let event = LogEvent(id: last, at: now(), severity: severity, kind: kind, message: message)
            store.update { s in
                s.entries.append(event)
                let excess = s.entries.count - capacity
                if excess > 0 {
                    s.entries.removeFirst(excess)
                    s.dropped += excess
                }
            }
            return event
        }
    }

    /// Forgets every event and the dropped count (ids keep increasing).
    public func clear() { store.update { $0 = EventLogSnapshot() } }

    /// Names as bluetoothd knows them now (alias, else name).
    public static func deviceNames(in mirror: BlueZMirror) -> @Sendable (DeviceID) -> String? {
        { [weak mirror] id in
            guard let d = mirror?.snapshot().devices[id] else { return nil }
            return d.alias ?? d.name
        }
    }

    // MARK: Feeds

    /// bluetoothd appearing and vanishing, adapters added, removed, powered
    /// on and off, devices connecting and disconnecting — transitions only,
    /// from the state the mirror is in when the feed starts. While
    /// bluetoothd is away nothing else is logged, and what the returning
    /// bluetoothd reports is taken as the new starting state.
    public func feed(from mirror: BlueZMirror) -> EventLogFeed {
        // Subscribed before the starting state is read: nothing falls between.
        let events = mirror.events(where: MirrorTracker.concerns)
        let start = mirror.snapshot()
        return EventLogFeed(Task { [weak self, weak mirror] in
            var tracker = MirrorTracker(start)
            for await event in events {
                guard let self, let mirror else { return }
                for (kind, name) in tracker.apply(event, snapshot: mirror.snapshot) {
                    self.append(kind, deviceName: name)
                }
            }
        })
    }

    /// Failed connection attempts of watched devices (`.retrying`); each
    /// status once, including one the manager is in when the feed starts.
    /// Connections themselves come from the mirror's feed.
    public func feed(from connections: ConnectionManager) -> EventLogFeed {
        let statuses = connections.statuses()
        return EventLogFeed(Task { [weak self] in
            var previous: [DeviceID: ConnectionStatus] = [:]
            for await current in statuses {
                guard let self else { return }
                for (id, status) in current.sorted(by: { $0.key < $1.key }) where previous[id] != status {
                    if case let .retrying(_, _, reason) = status { self.append(.connectionFailed(id, reason: reason)) }
                }
                previous = current
            }
        })
    }

    /// How each pairing attempt ends.
    public func feed(from pairing: any PairingService) -> EventLogFeed {
        let outcomes = pairing.outcomes()
        return EventLogFeed(Task { [weak self] in
            for await outcome in outcomes {
                guard let self else { return }
                switch outcome {
                case let .paired(d): self.append(.pairingSucceeded(d))
                case let .failed(d, reason): self.append(.pairingFailed(d, reason: reason))
                }
            }
        })
    }

    /// bluetoothd not answering and answering again (transitions only; it
    /// starts out answering).
    public func feed(from liveness: BluetoothdLiveness) -> EventLogFeed {
        let states = liveness.states()
        let timeout = liveness.timeout
        return EventLogFeed(Task { [weak self] in
            var answering = true
            for await answered in states where answered != answering {
                guard let self else { return }
                answering = answered
                self.append(answered ? .bluetoothdAnswering : .bluetoothdNotAnswering(timeout: timeout))
            }
        })
    }

    /// Readings that could not be stored (each distinct failure the
    /// recorder reports, including one it reports when the feed starts).
    public func feed(from recorder: ReadingRecorder) -> EventLogFeed {
        let failures = recorder.failures()
        return EventLogFeed(Task { [weak self] in
            for await failure in failures {
                guard let self else { return }
                if let failure { self.append(.storageFailed(reason: failure)) }
            }
        })
    }
}

/// A running feed into an event log: stops when cancelled or released.
public final class EventLogFeed: Sendable {
    private let task: Task<Void, Never>
    init(_ task: Task<Void, Never>) { self.task = task }
    public func cancel() { task.cancel() }
    deinit { task.cancel() }
}

/// What the mirror feed remembers between events: enough to tell a change
/// from a repetition, and the names of connected devices (for a
/// disconnection logged after the device is gone).
struct MirrorTracker {
    var available: Bool
    var powered: [AdapterID: Bool] = [:]
    /// Connected devices and their names.
    var connected: [DeviceID: String?] = [:]

    init(_ snapshot: BlueZSnapshot) {
        available = snapshot.available
        adopt(snapshot)
    }

    private mutating func adopt(_ snapshot: BlueZSnapshot) {
        powered = snapshot.adapters.mapValues { $0.powered ?? false }
        connected = [:]
        for d in snapshot.devices.values where d.connected { connected[d.id] = .some(Self.name(d)) }
    }

    private static func name(_ d: Device) -> String? { d.alias ?? d.name }

    /// Whether `apply` can make anything of `event` (the feed subscribes to
    /// these only: an advertisement does not wake it).
    @Sendable static func concerns(_ event: BlueZEvent) -> Bool {
        switch event {
        case let .deviceChanged(_, changed): return changed.contains(.connected)
        case let .adapterChanged(_, changed): return changed.contains(.powered)
        case .propertiesChanged: return false
        case .availability, .resynchronized, .interfacesAdded, .interfacesRemoved: return true
        }
    }

    /// The events `event` means. Property values come from the event itself
    /// (the snapshot may already be further on); the snapshot only supplies
    /// names and objects that were added.
    mutating func apply(_ event: BlueZEvent, snapshot: () -> BlueZSnapshot) -> [(LogEvent.Kind, String?)] {
        switch event {
        case .availability(false):
            guard available else { return [] }
            available = false
            powered = [:]
            connected = [:]
            return [(.bluetoothdVanished, nil)]
        case .availability(true):
            // A new bluetoothd (possibly replacing one without a gap): its
            // tree is the new starting state.
            let was = available
            available = true
            adopt(snapshot())
            return was ? [] : [(.bluetoothdAppeared, nil)]
        case .resynchronized:
            // Followed by availability(true), which starts over.
            return []
        case let .interfacesAdded(path, names):
            guard available else { return [] }
            var out: [(LogEvent.Kind, String?)] = []
            let now = snapshot()
            if names.contains(BlueZInterface.adapter) {
                let id = AdapterID(path: path)
                powered[id] = now.adapters[id]?.powered ?? false
                out.append((.adapterAdded(id), nil))
            }
            if names.contains(BlueZInterface.device), let id = DeviceID(path: path), let d = now.devices[id], d.connected,
               connected[id] == nil {
                connected[id] = .some(Self.name(d))
                out.append((.deviceConnected(id), Self.name(d)))
            }
            return out
        case let .interfacesRemoved(path, names):
            guard available else { return [] }
            var out: [(LogEvent.Kind, String?)] = []
            if names.contains(BlueZInterface.device), let id = DeviceID(path: path), let name = connected.removeValue(forKey: id) {
                out.append((.deviceDisconnected(id), name))
            }
            if names.contains(BlueZInterface.adapter) {
                let id = AdapterID(path: path)
                powered[id] = nil
                out.append((.adapterRemoved(id), nil))
            }
            return out
        case .propertiesChanged:
            return []
        case let .deviceChanged(id, changed):
            guard available, changed.contains(.connected) else { return [] }
            let now = Device(id: id, properties: changed.values).connected
            let was = connected[id] != nil
            guard now != was else { return [] }
            if now {
                let name = snapshot().devices[id].flatMap(Self.name)
                connected[id] = .some(name)
                return [(.deviceConnected(id), name)]
            }
            let known = connected.removeValue(forKey: id) ?? nil
            return [(.deviceDisconnected(id), snapshot().devices[id].flatMap(Self.name) ?? known)]
        case let .adapterChanged(id, changed):
            guard available, changed.contains(.powered),
                  let now = Adapter(id: id, properties: changed.values).powered, powered[id] != now else { return [] }
            powered[id] = now
            return [(.adapterPowered(id, now), nil)]
        }
    }
}
