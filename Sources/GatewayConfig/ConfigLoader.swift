import Foundation
import Vocabulary
import Yams

/// Reads the sections of a composed document into a ``GatewayConfiguration``,
/// reporting every problem to the reader. What is invalid keeps its default;
/// the caller throws when anything was reported.
struct ConfigLoader {
    let reader: ConfigReader
    let files: SystemAccess.Files

    static let sections = ["gateway", "bluez", "devices", "publish", "mqtt", "http", "fleet"]
    static let gatewayKeys = ["id", "state_dir"]
    static let bluezKeys = ["bus", "adapter", "scan", "ping_interval"]
    static let scanKeys = ["mode", "filter"]
    static let filterKeys = ["transport", "rssi", "uuids", "duplicate_data", "pattern"]
    static let devicesKeys = ["allow", "deny", "bindkeys", "watch", "expire_after", "identities", "bonded_identities", "profiles", "timesync", "timesync_interval"]
    static let watchKeys = ["address", "subscribe"]
    static let publishKeys = ["min_interval", "heartbeat", "batch"]
    static let mqttKeys = [
        "host", "port", "protocol", "client_id", "username", "password", "password_file", "tls",
        "keepalive", "base_topic", "discovery", "discovery_prefix", "queue_size",
    ]
    static let tlsKeys = ["ca_file", "cert_file", "key_file", "insecure"]
    static let httpKeys = ["enabled", "listen", "token", "token_file"]
    static let fleetKeys = ["name", "enabled", "room", "hysteresis", "dwell", "stale_after", "sighting_interval"]

    func configuration(from root: Node?) -> GatewayConfiguration {
        var configuration = GatewayConfiguration()
        guard let root else { return configuration }
        if case .scalar(let scalar) = root, ScalarValue(scalar) == .null { return configuration }
        guard case .mapping = root else {
            reader.report(
                line: root.mark?.line, key: "",
                "the top level must be a mapping of sections (\(Self.sections.joined(separator: ", "))), got \(ConfigReader.describe(root))"
            )
            return configuration
        }
        guard let top = reader.section(root, path: "", line: nil, keys: Self.sections) else { return configuration }
        readGateway(top, into: &configuration)
        readBlueZ(top, into: &configuration)
        readDevices(top, into: &configuration)
        readPublish(top, into: &configuration)
        configuration.mqtt = readMQTT(top)
        configuration.http = readHTTP(top)
        configuration.fleet = readFleet(top, configuration: configuration)
        return configuration
    }

    // MARK: fleet

