// Seeds the harnesses cannot take from fixtures: D-Bus streams marshalled
// by libdbus (what the bus sends BlueZ clients), command payloads and
// command-line words. `fuzz seeds HARNESS DIR` writes them; scripts/fuzz-all
// adds the fixture files (captures, scenarios, configurations).
import DBus

enum Seeds {
    static func inputs(for harness: Harness) -> [[UInt8]] {
        switch harness {
        case .dbus: return dbus()
        case .command: return commands.map { Array($0.utf8) }
        case .text: return words.map { Array($0.utf8) }
        case .http: return requests.map { [UInt8(7)] + Array($0.utf8) }
        case .fleet: return fleet.map { Array($0.utf8) }
        case .btsnoop, .scenario, .config, .profile: return []
        }
    }

    static let fleet = [
        #"{"gateway":"hall","room":"Hall","at":1764200000.250,"devices":{"cbb8334c884f":{"rssi":-63,"state":"9f3a"},"id_phone":{"rssi":-70}}}"#,
        #"{"gateway":"hall","at":1764200000.250}"#, #"{"gateway":"k-1","at":0,"devices":{}}"#,
        #"{"gateway":"a","at":1,"devices":{"e45f01aa1001":{"rssi":20.4}}}"#, "",
    ]

    static let commands = [
        #"{"action": "connect"}"#, #"{"action": "disconnect", "id": 7}"#,
        #"{"action": "read", "characteristic": "2a37", "id": "r1"}"#,
        #"{"action": "read", "characteristic": "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2/service000c/char000d"}"#,
        #"{"action": "write", "characteristic": "0x2A39", "value": "01", "without_response": false}"#,
        #"{"action": "write", "characteristic": "6e400002-b5a3-f393-e0a9-e50e24dcca9e", "value": "0a:1b 2c", "without_response": true}"#,
        #"{"action": "notify", "characteristic": "2a37", "enable": false}"#,
        #"{"action": "read"}"#, #"[1, 2]"#, #"{"action": "read", "characteristic": 12}"#,
    ]

    /// Requests as the gateway's clients send them (each input starts with
    /// the byte that picks the harness's piece size).
    static let requests = [
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "GET /api/devices/A4:C1:38:8D:18:B2/history?kind=temperature&since=2026-11-25T00:00:00Z HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n",
        "POST /api/devices/A4%3AC1%3A38%3A8D%3A18%3AB2/actions HTTP/1.1\r\nContent-Length: 20\r\nContent-Type: application/json\r\n\r\n{\"action\":\"connect\"}",
        "GET /api/events HTTP/1.0\r\nConnection: keep-alive\r\nAccept: text/event-stream\r\n\r\n",
        "POST /api/devices/x/actions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
        "GET http://gw.local:8080/metrics HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n",
        "\r\n\nOPTIONS * HTTP/1.1\nHost: a\n\n",
    ]

    static let words = [
        "A4:C1:38:8D:18:B2", "a4-c1-38-8d-18-b2", "e45f01aa1001", "180d", "0x180D", "0000fe95",
        "0000180d-0000-1000-8000-00805f9b34fb", "6e400001b5a3f393e0a9e50e24dcca9e", "0a1b2c", "0x16 48:54 01",
        "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2", "a{sv}", "(yqa{sv})", "aay", "unix:path=/run/dbus/system_bus_socket",
    ]

    /// Streams of one to three messages, each prefixed with the harness's
    /// option byte (descriptors, on-demand bodies, libdbus comparison) and
    /// its cut seed.
    static func dbus() -> [[UInt8]] {
        let device: ObjectPath = "/org/bluez/hci0/dev_A4_C1_38_8D_18_B2"
        func props(_ entries: [(String, DBusValue)]) -> DBusValue {
            .dictionary(key: .string, value: .variant, entries.map { DBusDictEntry(.string($0.0), .variant($0.1)) })
        }
        let manufacturer = DBusValue.dictionary(key: .uint16, value: .variant,
                                                [DBusDictEntry(.uint16(0x0499), .variant(.bytes([0x05, 0x12, 0xFC, 0x53, 0x94, 0xC3, 0x7C])))])
        let serviceData = DBusValue.dictionary(key: .string, value: .variant,
                                               [DBusDictEntry(.string("0000fcd2-0000-1000-8000-00805f9b34fb"), .variant(.bytes([0x40, 0x00, 0xA4, 0x01, 0x64])))])
        let changed = DBusMessage(kind: .signal, serial: 0, path: device, interface: "org.freedesktop.DBus.Properties",
                                  member: "PropertiesChanged", sender: ":1.4",
                                  body: [.string("org.bluez.Device1"),
                                         props([("RSSI", .int16(-61)), ("ManufacturerData", manufacturer), ("ServiceData", serviceData)]),
                                         .array(.string, [.string("TxPower")])])
        let added = DBusMessage(kind: .signal, serial: 0, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                                member: "InterfacesAdded", sender: ":1.4",
                                body: [.objectPath(device),
                                       .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                                           DBusDictEntry(.string("org.bluez.Device1"), props([
                                               ("Address", .string("A4:C1:38:8D:18:B2")), ("Name", .string("ATC_8D18B2")),
                                               ("Paired", .boolean(false)), ("UUIDs", .array(.string, [.string("0000181a-0000-1000-8000-00805f9b34fb")])),
                                               ("Adapter", .objectPath("/org/bluez/hci0")), ("TxPower", .int16(4)),
                                           ])),
                                       ])])
        let reply = DBusMessage(kind: .methodReturn, serial: 0, replySerial: 12, destination: ":1.9", sender: ":1.4",
                                body: [.structure([.byte(1), .boolean(true), .int16(-2), .uint16(2), .int32(-3), .uint32(3),
                                                   .int64(-4), .uint64(4), .double(2.5), .string("ü"), .objectPath("/a/b"),
                                                   .signature([.dictionary(key: .string, value: .variant)])]),
                                       .variant(.variant(.array(.int32, [.int32(1), .int32(2)]))),
                                       .array(.structure([.string, .array(.byte)]),
                                              [.structure([.string("x"), .bytes([1, 2, 3])])])])
        let error = DBusMessage(kind: .error, serial: 0, replySerial: 13, errorName: "org.bluez.Error.NotConnected",
                                destination: ":1.9", sender: ":1.4", body: [.string("Not Connected")])
        let call = DBusMessage(kind: .methodCall, flags: [.noReplyExpected], serial: 0, path: "/com/blecompanion/agent",
                               interface: "org.bluez.Agent1", member: "RequestConfirmation", destination: ":1.9", sender: ":1.4",
                               body: [.objectPath(device), .uint32(246810)])
        let messages = [changed, added, reply, error, call]
        var serial: UInt32 = 1
        func wire(_ m: DBusMessage) -> [UInt8] {
            defer { serial += 1 }
            return (try? m.marshalled(serial: serial)) ?? []
        }
        var out: [[UInt8]] = []
        for (i, m) in messages.enumerated() {
            let options: [UInt8] = [0x08, 0x0C, 0x01]
            for o in options { out.append([o, UInt8(i * 37 & 0xFF)] + wire(m)) }
        }
        out.append([0x0C, 99] + wire(changed) + wire(added) + wire(changed))
        out.append([0x08, 3] + wire(reply) + wire(error) + wire(call))
        return out
    }
}
