import BlueZ
import Foundation
import Vocabulary

/// One MQTT publication, independent of the MQTT module: the gateway maps it
/// to `MQTTMessage` when it wires the client in.
public struct OutgoingMessage: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var retain: Bool
    public var qos: Int

    public init(topic: String, payload: [UInt8], retain: Bool = false, qos: Int = 0) {
        self.topic = topic
        self.payload = payload
        self.retain = retain
        self.qos = qos
    }

    /// The payload as UTF-8 text (invalid sequences repaired).
    public var text: String { String(decoding: payload, as: UTF8.self) }
}

/// The topic layout of one gateway:
///
/// - `<base>/<gateway>/status` — gateway availability (`online`/`offline`, retained)
/// - `<base>/<gateway>/<addr>/state` — a device's JSON state (see ``StatePayload``)
/// - `<base>/<gateway>/<addr>/status` — a device's availability
/// - `<base>/<gateway>/<addr>/command` and `…/reply` — requests to the gateway and its answers
/// - `<discovery>/<component>/<node_id>/<object_id>/config` — Home Assistant discovery
///
/// `<addr>` is the Bluetooth address in lower case without colons. Base and
/// gateway id are reduced to topic-safe characters (`[a-zA-Z0-9_-]`, `/`
/// kept in the base) so no user string can add levels or wildcards.
///
/// In fleet mode (``fleet`` set) the device topics belong to the fleet, not
/// to one gateway, so whichever gateway owns a device publishes to the same
/// place: `<base>/fleet/<fleet>/<addr>/…`, with the fleet's own topics
/// beside them (`…/sightings/<gateway>`, `…/owner/<device>`).
public struct GatewayTopics: Sendable, Equatable {
    public let base: String
    public let gatewayID: String
    public let discoveryPrefix: String
    /// The fleet this gateway is part of (topic-safe); nil: a gateway on its own.
    public let fleet: String?

    public static let online = "online"
    public static let offline = "offline"

    /// `<base>/<gateway>`.
    public let gatewayRoot: String
    /// Where device topics live: ``gatewayRoot``, or `<base>/fleet/<fleet>` in fleet mode.
    public let deviceScope: String
    /// ``deviceScope`` and a `/`, as bytes: the start of every device topic.
    private let devicePrefix: [UInt8]

    public init(gatewayID: String, base: String = "blecompanion", discoveryPrefix: String = "homeassistant", fleet: String? = nil) {
        let safeID = TopicSafe.id(gatewayID, fallback: "gateway"), safeBase = TopicSafe.path(base, fallback: "blecompanion")
        let safeFleet = fleet.map { TopicSafe.id($0, fallback: "fleet") }
        self.gatewayID = safeID
        self.base = safeBase
        self.discoveryPrefix = TopicSafe.path(discoveryPrefix, fallback: "homeassistant")
        self.fleet = safeFleet
        let root = "\(safeBase)/\(safeID)"
        let scope = safeFleet.map { "\(safeBase)/fleet/\($0)" } ?? root
        gatewayRoot = root
        deviceScope = scope
        devicePrefix = Array(scope.utf8) + [UInt8(ascii: "/")]
    }

    /// What device ids in Home Assistant are made from: the gateway id, or `fleet_<fleet>`.
    public var scopeID: String { fleet.map { "fleet_\($0)" } ?? gatewayID }

    /// `<base>/fleet/<fleet>/sightings/<gateway>`: a gateway's sighting batches.
    public func fleetSightings(_ gateway: String) -> String { "\(deviceScope)/sightings/\(gateway)" }
    /// `<base>/fleet/<fleet>/owner/<device>`: the retained claim on a device.
    public func fleetOwner(_ device: String) -> String { "\(deviceScope)/owner/\(device)" }
    /// Every gateway's availability topic (`<base>/+/status`).
    public var gatewayAvailabilityFilter: String { "\(base)/+/status" }

    /// `<base>/<gateway>/status`: `online` while the gateway runs (the MQTT will says `offline`).
    public var gatewayAvailability: String { "\(gatewayRoot)/status" }

    /// The device's address as used in topics and ids: `aabbccddeeff`.
    public static func addressID(_ address: BluetoothAddress) -> String {
        address.compact
    }

    public func deviceRoot(_ address: BluetoothAddress) -> String { deviceTopic(address, "") }

    public func state(_ address: BluetoothAddress) -> String { deviceTopic(address, "/state") }
    public func availability(_ address: BluetoothAddress) -> String { deviceTopic(address, "/status") }
    public func command(_ address: BluetoothAddress) -> String { deviceTopic(address, "/command") }
    public func reply(_ address: BluetoothAddress) -> String { deviceTopic(address, "/reply") }
    /// Firmware and provisioning work on the device (retained JSON; docs/FIRMWARE.md).
    public func firmware(_ address: BluetoothAddress) -> String { deviceTopic(address, "/firmware") }

