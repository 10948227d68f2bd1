import Vocabulary

/// A user's description of a device the built-in decoders do not know
/// (docs/PROFILES.md): which devices it is for, where its readings lie in
/// advertisements and characteristics, the commands it takes, and how to
/// stay connected to it. The model only: the YAML reader is the
/// configuration module's, the connections the domain's. Pure.
public struct DeviceProfile: Sendable, Equatable {
    /// The profile's id: letters, digits, "_" and "-" (it names commands and entities).
    public var name: String
    /// What the dashboard, MQTT and Home Assistant call the device (the format); nil: `name`.
    public var model: String?
    public var manufacturer: String?
    public var match: Match
    public var advertisement: [AdvertisementField]
    public var gatt: [GATTField]
    public var commands: [Command]
    public var connection: ConnectionPolicy

    public init(name: String, model: String? = nil, manufacturer: String? = nil, match: Match,
                advertisement: [AdvertisementField] = [], gatt: [GATTField] = [], commands: [Command] = [],
                connection: ConnectionPolicy = .onDemand) {
        self.name = name
        self.model = model
        self.manufacturer = manufacturer
        self.match = match
        self.advertisement = advertisement
        self.gatt = gatt
        self.commands = commands
        self.connection = connection
    }

    /// The format name its readings carry.
    public var formatName: String { model ?? name }

    /// Which devices a profile is for: every condition given must hold (at least one is).
    public struct Match: Sendable, Equatable {
        /// A glob over the advertised local name: `*` any run of characters, `?` one.
        public var name: String?
        /// An advertised service UUID (in the UUID list or as service data).
        public var service: BluetoothUUID?
        /// A manufacturer data company id.
        public var manufacturer: UInt16?
        public var address: BluetoothAddress?

        public init(name: String? = nil, service: BluetoothUUID? = nil, manufacturer: UInt16? = nil, address: BluetoothAddress? = nil) {
            self.name = name
            self.service = service
            self.manufacturer = manufacturer
            self.address = address
        }

        public var isEmpty: Bool { name == nil && service == nil && manufacturer == nil && address == nil }

        public func matches(_ adv: Advertisement) -> Bool {
            if let address, adv.address != address { return false }
            if let manufacturer, !adv.manufacturerData.contains(where: { $0.companyID == manufacturer }) { return false }
            if let service, !adv.serviceUUIDs.contains(service), !adv.serviceData.contains(where: { $0.uuid == service }) { return false }
            if let name {
                guard let local = adv.localName, Glob.matches(name, local) else { return false }
            }
            return true
        }
    }

    /// Where an advertisement field's bytes come from.
    public enum Source: Sendable, Equatable, CustomStringConvertible {
        /// Manufacturer data of this company (the bytes after the company id).
        case manufacturer(UInt16)
        /// Service data of this UUID (the bytes after the UUID).
        case service(BluetoothUUID)

        public var description: String {
            switch self {
            case let .manufacturer(id): return "manufacturer data \(hexString(id))"
            case let .service(uuid): return "service data \(uuid.string)"
            }
        }
    }

    /// Readings from one payload of the device's advertisements.
    public struct AdvertisementField: Sendable, Equatable {
        public var source: Source
        /// The payload must begin with these bytes (a format or frame type); they are
        /// still part of the payload the layout's offsets count in.
        public var prefix: [UInt8]
        public var layout: FieldLayout

        public init(source: Source, prefix: [UInt8] = [], layout: FieldLayout) {
            self.source = source
            self.prefix = prefix
            self.layout = layout
        }
    }

    /// How a characteristic's value reaches the host.
    public enum Access: Sendable, Equatable {
        /// Notifications or indications while connected.
        case notify
        /// Read every so many seconds (1…86 400).
        case poll(seconds: Int)
        /// Read once each time the device connects.
        case onConnect
    }

    /// Readings from one characteristic.
    public struct GATTField: Sendable, Equatable {
        public var service: BluetoothUUID
        public var characteristic: BluetoothUUID
        public var access: Access
        public var layout: FieldLayout

        public init(service: BluetoothUUID, characteristic: BluetoothUUID, access: Access, layout: FieldLayout) {
            self.service = service
            self.characteristic = characteristic
            self.access = access
            self.layout = layout
        }
    }

    /// A named write: its arguments are the layout's fields.
    public struct Command: Sendable, Equatable {
        public var name: String
        public var service: BluetoothUUID
        public var characteristic: BluetoothUUID
        /// Write with response (a Write Request) or without (a Write Command).
        public var withResponse: Bool
        public var layout: FieldLayout
        /// Values of fields the user does not give (fixed opcodes and the like).
        public var constants: [String: FieldLayout.Value]

