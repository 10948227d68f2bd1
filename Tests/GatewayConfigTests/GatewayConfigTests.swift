// Gateway configuration: loading, defaults and every validation rule.
import Foundation
import Testing
import Vocabulary
@testable import GatewayConfig

typealias Problem = GatewayConfigError.Problem

/// The problems `parse` reports for `yaml` (empty when it loads).
func problems(_ yaml: String) -> [Problem] {
    do throws(GatewayConfigError) {
        _ = try GatewayConfiguration.parse(yaml, file: "test.yaml")
        return []
    } catch {
        return error.problems
    }
}

/// A directory of its own under the system temporary directory, removed by the caller.
func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("gateway-config-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

func write(_ text: String, to url: URL) throws {
    try Data(text.utf8).write(to: url)
}

// MARK: - The demo fixture

@Test func demoFixtureLoadsWithItsValues() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let path = root.appendingPathComponent("fixtures/gateway/demo.yaml").path
    let configuration = try GatewayConfiguration.load(path: path)

    #expect(configuration.gatewayID == "demo-home")
    #expect(configuration.stateDirectory == "/tmp/blecompanion-demo")
    #expect(configuration.bus == .session)
    #expect(configuration.adapter == "hci0")
    #expect(configuration.scanMode == .active)
    #expect(configuration.filter == .init(transport: "le", rssi: -90, uuids: [], duplicateData: true, pattern: nil))
    #expect(configuration.selection == .deny([try BluetoothAddress("DC:2C:26:01:02:03")]))
    #expect(configuration.bindkeys == [
        try BluetoothAddress("A4:C1:38:8D:18:B2"): [0x23, 0x1D, 0x39, 0xC1, 0xD7, 0xCC, 0x1A, 0xB1, 0xAE, 0xE2, 0x24, 0xCD, 0x09, 0x6D, 0xB9, 0x32],
    ])
    #expect(configuration.watched == [.init(address: try BluetoothAddress("E4:5F:01:AA:10:01"), subscribe: ["00002a37-0000-1000-8000-00805f9b34fb"])])
    #expect(configuration.expireAfter == 300)
    #expect(configuration.publish == .init(minInterval: 5, heartbeat: 300))
    #expect(configuration.mqtt == .init(
        host: "127.0.0.1", port: 1883, protocolVersion: .v311, clientID: "blecompanion-demo",
        username: nil, password: nil, tls: nil, keepAlive: 60, baseTopic: "blecompanion",
        discovery: true, discoveryPrefix: "homeassistant", queueCapacity: 10_000
    ))
    #expect(configuration.http == .init(host: "127.0.0.1", port: 8080, token: nil))
}

@Test func layoutFromTheDocumentationLoads() throws {
    let configuration = try GatewayConfiguration.parse("""
        gateway:   { id: living-room, state_dir: /var/lib/blecompanion }
        bluez:
          bus: system
          adapter: hci1
          scan: { mode: passive, filter: { transport: le, rssi: -90, uuids: [fcd2, FE95, 0000FCD2-0000-1000-8000-00805F9B34FB], duplicate_data: true, pattern: "" } }
        devices:
          allow: [ "a4:c1:38:00:00:01", A4:C1:38:00:00:02 ]
          watch: [ { address: "c0:ff:ee:00:00:01", subscribe: [ 2a37 ] } ]
          expire_after: 90.5
        publish: { min_interval: 0.25, heartbeat: 0 }
        mqtt:
          host: broker.local
          protocol: 5
          username: gateway
          password: 1234
          keepalive: 30
          discovery: no
        http:
          enabled: false
        """)
    #expect(configuration.gatewayID == "living-room")
    #expect(configuration.stateDirectory == "/var/lib/blecompanion")
    #expect(configuration.bus == .system)
    #expect(configuration.adapter == "hci1")
    #expect(configuration.scanMode == .passive)
    #expect(configuration.filter.uuids == ["0000fcd2-0000-1000-8000-00805f9b34fb", "0000fe95-0000-1000-8000-00805f9b34fb", "0000fcd2-0000-1000-8000-00805f9b34fb"])
    #expect(configuration.filter.pattern == "")
    #expect(configuration.selection == .allow([try BluetoothAddress("A4:C1:38:00:00:01"), try BluetoothAddress("A4:C1:38:00:00:02")]))
    #expect(configuration.expireAfter == 90.5)
    #expect(configuration.publish == .init(minInterval: 0.25, heartbeat: nil))
    #expect(configuration.mqtt?.host == "broker.local")
    #expect(configuration.mqtt?.protocolVersion == .v5)
    #expect(configuration.mqtt?.password == "1234")
    #expect(configuration.mqtt?.keepAlive == 30)
    #expect(configuration.mqtt?.discovery == false)
    #expect(configuration.http == nil)
    // `180` is a plain integer to YAML; as a UUID it is read as written, and it is not one.
    #expect(problems("devices:\n  watch: [ { address: \"C0:FF:EE:00:00:01\", subscribe: [ 180 ] } ]\n").map(\.key) == ["devices.watch[0].subscribe[0]"])
}

// MARK: - Defaults

@Test(arguments: ["", "\n", "# only a comment\n", "---\n", "---\n...\n"])
func emptyFilesGiveAllDefaults(_ text: String) throws {
    let configuration = try GatewayConfiguration.parse(text)
    #expect(configuration == GatewayConfiguration())
}

@Test func defaultsAreTheDocumentedOnes() {
    let configuration = GatewayConfiguration()
    #expect(!configuration.gatewayID.isEmpty)
    #expect(configuration.stateDirectory == nil)
    #expect(configuration.bus == .system)
    #expect(configuration.adapter == nil)
    #expect(configuration.scanMode == .active)
    #expect(configuration.filter == .init(transport: "le", rssi: nil, uuids: [], duplicateData: nil, pattern: nil))
    #expect(configuration.selection == .decodable)
    #expect(configuration.bindkeys.isEmpty)
    #expect(configuration.watched.isEmpty)
    #expect(configuration.expireAfter == 300)
    #expect(configuration.pingInterval == 15)
    #expect(configuration.publish == .init(minInterval: 0, heartbeat: 300))
    #expect(configuration.mqtt == nil)
    #expect(configuration.http == nil)
}