    func readFleet(_ top: Section, configuration: GatewayConfiguration) -> GatewayConfiguration.Fleet? {
        guard let section = reader.section(top, "fleet", keys: Self.fleetKeys) else { return nil }
        var enabled = true
        if let entry = section.value("enabled"), let on = reader.bool(entry) { enabled = on }
        var fleet = GatewayConfiguration.Fleet(name: "")
        if let entry = section.value("name"), let name = reader.text(entry, expected: "a fleet name") {
            if Syntax.isGatewayID(name) {
                fleet.name = name
            } else {
                reader.report(entry, "expected 1 to 64 letters, digits, \".\", \"_\" or \"-\" (it is used in MQTT topics), got \(ConfigReader.quote(name))")
            }
        } else if section.isMissing("name") {
            reader.report(line: section.line, key: section.path("name"), "missing; every gateway of one fleet gives the same name")
        }
        if let entry = section.value("room"), let room = reader.nonEmptyText(entry, expected: "a room name") {
            if room.utf8.count > 64 {
                reader.report(entry, "expected at most 64 bytes, got \(room.utf8.count)")
            } else {
                fleet.room = room
            }
        }
        if let entry = section.value("hysteresis") {
            let number: Double? = switch entry.node.scalar.map(ScalarValue.init) {
            case .integer(let n)?: Double(n)
            case .float(let n)?: n
            default: nil
            }
            if let number, number.isFinite, (0...40).contains(number) {
                fleet.hysteresis = number
            } else {
                reader.report(entry, "expected a number of dB from 0 to 40, got \(entry.node.scalar?.string ?? ConfigReader.describe(entry.node))")
            }
        }
        if let entry = section.value("dwell"), let seconds = reader.seconds(entry) {
            if seconds > 3600 { reader.report(entry, "expected at most 3600 seconds, got \(ConfigReader.format(seconds))") } else { fleet.dwell = seconds }
        }
        if let entry = section.value("sighting_interval"), let seconds = reader.seconds(entry, minimum: 0.2) {
            if seconds > 60 { reader.report(entry, "expected at most 60 seconds, got \(ConfigReader.format(seconds))") } else { fleet.sightingInterval = seconds }
        }
        if let entry = section.value("stale_after"), let seconds = reader.seconds(entry, minimum: 1) {
            fleet.staleAfter = seconds
        }
        if let entry = section.value("stale_after") ?? section.value("sighting_interval"),
           fleet.staleAfter < 2 * fleet.sightingInterval {
            reader.report(entry, "stale_after (\(ConfigReader.format(fleet.staleAfter)) s) must be at least twice sighting_interval (\(ConfigReader.format(fleet.sightingInterval)) s), or every device would lapse between two sightings")
        }
        if enabled, configuration.mqtt == nil {
            reader.report(line: section.line, key: section.path("enabled"), "a fleet coordinates through the MQTT broker: add an mqtt section, or set enabled: false")
        }
        if enabled, configuration.gatewayID == "fleet" {
            reader.report(line: section.line, key: "gateway.id", "\"fleet\" is the level fleet topics live under; give this gateway another id")
        }
        return enabled ? fleet : nil
    }

    // MARK: gateway

    func readGateway(_ top: Section, into configuration: inout GatewayConfiguration) {
        guard let section = reader.section(top, "gateway", keys: Self.gatewayKeys) else { return }
        if let entry = section.value("id"), let id = reader.text(entry, expected: "a gateway id") {
            if Syntax.isGatewayID(id) {
                configuration.gatewayID = id
            } else {
                reader.report(entry, "expected 1 to 64 letters, digits, \".\", \"_\" or \"-\" (it is used in MQTT topics), got \(ConfigReader.quote(id))")
            }
        }
        if let entry = section.value("state_dir"), let directory = reader.nonEmptyText(entry, expected: "a directory path") {
            configuration.stateDirectory = files.resolve(directory)
        }
    }

    // MARK: bluez

    func readBlueZ(_ top: Section, into configuration: inout GatewayConfiguration) {
        guard let section = reader.section(top, "bluez", keys: Self.bluezKeys) else { return }
        if let entry = section.value("bus") {
            let expected = "\"system\", \"session\" or a D-Bus address like \"unix:path=/run/dbus/system_bus_socket\""
            if let text = reader.text(entry, expected: expected) {
                switch text {
                case "system": configuration.bus = .system
                case "session": configuration.bus = .session
                default:
                    if text.contains(":"), Syntax.isDBusAddress(text) {
                        configuration.bus = .address(text)
                    } else {
                        var message = "expected \(expected), got \(ConfigReader.quote(text))"
                        if let suggestion = Suggestion.closest(to: text, among: ["system", "session"]) {
                            message += "; did you mean \(ConfigReader.quote(suggestion))?"
                        }
                        reader.report(entry, message)
                    }
                }
            }
        }
        if let entry = section.value("adapter"), let name = reader.text(entry, expected: "an adapter name like \"hci0\"") {
            if Syntax.isAdapterName(name) {
                configuration.adapter = name
            } else {
                reader.report(entry, "expected an adapter name like \"hci0\", got \(ConfigReader.quote(name))")
            }
        }
        if let entry = section.value("ping_interval"), let seconds = reader.seconds(entry) {
            configuration.pingInterval = seconds
        }
        guard let scan = reader.section(section, "scan", keys: Self.scanKeys) else { return }
        if let entry = scan.value("mode"), let mode = reader.choice(entry, ["active", "passive"]) {
            configuration.scanMode = GatewayConfiguration.ScanMode(rawValue: mode) ?? .active
        }
        if let filter = reader.section(scan, "filter", keys: Self.filterKeys) {
            readFilter(filter, into: &configuration.filter)
        }
    }