        public init(name: String, service: BluetoothUUID, characteristic: BluetoothUUID, withResponse: Bool = true,
                    layout: FieldLayout, constants: [String: FieldLayout.Value] = [:]) {
            self.name = name
            self.service = service
            self.characteristic = characteristic
            self.withResponse = withResponse
            self.layout = layout
            self.constants = constants
        }

        /// The arguments a caller gives, in layout order.
        public var arguments: [FieldLayout.Field] { layout.fields.filter { constants[$0.name] == nil } }
    }

    /// How the host connects for GATT fields.
    public enum ConnectionPolicy: Sendable, Equatable {
        /// Stay connected, subscribed to every notify field.
        case keep
        /// Connect for each scheduled read, then disconnect.
        case onDemand
    }
}

/// The profiles a front end applies to advertisements: the first whose
/// match holds decodes the device, instead of the built-in decoders (the
/// user's description of their device wins).
public struct ProfileSet: Sendable, Equatable {
    public let profiles: [DeviceProfile]
    /// More would be a mistake (a directory of generated files), and every
    /// advertisement tries each profile's match.
    public static let maximumProfiles = 256

    /// Some profile matches on a service UUID (so an advertisement's UUID
    /// list, which costs parsing, is needed to match).
    public let matchesServices: Bool

    public init(_ profiles: [DeviceProfile] = []) {
        self.profiles = Array(profiles.prefix(Self.maximumProfiles))
        self.matchesServices = self.profiles.contains { $0.match.service != nil }
    }

    public var isEmpty: Bool { profiles.isEmpty }

    /// The profile for this advertisement: the first whose match holds.
    public func profile(for adv: Advertisement) -> DeviceProfile? {
        profiles.first { $0.match.matches(adv) }
    }

    public func profile(named name: String) -> DeviceProfile? { profiles.first { $0.name == name } }

    /// The matching profile's models, one per advertisement field whose payload is
    /// present (and begins with its prefix); a payload that does not decode is a
    /// failure whose context names the profile.
    public func decode(_ adv: Advertisement, into results: inout [Result<AdvertisementModel, DecodeError>]) {
        guard !profiles.isEmpty, let profile = profile(for: adv) else { return }
        for field in profile.advertisement {
            let payload: [UInt8]?
            switch field.source {
            case let .manufacturer(id): payload = adv.manufacturerData.first { $0.companyID == id }?.data
            case let .service(uuid): payload = adv.serviceData.first { $0.uuid == uuid }?.data
            }
            guard let data = payload, data.starts(with: field.prefix) else { continue }
            results.append(AdvertisementDecoder.capture { () throws(DecodeError) in
                try profile.decodeAdvertisement(field, data)
            })
        }
    }

    public func decode(_ adv: Advertisement) -> [Result<AdvertisementModel, DecodeError>] {
        var results: [Result<AdvertisementModel, DecodeError>] = []
        decode(adv, into: &results)
        return results
    }
}

extension DeviceProfile {
    /// The GATT field for a characteristic (UUIDs as bluetoothd writes them).
    public func gattField(service: String, characteristic: String) -> GATTField? {
        guard let c = try? BluetoothUUID(parsing: characteristic) else { return nil }
        let s = try? BluetoothUUID(parsing: service)
        return gatt.first { $0.characteristic == c && (s == nil || $0.service == s) }
    }

    /// The decode-error context of this profile's fields: `profile <name>`.
    public var context: String { "profile \(name)" }

    /// One advertisement payload as a model (readings; fields on demand).
    public func decodeAdvertisement(_ field: AdvertisementField, _ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        let readings = try field.layout.readings(of: data, context: context)
        let layout = field.layout
        return AdvertisementModel(formatName: formatName, modelName: formatName, readings: readings, deferredFields: {
            ((try? layout.decode(data)) ?? []).map { ($0.name, $0.value.fieldValue) }
        })
    }

    /// A characteristic's value as a model.
    public func decodeCharacteristic(_ field: GATTField, _ data: [UInt8]) throws(DecodeError) -> AdvertisementModel {
        let decoded = try field.layout.decode(data, context: context)
        return AdvertisementModel(formatName: formatName, modelName: formatName, readings: field.layout.readings(decoded),
                                  fields: decoded.map { ($0.name, $0.value.fieldValue) })
    }
}

