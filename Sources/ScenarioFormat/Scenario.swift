/// A scenario: what the simulated bluetoothd has and does over time.
/// The file format is documented in docs/SCENARIOS.md.
public struct Scenario: Sendable {
    public var name: String
    public var settings: Settings
    public var adapters: [AdapterSpec]
    public var devices: [DeviceSpec]
    /// Times at which the whole service leaves the bus and comes back.
    public var outages: [Outage]
    /// Free text (the file's `description`).
    public var description: String? = nil
    /// How long the scenario lasts, in seconds (a recording's length): the
    /// period of `simulate --loop`. Nil: the end of its longest timeline.
    public var duration: Double? = nil

    /// An empty scenario (one adapter is added by the loader only; a
    /// scenario built in code lists its adapters itself).
    public init(name: String, settings: Settings = Settings(), adapters: [AdapterSpec] = [], devices: [DeviceSpec] = [],
                outages: [Outage] = []) {
        self.name = name
        self.settings = settings
        self.adapters = adapters
        self.devices = devices
        self.outages = outages
    }

    /// bluetoothd runs with its experimental interfaces (`--experimental`,
    /// or `Experimental = true` in main.conf): adapters then offer
    /// AdvertisementMonitorManager1 (passive scanning). Off by default, as
    /// in bluetoothd.
    public var experimental = false

    /// Which bluetoothd's D-Bus property set the simulator exports.
    public var bluetoothdVersion = BluetoothdVersion.v5_66

    /// Seconds every method call waits for its answer: a bluetoothd that is
    /// slow but answering (a loaded Raspberry Pi, a controller that stalls
    /// its management commands). 0: at once. At most 60.
    public var replyDelay: Double = 0

    public struct Settings: Sendable {
        /// Seconds after which a device that is neither paired, trusted nor
        /// connected is removed once it is no longer seen (BlueZ's
        /// TemporaryTimeout, 30 s by default).
        public var temporaryDeviceTimeout: Double = 30
        /// How long a successful Connect takes, in seconds.
        public var connectDelay: Double = 0.1
        /// Delay between Connected and ServicesResolved, in seconds.
        public var serviceResolveDelay: Double = 0.05
        /// How long Disconnect waits before the link goes down, in seconds
        /// (bluetoothd's DISCONNECT_TIMER: 2 s).
        public var disconnectDelay: Double = 2
        public init() {}
    }

    public struct Outage: Sendable {
        public var at: Double
        /// nil: never comes back.
        public var returnAt: Double?
        /// bluetoothd was killed (SIGKILL, a crash), not stopped: it did not
        /// power its adapters down, so the kernel keeps its LE links. Devices
        /// connected before come back Connected, without GATT objects, and
        /// Connect answers at once without opening ATT until a Disconnect
        /// (seen with bluetoothd 5.66 on the real stack). bluetoothd outages only.
        public var killed = false
        public init(at: Double, returnAt: Double?, killed: Bool = false) {
            self.at = at
            self.returnAt = returnAt
            self.killed = killed
        }
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

    /// An adapter with the loader's defaults.
    public init(id: String, address: String, addressType: String = "public", name: String = "blecompanion-sim",
                alias: String? = nil, classOfDevice: UInt32 = 0x7C010C, powered: Bool = true, discoverable: Bool = false,
                discoverableTimeout: UInt32 = 180, pairable: Bool = true, pairableTimeout: UInt32 = 0,
                modalias: String? = "usb:v1D6Bp0246d0542", roles: [String] = ["central", "peripheral"], uuids: [String] = [],
                manufacturer: UInt16 = 2, version: UInt8 = 0x0C, outages: [Scenario.Outage] = []) {
        self.id = id
        self.address = address
        self.addressType = addressType
        self.name = name
        self.alias = alias
        self.classOfDevice = classOfDevice
        self.powered = powered
        self.discoverable = discoverable
        self.discoverableTimeout = discoverableTimeout
        self.pairable = pairable
        self.pairableTimeout = pairableTimeout
        self.modalias = modalias
        self.roles = roles
        self.uuids = uuids
        self.manufacturer = manufacturer
        self.version = version
        self.outages = outages
    }
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

    public init(at: Double, rssi: Int16? = nil, txPower: Int16? = nil, name: String? = nil,
                manufacturerData: [UInt16: [UInt8]]? = nil, serviceData: [String: [UInt8]]? = nil,
                uuids: [String]? = nil, present: Bool? = nil) {
        self.at = at
        self.rssi = rssi
        self.txPower = txPower
        self.name = name
        self.manufacturerData = manufacturerData
        self.serviceData = serviceData
        self.uuids = uuids
        self.present = present
    }
}

public struct Timeline<Event: TimedEvent>: Sendable {
    public var events: [Event]
    /// When set, the timeline starts over every `repeatEvery` seconds.
    public var repeatEvery: Double?

    public init(events: [Event], repeatEvery: Double? = nil) {
        self.events = events
        self.repeatEvery = repeatEvery
    }
}

public struct ValueEvent: TimedEvent {
    public var at: Double
    public var value: [UInt8]

    public init(at: Double, value: [UInt8]) {
        self.at = at
        self.value = value
    }
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

