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
    public var lastSeen: Date?
    /// When the database first saw the device (nil: not remembered).
    public var firstSeen: Date?
    /// Format, readings and last seen come from the database: not heard
    /// since this process started (nothing new to record).
    public var remembered: Bool

    public init(id: DeviceID, name: String? = nil, rssi: Int16? = nil, paired: Bool = false, connected: Bool = false,
                trusted: Bool = false, format: String? = nil, readings: [Reading] = [], lastSeen: Date? = nil,
                firstSeen: Date? = nil, remembered: Bool = false) {
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

/// Everything the device list needs, at one moment.
public struct DeviceListSnapshot: Sendable, Equatable {
    public var availability: Availability
    public var scanning: Bool
    public var devices: [DeviceRecord]

    public init(availability: Availability, scanning: Bool = false, devices: [DeviceRecord] = []) {
        self.availability = availability
        self.scanning = scanning
        self.devices = devices
    }
}

/// What can go wrong in the domain layer, phrased for the user.
public struct DomainError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The single source of truth for devices. Every subscriber sees the
/// current snapshot first, then every change; a change made through one
/// presenter reaches all the others without any refresh call.
public protocol DeviceRepository: Sendable {
    func snapshots() -> AsyncStream<DeviceListSnapshot>
    /// Starts or stops discovery; the snapshot's `scanning` follows.
    func setScanning(_ on: Bool) async throws(DomainError)
}
