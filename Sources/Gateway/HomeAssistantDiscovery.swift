import BLEParsing
import BlueZ
import Domain
import Vocabulary

/// Home Assistant MQTT discovery for the devices a gateway publishes: one
/// retained config per published reading (see ``ReadingKey/published(_:)``)
/// plus a disabled-by-default RSSI sensor, all reading the device's
/// ``StatePayload`` through `value_template`.
///
/// Ids: `node_id` is `<gateway>_<addr>`, `object_id` `<addr>_<key>`,
/// `unique_id` `blecompanion_<gateway>_<addr>_<key>` — derived only from the
/// gateway id, the address and the key, so they are the same on every call
/// and every restart.
public enum HomeAssistantDiscovery {
    /// The Home Assistant component a reading becomes.
    public enum Component: String, Sendable {
        case sensor
        case binarySensor = "binary_sensor"
        case button, number, select
    }

    /// What ``binaryPayloadOn``/``binaryPayloadOff`` the binary-sensor template renders.
    public static let binaryPayloadOn = "ON"
    public static let binaryPayloadOff = "OFF"

    /// One retained config message per published reading, and the RSSI sensor.
    /// `profile`: the device's profile, whose commands become entities (``commandConfigs(_:record:topics:)``).
    public static func messages(for record: DeviceRecord, topics: GatewayTopics, profile: DeviceProfile? = nil) -> [OutgoingMessage] {
        let address = record.id.address
        let maker = profile?.manufacturer
        var out: [OutgoingMessage] = []
        for (key, reading) in ReadingKey.published(record.readings) where !StatePayload.fixedKeys.contains(key) {
            let component: Component = if case .bool = reading.value { .binarySensor } else { .sensor }
            var members = common(record: record, maker: maker, key: key, name: entityName(reading), topics: topics)
            switch reading.value {
            case .bool:
                members.append(("value_template", .string("{{ '\(binaryPayloadOn)' if value_json.\(key) else '\(binaryPayloadOff)' }}")))
                members.append(("payload_on", .string(binaryPayloadOn)))
                members.append(("payload_off", .string(binaryPayloadOff)))
                if let dc = DeviceClasses.binarySensor(reading.kind) { members.append(("device_class", .string(dc))) }
            case .number:
                members.append(("value_template", .string("{{ value_json.\(key) }}")))
                if let unit = reading.unit { members.append(("unit_of_measurement", .string(unit))) }
                if let dc = DeviceClasses.sensor(reading.kind, unit: reading.unit) { members.append(("device_class", .string(dc))) }
                if let sc = DeviceClasses.stateClass(reading.kind) { members.append(("state_class", .string(sc))) }
            case .text:
                members.append(("value_template", .string("{{ value_json.\(key) }}")))
            }
            out.append(config(component: component, address: address, key: key, members: members, topics: topics))
        }
        var rssi = common(record: record, maker: maker, key: "rssi", name: "RSSI", topics: topics)
        rssi.append(contentsOf: [
            ("value_template", .string("{{ value_json.rssi }}")),
            ("unit_of_measurement", .string(Unit.dBm)),
            ("device_class", .string("signal_strength")),
            ("state_class", .string("measurement")),
            ("entity_category", .string("diagnostic")),
            ("enabled_by_default", .bool(false)),
        ])
        out.append(config(component: .sensor, address: address, key: "rssi", members: rssi, topics: topics))
        if topics.fleet != nil {
            // Presence: the room of the gateway that owns the device (the nearest, by the fleet's rule).
            var room = common(record: record, maker: maker, key: "room", name: "Room", topics: topics)
            room.append(contentsOf: [
                ("value_template", .string("{{ value_json.room }}")),
                ("icon", .string("mdi:map-marker")),
            ])
            out.append(config(component: .sensor, address: address, key: "room", members: room, topics: topics))
        }
        if let profile { out.append(contentsOf: commandConfigs(profile, record: record, topics: topics)) }
        return out
    }

