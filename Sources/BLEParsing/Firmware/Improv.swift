import Vocabulary

/// Improv Wi-Fi over Bluetooth LE (improv-wifi.com/ble): how ESPHome, WLED
/// and other devices are given Wi-Fi credentials. Pure: the service, its
/// characteristics, the one-byte state/error/capability values, the RPC
/// frames and the advertised service data.
///
/// RPC frame (command and result characteristics):
///
/// | byte | field |
/// |---|---|
/// | 0 | command id (1 Wi-Fi settings, 2 identify, 3 device info, 4 scan, 5 hostname) |
/// | 1 | data length N |
/// | 2…N+1 | data: length-prefixed strings (Wi-Fi settings: SSID, password; a result: URLs or info) |
/// | N+2 | checksum: the low byte of the sum of every byte before it |
public enum Improv {
    public static let service = BluetoothUUID(high: 0x0046_7768_6228_2272, low: 0x4663_2774_7826_8000)
    public static let currentState = BluetoothUUID(high: 0x0046_7768_6228_2272, low: 0x4663_2774_7826_8001)
    public static let errorState = BluetoothUUID(high: 0x0046_7768_6228_2272, low: 0x4663_2774_7826_8002)
    public static let rpcCommand = BluetoothUUID(high: 0x0046_7768_6228_2272, low: 0x4663_2774_7826_8003)
    public static let rpcResult = BluetoothUUID(high: 0x0046_7768_6228_2272, low: 0x4663_2774_7826_8004)
    public static let capabilities = BluetoothUUID(high: 0x0046_7768_6228_2272, low: 0x4663_2774_7826_8005)
    /// The 16-bit UUID of the service data an Improv device advertises (state, capabilities, 4 reserved bytes).
    public static let serviceDataUUID = BluetoothUUID(uuid16: 0x4677)

    public enum State: UInt8, Sendable, CaseIterable {
        case authorizationRequired = 1, authorized = 2, provisioning = 3, provisioned = 4

        public var name: String {
            switch self {
            case .authorizationRequired: "authorization required"
            case .authorized: "authorized"
            case .provisioning: "provisioning"
            case .provisioned: "provisioned"
            }
        }
    }

    public enum ErrorCode: UInt8, Sendable, CaseIterable {
        case none = 0, invalidRPC = 1, unknownCommand = 2, unableToConnect = 3, notAuthorized = 4, badHostname = 5, unknown = 0xFF

        public var name: String {
            switch self {
            case .none: "no error"
            case .invalidRPC: "invalid RPC packet"
            case .unknownCommand: "unknown RPC command"
            case .unableToConnect: "unable to connect to the network"
            case .notAuthorized: "not authorized"
            case .badHostname: "bad hostname"
            case .unknown: "unknown error"
            }
        }
    }

    public struct Capabilities: OptionSet, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let identify = Capabilities(rawValue: 1)
        public static let deviceInfo = Capabilities(rawValue: 2)
        public static let scanWiFi = Capabilities(rawValue: 4)
        public static let hostname = Capabilities(rawValue: 8)
    }

    public enum Command: UInt8, Sendable {
        case wifiSettings = 1, identify = 2, deviceInfo = 3, scan = 4, hostname = 5
    }

    /// An RPC command or result: a command id and its strings.
    public struct RPC: Sendable, Equatable {
        public var command: UInt8
        public var strings: [[UInt8]]

        public init(command: UInt8, strings: [[UInt8]] = []) {
            self.command = command
            self.strings = strings
        }

        /// Send Wi-Fi settings. SSID and password are bytes as given (UTF-8).
        public static func wifiSettings(ssid: [UInt8], password: [UInt8]) -> RPC {
            RPC(command: Command.wifiSettings.rawValue, strings: [ssid, password])
        }

        /// The frame; nil when a string is longer than 255 bytes or the data longer than 255.
        public var bytes: [UInt8]? {
            var data: [UInt8] = []
            for s in strings {
                guard s.count <= 255 else { return nil }
                data.append(UInt8(s.count))
                data += s
            }
            guard data.count <= 255 else { return nil }
            var frame = [command, UInt8(data.count)] + data
            frame.append(Self.checksum(frame))
            return frame
        }

        public static func checksum(_ bytes: [UInt8]) -> UInt8 {
            bytes.reduce(UInt8(0)) { $0 &+ $1 }
        }

        /// A whole frame: length, checksum and strings checked.
        public static func parse(_ b: [UInt8]) throws(DecodeError) -> RPC {
            guard b.count >= 3 else {
                throw .truncated(context: "Improv RPC", offset: 0, needed: 3, available: b.count, what: "command, length and checksum")
            }
            let length = Int(b[1])
            guard b.count == length + 3 else {
                throw .invalidValue(context: "Improv RPC", offset: 1, expected: "\(length + 3) bytes (the length byte says \(length) of data)",
                                    found: "\(b.count)")
            }
            let sum = checksum(Array(b[0..<b.count - 1]))
            guard b[b.count - 1] == sum else {
                throw .invalidValue(context: "Improv RPC", offset: b.count - 1, expected: "checksum \(hexString(sum))", found: hexString(b[b.count - 1]))
            }
            var strings: [[UInt8]] = []
            var i = 2
            let end = b.count - 1
            while i < end {
                let n = Int(b[i])
                guard i + 1 + n <= end else {
                    throw .truncated(context: "Improv RPC", offset: i, needed: n, available: end - i - 1, what: "string \(strings.count + 1)")
                }
                strings.append(Array(b[i + 1..<i + 1 + n]))
                i += 1 + n
            }
            return RPC(command: b[0], strings: strings)
        }
    }

    /// The service data (UUID 0x4677) an Improv device advertises: its state and capabilities.
    public struct ServiceData: Sendable, Equatable {
        public var state: State
        public var capabilities: Capabilities

        public init(state: State, capabilities: Capabilities) {
            self.state = state
            self.capabilities = capabilities
        }

        public var bytes: [UInt8] { [state.rawValue, capabilities.rawValue, 0, 0, 0, 0] }

        public static func parse(_ b: [UInt8]) throws(DecodeError) -> ServiceData {
            guard b.count == 6 else {
                throw .invalidValue(context: "Improv service data", offset: 0, expected: "6 bytes", found: "\(b.count)")
            }
            guard let state = State(rawValue: b[0]) else {
                throw .reserved(context: "Improv service data", offset: 0, field: "state (1…4)", found: "\(b[0])")
            }
            return ServiceData(state: state, capabilities: Capabilities(rawValue: b[1]))
        }
    }
}