    public init() {}
}

public struct FaultSpec: Sendable {
    /// Connect fails this many times (then succeeds) with `connectError`.
    public var connectFailures: Int = 0
    public var connectError = ErrorSpec(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")
    /// The device drops the link this many seconds after each connection.
    public var disconnectAfter: Double?
    /// Pair fails with this error (after the agent step, if any).
    public var pairError: ErrorSpec?
    /// The link comes up but the services are never resolved (a device
    /// whose ATT server does not answer; python-dbusmock's bluez5 template).
    public var servicesUnresolved = false

    public init() {}
}

public struct DescriptorSpec: Sendable {
    public var uuid: String
    public var flags: [String]
    public var value: [UInt8]

    /// `uuid` in BlueZ's lowercase 128-bit form.
    public init(uuid: String, flags: [String] = ["read"], value: [UInt8] = []) {
        self.uuid = uuid
        self.flags = flags
        self.value = value
    }
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

    /// `uuid` in BlueZ's lowercase 128-bit form.
    public init(uuid: String, flags: [String] = ["read"], value: [UInt8] = [], descriptors: [DescriptorSpec] = [],
                notifications: Timeline<ValueEvent>? = nil, onWrite: [WriteRule] = [], readError: ErrorSpec? = nil) {
        self.uuid = uuid
        self.flags = flags
        self.value = value
        self.descriptors = descriptors
        self.notifications = notifications
        self.onWrite = onWrite
        self.readError = readError
    }
}

public struct ServiceSpec: Sendable {
    public var uuid: String
    public var primary: Bool
    public var characteristics: [CharacteristicSpec]

    public init(uuid: String, primary: Bool = true, characteristics: [CharacteristicSpec] = []) {
        self.uuid = uuid
        self.primary = primary
        self.characteristics = characteristics
    }
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
    /// Free text (the file's `comment`).
    public var comment: String? = nil
    /// An mcumgr SMP server (MCUboot image and OS management) behind the SMP
    /// GATT service, which the loader adds to `gatt` (docs/SCENARIOS.md, "Firmware").
    public var smp: SMPSpec? = nil
    /// An Improv Wi-Fi provisioning server; the loader adds its service to
    /// `gatt` and its UUID and service data to the advertisement.
    public var improv: ImprovSpec? = nil
}

/// A device waiting for Wi-Fi credentials over Improv (improv-wifi.com/ble).
public struct ImprovSpec: Sendable, Equatable {
    /// 1: authorization required (a button to press), 2: authorized.
    public var state: UInt8 = 2
    /// Seconds after a connection at which the button is "pressed" (authorization required only; nil: never).
    public var authorizeAfter: Double? = nil
    /// The networks it can join: SSID → password (empty for an open network).
    public var networks: [String: String] = [:]
    /// What it answers once provisioned (its web page).
    public var url: String? = nil
    /// Seconds spent joining the network.
    public var connectTime: Double = 0.5
    /// Capability bits: 1 identify, 2 device info.
    public var capabilities: UInt8 = 1

    public init() {}
}

/// The simulated device's firmware side: MCUboot's two slots and the
/// mcumgr parameters it announces; faults a test injects.
public struct SMPSpec: Sendable, Equatable {
    /// The image running in slot 0 (confirmed): its version and hash.
    public var version: String = "1.0.0"
    /// 32 bytes; when the file gives none, derived from the version.
    public var hash: [UInt8]? = nil
    /// MCUmgr parameters: the largest request the device takes, and how many it buffers.
    public var bufferSize: Int = 2475
    public var bufferCount: Int = 4
    /// The link drops once this many bytes of an upload arrived (once per simulator run).
    public var disconnectAfterBytes: Int? = nil
    /// The first this-many upload requests are answered busy (rc 10).
    public var busyChunks: Int = 0
    /// A finished upload is refused as corrupt (rc 9), as when the image was damaged on the way.
    public var badHash = false
    /// Seconds the device takes to boot after a reset (then it advertises and accepts connections again).
    public var bootTime: Double = 0.5

    public init() {}
}

extension DeviceSpec {
    /// A device with the loader's defaults; `address` in upper case.
    public init(address: String, addressType: String = "public", adapter: String = "hci0") {
        self.init(address: address, addressType: addressType, adapter: adapter, name: nil, alias: nil, appearance: nil,
                  classOfDevice: nil, icon: nil, paired: false, trusted: false, blocked: false, connectable: true,
                  legacyPairing: false, rssi: -60, txPower: nil, manufacturerData: [:], serviceData: [:], uuids: [],
                  advertising: nil, battery: nil, batteryTimeline: nil, gatt: [], mtu: 247, pairing: PairingSpec(),
                  faults: FaultSpec(), advertisingAtStart: true)
    }
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

/// The bluetoothd whose property set the simulator imitates (scenario key
/// `bluetoothd.version`). 5.66 is what Debian 12 and Raspberry Pi OS ship and
/// what the real-BlueZ tier runs, so it is the default; `latest` adds what
/// BlueZ's current documentation (doc/org.bluez.*.rst on master) lists beyond
/// it, so the client is tested against both.
public enum BluetoothdVersion: String, Sendable, CaseIterable {
    case v5_66 = "5.66"
    case latest
}