@Test func emptySectionsKeepTheirDefaults() throws {
    let configuration = try GatewayConfiguration.parse("gateway:\nbluez: {}\ndevices:\npublish: {}\nmqtt:\nhttp:\n")
    var expected = GatewayConfiguration()
    expected.gatewayID = configuration.gatewayID
    #expect(configuration == expected)
}

@Test func mqttDefaults() throws {
    let mqtt = try #require(try GatewayConfiguration.parse("mqtt:\n  host: broker\n").mqtt)
    #expect(mqtt.host == "broker")
    #expect(mqtt.port == 1883)
    #expect(mqtt.protocolVersion == .v311)
    #expect(mqtt.clientID == nil)
    #expect(mqtt.username == nil)
    #expect(mqtt.password == nil)
    #expect(mqtt.tls == nil)
    #expect(mqtt.keepAlive == 60)
    #expect(mqtt.baseTopic == "blecompanion")
    #expect(mqtt.discovery == true)
    #expect(mqtt.discoveryPrefix == "homeassistant")
    #expect(mqtt.queueCapacity == 100_000)
}

/// Plain scalars are typed by their text (Yams composes without its
/// regular-expression resolver); an explicit `!!str` or `!` keeps a value a
/// string, and YAML 1.1's words stay booleans.
@Test func scalarsAreTypedByTheirTextAndExplicitTagsKeepStrings() throws {
    let mqtt = try #require(try GatewayConfiguration.parse(
        "mqtt:\n  host: broker\n  port: 1884\n  discovery: off\n  client_id: !!str 1234\n  base_topic: ! 99\n").mqtt)
    #expect(mqtt.port == 1884)
    #expect(mqtt.discovery == false)
    #expect(mqtt.clientID == "1234")
    #expect(mqtt.baseTopic == "99")
    #expect(problems("mqtt:\n  host: broker\n  port: !!str 1884\n").map(\.key) == ["mqtt.port"])
    #expect(problems("mqtt:\n  host: broker\n  port: 0x75C\n").isEmpty)
}

@Test func httpDefaultsAndDisabling() throws {
    #expect(try GatewayConfiguration.parse("http: {}\n").http == .init(host: "127.0.0.1", port: 8080, token: nil))
    #expect(try GatewayConfiguration.parse("http:\n  enabled: true\n").http?.port == 8080)
    // Disabled: off loopback without a token is not a problem, since nothing listens.
    #expect(try GatewayConfiguration.parse("http:\n  enabled: false\n  listen: 0.0.0.0:80\n").http == nil)
}

@Test func heartbeatZeroOrNullDisables() throws {
    #expect(try GatewayConfiguration.parse("publish: { heartbeat: 0 }").publish.heartbeat == nil)
    #expect(try GatewayConfiguration.parse("publish: { heartbeat: null }").publish.heartbeat == nil)
    #expect(try GatewayConfiguration.parse("publish:\n  heartbeat:\n").publish.heartbeat == nil)
    #expect(try GatewayConfiguration.parse("publish: { heartbeat: 60 }").publish.heartbeat == 60)
    #expect(try GatewayConfiguration.parse("publish: { min_interval: 2 }").publish.heartbeat == 300)
}

@Test func batchDefaultsToATenthOfASecondAndIsBounded() throws {
    #expect(try GatewayConfiguration.parse("publish: { heartbeat: 60 }").publish.batch == 0.1)
    #expect(try GatewayConfiguration.parse("publish: { batch: 0 }").publish.batch == 0)
    #expect(try GatewayConfiguration.parse("publish: { batch: 0.025 }").publish.batch == 0.025)
    #expect(try GatewayConfiguration.parse("publish: { batch: 10 }").publish.batch == 10)
}

@Test func busValues() throws {
    #expect(try GatewayConfiguration.parse("bluez: { bus: session }").bus == .session)
    #expect(try GatewayConfiguration.parse("bluez: { bus: system }").bus == .system)
    #expect(try GatewayConfiguration.parse("bluez: { bus: \"unix:path=/tmp/sim bus\" }").bus == .address("unix:path=/tmp/sim bus"))
    #expect(try GatewayConfiguration.parse("bluez: { bus: \"tcp:host=127.0.0.1,port=12345;unix:abstract=/x\" }").bus
        == .address("tcp:host=127.0.0.1,port=12345;unix:abstract=/x"))
}

@Test func protocolVersions() throws {
    #expect(try GatewayConfiguration.parse("mqtt: { host: b, protocol: 5 }").mqtt?.protocolVersion == .v5)
    #expect(try GatewayConfiguration.parse("mqtt: { host: b, protocol: \"5\" }").mqtt?.protocolVersion == .v5)
    #expect(try GatewayConfiguration.parse("mqtt: { host: b, protocol: 3.1.1 }").mqtt?.protocolVersion == .v311)
    #expect(try GatewayConfiguration.parse("mqtt: { host: b, protocol: \"3.1.1\" }").mqtt?.protocolVersion == .v311)
}

@Test func tlsMakesTheDefaultPort8883AndResolvesFiles() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    for name in ["ca.pem", "client.pem", "client.key"] {
        try write("-----BEGIN CERTIFICATE-----\n", to: directory.appendingPathComponent(name))
    }
    let config = directory.appendingPathComponent("gateway.yaml")
    try write("""
        mqtt:
          host: broker
          tls: { ca_file: ca.pem, cert_file: client.pem, key_file: \(directory.path)/client.key, insecure: true }
        """, to: config)
    let mqtt = try #require(try GatewayConfiguration.load(path: config.path).mqtt)
    #expect(mqtt.port == 8883)
    #expect(mqtt.tls == .init(
        caFile: directory.appendingPathComponent("ca.pem").path,
        certificateFile: directory.appendingPathComponent("client.pem").path,
        keyFile: directory.appendingPathComponent("client.key").path,
        insecure: true
    ))
    // An explicit port wins over the TLS default.
    try write("mqtt: { host: broker, port: 18883, tls: { ca_file: ca.pem } }\n", to: config)
    #expect(try GatewayConfiguration.load(path: config.path).mqtt?.port == 18883)
}

