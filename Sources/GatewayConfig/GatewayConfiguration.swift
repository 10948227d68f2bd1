// Gateway configuration: the model of `blecompanion gateway --config FILE`.
// The YAML layout is documented in docs/GATEWAY-CONFIG.md.
import Foundation
import Vocabulary

/// Everything the headless gateway reads from its YAML configuration file.
///
/// Build one with ``load(path:)`` or ``parse(_:file:)``; both collect every
/// problem in the file (type, range, syntax, unknown or duplicate keys,
/// unreadable files) and throw them together as a ``GatewayConfigError``.
/// ``init()`` gives the configuration of an empty file.
public struct GatewayConfiguration: Sendable, Equatable {
    /// The D-Bus bus bluetoothd is reached on.
    public enum Bus: Sendable, Equatable {
        case system
        case session
        /// A D-Bus server address such as `unix:path=/run/dbus/system_bus_socket` or `tcp:host=…,port=…`.
        case address(String)
    }

    /// BlueZ scan mode: passive scanning sends no scan requests (no scan responses either).
    public enum ScanMode: String, Sendable, Equatable {
        case active, passive
    }

    /// Arguments of BlueZ's `Adapter1.SetDiscoveryFilter`; `nil` leaves a field to BlueZ.
    public struct DiscoveryFilter: Sendable, Equatable {
        /// `"le"`, `"bredr"` or `"auto"`.
        public var transport: String?
        /// Only report devices heard at least this strong, -127…20 dBm.
        public var rssi: Int16?
        /// Service UUIDs in BlueZ's form (lower-case, 128-bit), whichever spelling the file used.
        public var uuids: [String]
        /// Report every advertisement, not only changed data.
        public var duplicateData: Bool?
        /// Address or name prefix.
        public var pattern: String?

        public init(transport: String? = "le", rssi: Int16? = nil, uuids: [String] = [], duplicateData: Bool? = nil, pattern: String? = nil) {
            self.transport = transport
            self.rssi = rssi
            self.uuids = uuids
            self.duplicateData = duplicateData
            self.pattern = pattern
        }
    }

    /// Which devices the gateway publishes.
    public enum Selection: Sendable, Equatable {
        /// Every device whose advertisements decode.
        case decodable
        /// Only these devices.
        case allow([BluetoothAddress])
        /// Every decodable device except these.
        case deny([BluetoothAddress])
    }

    /// A device the gateway connects to, subscribing to GATT characteristics.
    public struct Watched: Sendable, Equatable {
        public var address: BluetoothAddress
        /// Characteristic UUIDs in BlueZ's form (lower-case, 128-bit).
        public var subscribe: [String]

        public init(address: BluetoothAddress, subscribe: [String] = []) {
            self.address = address
            self.subscribe = subscribe
        }
    }

    /// How often device state is published.
    public struct Publish: Sendable, Equatable {
        /// Seconds between two publications of one device; 0 publishes on every change.
        public var minInterval: TimeInterval
        /// Seconds after which an unchanged device is published again; `nil` means never.
        public var heartbeat: TimeInterval?
        /// Seconds over which advertisements are gathered and go through the
        /// pipeline together (one pass, one SQLite transaction); a device's
        /// latest in that time wins. 0: each at once.
        public var batch: TimeInterval

        public init(minInterval: TimeInterval = 0, heartbeat: TimeInterval? = 300, batch: TimeInterval = 0.1) {
            self.minInterval = minInterval
            self.heartbeat = heartbeat
            self.batch = batch
        }
    }

    /// The MQTT broker connection.
    public struct MQTT: Sendable, Equatable {
        public enum ProtocolVersion: String, Sendable, Equatable {
            case v311 = "3.1.1"
            case v5 = "5"
        }

        /// TLS to the broker. Paths are resolved against the configuration file's directory
        /// and were readable when the file was loaded.
        public struct TLS: Sendable, Equatable {
            public var caFile: String
            /// Client certificate; set together with ``keyFile``.
            public var certificateFile: String?
            public var keyFile: String?
            /// Do not check the broker's host name against its certificate.
            public var insecure: Bool