    func readFilter(_ section: Section, into filter: inout GatewayConfiguration.DiscoveryFilter) {
        if let entry = section.value("transport"), let transport = reader.choice(entry, ["le", "bredr", "auto"]) {
            filter.transport = transport
        }
        if let entry = section.value("rssi"), let rssi = reader.integer(entry, in: -127...20) {
            filter.rssi = Int16(rssi)
        }
        if let entry = section.value("uuids") {
            filter.uuids = uuids(entry, what: "service UUID")
        }
        if let entry = section.value("duplicate_data"), let value = reader.bool(entry) {
            filter.duplicateData = value
        }
        if let entry = section.value("pattern"), let pattern = reader.text(entry) {
            filter.pattern = pattern
        }
    }

    /// A list of UUIDs, lower-cased; invalid items are reported and left out.
    func uuids(_ entry: Entry, what: String) -> [String] {
        guard let items = reader.list(entry) else { return [] }
        return items.compactMap { reader.uuid($0, what: "a \(what)")?.string }
    }

    // MARK: devices

    func readDevices(_ top: Section, into configuration: inout GatewayConfiguration) {
        guard let section = reader.section(top, "devices", keys: Self.devicesKeys) else { return }
        let allow = section.value("allow")
        let deny = section.value("deny")
        if let allow, let deny {
            let (first, second) = (allow.keyLine ?? 0) <= (deny.keyLine ?? 0) ? (allow, deny) : (deny, allow)
            reader.report(
                line: second.keyLine, key: second.path,
                "cannot be combined with \(first.path)\(first.keyLine.map { " (line \($0))" } ?? ""); give one list, or neither to take every device whose advertisements decode"
            )
        } else if let allow {
            if let addresses = addresses(allow) {
                if addresses.isEmpty {
                    reader.report(allow, "an empty allow list would ignore every device; leave the key out to take every device whose advertisements decode")
                } else {
                    configuration.selection = .allow(addresses)
                }
            }
        } else if let deny, let addresses = addresses(deny) {
            configuration.selection = .deny(addresses)
        }

        if let entry = section.value("bindkeys"), let pairs = reader.keyedEntries(entry) {
            var firstLines: [BluetoothAddress: Int?] = [:]
            for pair in pairs {
                let address: BluetoothAddress
                do { address = try BluetoothAddress(pair.key) } catch {
                    reader.report(line: pair.keyLine, key: pair.path, error.description)
                    continue
                }
                if let first = firstLines[address] {
                    reader.report(line: pair.keyLine, key: pair.path, "a second bindkey for \(address)\(first.map { "; the first is on line \($0)" } ?? "")")
                    continue
                }
                firstLines[address] = pair.keyLine
                guard let key = key16(pair, what: "a bindkey", form: "") else { continue }
                configuration.bindkeys[address] = key
            }
        }

        if let entry = section.value("identities"), let pairs = reader.keyedEntries(entry) {
            for pair in pairs {
                let name = pair.key
                guard Syntax.isIdentityName(name) else {
                    reader.report(line: pair.keyLine, key: pair.path, "an identity name is 1 to 60 letters, digits, \"_\" or \"-\" (it is used in MQTT topics and Home Assistant ids), got \(ConfigReader.quote(name))")
                    continue
                }
                guard let key = key16(pair, what: "an identity resolving key", form: ", most significant first") else { continue }
                if let same = configuration.identities.first(where: { $0.value == key }) {
                    reader.report(pair, "the same key as identity \(same.key); one device, one identity")
                    continue
                }
                configuration.identities[name] = key
            }
        }

        if let entry = section.value("bonded_identities") {
            if let on = entry.node.scalar.map(ScalarValue.init), case .bool(let flag) = on {
                configuration.bondedIdentities = flag ? "/var/lib/bluetooth" : nil
            } else if let directory = reader.nonEmptyText(entry, expected: "true, or bluetoothd's storage directory") {
                configuration.bondedIdentities = files.resolve(directory)
            }
        }

        if let entry = section.value("timesync") {
            configuration.timeSync = addresses(entry) ?? []
        }
        if let entry = section.value("timesync_interval"), let seconds = reader.seconds(entry, minimum: 60) {
            if seconds > 30 * 86_400 {
                reader.report(entry, "expected at most 2592000 seconds (30 days), got \(ConfigReader.format(seconds))")
            } else {
                configuration.timeSyncInterval = seconds
            }
        }

        if let entry = section.value("profiles") {
            let items: [Entry]? = if case .sequence = entry.node { reader.list(entry) } else { [entry] }
            for item in items ?? [] {
                if let path = reader.nonEmptyText(item, expected: "a profile file or directory") {
                    configuration.profiles.append(files.resolve(path))
                }
            }
        }

        if let entry = section.value("watch"), let items = reader.list(entry) {
            var firstLines: [BluetoothAddress: Int?] = [:]
            for item in items {
                guard let device = reader.section(item.node, path: item.path, line: item.line, keys: Self.watchKeys,
                                                  what: "a mapping like { address: \"C0:FF:EE:00:00:01\", subscribe: [2a37] }") else { continue }
                guard let addressEntry = device.value("address") else {
                    if device.isMissing("address") {
                        reader.report(line: device.line, key: device.path("address"), "missing; every watched device needs its address")
                    }
                    continue
                }
                guard let address = address(addressEntry) else { continue }
                if let first = firstLines[address] {
                    reader.report(addressEntry, "\(address) is watched twice\(first.map { "; first on line \($0)" } ?? "")")
                    continue
                }
                firstLines[address] = addressEntry.line
                let subscribe = device.value("subscribe").map { uuids($0, what: "characteristic UUID") } ?? []
                configuration.watched.append(.init(address: address, subscribe: subscribe))
            }
        }

        if let entry = section.value("expire_after"), let seconds = reader.seconds(entry, minimum: 0, exclusive: true) {
            configuration.expireAfter = seconds
        }
    }

