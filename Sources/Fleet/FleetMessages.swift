import Foundation
import Vocabulary

/// What one gateway tells the fleet it hears, one message per publish tick
/// (docs/GATEWAY.md, "Fleet"): for each device heard since the last one (or
/// due for a refresh), the smoothed RSSI and a hash of the state last
/// published for it, so a gateway taking a device over knows whether the
/// state Home Assistant holds is already current.
///
/// JSON: `{"gateway":"hall","room":"hall","at":1764200000.25,"devices":{"e45f01aa1001":{"rssi":-63,"state":"9f86d081"}}}`
public struct SightingBatch: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        /// Smoothed RSSI, dBm, -127…20.
        public var rssi: Int
        /// Hash of the state this gateway last published for the device (owner only).
        public var state: String?
        public init(rssi: Int, state: String? = nil) {
            self.rssi = rssi
            self.state = state
        }
    }

    public var gateway: String
    public var room: String?
    /// Seconds since the Unix epoch, the sender's clock.
    public var at: Double
    /// Device id (`e45f01aa1001`, or `id_<name>` for a resolved identity) → entry.
    public var devices: [String: Entry]

    public init(gateway: String, room: String?, at: Double, devices: [String: Entry]) {
        self.gateway = gateway
        self.room = room
        self.at = at
        self.devices = devices
    }

    /// Most devices in one message: beyond it the batch is split (a broker's
    /// default message limit is far above; a subscriber's parse stays short).
    public static let maximumDevices = 2_000

    /// One line of JSON, keys in a fixed order.
    public var json: [UInt8] {
        var out = "{\"gateway\":\(FleetJSON.quote(gateway))"
        if let room { out += ",\"room\":\(FleetJSON.quote(room))" }
        out += ",\"at\":\(FleetJSON.seconds(at)),\"devices\":{"
        var first = true
        for (id, e) in devices.sorted(by: { $0.key < $1.key }) {
            out += first ? "" : ","
            first = false
            out += "\(FleetJSON.quote(id)):{\"rssi\":\(e.rssi)"
            if let s = e.state { out += ",\"state\":\(FleetJSON.quote(s))" }
            out += "}"
        }
        out += "}}"
        return Array(out.utf8)
    }

    /// Reads a batch another gateway sent; every problem is named.
    public static func parse(_ payload: [UInt8]) throws(FleetMessageError) -> SightingBatch {
        let object = try FleetJSON.object(payload, what: "sighting batch")
        guard let gateway = object["gateway"] as? String, FleetIDs.isGatewayID(gateway) else {
            throw .invalid("sighting batch: \"gateway\" must be a gateway id ([A-Za-z0-9_-], 1-64 characters)")
        }
        let room = object["room"] as? String
        if object["room"] != nil, room == nil { throw .invalid("sighting batch from \(gateway): \"room\" must be a string") }
        guard let at = FleetJSON.double(object["at"]), at.isFinite, at >= 0, at <= 9_999_999_999 else {
            throw .invalid("sighting batch from \(gateway): \"at\" must be seconds since 1970")
        }
        guard let list = object["devices"] as? [String: Any] else {
            throw .invalid("sighting batch from \(gateway): \"devices\" must be an object")
        }
        guard list.count <= maximumDevices else {
            throw .invalid("sighting batch from \(gateway): \(list.count) devices, at most \(maximumDevices)")
        }
        var devices: [String: Entry] = [:]
        for (id, value) in list {
            guard FleetIDs.isDeviceID(id) else {
                throw .invalid("sighting batch from \(gateway): \"\(id.prefix(40))\" is not a device id (12 hex digits or id_<name>)")
            }
            guard let e = value as? [String: Any], let r = FleetJSON.double(e["rssi"]), r.isFinite, r >= -127, r <= 20 else {
                throw .invalid("sighting batch from \(gateway): device \(id) needs \"rssi\" in -127…20")
            }
            let state = e["state"] as? String
            if e["state"] != nil, state == nil { throw .invalid("sighting batch from \(gateway): device \(id): \"state\" must be a string") }
            devices[id] = Entry(rssi: Int(r.rounded()), state: state)
        }
        return SightingBatch(gateway: gateway, room: room, at: at, devices: devices)
    }
}

/// A gateway's claim on a device, retained on `<base>/fleet/<fleet>/owner/<device>`.
/// JSON: `{"gateway":"hall","at":1764200000.25}`.
public struct OwnerClaim: Sendable, Equatable {
    public var gateway: String
    public var at: Double
    public init(gateway: String, at: Double) {
        self.gateway = gateway
        self.at = at
    }

    public var json: [UInt8] { Array("{\"gateway\":\(FleetJSON.quote(gateway)),\"at\":\(FleetJSON.seconds(at))}".utf8) }

    /// An empty payload clears a retained claim: nil.
    public static func parse(_ payload: [UInt8]) throws(FleetMessageError) -> OwnerClaim? {
        if payload.isEmpty { return nil }
        let object = try FleetJSON.object(payload, what: "owner claim")
        guard let gateway = object["gateway"] as? String, FleetIDs.isGatewayID(gateway) else {
            throw .invalid("owner claim: \"gateway\" must be a gateway id")
        }
        guard let at = FleetJSON.double(object["at"]), at.isFinite, at >= 0, at <= 9_999_999_999 else {
            throw .invalid("owner claim by \(gateway): \"at\" must be seconds since 1970")
        }
        return OwnerClaim(gateway: gateway, at: at)
    }
}

/// A fleet message that could not be read: what was wrong with it.
public enum FleetMessageError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalid(String)
    public var description: String {
        switch self { case let .invalid(text): return text }
    }
}

/// The spellings of fleet ids (they become topic levels).
public enum FleetIDs {
    public static func isGatewayID(_ s: String) -> Bool {
        (1...64).contains(s.utf8.count) && s.utf8.allSatisfy(isIDByte)
    }

    /// `e45f01aa1001` (an address) or `id_<name>` (a resolved identity).
    public static func isDeviceID(_ s: String) -> Bool {
        let u = s.utf8
        if u.count == 12 { return u.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) } }
        return s.hasPrefix("id_") && (4...67).contains(u.count) && u.allSatisfy(isIDByte)
    }

    static func isIDByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F || c == 0x2D
    }
}

enum FleetJSON {
    /// The one JSON string escaper (Vocabulary's).
    static func quote(_ s: String) -> String { JSONValue.quote(s) }

    /// Seconds with millisecond precision.
    static func seconds(_ t: Double) -> String { String(format: "%.3f", t) }

    static func object(_ payload: [UInt8], what: String) throws(FleetMessageError) -> [String: Any] {
        guard payload.count <= 1 << 20 else { throw .invalid("\(what): \(payload.count) bytes, at most 1 MiB") }
        let parsed: Any
        do { parsed = try JSONSerialization.jsonObject(with: Data(payload)) } catch {
            throw .invalid("\(what): not JSON (\(String(decoding: payload.prefix(40), as: UTF8.self)))")
        }
        guard let object = parsed as? [String: Any] else { throw .invalid("\(what): not a JSON object") }
        return object
    }

    static func double(_ v: Any?) -> Double? {
        // JSONSerialization gives NSNumber for booleans too: only numbers count.
        guard let n = v as? NSNumber, String(cString: n.objCType) != "c" else { return nil }
        return n.doubleValue
    }
}