    /// `<deviceScope>/<addr><suffix>`, written into one allocation: the state
    /// topic is made for every state message (three interpolations and the
    /// scope made again were ~2 400 instructions a message).
    private func deviceTopic(_ address: BluetoothAddress, _ suffix: StaticString) -> String {
        let prefix = devicePrefix
        let tail = UnsafeBufferPointer(start: suffix.utf8Start, count: suffix.utf8CodeUnitCount)
        return String(unsafeUninitializedCapacity: prefix.count + 12 + tail.count) { out in
            var at = 0
            for b in prefix { out[at] = b; at += 1 }
            address.writeCompact(to: out, at: at)
            at += 12
            for b in tail { out[at] = b; at += 1 }
            return at
        }
    }

    /// `<discovery>/<component>/<node_id>/<object_id>/config`.
    public func discoveryConfig(component: String, nodeID: String, objectID: String) -> String {
        "\(discoveryPrefix)/\(component)/\(TopicSafe.id(nodeID, fallback: "node"))/\(TopicSafe.id(objectID, fallback: "entity"))/config"
    }

    /// Retained `online` on the gateway availability topic.
    public var onlineMessage: OutgoingMessage {
        OutgoingMessage(topic: gatewayAvailability, payload: Array(Self.online.utf8), retain: true, qos: 1)
    }

    /// Retained `offline` on the gateway availability topic (also the MQTT will).
    public var offlineMessage: OutgoingMessage {
        OutgoingMessage(topic: gatewayAvailability, payload: Array(Self.offline.utf8), retain: true, qos: 1)
    }

    /// Retained `online`/`offline` on a device's availability topic.
    public func deviceAvailabilityMessage(_ address: BluetoothAddress, online: Bool) -> OutgoingMessage {
        OutgoingMessage(topic: availability(address), payload: Array((online ? Self.online : Self.offline).utf8),
                        retain: true, qos: 1)
    }
}

extension GatewayTopics {
    /// The address a topic level names: 12 hex digits, any case
    /// (`e45f01aa1001`, as ``addressID(_:)`` writes it); nil for anything else.
    public static func address(fromID id: some StringProtocol) -> BluetoothAddress? {
        guard id.utf8.count == 12 else { return nil }
        return try? BluetoothAddress(String(id))
    }

    /// The device level and the leaf of `<base>/<gateway>/<addr>/<leaf>`
    /// under this gateway's root, as written (the level is not checked to be
    /// an address); nil for any other topic.
    public func deviceLevels(of topic: String) -> (id: Substring, leaf: Substring)? {
        let prefix = deviceScope + "/"
        guard topic.hasPrefix(prefix) else { return nil }
        let rest = topic.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard rest.count == 2 else { return nil }
        return (rest[0], rest[1])
    }
}

/// Reduces user-supplied strings to characters safe in MQTT topic levels and
/// Home Assistant ids.
public enum TopicSafe {
    /// Only `[a-zA-Z0-9_-]`; anything else becomes `_`, runs of `_` collapse,
    /// leading/trailing `_` go. Empty results become `fallback`.
    public static func id(_ s: String, fallback: String) -> String {
        var out = ""
        for scalar in s.unicodeScalars {
            let ok = scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar)
                                        || scalar == "_" || scalar == "-")
            if ok {
                out.unicodeScalars.append(scalar)
            } else if !out.hasSuffix("_") {
                out.append("_")
            }
        }
        while out.hasPrefix("_") { out.removeFirst() }
        while out.hasSuffix("_") { out.removeLast() }
        return out.isEmpty ? fallback : out
    }

    /// Like ``id(_:fallback:)`` for each `/`-separated level; empty levels dropped.
    public static func path(_ s: String, fallback: String) -> String {
        let levels = s.split(separator: "/").map { id(String($0), fallback: "") }.filter { !$0.isEmpty }
        return levels.isEmpty ? fallback : levels.joined(separator: "/")
    }

    /// A key usable as a JSON member and as `value_json.<key>` in a Home
    /// Assistant template: lower-case `[a-z0-9_]`, never starting with a digit.
    public static func key(_ s: String) -> String {
        // The common case (a decoder's label such as "x" or "probe_1") is
        // already a key: returned as it is, without building a new string.
        isKey(s) ? s : rewrittenKey(s)
    }

    /// Whether ``rewrittenKey(_:)`` would return `s` unchanged (a
    /// conservative check: false sends a string the long way).
    static func isKey(_ s: String) -> Bool {
        var previous: UInt8 = 0
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"): break
            case UInt8(ascii: "0")...UInt8(ascii: "9"): if previous == 0 { return false }
            case UInt8(ascii: "_"): if previous == 0 || previous == b { return false }
            default: return false
            }
            previous = b
        }
        return previous != 0 && previous != UInt8(ascii: "_")
    }

    static func rewrittenKey(_ s: String) -> String {
        let safe = id(s.lowercased().replacingOccurrences(of: "-", with: "_"), fallback: "x")
        if let first = safe.unicodeScalars.first, ("0"..."9").contains(first) { return "_" + safe }
        return safe
    }
}
