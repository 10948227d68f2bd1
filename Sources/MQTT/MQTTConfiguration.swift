/// How to reach and talk to one MQTT broker.
///
/// Everything libmosquitto is told before connecting lives here, so a gateway
/// can build it from its configuration file and hand it to
/// ``MQTTClient/connect(_:)`` unchanged.
public struct MQTTConfiguration: Sendable {
    /// The MQTT protocol revision spoken on the connection.
    public enum ProtocolVersion: Sendable, Hashable {
        case v311
        case v5
    }

    /// TLS settings. Without them the connection is plain TCP.
    public struct TLS: Sendable, Hashable {
        /// PEM file with the certificate authorities the broker's certificate must chain to.
        public var caFile: String
        /// PEM client certificate, for brokers that require one (needs ``keyFile``).
        public var certificateFile: String?
        /// PEM private key of ``certificateFile``.
        public var keyFile: String?
        /// Skips the check that the certificate names ``MQTTConfiguration/host``.
        /// Off by default: only for testing against a broker with a throw-away certificate.
        public var insecure: Bool

        public init(caFile: String, certificateFile: String? = nil, keyFile: String? = nil, insecure: Bool = false) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
            self.insecure = insecure
        }
    }

    public var host: String
    public var port: Int
    /// nil lets libmosquitto generate one (only allowed with ``cleanSession``).
    public var clientID: String?
    public var username: String?
    public var password: String?
    public var protocolVersion: ProtocolVersion
    /// Seconds between keep-alive PINGREQs on an idle connection (0 disables, else at least 5).
    public var keepAlive: Int
    public var tls: TLS?
    /// Published by the broker when this client vanishes without a DISCONNECT.
    public var will: MQTTMessage?
    /// MQTT v3.1.1 clean session / v5 clean start.
    public var cleanSession: Bool
    /// Seconds before the first reconnect attempt; doubled after each failure…
    public var reconnectDelayMin: Int
    /// …up to this many seconds.
    public var reconnectDelayMax: Int
    /// How long ``MQTTClient/connect(_:)`` waits for the TCP/TLS connection,
    /// and then as long again for the broker's CONNACK.
    public var connectTimeout: Duration

    public init(
        host: String,
        port: Int = 1883,
        clientID: String? = nil,
        username: String? = nil,
        password: String? = nil,
        protocolVersion: ProtocolVersion = .v311,
        keepAlive: Int = 60,
        tls: TLS? = nil,
        will: MQTTMessage? = nil,
        cleanSession: Bool = true,
        reconnectDelayMin: Int = 1,
        reconnectDelayMax: Int = 60,
        connectTimeout: Duration = .seconds(10)
    ) {
        self.host = host
        self.port = port
        self.clientID = clientID
        self.username = username
        self.password = password
        self.protocolVersion = protocolVersion
        self.keepAlive = keepAlive
        self.tls = tls
        self.will = will
        self.cleanSession = cleanSession
        self.reconnectDelayMin = reconnectDelayMin
        self.reconnectDelayMax = reconnectDelayMax
        self.connectTimeout = connectTimeout
    }

    /// `host:port`, as every error names it.
    public var endpoint: String { "\(host):\(port)" }

    func validate() throws(MQTTError) {
        func invalid(_ reason: String) -> MQTTError { .invalidConfiguration(endpoint: endpoint, reason: reason) }
        if host.isEmpty { throw invalid("empty host name") }
        if !(1...65535).contains(port) { throw invalid("port \(port) is not in 1…65535") }
        if keepAlive != 0 && !(5...65535).contains(keepAlive) { throw invalid("keep-alive \(keepAlive) s: must be 0 or 5…65535") }
        if reconnectDelayMin < 1 || reconnectDelayMax < reconnectDelayMin {
            throw invalid("reconnect delay \(reconnectDelayMin)…\(reconnectDelayMax) s: need 1 ≤ min ≤ max")
        }
        if clientID == nil && !cleanSession { throw invalid("a persistent session (cleanSession false) needs a client ID") }
        if password != nil && username == nil { throw invalid("a password needs a username") }
        if let tls, (tls.certificateFile == nil) != (tls.keyFile == nil) {
            throw invalid("a TLS client certificate and its key go together")
        }
        if connectTimeout <= .zero { throw invalid("connect timeout must be positive") }
    }
}

/// Delivery guarantee of a publish or subscription.
public enum MQTTQoS: Int, Sendable, Hashable, Comparable {
    case atMostOnce = 0
    case atLeastOnce = 1
    case exactlyOnce = 2

    public static func < (a: MQTTQoS, b: MQTTQoS) -> Bool { a.rawValue < b.rawValue }
}

/// One application message, sent or received.
public struct MQTTMessage: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: MQTTQoS
    public var retain: Bool

    public init(topic: String, payload: [UInt8], qos: MQTTQoS = .atMostOnce, retain: Bool = false) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
    }

    /// A message whose payload is the UTF-8 of `text`.
    public init(topic: String, text: String, qos: MQTTQoS = .atMostOnce, retain: Bool = false) {
        self.init(topic: topic, payload: Array(text.utf8), qos: qos, retain: retain)
    }

    /// The payload as UTF-8 text, nil when it is not valid UTF-8.
    public var text: String? { String(validating: payload, as: UTF8.self) }
}

/// Whether the client currently has a session with the broker.
public enum MQTTConnectionState: Sendable, Equatable {
    case connected
    /// Not connected; libmosquitto keeps retrying (with backoff) unless the
    /// client was disconnected on purpose.
    case disconnected(reason: String)
}
