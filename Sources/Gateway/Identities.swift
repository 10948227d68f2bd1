import BLEParsing
import Foundation
import Vocabulary

/// Phones, watches and tags that advertise resolvable private addresses,
/// followed as the identities their keys name (docs/GATEWAY.md,
/// "Identities"): whatever address one uses this quarter of an hour, it is
/// the same Home Assistant device, present while heard.
///
/// Topics, under the device scope (`<base>/<gateway>` or the fleet's):
/// `id_<name>/status` (retained `online` while heard within the expiry,
/// `offline` after: the device tracker's home / not_home) and `id_<name>/state`
/// (JSON: identity, the address it uses now, RSSI, last seen; in a fleet the
/// gateway and its room). Pure: rows and times in, messages out.
struct IdentityTracker: Sendable {
    struct Seen: Sendable, Equatable {
        var address: BluetoothAddress
        var rssi: Int16
        var at: Double
    }

    /// What was last published for an identity.
    struct Published: Sendable, Equatable {
        var address: BluetoothAddress
        var rssi: Int16
        var online: Bool
    }

    let topics: GatewayTopics
    let discovery: Bool
    /// Fleet mode: the gateway and room states say; only ``owned`` identities are published.
    let fleet: PublishPlanner.Fleet?
    let expireAfter: Double
    private var resolver: IdentityResolver
    private(set) var seen: [String: Seen] = [:]
    private var published: [String: Published] = [:]
    private(set) var owned: Set<String> = []

    /// RSSI moves smaller than this are not published (a phone advertises ten times a second).
    static let rssiStep: Int16 = 6

    init(identities: [IdentityResolver.Identity], topics: GatewayTopics, discovery: Bool, fleet: PublishPlanner.Fleet?, expireAfter: Double) {
        resolver = IdentityResolver(identities: identities)
        self.topics = topics
        self.discovery = discovery
        self.fleet = fleet
        self.expireAfter = max(1, expireAfter)
    }

    var isEmpty: Bool { resolver.identities.isEmpty }

    /// The identity `address` resolves to, if any.
    mutating func resolve(_ address: BluetoothAddress) -> String? { resolver.identity(for: address)?.name }

    /// An advertisement from `address` at `rssi`: the identity it belongs to
    /// (nil: none), and what to publish now.
    mutating func heard(_ address: BluetoothAddress, rssi: Int16, at: Double) -> (name: String?, messages: [OutgoingMessage]) {
        guard let name = resolve(address) else { return (nil, []) }
        if let s = seen[name], s.at > at { return (name, []) }
        seen[name] = Seen(address: address, rssi: rssi, at: at)
        return (name, publishable(name) ? due(name, at: at) : [])
    }

    /// Fleet mode: the fleet gave this gateway `name`.
    mutating func adopt(_ name: String, now: Double) -> [OutgoingMessage] {
        guard owned.insert(name).inserted else { return [] }
        published[name] = nil
        return due(name, at: now)
    }

    /// Fleet mode: another gateway speaks for `name` now.
    mutating func release(_ name: String) {
        owned.remove(name)
        published[name] = nil
    }

    /// Identities not heard for the expiry go offline (not_home).
    mutating func expire(now: Double) -> [OutgoingMessage] {
        var out: [OutgoingMessage] = []
        for (name, p) in published.sorted(by: { $0.key < $1.key }) where p.online {
            guard let s = seen[name], now - s.at >= expireAfter else { continue }
            published[name]?.online = false
            out.append(status(name, online: false))
        }
        return out
    }

    /// When ``expire(now:)`` next has something to do.
    var nextExpiry: Date? {
        published.compactMap { name, p in p.online ? seen[name].map { Date(timeIntervalSince1970: $0.at + expireAfter) } : nil }.min()
    }

    private func publishable(_ name: String) -> Bool { fleet == nil || owned.contains(name) }

    /// What is due for `name` after it was heard: the first time (or after
    /// an adoption) discovery, online and the state; then the state when
    /// the address rotated or the RSSI moved by ``rssiStep``.
    private mutating func due(_ name: String, at: Double) -> [OutgoingMessage] {
        guard let s = seen[name], at - s.at < expireAfter else { return [] }
        var out: [OutgoingMessage] = []
        let last = published[name]
        if last == nil, discovery { out.append(contentsOf: discoveryMessages(name)) }
        if last?.online != true { out.append(status(name, online: true)) }
        if last == nil || last?.online != true || last?.address != s.address || abs(Int(s.rssi) - Int(last?.rssi ?? 0)) >= Int(Self.rssiStep) {
            out.append(state(name, s))
            published[name] = Published(address: s.address, rssi: s.rssi, online: true)
        }
        return out
    }

    // MARK: - Messages

    static func deviceID(_ name: String) -> String { "id_\(name)" }

    func root(_ name: String) -> String { "\(topics.deviceScope)/\(Self.deviceID(name))" }