    /// A 16-byte key written as hex (bindkeys, identity resolving keys); nil when it is not one (reported).
    func key16(_ entry: Entry, what: String, form: String) -> [UInt8]? {
        let expected = "\(what) of 32 hex characters (16 bytes\(form))"
        guard let text = reader.text(entry, expected: expected) else { return nil }
        let key: [UInt8]
        do { key = try Hex.bytes(text) } catch {
            reader.report(entry, "\(what) is 16 bytes of hex: \(error.description)")
            return nil
        }
        guard key.count == 16 else {
            reader.report(entry, "expected \(expected), got \(key.count * 2) hex characters")
            return nil
        }
        return key
    }

    func address(_ entry: Entry) -> BluetoothAddress? { reader.address(entry) }

    /// A list of addresses; `nil` when any is invalid (reported).
    func addresses(_ entry: Entry) -> [BluetoothAddress]? {
        guard let items = reader.list(entry) else { return nil }
        let addresses = items.map(address)
        let valid = addresses.compactMap { $0 }
        return valid.count == addresses.count ? valid : nil
    }

    // MARK: publish

    func readPublish(_ top: Section, into configuration: inout GatewayConfiguration) {
        guard let section = reader.section(top, "publish", keys: Self.publishKeys) else { return }
        if let entry = section.value("min_interval"), let seconds = reader.seconds(entry) {
            configuration.publish.minInterval = seconds
        }
        if let entry = section.value("batch"), let seconds = reader.seconds(entry) {
            if seconds > 10 {
                reader.report(entry, "expected at most 10 seconds (advertisements are held that long before they are published), got \(entry.node.scalar?.string ?? "\(seconds)")")
            } else {
                configuration.publish.batch = seconds
            }
        }
        if let entry = section["heartbeat"] {
            if entry.isNull {
                configuration.publish.heartbeat = nil
            } else if let seconds = reader.seconds(entry) {
                configuration.publish.heartbeat = seconds == 0 ? nil : seconds
            }
        }
    }

    // MARK: mqtt