            public init(caFile: String, certificateFile: String? = nil, keyFile: String? = nil, insecure: Bool = false) {
                self.caFile = caFile
                self.certificateFile = certificateFile
                self.keyFile = keyFile
                self.insecure = insecure
            }
        }

        public var host: String
        /// 1…65535; 1883 by default, 8883 when ``tls`` is set.
        public var port: Int
        public var protocolVersion: ProtocolVersion
        /// `nil`: the client makes one up.
        public var clientID: String?
        public var username: String?
        /// From `password`, or the contents of `password_file` (trailing newline stripped).
        public var password: String?
        public var tls: TLS?
        /// Seconds, 5…65535.
        public var keepAlive: Int
        public var baseTopic: String
        /// Publish Home Assistant discovery configs.
        public var discovery: Bool
        public var discoveryPrefix: String
        /// Messages kept in the outbox while the broker is unreachable, ≥ 1.
        public var queueCapacity: Int

        public static let defaultPort = 1883
        public static let defaultTLSPort = 8883

        public init(
            host: String,
            port: Int? = nil,
            protocolVersion: ProtocolVersion = .v311,
            clientID: String? = nil,
            username: String? = nil,
            password: String? = nil,
            tls: TLS? = nil,
            keepAlive: Int = 60,
            baseTopic: String = "blecompanion",
            discovery: Bool = true,
            discoveryPrefix: String = "homeassistant",
            queueCapacity: Int = 100_000
        ) {
            self.host = host
            self.port = port ?? (tls == nil ? Self.defaultPort : Self.defaultTLSPort)
            self.protocolVersion = protocolVersion
            self.clientID = clientID
            self.username = username
            self.password = password
            self.tls = tls
            self.keepAlive = keepAlive
            self.baseTopic = baseTopic
            self.discovery = discovery
            self.discoveryPrefix = discoveryPrefix
            self.queueCapacity = queueCapacity
        }
    }

    /// The local HTTP API.
    public struct HTTP: Sendable, Equatable {
        /// Address to listen on, without brackets for IPv6 (`"::1"`).
        public var host: String
        public var port: Int
        /// Bearer token clients must send; required unless ``host`` is loopback.
        public var token: String?

        public init(host: String = "127.0.0.1", port: Int = 8080, token: String? = nil) {
            self.host = host
            self.port = port
            self.token = token
        }

        /// Whether ``host`` only accepts connections from this machine
        /// (127.0.0.0/8, `::1` or `localhost`).
        public var isLoopback: Bool { ListenAddress.isLoopback(host) }
    }

    /// Fleet mode (docs/GATEWAY.md, "Fleet"): several gateways, one broker,
    /// one owner per device.
    public struct Fleet: Sendable, Equatable {
        /// The fleet's name: every gateway of one fleet gives the same.
        public var name: String
        /// Where this gateway stands: the presence every device it owns gets. Default: the gateway id.
        public var room: String?
        /// dB by which another gateway must hear a device better to take it over.
        public var hysteresis: Double
        /// Seconds it must stay that much better.
        public var dwell: TimeInterval
        /// Seconds after which a gateway's silence about a device gives it up.
        public var staleAfter: TimeInterval
        /// Seconds between two sighting messages of this gateway.
        public var sightingInterval: TimeInterval

        public init(name: String, room: String? = nil, hysteresis: Double = 6, dwell: TimeInterval = 10,
                    staleAfter: TimeInterval = 30, sightingInterval: TimeInterval = 2) {
            self.name = name
            self.room = room
            self.hysteresis = hysteresis
            self.dwell = dwell
            self.staleAfter = staleAfter
            self.sightingInterval = sightingInterval
        }
    }

