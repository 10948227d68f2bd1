import BLEParsing
import BlueZ
import Foundation
import Vocabulary

/// One device in full, as the detail screen shows it.
public struct DeviceDetails: Sendable, Equatable, Identifiable {
    public let id: DeviceID
    /// The alias bluetoothd shows (the advertised name unless renamed).
    public var name: String?
    public var advertisedName: String?
    /// "public" or "random".
    public var addressType: String?
    public var icon: String?
    public var appearance: UInt16?
    public var rssi: Int16?
    public var txPower: Int16?
    public var paired = false
    public var bonded = false
    public var trusted = false
    public var blocked = false
    public var connected = false
    public var servicesResolved = false
    /// Battery1 Percentage, when bluetoothd's battery plugin reports one.
    public var battery: UInt8?
    public var uuids: [String] = []
    /// The decoded advertisement format and its latest readings.
    public var format: String?
    public var readings: [Reading] = []
    public var lastSeen: Date?
    /// The device profile that describes it (docs/PROFILES.md); nil: none.
    public var profile: String?
    /// Its profile's commands (the dashboard's command menu).
    public var commands: [DeviceProfile.Command] = []

    public init(id: DeviceID) { self.id = id }
}

/// What the parsing module made of an attribute's value.
public enum DecodedValue: Sendable, Equatable {
    case readings([Reading])
    /// A value with no readings (a feature bitmap, a string, …): its fields.
    case fields([String: String], order: [String])
    /// The bytes do not match the attribute's layout; the text says where and why.
    case undecodable(String)
    /// No decoder for this attribute.
    case unknown
}

public struct GATTDescriptorNode: Sendable, Equatable, Identifiable {
    public let id: GATTAttributeID
    public var uuid: String
    /// The SIG name ("Client Characteristic Configuration"), if assigned.
    public var name: String?
    public var value: [UInt8]?
    public var decoded: DecodedValue?
    public init(id: GATTAttributeID, uuid: String, name: String?, value: [UInt8]?, decoded: DecodedValue?) {
        self.id = id
        self.uuid = uuid
        self.name = name
        self.value = value
        self.decoded = decoded
    }
}

public struct GATTCharacteristicNode: Sendable, Equatable, Identifiable {
    public let id: GATTAttributeID
    public var uuid: String
    public var name: String?
    /// bluetoothd's flags ("read", "notify", "encrypt-write", …), sorted.
    public var flags: [String]
    public var canRead: Bool
    public var canWrite: Bool
    public var canWriteWithoutResponse: Bool
    public var canNotify: Bool
    public var notifying: Bool
    /// The last value read or notified (bluetoothd's cache).
    public var value: [UInt8]?
    public var decoded: DecodedValue?
    public var descriptors: [GATTDescriptorNode]
    public init(id: GATTAttributeID, uuid: String, name: String?, flags: [String], canRead: Bool, canWrite: Bool,
                canWriteWithoutResponse: Bool, canNotify: Bool, notifying: Bool, value: [UInt8]?, decoded: DecodedValue?,
                descriptors: [GATTDescriptorNode]) {
        self.id = id
        self.uuid = uuid
        self.name = name
        self.flags = flags
        self.canRead = canRead
        self.canWrite = canWrite
        self.canWriteWithoutResponse = canWriteWithoutResponse
        self.canNotify = canNotify
        self.notifying = notifying
        self.value = value
        self.decoded = decoded
        self.descriptors = descriptors
    }
}

public struct GATTServiceNode: Sendable, Equatable, Identifiable {
    public let id: GATTAttributeID
    public var uuid: String
    public var name: String?
    public var primary: Bool
    public var characteristics: [GATTCharacteristicNode]
    public init(id: GATTAttributeID, uuid: String, name: String?, primary: Bool, characteristics: [GATTCharacteristicNode]) {
        self.id = id
        self.uuid = uuid
        self.name = name
        self.primary = primary
        self.characteristics = characteristics
    }
}

public struct RSSISample: Sendable, Equatable {
    public var at: Date
    public var value: Int16
    public init(at: Date, value: Int16) {
        self.at = at
        self.value = value
    }
}

/// Everything the detail screen needs about one device, at one moment.
public struct DeviceDetailSnapshot: Sendable, Equatable {
    public var availability: Availability
    /// nil: bluetoothd does not know the device (never seen, or removed).
    public var device: DeviceDetails?
    /// The GATT tree (empty until services are resolved).
    public var services: [GATTServiceNode]
    /// Recent RSSI values, oldest first (bounded).
    public var rssiHistory: [RSSISample]

    public init(availability: Availability, device: DeviceDetails? = nil, services: [GATTServiceNode] = [], rssiHistory: [RSSISample] = []) {
        self.availability = availability
        self.device = device
        self.services = services
        self.rssiHistory = rssiHistory
    }
}

/// One device's details and the operations on it. The details stream is the
/// single source of truth: a change made anywhere (another presenter,
/// bluetoothctl, the device itself) appears in it.
public protocol DeviceControl: Sendable {
    /// The current details first, then every change.
    func details(of id: DeviceID) -> AsyncStream<DeviceDetailSnapshot>
    /// Connects and waits until services are resolved.
    func connect(_ id: DeviceID) async throws(DomainError)
    func disconnect(_ id: DeviceID) async throws(DomainError)
    func setTrusted(_ on: Bool, _ id: DeviceID) async throws(DomainError)
    /// Removes the device and its pairing from bluetoothd (RemoveDevice).
    func forget(_ id: DeviceID) async throws(DomainError)
    /// Reads the value from the device. By the time it returns, `details(of:)`
    /// has published it as the characteristic's value (bluetoothd's cached
    /// Value), unless a newer one replaced it.
    func read(_ characteristic: GATTAttributeID) async throws(DomainError) -> [UInt8]
    func write(_ characteristic: GATTAttributeID, _ value: [UInt8], withoutResponse: Bool) async throws(DomainError)
    func setNotifying(_ on: Bool, _ characteristic: GATTAttributeID) async throws(DomainError)
}

/// Decoding attribute values for display (pure).
public enum AttributeDecoding {
    public static func decode(uuid: String, value: [UInt8]?, presentationFormat: [UInt8]? = nil, descriptor: Bool = false) -> DecodedValue? {
        guard let value else { return nil }
        guard let u = try? BluetoothUUID(parsing: uuid) else { return .unknown }
        let format = presentationFormat.flatMap { try? PresentationFormat(bytes: $0) }
        if !descriptor && !GATTDecoder.isSupported(u) && format == nil { return .unknown }
        do throws(DecodeError) {
            let g = descriptor ? try GATTDecoder.decode(descriptor: u, value: value)
                               : try GATTDecoder.decode(characteristic: u, value: value, presentationFormat: format)
            if !g.readings.isEmpty { return .readings(g.readings) }
            var dict: [String: String] = [:]
            var order: [String] = []
            for (k, v) in g.fields {
                if case let .string(text) = v { dict[k] = text } else { dict[k] = v.description }
                order.append(k)
            }
            return .fields(dict, order: order)
        } catch {
            if error.kind == .unsupported { return .unknown }
            return .undecodable(error.description)
        }
    }

    public static func name(of uuid: String) -> String? {
        (try? BluetoothUUID(parsing: uuid)).flatMap { AssignedNumbers.name(for: $0) }
    }
}
