import DBus

/// `bench dbus-decode`: the Swift wire decoder alone on one BlueZ-shaped
/// PropertiesChanged message (no socket, no libdbus), in ns per message.
enum DBusDecodeBench {
    static func run(_ arguments: [String]) -> Int32 {
        let iterations = arguments.first.flatMap { Int($0) } ?? 1_000_000
        let payload: [UInt8] = [0x05] + (1...23).map { UInt8(truncatingIfNeeded: 7 + 13 * $0) }
        let message = DBusMessage(
            kind: .signal, path: "/org/bluez/hci0/dev_C0_FE_00_00_00_01", interface: "org.freedesktop.DBus.Properties",
            member: "PropertiesChanged",
            body: [
                .string("org.bluez.Device1"),
                .dictionary(key: .string, value: .variant, [
                    DBusDictEntry(.string("RSSI"), .variant(.int16(-60))),
                    DBusDictEntry(.string("ManufacturerData"), .variant(.dictionary(key: .uint16, value: .variant, [
                        DBusDictEntry(.uint16(0x0499), .variant(.bytes(payload))),
                    ]))),
                ]),
                .array(.string, []),
            ])
        do {
            var bytes = try message.marshalled()
            // libdbus leaves the sender out; the bus adds it. Decode as received.
            _ = bytes.count
            let decoder = DBusMessageDecoder()
            var sink = 0
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<iterations {
                let m = try decoder.decode(bytes)
                sink &+= m.body.count
            }
            let elapsed = clock.now - start
            let ns = (Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9) / Double(iterations)
            printFlushed("{\"bench\":\"dbus-decode\",\"iterations\":\(iterations),\"ns_per_message\":\(ns),\"bytes\":\(bytes.count),\"sink\":\(sink)}")
            bytes.removeAll()
            return 0
        } catch {
            writeError("bench dbus-decode: \(error)")
            return 1
        }
    }
}
