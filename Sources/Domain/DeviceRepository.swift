import BLEParsing
import BlueZ
import Foundation

/// Whether Bluetooth can be used at all right now, and if not, why — in words
/// a user can act on.
public enum Availability: Sendable, Equatable {
    case available
    /// bluetoothd is not on the bus (stopped, restarting, not installed).
    case bluetoothdGone
    /// bluetoothd runs but has no controller.
    case noAdapter
    /// The adapter exists but its radio is off (or rfkill-blocked).
    case adapterOff(AdapterID)

    /// One sentence for the user, or nil when all is well.
    public var reason: String? {
        switch self {
        case .available: return nil
        case .bluetoothdGone: return "bluetoothd is not running"
        case .noAdapter: return "no Bluetooth adapter"
        case let .adapterOff(id): return "adapter \(id.name) is powered off"
        }
    }
}

/// One device as the product shows it: what bluetoothd says plus what the
/// parsing module made of its advertisements.
public struct DeviceRecord: Sendable, Equatable, Identifiable {
    public let id: DeviceID
    public var name: String?
    public var rssi: Int16?
    public var paired: Bool
    public var connected: Bool
    public var trusted: Bool
    /// The decoded advertisement format ("bthome", "ruuvi", …), if any.
    public var format: String?
    public var readings: [Reading]
    /// The device profile that describes it (docs/PROFILES.md), by name; nil: none matches.
    public var profile: String?
    /// When it was last heard, on the wall clock (shown and published).
    public var lastSeen: Date?
    /// When it was last heard this session, on the boot-time clock
    /// (``BootClock``), which setting the wall clock does not move: what
    /// stale and expiry times are measured with. nil: not heard this session.
    public var heard: TimeInterval?
    /// When the database first saw the device (nil: not remembered).
    public var firstSeen: Date?
    /// Format, readings and last seen come from the database: not heard
    /// since this process started (nothing new to record).
    public var remembered: Bool

    public init(id: DeviceID, name: String? = nil, rssi: Int16? = nil, paired: Bool = false, connected: Bool = false,
                trusted: Bool = false, format: String? = nil, readings: [Reading] = [], lastSeen: Date? = nil,
                firstSeen: Date? = nil, remembered: Bool = false, heard: TimeInterval? = nil) {
        self.heard = heard
        self.firstSeen = firstSeen
        self.remembered = remembered
        self.id = id
        self.name = name
        self.rssi = rssi
        self.paired = paired
        self.connected = connected
        self.trusted = trusted
        self.format = format
        self.readings = readings
        self.lastSeen = lastSeen
    }
}

/// Everything the device list needs, at one moment, and what changed since
/// the snapshot before it: a consumer that saw version `v - 1` updates only
/// the devices in `changed` (O(changed), not O(devices)); one that missed a
/// snapshot (it lagged and its buffer kept the newest) or gets `changed ==
/// nil` looks at everything.
public struct DeviceListSnapshot: Sendable, Equatable {
    /// Increases by one with every snapshot a repository publishes (0: not
    /// numbered, e.g. a test's fake). First, so that comparing two snapshots
    /// of a repository stops here instead of walking the device list.
    public var version: UInt64
    public var availability: Availability
    public var scanning: Bool
    /// Chunked: the repository changes one record of a list that its last
    /// snapshot still shares at the cost of one chunk, not of every record.
    public var devices: ChunkedArray<DeviceRecord>
    /// The devices whose records differ from snapshot `version - 1`; nil:
    /// anything may have changed (availability, scanning, devices added or
    /// removed, or the repository does not say).
    public var changed: Set<DeviceID>?
    /// Where each device is in `devices`, when the repository keeps it (nil:
    /// not given; ``record(_:)`` then searches).
    public var positions: [DeviceID: Int]?

    public init(availability: Availability, scanning: Bool = false, devices: [DeviceRecord] = [],
                version: UInt64 = 0, changed: Set<DeviceID>? = nil, positions: [DeviceID: Int]? = nil) {
        self.init(availability: availability, scanning: scanning, records: ChunkedArray(devices), version: version,
                  changed: changed, positions: positions)
    }

    public init(availability: Availability, scanning: Bool = false, records devices: ChunkedArray<DeviceRecord>,
                version: UInt64 = 0, changed: Set<DeviceID>? = nil, positions: [DeviceID: Int]? = nil) {
        self.version = version
        self.availability = availability
        self.scanning = scanning
        self.devices = devices
        self.changed = changed
        self.positions = positions
    }

    /// The record of `id`: O(1) with positions, a search without.
    public func record(_ id: DeviceID) -> DeviceRecord? {
        if let positions {
            guard let i = positions[id], i < devices.count, devices[i].id == id else { return nil }
            return devices[i]
        }
        return devices.first { $0.id == id }
    }

    /// The devices that changed since `previous` (a snapshot this consumer
    /// saw), or nil when that is not known and everything must be looked at.
    public func changes(since previous: UInt64?) -> Set<DeviceID>? {
        guard let previous, version != 0, version == previous &+ 1 else { return nil }
        return changed
    }
}

/// What can go wrong in the domain layer, phrased for the user.
public struct DomainError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The sentence a user sees: what could not be done and why.
    public let description: String
    /// The error underneath (a `BlueZError`, GRDB's `DatabaseError`, a
    /// `DecodingError`…), kept for whoever needs more than the sentence:
    /// logs, and code that reacts to a kind of failure rather than to text.
    public let cause: (any Error)?

    public init(_ description: String, cause: (any Error)? = nil) {
        self.description = description
        self.cause = cause
    }

    /// Two errors are equal when they say the same (causes rarely are Equatable).
    public static func == (a: DomainError, b: DomainError) -> Bool { a.description == b.description }
}

/// The single source of truth for devices. Every subscriber sees the
/// current snapshot first, then every change; a change made through one
/// presenter reaches all the others without any refresh call.
public protocol DeviceRepository: Sendable {
    func snapshots() -> AsyncStream<DeviceListSnapshot>
    /// Starts or stops discovery; the snapshot's `scanning` follows.
    func setScanning(_ on: Bool) async throws(DomainError)
}