/// Shell-style globs over names: `*` any run, `?` one character; the rest literal.
public enum Glob {
    /// Linear in the name for each star (greedy with one backtrack point).
    public static func matches(_ pattern: String, _ text: String) -> Bool {
        let p = Array(pattern), t = Array(text)
        var i = 0, j = 0
        var star: Int? = nil, mark = 0
        while j < t.count {
            if i < p.count, p[i] == "?" || p[i] == t[j] {
                i += 1
                j += 1
            } else if i < p.count, p[i] == "*" {
                star = i
                i += 1
                mark = j
            } else if let s = star {
                i = s + 1
                mark += 1
                j = mark
            } else {
                return false
            }
        }
        while i < p.count, p[i] == "*" { i += 1 }
        return i == p.count
    }
}

extension DeviceProfile.Command {
    /// The bytes this command writes for `arguments` written as `NAME=VALUE`
    /// (the CLI's and MQTT's form): every argument field needs one; values are
    /// read as the field's type reads them (``FieldLayout/Field/parse(_:)``).
    public func encode(arguments list: [String]) throws(FieldLayout.Problem) -> [UInt8] {
        var given: [String: String] = [:]
        for argument in list {
            guard let eq = argument.firstIndex(of: "=") else {
                throw FieldLayout.Problem(field: "", "expected NAME=VALUE, got \"\(argument)\" (arguments: \(arguments(described: true)))")
            }
            let name = String(argument[..<eq])
            guard self.arguments.contains(where: { $0.name == name }) else {
                throw FieldLayout.Problem(field: name, "not an argument of \(self.name) (arguments: \(arguments(described: true)))")
            }
            guard given.updateValue(String(argument[argument.index(after: eq)...]), forKey: name) == nil else {
                throw FieldLayout.Problem(field: name, "given twice")
            }
        }
        return try encode(text: given)
    }

    /// As ``encode(arguments:)``, from a name → text table (HTTP and MQTT JSON give numbers as text too).
    public func encode(text given: [String: String]) throws(FieldLayout.Problem) -> [UInt8] {
        var values = constants
        for field in arguments {
            guard let text = given[field.name] else {
                throw FieldLayout.Problem(field: field.name, "missing (arguments: \(arguments(described: true)))")
            }
            values[field.name] = try field.parse(text)
        }
        return try layout.encode(values)
    }

    /// `name:type` of each argument, for messages and menus.
    public func arguments(described: Bool) -> String {
        let list = arguments.map { f in described ? "\(f.name)=\(f.argumentKind)" : f.name }
        return list.isEmpty ? "none" : list.joined(separator: " ")
    }
}

extension FieldLayout.Field {
    /// What a value of this field is written as: `integer`, `number`,
    /// `on|off…` (an enumeration's names), `text`, `hex`, a list of them.
    public var argumentKind: String {
        let one: String
        if !values.isEmpty {
            one = values.sorted { $0.key < $1.key }.map(\.value).joined(separator: "|")
        } else {
            switch encoding {
            case .unsigned, .signed: one = isScaled ? "number" : "integer"
            case .float: one = "number"
            case .string: one = "text"
            case .raw: one = "hex"
            }
        }
        return count == .fixed(1) ? one : "\(one),…"
    }

    /// A value of this field from text: an enumeration's name, a number
    /// (decimal, or `0x` hex for integers), text as it is, bytes as hex; a
    /// repeated field takes comma-separated values. Range checks are the
    /// layout's (``FieldLayout/encode(_:)``).
    public func parse(_ text: String) throws(FieldLayout.Problem) -> FieldLayout.Value {
        if count != .fixed(1) {
            var one = self
            one.count = .fixed(1)
            var items: [FieldLayout.Value] = []
            for part in text.split(separator: ",", omittingEmptySubsequences: false) {
                items.append(try one.parse(String(part)))
            }
            return .list(items)
        }
        let t = String(text.trimmingCharacters(in: " "))
        switch encoding {
        case .string: return .text(text)
        case .raw:
            do { return .bytes(try Hex.bytes(t)) } catch { throw FieldLayout.Problem(field: name, "expected hex bytes: \(error)") }
        case .unsigned, .signed, .float:
            if values.values.contains(t) { return .text(t) }
            if !isScaled, encoding.isInteger {
                if t.hasPrefix("0x") || t.hasPrefix("0X"), let u = UInt64(t.dropFirst(2), radix: 16) { return .unsigned(u) }
                if let i = Int64(t) { return .integer(i) }
                if let u = UInt64(t) { return .unsigned(u) }
            } else if let x = Double(t), x.isFinite {
                return .number(x)
            }
            throw FieldLayout.Problem(field: name, "expected \(argumentKind), got \"\(text)\"")
        }
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: Character) -> Substring.SubSequence {
        var s = Substring(self)
        while s.first == set { s.removeFirst() }
        while s.last == set { s.removeLast() }
        return s
    }
}
