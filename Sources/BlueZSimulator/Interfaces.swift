import DBus
import ScenarioFormat

/// Interface and error names of bluetoothd's D-Bus API (BlueZ doc/org.bluez.*.rst).
enum BlueZ {
    static let adapter = "org.bluez.Adapter1"
    static let device = "org.bluez.Device1"
    static let battery = "org.bluez.Battery1"
    static let agentManager = "org.bluez.AgentManager1"
    static let agent = "org.bluez.Agent1"
    static let gattService = "org.bluez.GattService1"
    static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    static let gattDescriptor = "org.bluez.GattDescriptor1"
    static let advertisementMonitorManager = "org.bluez.AdvertisementMonitorManager1"
    static let advertisementMonitor = "org.bluez.AdvertisementMonitor1"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"
}

/// An error reply with a BlueZ error name (`org.bluez.Error.<short>`).
func bluezError(_ short: String, _ message: String) -> DBusError {
    .remote(name: "org.bluez.Error." + short, message: message)
}

extension ErrorSpec {
    var dbusError: DBusError { .remote(name: name, message: message) }
}

let stringArray = DBusType.array(.string)
let manufacturerDataType = DBusType.dictionary(key: .uint16, value: .variant)
let serviceDataType = DBusType.dictionary(key: .string, value: .variant)
let optionsType = DBusType.dictionary(key: .string, value: .variant)

func strings(_ list: [String]) -> DBusValue { .array(.string, list.map { .string($0) }) }

func manufacturerDataValue(_ data: [UInt16: [UInt8]]) -> DBusValue {
    .dictionary(key: .uint16, value: .variant, data.sorted { $0.key < $1.key }.map { DBusDictEntry(.uint16($0.key), .variant(.bytes($0.value))) })
}

func serviceDataValue(_ data: [String: [UInt8]]) -> DBusValue {
    .dictionary(key: .string, value: .variant, data.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .variant(.bytes($0.value))) })
}

/// "AA:BB:CC:DD:EE:FF" → "dev_AA_BB_CC_DD_EE_FF".
func deviceNodeName(_ address: String) -> String {
    "dev_" + String(address.map { $0 == ":" ? "_" : $0 })
}

func hex4(_ v: Int) -> String {
    let s = String(v, radix: 16)
    return String(repeating: "0", count: max(0, 4 - s.count)) + s
}

/// BlueZ's icon names for the appearance categories (Core Supplement, Appearance).
func iconForAppearance(_ appearance: UInt16) -> String? {
    switch appearance {
    case 0x03c1: return "input-keyboard"
    case 0x03c2: return "input-mouse"
    case 0x03c3, 0x03c4: return "input-gaming"
    case 0x03c5: return "input-tablet"
    default: break
    }
    switch appearance >> 6 {
    case 0x01: return "phone"
    case 0x02: return "computer"
    case 0x05: return "video-display"
    case 0x0a: return "multimedia-player"
    case 0x0b: return "scanner"
    default: return nil
    }
}

extension BlueZSimulator {
    /// An interface as this scenario's bluetoothd exports it: without the
    /// properties its version (and `--experimental` or not) lacks.
    nonisolated func exported(_ description: DBusInterfaceDescription, values: [String: DBusValue]) -> DBusExportedInterface {
        let version = scenario.bluetoothdVersion, experimental = scenario.experimental
        var d = description
        d.properties.removeAll { !version.has(description.name, $0.name, experimental: experimental) }
        return DBusExportedInterface(d, values: values.filter { version.has(description.name, $0.key, experimental: experimental) })
    }
}
