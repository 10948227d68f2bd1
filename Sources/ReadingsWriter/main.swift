// readings-writer: test support for the crash-consistency test of the
// readings store. Writes readings to the database at PATH as fast as it can
// and prints "committed N" after each committed record, until killed.
import BLEParsing
import BlueZ
import Domain
import Foundation
import Vocabulary

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 1, let path = arguments.first else {
    FileHandle.standardError.write(Data("usage: readings-writer DATABASE-PATH\n".utf8))
    exit(64)
}
do {
    var policy = RetentionPolicy()
    policy.minimumInterval = 0
    let store = try ReadingStore(path: path, policy: policy)
    let device = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: try BluetoothAddress("CB:B8:33:4C:88:4F"))
    var n = 0
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    while true {
        let record = DeviceRecord(id: device, name: "Ruuvi 884F", format: "ruuvi", readings: [
            Reading(kind: .temperature, value: .number(Double(n % 40)), unit: "°C"),
            Reading(kind: .humidity, value: .number(Double(n % 100)), unit: "%"),
        ])
        try store.record(record, at: start.addingTimeInterval(Double(n)))
        n += 1
        FileHandle.standardOutput.write(Data("committed \(n)\n".utf8))
    }
} catch {
    FileHandle.standardError.write(Data("readings-writer: \(error)\n".utf8))
    exit(1)
}