    func readMQTT(_ top: Section) -> GatewayConfiguration.MQTT? {
        guard let section = reader.section(top, "mqtt", keys: Self.mqttKeys) else { return nil }
        var host = ""
        if let entry = section.value("host") {
            if let text = reader.nonEmptyText(entry, expected: "the broker's host name or IP address") {
                if ListenAddress.isIPv4(text) || ListenAddress.isIPv6(text) || ListenAddress.isHostName(Substring(text)) {
                    host = text
                } else {
                    reader.report(entry, "expected the broker's host name or IP address (IPv6 without brackets), got \(ConfigReader.quote(text))")
                }
            }
        } else if section.isMissing("host") {
            reader.report(line: section.line, key: section.path("host"), "missing; the broker's host name or IP address is required")
        }

        var tls: GatewayConfiguration.MQTT.TLS?
        let wantsTLS = section.value("tls") != nil
        if let tlsSection = reader.section(section, "tls", keys: Self.tlsKeys) {
            tls = readTLS(tlsSection)
        }

        var mqtt = GatewayConfiguration.MQTT(host: host, tls: tls)
        mqtt.port = wantsTLS ? GatewayConfiguration.MQTT.defaultTLSPort : GatewayConfiguration.MQTT.defaultPort
        if let entry = section.value("port"), let port = reader.integer(entry, in: 1...65535) {
            mqtt.port = port
        }
        if let entry = section.value("protocol"), let text = reader.text(entry, expected: "\"3.1.1\" or 5") {
            if let version = GatewayConfiguration.MQTT.ProtocolVersion(rawValue: text) {
                mqtt.protocolVersion = version
            } else {
                reader.report(entry, "expected \"3.1.1\" or 5, got \(ConfigReader.describe(entry.node))")
            }
        }
        if let entry = section.value("client_id"), let id = reader.nonEmptyText(entry, expected: "a client id") {
            mqtt.clientID = id
        }
        if let entry = section.value("username"), let name = reader.nonEmptyText(entry, expected: "a user name") {
            mqtt.username = name
        }
        if let entry = exclusive(section, "password", "password_file") {
            if entry.key == "password" {
                mqtt.password = reader.text(entry, expected: "a password")
            } else {
                mqtt.password = secret(entry)
            }
            if mqtt.protocolVersion == .v311, section.value("username") == nil {
                reader.report(entry, "MQTT 3.1.1 sends a password only with a user name; set \(section.path("username"))")
            }
        }
        if let entry = section.value("keepalive"), let seconds = reader.integer(entry, in: 5...65535) {
            mqtt.keepAlive = seconds
        }
        if let entry = section.value("base_topic"), let topic = topic(entry) {
            mqtt.baseTopic = topic
        }
        if let entry = section.value("discovery"), let enabled = reader.bool(entry) {
            mqtt.discovery = enabled
        }
        if let entry = section.value("discovery_prefix"), let topic = topic(entry) {
            mqtt.discoveryPrefix = topic
        }
        if let entry = section.value("queue_size"), let size = reader.integer(entry, in: 1...Int.max, bounds: "≥ 1") {
            mqtt.queueCapacity = size
        }
        return mqtt
    }

    func readTLS(_ section: Section) -> GatewayConfiguration.MQTT.TLS? {
        var caFile: String?
        if let entry = section.value("ca_file") {
            caFile = readableFile(entry)
        } else if section.isMissing("ca_file") {
            reader.report(line: section.line, key: section.path("ca_file"), "missing; TLS needs the CA certificate(s) to check the broker with (/etc/ssl/certs/ca-certificates.crt for public CAs)")
        }
        let certificate = section.value("cert_file")
        let key = section.value("key_file")
        if let certificate, key == nil {
            reader.report(certificate, "a client certificate needs its key; set \(section.path("key_file")) too")
        }
        if let key, certificate == nil {
            reader.report(key, "a client key needs its certificate; set \(section.path("cert_file")) too")
        }
        let certificateFile = certificate.flatMap(readableFile)
        let keyFile = key.flatMap(readableFile)
        var insecure = false
        if let entry = section.value("insecure"), let value = reader.bool(entry) {
            insecure = value
        }
        guard let caFile else { return nil }
        return .init(caFile: caFile, certificateFile: certificateFile, keyFile: keyFile, insecure: insecure)
    }