@Test(arguments: [
    ("127.0.0.1:8080", "127.0.0.1", 8080),
    ("127.1.2.3:80", "127.1.2.3", 80),
    ("localhost:9000", "localhost", 9000),
    ("[::1]:8080", "::1", 8080),
])
func loopbackListenersNeedNoToken(listen: String, host: String, port: Int) throws {
    let http = try GatewayConfiguration.parse("http: { listen: \"\(listen)\" }").http
    #expect(http == .init(host: host, port: port, token: nil))
    #expect(http?.isLoopback == true)
}

@Test func nonLoopbackListenerWithATokenLoads() throws {
    let http = try GatewayConfiguration.parse("http: { listen: \"0.0.0.0:8080\", token: s3cret }").http
    #expect(http == .init(host: "0.0.0.0", port: 8080, token: "s3cret"))
    #expect(try GatewayConfiguration.parse("http: { listen: \"[::]:8080\", token: s3cret }").http?.host == "::")
}

// MARK: - Secrets from files

@Test func passwordFileAndTokenFileAreReadRelativeToTheConfigFile() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    try FileManager.default.createDirectory(at: directory.appendingPathComponent("secrets"), withIntermediateDirectories: true)
    try write("hunter2\n", to: directory.appendingPathComponent("secrets/mqtt"))
    try write("t0ken-value\r\n\n", to: directory.appendingPathComponent("http-token"))
    let config = directory.appendingPathComponent("gateway.yaml")
    try write("""
        mqtt:
          host: broker
          username: gateway
          password_file: secrets/mqtt
        http:
          listen: 0.0.0.0:8080
          token_file: \(directory.appendingPathComponent("http-token").path)
        """, to: config)
    let configuration = try GatewayConfiguration.load(path: config.path)
    #expect(configuration.mqtt?.password == "hunter2")
    #expect(configuration.http?.token == "t0ken-value")
}