    /// A profile's commands as entities that send `{"action":"command",…}`
    /// to the device's command topic: a command without arguments is a
    /// `button`; one whose single argument is an enumeration a `select` of
    /// its names; one whose single argument is a number a `number` over the
    /// field's range. Other commands (several arguments, text, bytes) are
    /// for MQTT, HTTP and the CLI only.
    static func commandConfigs(_ profile: DeviceProfile, record: DeviceRecord, topics: GatewayTopics) -> [OutgoingMessage] {
        var out: [OutgoingMessage] = []
        let address = record.id.address
        let maker = profile.manufacturer
        for command in profile.commands {
            let key = "command_\(command.name)"
            let title = command.name.replacingOccurrences(of: "_", with: " ")
            var members = common(record: record, maker: maker, key: key, name: title.prefix(1).uppercased() + title.dropFirst(), topics: topics)
            members.removeAll { $0.0 == "state_topic" }
            members.append(("command_topic", .string(topics.command(address))))
            let head = "{\"action\":\"command\",\"name\":\(JSONValue.quote(command.name))"
            let arguments = command.arguments
            if arguments.isEmpty {
                members.append(("payload_press", .string(head + "}")))
                out.append(config(component: .button, address: address, key: key, members: members, topics: topics))
                continue
            }
            guard arguments.count == 1, let field = arguments.first, field.count == .fixed(1) else { continue }
            let argument = JSONValue.quote(field.name)
            if !field.values.isEmpty {
                members.append(("options", .list(field.values.sorted { $0.key < $1.key }.map { .string($0.value) })))
                members.append(("command_template", .string(head + ",\"arguments\":{\(argument):\"{{ value }}\"}}")))
                members.append(("optimistic", .bool(true)))
                out.append(config(component: .select, address: address, key: key, members: members, topics: topics))
                continue
            }
            guard let range = field.numberRange else { continue }
            members.append(("min", .number(range.lowerBound)))
            members.append(("max", .number(range.upperBound)))
            members.append(("step", .number(field.isScaled ? abs(field.scale) : 1)))
            members.append(("mode", .string("box")))
            if let unit = field.unit ?? field.reading?.canonicalUnit { members.append(("unit_of_measurement", .string(unit))) }
            members.append(("command_template", .string(head + ",\"arguments\":{\(argument):{{ value }}}}")))
            members.append(("optimistic", .bool(true)))
            out.append(config(component: .number, address: address, key: key, members: members, topics: topics))
        }
        return out
    }

    /// Empty retained payloads on every topic ``messages(for:topics:)``
    /// publishes for this record: Home Assistant removes an entity whose
    /// config topic receives an empty message, and the broker drops the
    /// retained config.
    public static func removal(for record: DeviceRecord, topics: GatewayTopics) -> [OutgoingMessage] {
        messages(for: record, topics: topics).map { OutgoingMessage(topic: $0.topic, payload: [], retain: true, qos: $0.qos) }
    }

    /// `<gateway>_<addr>`, or `fleet_<fleet>_<addr>` in fleet mode (one
    /// device whichever gateway publishes it).
    public static func nodeID(_ address: BluetoothAddress, topics: GatewayTopics) -> String {
        "\(topics.scopeID)_\(GatewayTopics.addressID(address))"
    }

    /// `<addr>_<key>`.
    public static func objectID(_ address: BluetoothAddress, key: String) -> String {
        TopicSafe.id("\(GatewayTopics.addressID(address))_\(key)", fallback: "entity")
    }

    /// `blecompanion_<gateway>_<addr>_<key>`.
    public static func uniqueID(_ address: BluetoothAddress, key: String, topics: GatewayTopics) -> String {
        "blecompanion_\(nodeID(address, topics: topics))_\(TopicSafe.id(key, fallback: "entity"))"
    }

    /// The gateway's own device identifier (the `via_device` of every device).
    public static func gatewayIdentifier(_ topics: GatewayTopics) -> String { "blecompanion_\(topics.gatewayID)" }

