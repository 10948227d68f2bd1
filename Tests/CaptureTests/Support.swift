import BLEParsing
import BlueZSimulator
import DBus
import Foundation
import ScenarioFormat
import TestSupport
import Vocabulary

/// A scenario from fixtures/scenarios.
func fixture(_ name: String) throws -> Scenario {
    try Scenario.load(path: packageRoot().appendingPathComponent("fixtures/scenarios/\(name)").path)
}

func fixturePath(_ name: String) -> String { packageRoot().appendingPathComponent("fixtures/scenarios/\(name)").path }

let base = "-0000-1000-8000-00805f9b34fb"
func uuid(_ short: String) -> String { "0000\(short)\(base)" }

func bytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var it = hex.filter { $0 != " " }.makeIterator()
    while let a = it.next(), let b = it.next() { out.append(UInt8(String([a, b]), radix: 16) ?? 0) }
    return out
}

/// D-Bus dictionaries as bluetoothd sends them.
func serviceDataValue(_ d: [String: [UInt8]]) -> DBusValue {
    .dictionary(key: .string, value: .variant, d.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .variant(.bytes($0.value))) })
}

func manufacturerDataValue(_ d: [UInt16: [UInt8]]) -> DBusValue {
    .dictionary(key: .uint16, value: .variant, d.sorted { $0.key < $1.key }.map { DBusDictEntry(.uint16($0.key), .variant(.bytes($0.value))) })
}

/// What the parsing module decodes from a device's advertised data.
func readings(name: String?, manufacturer: [UInt16: [UInt8]], service: [String: [UInt8]]) -> [Reading] {
    var adv = Advertisement(localName: name)
    for (k, v) in manufacturer.sorted(by: { $0.key < $1.key }) { adv.manufacturerData.append(ManufacturerData(companyID: k, data: v)) }
    for (k, v) in service.sorted(by: { $0.key < $1.key }) {
        if let u = try? BluetoothUUID(parsing: k) { adv.serviceData.append(ServiceData(uuid: u, data: v)) }
    }
    return AdvertisementDecoder.decode(adv).compactMap { try? $0.get() }.flatMap(\.readings)
}