    public var gatewayID: String
    /// `nil`: the caller's default.
    public var stateDirectory: String?
    public var bus: Bus
    /// `"hci0"`…; `nil`: the first powered adapter.
    public var adapter: String?
    public var scanMode: ScanMode
    /// Seconds between checks that bluetoothd still answers (`bluez.ping_interval`); 0: none.
    public var pingInterval: TimeInterval
    public var filter: DiscoveryFilter
    public var selection: Selection
    /// Address → 16-byte AES key for encrypted advertisements.
    public var bindkeys: [BluetoothAddress: [UInt8]]
    /// Identity name → identity resolving key (16 bytes, most significant
    /// first): a phone or watch advertising resolvable private addresses is
    /// followed as one identity (`devices.identities`).
    public var identities: [String: [UInt8]]
    /// bluetoothd's storage directory (`/var/lib/bluetooth`) whose bonded
    /// devices' keys become identities too (`devices.bonded_identities`); nil: none.
    public var bondedIdentities: String?
    public var watched: [Watched]
    /// Devices whose clock the gateway sets (`devices.timesync`), every `timeSyncInterval` seconds.
    public var timeSync: [BluetoothAddress]
    public var timeSyncInterval: TimeInterval
    /// Device profile files and directories (`devices.profiles`, docs/PROFILES.md), resolved.
    public var profiles: [String]
    /// The directory read when `devices.profiles` is not given: `profiles/`
    /// beside the configuration file, if it exists (nil: none).
    public var defaultProfileDirectory: String?
    /// Seconds: a device not heard for this long is published offline.
    public var expireAfter: TimeInterval
    public var publish: Publish
    /// `nil` when the section is absent: the gateway runs HTTP only.
    public var mqtt: MQTT?
    /// `nil` when the section is absent or `enabled: false`.
    public var http: HTTP?
    /// `nil` when the section is absent or `enabled: false`: a gateway on its own.
    public var fleet: Fleet?

    /// The default ``gatewayID`` when the host name is not available.
    public static let fallbackGatewayID = "blecompanion"

    /// All defaults: the configuration of an empty file.
    public init() {
        gatewayID = SystemAccess.hostName() ?? Self.fallbackGatewayID
        stateDirectory = nil
        bus = .system
        adapter = nil
        scanMode = .active
        pingInterval = 15
        filter = DiscoveryFilter()
        selection = .decodable
        bindkeys = [:]
        identities = [:]
        bondedIdentities = nil
        watched = []
        profiles = []
        defaultProfileDirectory = nil
        timeSync = []
        timeSyncInterval = 86_400
        expireAfter = 300
        publish = Publish()
        mqtt = nil
        http = nil
        fleet = nil
    }

    /// Reads and validates the file at `path`. Relative paths inside the file
    /// (`state_dir`, TLS files, `password_file`, `token_file`) are resolved
    /// against the file's directory. Problems name `path` as the file.
    public static func load(path: String) throws(GatewayConfigError) -> GatewayConfiguration {
        let bytes: [UInt8]
        switch SystemAccess.readFile(path) {
        case .success(let contents): bytes = contents
        case .failure(let reason):
            throw GatewayConfigError(file: path, problems: [.init(line: nil, key: "", message: "cannot read the configuration file: \(reason.text)")])
        }
        let text: String
        switch YAMLDocument.decodeUTF8(bytes) {
        case .success(let decoded): text = decoded
        case .failure(let invalid): throw GatewayConfigError(file: path, problems: [invalid.problem])
        }
        let directory = (path as NSString).deletingLastPathComponent
        return try parse(text, file: path, baseDirectory: directory.isEmpty ? "." : directory)
    }

    /// Parses and validates YAML text. `file` only names the text in problems;
    /// relative paths inside it are resolved against the current directory.
    public static func parse(_ text: String, file: String = "<config>") throws(GatewayConfigError) -> GatewayConfiguration {
        try parse(text, file: file, baseDirectory: nil)
    }

    static func parse(_ text: String, file: String, baseDirectory: String?) throws(GatewayConfigError) -> GatewayConfiguration {
        let reader = ConfigReader()
        let root = YAMLDocument.compose(text, reader: reader)
        var configuration = GatewayConfiguration()
        if case .parsed(let node) = root {
            let loader = ConfigLoader(reader: reader, files: SystemAccess.Files(baseDirectory: baseDirectory))
            configuration = loader.configuration(from: node)
        }
        if configuration.profiles.isEmpty, let baseDirectory {
            configuration.defaultProfileDirectory = baseDirectory == "." ? "profiles" : baseDirectory + "/profiles"
        }
        let problems = reader.problemsInFileOrder
        guard problems.isEmpty else { throw GatewayConfigError(file: file, problems: problems) }
        return configuration
    }
}