    /// Who makes devices speaking that advertisement format, when it says so.
    public static func manufacturer(forFormat format: String?) -> String? {
        guard let f = format?.lowercased() else { return nil }
        let table: [(String, String)] = [
            ("ruuvi", "Ruuvi Innovations"), ("bthome", "BTHome"), ("mibeacon", "Xiaomi"), ("xiaomi", "Xiaomi"),
            ("govee", "Govee"), ("inkbird", "Inkbird"), ("switchbot", "SwitchBot"), ("qingping", "Qingping"),
            ("pvvx", "pvvx custom firmware"), ("atc", "pvvx custom firmware"),
        ]
        return table.first { f.hasPrefix($0.0) }?.1
    }

    // MARK: - Building blocks

    private static func config(component: Component, address: BluetoothAddress, key: String,
                               members: [(String, FieldValue)], topics: GatewayTopics) -> OutgoingMessage {
        let topic = topics.discoveryConfig(component: component.rawValue, nodeID: nodeID(address, topics: topics),
                                           objectID: objectID(address, key: key))
        return OutgoingMessage(topic: topic, payload: SortedJSON.bytes(members), retain: true, qos: 1)
    }

    private static func common(record: DeviceRecord, maker: String?, key: String, name: String,
                               topics: GatewayTopics) -> [(String, FieldValue)] {
        let address = record.id.address
        // In a fleet no one gateway's status says whether the device is
        // available (another takes over when it stops): the device's own does.
        let availability: [FieldValue] = topics.fleet != nil
            ? [.nested([("topic", .string(topics.availability(address)))])]
            : [.nested([("topic", .string(topics.gatewayAvailability))]), .nested([("topic", .string(topics.availability(address)))])]
        return [
            ("name", .string(name)),
            ("unique_id", .string(uniqueID(address, key: key, topics: topics))),
            ("object_id", .string(objectID(address, key: key))),
            ("state_topic", .string(topics.state(address))),
            ("availability", .list(availability)),
            ("availability_mode", .string("all")),
            ("device", device(record, maker: maker, topics: topics)),
        ]
    }

    private static func device(_ record: DeviceRecord, maker profileMaker: String?, topics: GatewayTopics) -> FieldValue {
        let address = record.id.address
        var members: [(String, FieldValue)] = [
            ("identifiers", .list([.string("blecompanion_\(nodeID(address, topics: topics))")])),
            ("connections", .list([.list([.string("bluetooth"), .string(address.description)])])),
            ("name", .string(record.name.flatMap { $0.isEmpty ? nil : $0 } ?? address.description)),
        ]
        if topics.fleet == nil { members.append(("via_device", .string(gatewayIdentifier(topics)))) }
        if let format = record.format { members.append(("model", .string(format))) }
        if let maker = manufacturer(forFormat: record.format) { members.append(("manufacturer", .string(maker))) }
        // A profile's own maker (a profile named after a built-in format does not get that format's).
        if record.profile != nil { members.removeAll { $0.0 == "manufacturer" } }
        if let profileMaker { members.append(("manufacturer", .string(profileMaker))) }
        return .nested(members)
    }

    /// "Temperature", "Blood pressure (systolic)".
    static func entityName(_ reading: Reading) -> String {
        var words = reading.kind.rawValue.replacingOccurrences(of: "_", with: " ")
        switch reading.kind {
        case .co2: words = "CO2"
        case .co: words = "CO"
        case .pm1: words = "PM1"
        case .pm25: words = "PM2.5"
        case .pm10: words = "PM10"
        case .tvoc: words = "TVOC"
        case .uvIndex: words = "UV index"
        case .bmi: words = "BMI"
        default: words = words.prefix(1).uppercased() + words.dropFirst()
        }
        if let label = reading.label, !label.isEmpty { words += " (\(label))" }
        return words
    }
}
