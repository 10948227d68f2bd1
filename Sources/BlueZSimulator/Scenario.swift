/// A scenario: what the simulated bluetoothd has and does over time.
/// The file format is documented in docs/SCENARIOS.md.
public struct Scenario: Sendable {
    public var name: String
    public var settings: Settings
    public var adapters: [AdapterSpec]
    public var devices: [DeviceSpec]
    /// Times at which the whole service leaves the bus and comes back.
    public var outages: [Outage]
    /// bluetoothd runs with its experimental interfaces (`--experimental`,
    /// or `Experimental = true` in main.conf): adapters then offer
    /// AdvertisementMonitorManager1 (passive scanning). Off by default, as
    /// in bluetoothd.
    public var experimental = false

    public struct Settings: Sendable {
        /// Seconds after which a device that is neither paired, trusted nor
        /// connected is removed once it is no longer seen (BlueZ's
        /// TemporaryTimeout, 30 s by default).
        public var temporaryDeviceTimeout: Double = 30
        /// How long a successful Connect takes, in seconds.
        public var connectDelay: Double = 0.1
        /// Delay between Connected and ServicesResolved, in seconds.
        public var serviceResolveDelay: Double = 0.05
    }

    public struct Outage: Sendable {
        public var at: Double
        /// nil: never comes back.
        public var returnAt: Double?
    }
}

public struct AdapterSpec: Sendable {
    public var id: String
    public var address: String
    public var addressType: String
    public var name: String
    public var alias: String?
    public var classOfDevice: UInt32
    public var powered: Bool
    public var discoverable: Bool
    public var discoverableTimeout: UInt32
    public var pairable: Bool
    public var pairableTimeout: UInt32
    public var modalias: String?
    public var roles: [String]
    public var uuids: [String]
    public var manufacturer: UInt16
    public var version: UInt8
    public var outages: [Scenario.Outage]
}

public struct ErrorSpec: Sendable, Equatable {
    public var name: String
    public var message: String
}

/// An event at a time on a timeline (seconds from its start).
public protocol TimedEvent: Sendable {
    var at: Double { get }
}

public struct AdvertisementEvent: TimedEvent {
    public var at: Double
    public var rssi: Int16?
    public var txPower: Int16?
    public var name: String?
    public var manufacturerData: [UInt16: [UInt8]]?
    public var serviceData: [String: [UInt8]]?
    public var uuids: [String]?
    /// true: starts advertising; false: stops (vanishes).
    public var present: Bool?
}

public struct Timeline<Event: TimedEvent>: Sendable {
    public var events: [Event]
    /// When set, the timeline starts over every `repeatEvery` seconds.
    public var repeatEvery: Double?
}

public struct ValueEvent: TimedEvent {
    public var at: Double
    public var value: [UInt8]
}

public struct PairingSpec: Sendable {
    public enum Method: String, Sendable, CaseIterable {
        case none, justWorks, requestConfirmation, requestPasskey, displayPasskey, requestPinCode, displayPinCode
    }
    public var method: Method = .justWorks
    public var passkey: UInt32 = 0
    public var pinCode: String = "0000"
    /// false: the remote device rejects pairing after the agent step.
    public var accept: Bool = true
    /// Seconds the remote takes to complete pairing.
    public var delay: Double = 0.05
}

public struct FaultSpec: Sendable {
    /// Connect fails this many times (then succeeds) with `connectError`.
    public var connectFailures: Int = 0
    public var connectError = ErrorSpec(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
    /// The device drops the link this many seconds after each connection.
    public var disconnectAfter: Double?
    /// Pair fails with this error (after the agent step, if any).
    public var pairError: ErrorSpec?
}

public struct DescriptorSpec: Sendable {
    public var uuid: String
    public var flags: [String]
    public var value: [UInt8]
}

public struct WriteAction: Sendable {
    /// The characteristic (UUID) whose value changes; nil = the one written.
    public var characteristic: String?
    public var value: [UInt8]
    public var after: Double
}

public struct WriteRule: Sendable {
    /// The written bytes this rule applies to; nil = any write.
    public var match: [UInt8]?
    public var error: ErrorSpec?
    /// Whether the written value is kept as the characteristic's value.
    public var store: Bool
    public var actions: [WriteAction]
}

public struct CharacteristicSpec: Sendable {
    public var uuid: String
    public var flags: [String]
    public var value: [UInt8]
    public var descriptors: [DescriptorSpec]
    public var notifications: Timeline<ValueEvent>?
    public var onWrite: [WriteRule]
    public var readError: ErrorSpec?
}

public struct ServiceSpec: Sendable {
    public var uuid: String
    public var primary: Bool
    public var characteristics: [CharacteristicSpec]
}

public struct DeviceSpec: Sendable {
    public var address: String
    public var addressType: String
    public var adapter: String
    public var name: String?
    public var alias: String?
    public var appearance: UInt16?
    public var classOfDevice: UInt32?
    public var icon: String?
    public var paired: Bool
    public var trusted: Bool
    public var blocked: Bool
    public var connectable: Bool
    public var legacyPairing: Bool
    public var rssi: Int16
    public var txPower: Int16?
    public var manufacturerData: [UInt16: [UInt8]]
    public var serviceData: [String: [UInt8]]
    public var uuids: [String]
    public var advertising: Timeline<AdvertisementEvent>?
    public var battery: UInt8?
    public var batteryTimeline: Timeline<ValueEvent>?
    public var gatt: [ServiceSpec]
    public var mtu: UInt16
    public var pairing: PairingSpec
    public var faults: FaultSpec
    /// Whether the device advertises from t = 0 (before its timeline says otherwise).
    public var advertisingAtStart: Bool
}

/// A problem in a scenario file, with where it is.
public struct ScenarioError: Error, Sendable, CustomStringConvertible, Equatable {
    public var file: String
    public var line: Int
    public var path: String
    public var message: String

    public var description: String {
        path.isEmpty ? "\(file):\(line): \(message)" : "\(file):\(line): \(path): \(message)"
    }
}