    private func status(_ name: String, online: Bool) -> OutgoingMessage {
        OutgoingMessage(topic: "\(root(name))/status", payload: Array((online ? GatewayTopics.online : GatewayTopics.offline).utf8), retain: true, qos: 1)
    }

    private func state(_ name: String, _ s: Seen) -> OutgoingMessage {
        var members: [(String, FieldValue)] = [
            ("identity", .string(name)),
            ("address", .string(s.address.description)),
            ("rssi", .int(Int(s.rssi))),
            ("last_seen", .string(ISO8601UTC.string(Date(timeIntervalSince1970: s.at)))),
        ]
        if let fleet { members += [("gateway", .string(fleet.gateway)), ("room", .string(fleet.room))] }
        return OutgoingMessage(topic: "\(root(name))/state", payload: SortedJSON.bytes(members), retain: false, qos: 1)
    }

    /// A device tracker (home while heard), an RSSI sensor and, in a fleet, the room.
    private func discoveryMessages(_ name: String) -> [OutgoingMessage] {
        let node = "\(topics.scopeID)_\(Self.deviceID(name))"
        let device: FieldValue = .nested([
            ("identifiers", .list([.string("blecompanion_\(node)")])),
            ("name", .string(name)),
            ("model", .string("Resolvable private address identity")),
        ])
        func config(_ component: String, _ key: String, _ members: [(String, FieldValue)]) -> OutgoingMessage {
            let all: [(String, FieldValue)] = [
                ("unique_id", .string("blecompanion_\(node)_\(key)")),
                ("object_id", .string("\(Self.deviceID(name))_\(key)")),
                ("device", device),
            ] + members
            return OutgoingMessage(topic: topics.discoveryConfig(component: component, nodeID: node, objectID: "\(Self.deviceID(name))_\(key)"),
                                   payload: SortedJSON.bytes(all), retain: true, qos: 1)
        }
        var out = [
            config("device_tracker", "presence", [
                ("name", .null),
                ("state_topic", .string("\(root(name))/status")),
                ("payload_home", .string(GatewayTopics.online)),
                ("payload_not_home", .string(GatewayTopics.offline)),
                ("source_type", .string("bluetooth_le")),
            ]),
            config("sensor", "rssi", [
                ("name", .string("RSSI")),
                ("state_topic", .string("\(root(name))/state")),
                ("value_template", .string("{{ value_json.rssi }}")),
                ("unit_of_measurement", .string(Unit.dBm)),
                ("device_class", .string("signal_strength")),
                ("entity_category", .string("diagnostic")),
                ("availability_topic", .string("\(root(name))/status")),
            ]),
        ]
        if fleet != nil {
            out.append(config("sensor", "room", [
                ("name", .string("Room")),
                ("state_topic", .string("\(root(name))/state")),
                ("value_template", .string("{{ value_json.room }}")),
                ("icon", .string("mdi:map-marker")),
                ("availability_topic", .string("\(root(name))/status")),
            ]))
        }
        return out
    }
}

/// Identities from bluetoothd's bonding store: the IRK of every bonded
/// device that shared one (`<dir>/<adapter>/<device>/info`), named after
/// the device's name there (or its address). Reading problems are returned,
/// not thrown: a gateway runs with the keys it could read.
public enum BondedIdentities {
    public static func read(directory: String) -> (identities: [IdentityResolver.Identity], problems: [String]) {
        let fm = FileManager.default
        var out: [IdentityResolver.Identity] = []
        var problems: [String] = []
        guard let adapters = try? fm.contentsOfDirectory(atPath: directory) else {
            return ([], ["cannot read \(directory) (bluetoothd's storage; reading it needs root)"])
        }
        for adapter in adapters.sorted() where (try? BluetoothAddress(adapter)) != nil {
            guard let devices = try? fm.contentsOfDirectory(atPath: "\(directory)/\(adapter)") else { continue }
            for device in devices.sorted() {
                guard let address = try? BluetoothAddress(device) else { continue }
                let path = "\(directory)/\(adapter)/\(device)/info"
                guard let data = fm.contents(atPath: path), data.count <= 1 << 20 else { continue }
                let text = String(decoding: data, as: UTF8.self)
                do {
                    guard let key = try IdentityResolvingKey(bluetoothdInfo: text) else { continue }
                    let name = storedName(text).map { TopicSafe.id($0, fallback: "") }.flatMap { $0.isEmpty ? nil : String($0.prefix(40)) }
                    out.append(.init(name: "\(name ?? "device")_\(address.compact.suffix(4))", key: key))
                } catch {
                    problems.append("\(path): \(error.description)")
                }
            }
        }
        return (out, problems)
    }

    /// `Name=` in the `[General]` group.
    static func storedName(_ text: String) -> String? {
        var general = false
        for line in text.split(separator: "\n") {
            if line.hasPrefix("[") { general = line.hasPrefix("[General]") } else if general, line.hasPrefix("Name=") {
                return String(line.dropFirst(5))
            }
        }
        return nil
    }
}