    func topic(_ entry: Entry) -> String? {
        guard let text = reader.text(entry, expected: "an MQTT topic") else { return nil }
        if let problem = Syntax.topicProblem(text) {
            reader.report(entry, "\(problem), got \(ConfigReader.quote(text))")
            return nil
        }
        return text
    }

    // MARK: http

    func readHTTP(_ top: Section) -> GatewayConfiguration.HTTP? {
        guard let section = reader.section(top, "http", keys: Self.httpKeys) else { return nil }
        var enabled = true
        if let entry = section.value("enabled"), let value = reader.bool(entry) {
            enabled = value
        }
        var http = GatewayConfiguration.HTTP()
        let listen = section.value("listen")
        if let listen, let text = reader.text(listen, expected: "host:port") {
            switch ListenAddress.parse(text) {
            case .valid(let host, let port):
                http.host = host
                http.port = port
            case .invalid(let reason):
                reader.report(listen, "expected host:port or [IPv6]:port, got \(ConfigReader.quote(text)): \(reason)")
            }
        }
        var tokenGiven = false
        if let entry = exclusive(section, "token", "token_file") {
            tokenGiven = true
            let token: String?
            if entry.key == "token" {
                token = reader.nonEmptyText(entry, expected: "a bearer token")
            } else {
                token = enabled ? secret(entry) : nil
            }
            if let token {
                if token.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control }) {
                    reader.report(entry, "a bearer token must not contain spaces or control characters")
                } else {
                    http.token = token
                }
            }
        }
        guard enabled else { return nil }
        if !tokenGiven, !http.isLoopback {
            reader.report(
                line: listen?.line ?? section.line, key: listen?.path ?? section.path("listen"),
                "listening on \(http.host), which is not loopback, needs a bearer token; set \(section.path("token")) or \(section.path("token_file")) (or listen on 127.0.0.1)"
            )
        }
        return http
    }

    // MARK: Shared

    /// The one of two keys that exclude each other that is given; both given is reported
    /// at the later one and the earlier is used.
    func exclusive(_ section: Section, _ first: String, _ second: String) -> Entry? {
        switch (section.value(first), section.value(second)) {
        case (let a?, let b?):
            let (earlier, later) = (a.keyLine ?? 0) <= (b.keyLine ?? 0) ? (a, b) : (b, a)
            reader.report(line: later.keyLine, key: later.path, "give either \(section.path(first)) or \(section.path(second)), not both")
            return earlier
        case (let a?, nil): return a
        case (nil, let b?): return b
        case (nil, nil): return nil
        }
    }

    /// A file that must exist and be readable now; returns its resolved path.
    func readableFile(_ entry: Entry) -> String? {
        guard let path = reader.nonEmptyText(entry, expected: "a file path") else { return nil }
        let resolved = files.resolve(path)
        switch SystemAccess.readFile(resolved) {
        case .failure(let failure):
            reader.report(entry, "cannot read \(resolved): \(failure.text)")
            return nil
        case .success(let bytes):
            guard !bytes.isEmpty else {
                reader.report(entry, "\(resolved) is empty")
                return nil
            }
            return resolved
        }
    }

    /// The contents of a secret file, without trailing line breaks.
    func secret(_ entry: Entry) -> String? {
        guard let path = reader.nonEmptyText(entry, expected: "a file path") else { return nil }
        let resolved = files.resolve(path)
        switch SystemAccess.readFile(resolved) {
        case .failure(let failure):
            reader.report(entry, "cannot read \(resolved): \(failure.text)")
            return nil
        case .success(let bytes):
            guard var text = String(validating: bytes, as: UTF8.self) else {
                reader.report(entry, "\(resolved) is not UTF-8 text")
                return nil
            }
            while let last = text.last, last.isNewline { text.removeLast() }
            guard !text.isEmpty else {
                reader.report(entry, "\(resolved) is empty")
                return nil
            }
            return text
        }
    }
}