@Test func secretFilesMustBeReadableAndNotEmpty() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let empty = directory.appendingPathComponent("empty")
    try write("\n", to: empty)
    let missing = directory.appendingPathComponent("missing").path
    #expect(problems("""
        mqtt:
          host: broker
          username: u
          password_file: \(missing)
        http:
          token_file: \(empty.path)
        """) == [
        Problem(line: 4, key: "mqtt.password_file", message: "cannot read \(missing): No such file or directory"),
        Problem(line: 6, key: "http.token_file", message: "\(empty.path) is empty"),
    ])
    #expect(problems("mqtt:\n  host: b\n  tls: { ca_file: \(directory.path) }\n")
        == [Problem(line: 3, key: "mqtt.tls.ca_file", message: "cannot read \(directory.path): Is a directory")])
}

// MARK: - One rule, one problem

struct Rule: Sendable, CustomTestStringConvertible {
    var yaml: String
    var key: String
    var line: Int
    /// The whole message, or a part of it when `exact` is false.
    var message: String
    var exact = true

    var testDescription: String { "\(key) @\(line): \(message)" }
}

@Test(arguments: [
    // Types and ranges of integers.
    Rule(yaml: "mqtt:\n  host: broker\n  port: 18830x\n", key: "mqtt.port", line: 3, message: "expected an integer 1…65535, got \"18830x\""),
    Rule(yaml: "mqtt:\n  host: broker\n  port: \"1883\"\n", key: "mqtt.port", line: 3,
         message: "expected an integer 1…65535, got the string \"1883\"; remove the quotes"),
    Rule(yaml: "mqtt:\n  host: broker\n  port: 0\n", key: "mqtt.port", line: 3, message: "expected an integer 1…65535, got 0"),
    Rule(yaml: "mqtt:\n  host: broker\n  port: 65536\n", key: "mqtt.port", line: 3, message: "expected an integer 1…65535, got 65536"),
    Rule(yaml: "mqtt:\n  host: broker\n  port: 1883.5\n", key: "mqtt.port", line: 3, message: "expected an integer 1…65535, got 1883.5"),
    Rule(yaml: "mqtt:\n  host: broker\n  port: [1883]\n", key: "mqtt.port", line: 3, message: "expected an integer 1…65535, got a list"),
    Rule(yaml: "mqtt:\n  host: broker\n  port: true\n", key: "mqtt.port", line: 3, message: "expected an integer 1…65535, got true"),
    Rule(yaml: "mqtt:\n  host: broker\n  keepalive: 4\n", key: "mqtt.keepalive", line: 3, message: "expected an integer 5…65535, got 4"),
    Rule(yaml: "mqtt:\n  host: broker\n  keepalive: 65536\n", key: "mqtt.keepalive", line: 3, message: "expected an integer 5…65535, got 65536"),
    Rule(yaml: "mqtt:\n  host: broker\n  queue_size: 0\n", key: "mqtt.queue_size", line: 3, message: "expected an integer ≥ 1, got 0"),
    Rule(yaml: "mqtt:\n  host: broker\n  queue_size: 99999999999999999999\n", key: "mqtt.queue_size", line: 3,
         message: "expected an integer ≥ 1, got 99999999999999999999"),
    Rule(yaml: "bluez:\n  scan:\n    filter:\n      rssi: -128\n", key: "bluez.scan.filter.rssi", line: 4, message: "expected an integer -127…20, got -128"),
    Rule(yaml: "bluez:\n  scan:\n    filter: { rssi: 21 }\n", key: "bluez.scan.filter.rssi", line: 3, message: "expected an integer -127…20, got 21"),
    // Intervals.
    Rule(yaml: "publish:\n  min_interval: -1\n", key: "publish.min_interval", line: 2, message: "expected a number of seconds ≥ 0, got -1"),
    Rule(yaml: "publish:\n  batch: 10.5\n", key: "publish.batch", line: 2,
         message: "expected at most 10 seconds (advertisements are held that long before they are published), got 10.5"),
    Rule(yaml: "publish:\n  batch: -1\n", key: "publish.batch", line: 2, message: "expected a number of seconds ≥ 0, got -1"),
    Rule(yaml: "publish:\n  heartbeat: -0.5\n", key: "publish.heartbeat", line: 2, message: "expected a number of seconds ≥ 0, got -0.5"),
    Rule(yaml: "publish:\n  heartbeat: 5m\n", key: "publish.heartbeat", line: 2, message: "expected a number of seconds ≥ 0, got \"5m\""),
    Rule(yaml: "publish:\n  heartbeat: .inf\n", key: "publish.heartbeat", line: 2, message: "expected a number of seconds ≥ 0, got .inf"),
    Rule(yaml: "devices:\n  expire_after: 0\n", key: "devices.expire_after", line: 2, message: "expected a number of seconds > 0, got 0"),
    Rule(yaml: "devices:\n  expire_after: \"300\"\n", key: "devices.expire_after", line: 2,
         message: "expected a number of seconds > 0, got the string \"300\"; remove the quotes"),
    // Booleans, lists, mappings.
    Rule(yaml: "mqtt:\n  host: broker\n  discovery: maybe\n", key: "mqtt.discovery", line: 3, message: "expected true or false, got \"maybe\""),
    Rule(yaml: "bluez:\n  scan:\n    filter:\n      duplicate_data: 1\n", key: "bluez.scan.filter.duplicate_data", line: 4,
         message: "expected true or false, got 1"),
    Rule(yaml: "bluez:\n  scan:\n    filter:\n      uuids: fcd2\n", key: "bluez.scan.filter.uuids", line: 4, message: "expected a list, got \"fcd2\""),
    Rule(yaml: "mqtt:\n  host: broker\n  tls: true\n", key: "mqtt.tls", line: 3, message: "expected a mapping, got true"),
    Rule(yaml: "gateway:\n  - living-room\n", key: "gateway", line: 2, message: "expected a mapping, got a list"),
    Rule(yaml: "mqtt:\n  host: [a, b]\n", key: "mqtt.host", line: 2, message: "expected the broker's host name or IP address, got a list"),
    Rule(yaml: "mqtt:\n  host: \"broker one\"\n", key: "mqtt.host", line: 2,
         message: "expected the broker's host name or IP address (IPv6 without brackets), got \"broker one\""),
    Rule(yaml: "gateway:\n  id: living room\n", key: "gateway.id", line: 2,
         message: "expected 1 to 64 letters, digits, \".\", \"_\" or \"-\" (it is used in MQTT topics), got \"living room\""),
    Rule(yaml: "gateway:\n  state_dir: \"\"\n", key: "gateway.state_dir", line: 2, message: "expected a directory path, got an empty string"),
    // Words from a small set.
    Rule(yaml: "bluez:\n  bus: sytem\n", key: "bluez.bus", line: 2,
         message: "expected \"system\", \"session\" or a D-Bus address like \"unix:path=/run/dbus/system_bus_socket\", got \"sytem\"; did you mean \"system\"?"),
    Rule(yaml: "bluez:\n  bus: \"unix:path\"\n", key: "bluez.bus", line: 2, message: "got \"unix:path\"", exact: false),
    Rule(yaml: "bluez:\n  scan: { mode: pasive }\n", key: "bluez.scan.mode", line: 2,
         message: "expected \"active\" or \"passive\", got \"pasive\"; did you mean \"passive\"?"),
    Rule(yaml: "bluez:\n  scan: { filter: { transport: ble } }\n", key: "bluez.scan.filter.transport", line: 2,
         message: "expected \"le\", \"bredr\" or \"auto\", got \"ble\"; did you mean \"le\"?"),
    Rule(yaml: "mqtt:\n  host: broker\n  protocol: 3.1\n", key: "mqtt.protocol", line: 3, message: "expected \"3.1.1\" or 5, got 3.1"),
    Rule(yaml: "mqtt:\n  host: broker\n  protocol: v5\n", key: "mqtt.protocol", line: 3, message: "expected \"3.1.1\" or 5, got \"v5\""),
    // Adapter names.
    Rule(yaml: "bluez:\n  adapter: hci\n", key: "bluez.adapter", line: 2, message: "expected an adapter name like \"hci0\", got \"hci\""),
    Rule(yaml: "bluez:\n  adapter: bluetooth0\n", key: "bluez.adapter", line: 2, message: "expected an adapter name like \"hci0\", got \"bluetooth0\""),
    Rule(yaml: "bluez:\n  adapter: hci01\n", key: "bluez.adapter", line: 2, message: "expected an adapter name like \"hci0\", got \"hci01\""),
    // Bluetooth addresses.
    Rule(yaml: "devices:\n  allow:\n    - A4:C1:38:00:00:01\n    - A4:C1:38:00:00\n", key: "devices.allow[1]", line: 4,
         message: "\"A4:C1:38:00:00\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none)"),
    Rule(yaml: "devices:\n  deny: [ \"A4:C1:38-00-00-01\" ]\n", key: "devices.deny[0]", line: 2,
         message: "\"A4:C1:38-00-00-01\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none, at character 9)"),
    Rule(yaml: "devices:\n  watch:\n    - address: C0:FF:EE:00:00:0G\n", key: "devices.watch[0].address", line: 3,
         message: "\"C0:FF:EE:00:00:0G\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none, at character 17)"),
    Rule(yaml: "devices:\n  watch:\n    - subscribe: [2a37]\n", key: "devices.watch[0].address", line: 3,
         message: "missing; every watched device needs its address"),
    Rule(yaml: "devices:\n  watch:\n    - C0:FF:EE:00:00:01\n", key: "devices.watch[0]", line: 3,
         message: "expected a mapping like { address: \"C0:FF:EE:00:00:01\", subscribe: [2a37] }, got \"C0:FF:EE:00:00:01\""),
    Rule(yaml: "devices:\n  watch:\n    - { address: C0:FF:EE:00:00:01 }\n    - { address: c0:ff:ee:00:00:01 }\n", key: "devices.watch[1].address", line: 4,
         message: "C0:FF:EE:00:00:01 is watched twice; first on line 3"),
    Rule(yaml: "devices:\n  allow: []\n", key: "devices.allow", line: 2,
         message: "an empty allow list would ignore every device; leave the key out to take every device whose advertisements decode"),
    // Bindkeys.
    Rule(yaml: "devices:\n  bindkeys:\n    \"A4:C1:38\": 231d39c1d7cc1ab1aee224cd096db932\n", key: "devices.bindkeys[\"A4:C1:38\"]", line: 3,
         message: "\"A4:C1:38\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none)"),
    Rule(yaml: "devices:\n  bindkeys:\n    A4:C1:38:00:00:02: 231d39c1d7cc1ab1aee224cd096db9\n", key: "devices.bindkeys[\"A4:C1:38:00:00:02\"]", line: 3,
         message: "expected a bindkey of 32 hex characters (16 bytes), got 30 hex characters"),
    Rule(yaml: "devices:\n  bindkeys:\n    A4:C1:38:00:00:02: \"231d39c1d7cc1ab1aee224cd096db93z\"\n", key: "devices.bindkeys[\"A4:C1:38:00:00:02\"]", line: 3,
         message: "a bindkey is 16 bytes of hex: \"231d39c1d7cc1ab1aee224cd096db93z\" is not hex bytes (expected hex digits such as 0a1b, \"0a 1b\" or 0a:1b, at character 32)"),
    Rule(yaml: "devices:\n  bindkeys:\n    A4:C1:38:00:00:02: 231d39c1d7cc1ab1aee224cd096db932\n    a4:c1:38:00:00:02: 00000000000000000000000000000000\n",
         key: "devices.bindkeys[\"a4:c1:38:00:00:02\"]", line: 4, message: "a second bindkey for A4:C1:38:00:00:02; the first is on line 3"),
    Rule(yaml: "devices:\n  bindkeys: [231d39c1d7cc1ab1aee224cd096db932]\n", key: "devices.bindkeys", line: 2, message: "expected a mapping, got a list"),
    // UUIDs.
    Rule(yaml: "bluez:\n  scan:\n    filter:\n      uuids:\n        - fcd2\n        - fcd\n", key: "bluez.scan.filter.uuids[1]", line: 6,
         message: "\"fcd\" is not a Bluetooth UUID (expected 4 or 8 hex digits (\"180d\", \"0x180D\", \"0000fe95\") or 32, optionally 8-4-4-4-12 with dashes)"),
    Rule(yaml: "bluez:\n  scan: { filter: { uuids: [\"0000fcd2-0000-1000-8000-00805f9b34f\"] } }\n", key: "bluez.scan.filter.uuids[0]", line: 2,
         message: "\"0000fcd2-0000-1000-8000-00805f9b34f\" is not a Bluetooth UUID", exact: false),
    Rule(yaml: "devices:\n  watch:\n    - address: C0:FF:EE:00:00:01\n      subscribe: [ heart_rate ]\n", key: "devices.watch[0].subscribe[0]", line: 4,
         message: "\"heart_rate\" is not a Bluetooth UUID (expected 4 or 8 hex digits (\"180d\", \"0x180D\", \"0000fe95\") or 32, optionally 8-4-4-4-12 with dashes, at character 1)"),
    // Keys that exclude or need each other.
    Rule(yaml: "devices:\n  allow: [\"A4:C1:38:00:00:01\"]\n  deny: [\"A4:C1:38:00:00:02\"]\n", key: "devices.deny", line: 3,
         message: "cannot be combined with devices.allow (line 2); give one list, or neither to take every device whose advertisements decode"),
    Rule(yaml: "mqtt:\n  host: broker\n  username: u\n  password_file: /etc/hostname\n  password: p\n", key: "mqtt.password", line: 5,
         message: "give either mqtt.password or mqtt.password_file, not both"),
    Rule(yaml: "mqtt:\n  host: broker\n  password: p\n", key: "mqtt.password", line: 3,
         message: "MQTT 3.1.1 sends a password only with a user name; set mqtt.username"),
    Rule(yaml: "http:\n  token: abc\n  token_file: /etc/hostname\n", key: "http.token_file", line: 3, message: "give either http.token or http.token_file, not both"),
    Rule(yaml: "http:\n  token: \"abc def\"\n", key: "http.token", line: 2, message: "a bearer token must not contain spaces or control characters"),
    Rule(yaml: "mqtt:\n  host: broker\n  tls:\n    ca_file: /etc/hostname\n    cert_file: /etc/hostname\n", key: "mqtt.tls.cert_file", line: 5,
         message: "a client certificate needs its key; set mqtt.tls.key_file too"),
    Rule(yaml: "mqtt:\n  host: broker\n  tls:\n    ca_file: /etc/hostname\n    key_file: /etc/hostname\n", key: "mqtt.tls.key_file", line: 5,
         message: "a client key needs its certificate; set mqtt.tls.cert_file too"),
    Rule(yaml: "mqtt:\n  host: broker\n  tls:\n    insecure: true\n", key: "mqtt.tls.ca_file", line: 3,
         message: "missing; TLS needs the CA certificate(s) to check the broker with (/etc/ssl/certs/ca-certificates.crt for public CAs)"),
    Rule(yaml: "mqtt:\n  host: broker\n  tls: { ca_file: /nonexistent/ca.pem }\n", key: "mqtt.tls.ca_file", line: 3,
         message: "cannot read /nonexistent/ca.pem: No such file or directory"),
    Rule(yaml: "mqtt:\n  port: 1883\n", key: "mqtt.host", line: 1, message: "missing; the broker's host name or IP address is required"),
    // Topics.
    Rule(yaml: "mqtt:\n  host: broker\n  base_topic: home/#\n", key: "mqtt.base_topic", line: 3,
         message: "must not contain the MQTT wildcards + or #, got \"home/#\""),
    Rule(yaml: "mqtt:\n  host: broker\n  discovery_prefix: homeassistant/\n", key: "mqtt.discovery_prefix", line: 3,
         message: "must not end with /, got \"homeassistant/\""),
    Rule(yaml: "mqtt:\n  host: broker\n  client_id: \"\"\n", key: "mqtt.client_id", line: 3, message: "expected a client id, got an empty string"),
    // HTTP listeners.
    Rule(yaml: "http:\n  enabled: true\n  listen: 0.0.0.0:8080\n", key: "http.listen", line: 3,
         message: "listening on 0.0.0.0, which is not loopback, needs a bearer token; set http.token or http.token_file (or listen on 127.0.0.1)"),
    Rule(yaml: "http:\n  listen: \"[::]:8080\"\n", key: "http.listen", line: 2, message: "listening on ::, which is not loopback", exact: false),
    Rule(yaml: "http:\n  listen: 192.168.1.10:8080\n", key: "http.listen", line: 2, message: "listening on 192.168.1.10, which is not loopback", exact: false),
    Rule(yaml: "http:\n  listen: \"::1:8080\"\n", key: "http.listen", line: 2,
         message: "expected host:port or [IPv6]:port, got \"::1:8080\": an IPv6 address needs brackets, like [::1]:8080"),
    Rule(yaml: "http:\n  listen: 127.0.0.1\n", key: "http.listen", line: 2,
         message: "expected host:port or [IPv6]:port, got \"127.0.0.1\": expected host:port, like 127.0.0.1:8080"),
    Rule(yaml: "http:\n  listen: 127.0.0.1:0\n", key: "http.listen", line: 2,
         message: "expected host:port or [IPv6]:port, got \"127.0.0.1:0\": expected a port 1…65535 after the colon, got \"0\""),
    Rule(yaml: "http:\n  listen: \"[::1:8080\"\n", key: "http.listen", line: 2, message: "missing ] after the IPv6 address", exact: false),
    // Fleet mode.
    Rule(yaml: "mqtt: { host: b }\nfleet:\n  room: hall\n", key: "fleet.name", line: 2, message: "missing; every gateway of one fleet gives the same name"),
    Rule(yaml: "mqtt: { host: b }\nfleet:\n  name: \"my home\"\n", key: "fleet.name", line: 3,
         message: "expected 1 to 64 letters, digits, \".\", \"_\" or \"-\" (it is used in MQTT topics), got \"my home\""),
    Rule(yaml: "fleet: { name: home }\n", key: "fleet.enabled", line: 1,
         message: "a fleet coordinates through the MQTT broker: add an mqtt section, or set enabled: false"),
    Rule(yaml: "mqtt: { host: b }\nfleet: { name: home, hysteresis: 50 }\n", key: "fleet.hysteresis", line: 2,
         message: "expected a number of dB from 0 to 40, got 50"),
    Rule(yaml: "mqtt: { host: b }\nfleet: { name: home, sighting_interval: 0.1 }\n", key: "fleet.sighting_interval", line: 2,
         message: "expected a number of seconds ≥ 0.2", exact: false),
    Rule(yaml: "mqtt: { host: b }\nfleet: { name: home, sighting_interval: 10, stale_after: 15 }\n", key: "fleet.stale_after", line: 2,
         message: "stale_after (15 s) must be at least twice sighting_interval (10 s), or every device would lapse between two sightings"),
    Rule(yaml: "gateway: { id: fleet }\nmqtt: { host: b }\nfleet: { name: home }\n", key: "gateway.id", line: 3,
         message: "\"fleet\" is the level fleet topics live under; give this gateway another id"),
    Rule(yaml: "mqtt: { host: b }\nfleet: { name: home, rooms: hall }\n", key: "fleet.rooms", line: 2, message: "unknown key; did you mean fleet.room?"),
    // Unknown keys.
    Rule(yaml: "mqtt:\n  host: broker\n  prot: 1883\n", key: "mqtt.prot", line: 3, message: "unknown key; did you mean mqtt.port?"),
    Rule(yaml: "mqtt:\n  host: broker\n  baseTopic: x\n", key: "mqtt.baseTopic", line: 3, message: "unknown key; did you mean mqtt.base_topic?"),
    Rule(yaml: "mqt:\n  host: broker\n", key: "mqt", line: 1, message: "unknown key; did you mean mqtt?"),
    Rule(yaml: "logging: { level: debug }\n", key: "logging", line: 1,
         message: "unknown key; expected one of: gateway, bluez, devices, publish, mqtt, http, fleet"),
    Rule(yaml: "devices:\n  watch:\n    - address: C0:FF:EE:00:00:01\n      subscibe: [2a37]\n", key: "devices.watch[0].subscibe", line: 4,
         message: "unknown key; did you mean devices.watch[0].subscribe?"),
    Rule(yaml: "mqtt:\n  <<: { port: 1883 }\n  host: a\n", key: "mqtt.<<", line: 2, message: "merge keys (<<) are not supported; write the keys out"),
    // Duplicate keys.
    Rule(yaml: "mqtt:\n  host: a\n  port: 1883\n  port: 1884\n", key: "mqtt.port", line: 4, message: "duplicate key; first given on line 3"),
    Rule(yaml: "http: {}\nmqtt: { host: a }\nhttp: {}\n", key: "http", line: 3, message: "duplicate key; first given on line 1"),
    Rule(yaml: "publish: { heartbeat: 1, \"heartbeat\": 2 }\n", key: "publish.heartbeat", line: 1, message: "duplicate key; first given on line 1"),
    Rule(yaml: "devices:\n  bindkeys:\n    \"A4:C1:38:00:00:02\": 231d39c1d7cc1ab1aee224cd096db932\n    \"A4:C1:38:00:00:02\": 231d39c1d7cc1ab1aee224cd096db932\n",
         key: "devices.bindkeys[\"A4:C1:38:00:00:02\"]", line: 4, message: "duplicate key; first given on line 3"),
    // The file as a whole.
    Rule(yaml: "- mqtt\n- http\n", key: "", line: 1,
         message: "the top level must be a mapping of sections (gateway, bluez, devices, publish, mqtt, http, fleet), got a list"),
    Rule(yaml: "# a comment\nhello\n", key: "", line: 2,
         message: "the top level must be a mapping of sections (gateway, bluez, devices, publish, mqtt, http, fleet), got \"hello\""),
    Rule(yaml: "mqtt:\n  host: broker\n  port: [1883\nhttp: {}\n", key: "", line: 4,
         message: "invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence that starts on line 3)"),
    Rule(yaml: "mqtt:\n  host: broker\n port: 1883\n", key: "", line: 3,
         message: "invalid YAML: did not find expected key (while parsing a block mapping that starts on line 1)"),
    Rule(yaml: "mqtt:\n\thost: broker\n", key: "", line: 2, message: "invalid YAML: a tab where YAML allows only spaces (indent with spaces)"),
    Rule(yaml: "gateway: { id: a: b }\n", key: "", line: 1, message: "invalid YAML: ", exact: false),
    Rule(yaml: "mqtt:\n  host: \"broker\n", key: "", line: 3,
         message: "invalid YAML: found unexpected end of stream (while scanning a quoted scalar that starts on line 2)"),
    Rule(yaml: "mqtt: { host: a }\n---\nhttp: {}\n", key: "", line: 2,
         message: "invalid YAML: expected a single document in the stream, but found another document; a configuration file is one document"),
    Rule(yaml: "mqtt: &m { host: a }\nhttp: *n\n", key: "", line: 2, message: "invalid YAML: found undefined alias"),
])
func eachRuleReportsKeyLineAndMessage(_ rule: Rule) {
    let found = problems(rule.yaml)
    #expect(found.count == 1, "\(found)")
    let problem = found.first
    #expect(problem?.key == rule.key)
    #expect(problem?.line == rule.line)
    if rule.exact {
        #expect(problem?.message == rule.message)
    } else {
        #expect(problem?.message.contains(rule.message) == true, "\(problem?.message ?? "nothing")")
    }
}

// MARK: - Several problems, file order, description

@Test func allProblemsAreReportedInFileOrder() {
    let found = problems("""
        http:
          listen: 0.0.0.0:8080
        mqtt:
          hots: broker
          port: 70000
          port: 1
        devices:
          bindkeys: { "A4:C1:38:00:00:02": "00" }
          allow: [ nope ]
        bluez:
          adapter: hci0
          bus: sytem
        """)
    #expect(found == [
        Problem(line: 2, key: "http.listen",
                message: "listening on 0.0.0.0, which is not loopback, needs a bearer token; set http.token or http.token_file (or listen on 127.0.0.1)"),
        Problem(line: 4, key: "mqtt.hots", message: "unknown key; did you mean mqtt.host?"),
        Problem(line: 5, key: "mqtt.port", message: "expected an integer 1…65535, got 70000"),
        Problem(line: 6, key: "mqtt.port", message: "duplicate key; first given on line 5"),
        Problem(line: 8, key: "devices.bindkeys[\"A4:C1:38:00:00:02\"]", message: "expected a bindkey of 32 hex characters (16 bytes), got 2 hex characters"),
        Problem(line: 9, key: "devices.allow[0]", message: "\"nope\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none)"),
        Problem(line: 12, key: "bluez.bus",
                message: "expected \"system\", \"session\" or a D-Bus address like \"unix:path=/run/dbus/system_bus_socket\", got \"sytem\"; did you mean \"system\"?"),
    ])
}

@Test func everyDuplicateIsReportedAndReadingGoesOn() {
    let found = problems("""
        mqtt:
          host: a
          host: b
          host: c
          tls: { ca_file: /nonexistent/ca.pem }
        publish: { min_interval: 1, min_interval: 2 }
        """)
    #expect(found == [
        Problem(line: 3, key: "mqtt.host", message: "duplicate key; first given on line 2"),
        Problem(line: 4, key: "mqtt.host", message: "duplicate key; first given on line 2"),
        Problem(line: 5, key: "mqtt.tls.ca_file", message: "cannot read /nonexistent/ca.pem: No such file or directory"),
        Problem(line: 6, key: "publish.min_interval", message: "duplicate key; first given on line 6"),
    ])
}

@Test func duplicateKeysDoNotChangeTheValueOfTheFirst() throws {
    // The error is thrown, but the reader kept going with the first value: its problems are its own.
    let found = problems("mqtt:\n  port: 99999\n  host: a\n  port: 1883\n")
    #expect(found.map(\.line) == [2, 4])
    #expect(found.first?.message == "expected an integer 1…65535, got 99999")
}

@Test func descriptionHasOneLinePerProblem() {
    let error = GatewayConfigError(file: "gateway.yaml", problems: [
        Problem(line: 14, key: "mqtt.port", message: "expected an integer 1…65535, got \"18830x\""),
        Problem(line: 3, key: "", message: "invalid YAML: mapping values are not allowed in this context"),
        Problem(line: nil, key: "", message: "cannot read the configuration file: No such file or directory"),
    ])
    #expect(error.description == """
        gateway.yaml:14: mqtt.port: expected an integer 1…65535, got "18830x"
        gateway.yaml:3: invalid YAML: mapping values are not allowed in this context
        gateway.yaml: cannot read the configuration file: No such file or directory
        """)
    #expect(error.localizedDescription == error.description)
}

@Test func parseErrorsNameTheFileGiven() {
    do throws(GatewayConfigError) {
        _ = try GatewayConfiguration.parse("mqtt:\n  host: broker\n  port: 18830x\n", file: "gateway.yaml")
        Issue.record("expected an error")
    } catch {
        #expect(error.file == "gateway.yaml")
        #expect(error.description == "gateway.yaml:3: mqtt.port: expected an integer 1…65535, got \"18830x\"")
    }
}

@Test func loadReportsAnUnreadableFile() {
    let path = "/nonexistent/gateway.yaml"
    do throws(GatewayConfigError) {
        _ = try GatewayConfiguration.load(path: path)
        Issue.record("expected an error")
    } catch {
        #expect(error == GatewayConfigError(file: path, problems: [
            Problem(line: nil, key: "", message: "cannot read the configuration file: No such file or directory"),
        ]))
    }
}

@Test func loadReportsInvalidUTF8WithItsLine() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let path = directory.appendingPathComponent("gateway.yaml")
    try Data("mqtt:\n  host: broker\n  client_id: ".utf8 + [0xFF, 0xFE] + Data("\n".utf8)).write(to: path)
    do throws(GatewayConfigError) {
        _ = try GatewayConfiguration.load(path: path.path)
        Issue.record("expected an error")
    } catch {
        #expect(error.problems == [Problem(line: 3, key: "", message: "the file is not valid UTF-8")])
    }
}

// MARK: - Pieces

@Test func suggestionsAreCloseWordsOnly() {
    #expect(Suggestion.closest(to: "hots", among: ["host", "port"]) == "host")
    #expect(Suggestion.closest(to: "Host", among: ["host", "port"]) == "host")
    #expect(Suggestion.closest(to: "state-dir", among: ["id", "state_dir"]) == "state_dir")
    #expect(Suggestion.closest(to: "username", among: ["host", "port"]) == nil)
    #expect(Suggestion.editDistance(Array("kitten"), Array("sitting")) == 3)
}

@Test func duplicateMarkerGoesInsideQuotes() {
    #expect(YAMLDocument.insert("X", into: "a: 1\n\"b\": 2\n", line: 2, column: 1) == "a: 1\n\"Xb\": 2\n")
    #expect(YAMLDocument.insert("X", into: "a: 1\r\n  b: 2\n", line: 2, column: 3) == "a: 1\r\n  Xb: 2\n")
    #expect(YAMLDocument.insert("X", into: "a: 1\n", line: 3, column: 1) == nil)
    #expect(ConfigReader.unmarked("__blecompanion_duplicate_12__port") == "port")
    #expect(ConfigReader.unmarked("port") == "port")
}

// MARK: - Numbers that would trap when converted

/// Every interval key refuses huge, negative, infinite and NaN values with its
/// key and line (a gateway started with `heartbeat: 1e16` used to pass the
/// check and then trap at start, a crash loop under systemd).
@Test(arguments: ["publish:\n  heartbeat: %@\n", "publish:\n  min_interval: %@\n", "devices:\n  expire_after: %@\n"],
      ["1e16", "1e300", "-1", ".inf", "-.inf", ".nan", "315576001"])
func intervalKeysRefuseNumbersOutsideTheirBounds(template: String, value: String) {
    let yaml = "gateway:\n  id: x\n" + template.replacingOccurrences(of: "%@", with: value)
    let found = problems(yaml)
    let key = template.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: ": %@", with: "") }
        .joined(separator: ".").replacingOccurrences(of: ":", with: "")
    #expect(found.count == 1, "\(value) in \(key): \(found)")
    #expect(found.first?.key == key, "\(found)")
    #expect(found.first?.line == 4, "\(found)")
    #expect(found.first?.message.contains("got") == true, "\(found)")
}

@Test func tenYearsIsTheLargestIntervalAccepted() {
    #expect(problems("gateway:\n  id: x\npublish:\n  heartbeat: 315576000\n").isEmpty)
}

@Test func bluetoothdPingInterval() throws {
    #expect(try GatewayConfiguration.parse("bluez: { ping_interval: 2.5 }\n").pingInterval == 2.5)
    #expect(try GatewayConfiguration.parse("bluez: { ping_interval: 0 }\n").pingInterval == 0)
    let refused = problems("bluez:\n  ping_interval: -1\n")
    #expect(refused.count == 1 && refused.first?.key == "bluez.ping_interval" && refused.first?.line == 2, "\(refused)")
    #expect(problems("bluez:\n  ping_interval: often\n").first?.key == "bluez.ping_interval")
}

/// The configuration reads addresses, UUIDs and keys through the shared
/// vocabulary: every spelling the CLI, scenario files and the HTTP API take
/// is taken here too, and comes out as one value.
@Test func everySpellingOfAnAddressOrUUIDTheCLITakesLoads() throws {
    let configuration = try GatewayConfiguration.parse("""
        bluez:
          scan:
            filter:
              uuids: [ "0xFCD2", "0000fe95", "0000181A-0000-1000-8000-00805F9B34FB", "0000181a00001000800000805f9b34fb" ]
        devices:
          allow: [ "a4:c1:38:00:00:01", "A4-C1-38-00-00-02", "A4_C1_38_00_00_03", "a4c138000004" ]
          bindkeys: { "a4c138000001": "23 1d 39 c1 d7 cc 1a b1 ae e2 24 cd 09 6d b9 32" }
        """)
    #expect(configuration.filter.uuids == [
        "0000fcd2-0000-1000-8000-00805f9b34fb", "0000fe95-0000-1000-8000-00805f9b34fb",
        "0000181a-0000-1000-8000-00805f9b34fb", "0000181a-0000-1000-8000-00805f9b34fb",
    ])
    let expected = try (1...4).map { try BluetoothAddress("A4:C1:38:00:00:0\($0)") }
    #expect(configuration.selection == .allow(expected))
    #expect(configuration.bindkeys[expected[0]]?.count == 16)
}


@Test func aFleetSectionIsReadWithItsDefaults() throws {
    let c = try GatewayConfiguration.parse("gateway: { id: hall-1 }\nmqtt: { host: b }\nfleet: { name: home, room: Hall, dwell: 5 }\n")
    let fleet = try #require(c.fleet)
    #expect(fleet == GatewayConfiguration.Fleet(name: "home", room: "Hall", hysteresis: 6, dwell: 5, staleAfter: 30, sightingInterval: 2))
    #expect(try GatewayConfiguration.parse("mqtt: { host: b }\nfleet: { name: home, enabled: false }\n").fleet == nil)
    #expect(try GatewayConfiguration.parse("mqtt: { host: b }\n").fleet == nil)
}

@Test func identitiesAreReadAndCheckedLikeBindkeys() throws {
    let c = try GatewayConfiguration.parse("devices:\n  identities: { watch: \"ec0234a3 57c8ad05 341010a6 0a397d9b\" }\n  bonded_identities: true\n")
    #expect(c.identities["watch"]?.count == 16 && c.identities["watch"]?.first == 0xEC)
    #expect(c.bondedIdentities == "/var/lib/bluetooth")
    let bad = problems("devices:\n  identities:\n    \"a b\": ec0234a357c8ad05341010a60a397d9b\n    w: ec02\n    x: ec0234a357c8ad05341010a60a397d9b\n    y: ec0234a357c8ad05341010a60a397d9b\n")
    #expect(bad.map(\.line) == [3, 4, 6], "\(bad)")
    #expect(bad.first?.message.contains("identity name") == true)
    #expect(bad.dropFirst().first?.message.contains("got 4 hex characters") == true)
    #expect(bad.last?.message.contains("the same key as identity x") == true)
}

@Test func fleetFixtureLoadsWithItsValues() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let c = try GatewayConfiguration.load(path: root.appendingPathComponent("fixtures/gateway/fleet-hall.yaml").path)
    #expect(c.gatewayID == "hall")
    #expect(c.fleet == .init(name: "home", room: "Hall", hysteresis: 6, dwell: 10, staleAfter: 30, sightingInterval: 2))
    #expect(c.identities["ann_phone"] == [0xEC, 0x02, 0x34, 0xA3, 0x57, 0xC8, 0xAD, 0x05, 0x34, 0x10, 0x10, 0xA6, 0x0A, 0x39, 0x7D, 0x9B])
    #expect(c.bondedIdentities == "/var/lib/bluetooth")
    #expect(c.mqtt?.keepAlive == 15)
}
