import Testing
@testable import DBus
@testable import BlueZ

/// The mirror reads GetManagedObjects in place (its reply left in wire
/// form), object by object: it must build the very tree the decoded reply
/// gives, and refuse what the decoded path refuses.
@Suite struct ManagedObjectsInPlaceTests {
    static let interfacesType: DBusType = .dictionary(key: .string, value: .dictionary(key: .string, value: .variant))

    static func reply(_ objects: [(String, [String: [String: DBusValue]])]) -> DBusMessage {
        let entries = objects.map { path, interfaces in
            DBusDictEntry(.objectPath(ObjectPath(unchecked: path)), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant),
                interfaces.sorted { $0.key < $1.key }.map { name, properties in
                    DBusDictEntry(.string(name), .dictionary(key: .string, value: .variant,
                                                             properties.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .variant($0.value)) }))
                }))
        }
        return DBusMessage(kind: .methodReturn, replySerial: 1, body: [.dictionary(key: .objectPath, value: interfacesType, entries)])
    }

    static let objects: [(String, [String: [String: DBusValue]])] = [
        ("/org/bluez/hci0", ["org.bluez.Adapter1": ["Address": .string("00:11:22:33:44:55"), "Powered": .boolean(true)]]),
        ("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF", [
            "org.bluez.Device1": ["Address": .string("AA:BB:CC:DD:EE:FF"), "RSSI": .int16(-61), "Name": .string("Ruuvi EEFF"),
                                  "ManufacturerData": .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(0x0499), .variant(.bytes([5, 1, 2])))])],
            "org.bluez.Battery1": ["Percentage": .byte(87)],
        ]),
        ("/org/bluez/hci0/dev_11_22_33_44_55_66", ["org.bluez.Device1": ["Address": .string("11:22:33:44:55:66"), "Connected": .boolean(true)]]),
    ]

    @Test func readInPlaceItIsTheTreeTheDecodedReplyGives() throws {
        let message = Self.reply(Self.objects)
        let decoded = try BlueZSnapshot(managedObjects: #require(message.body.first))
        let lazy = try message.deferringBody()
        let inPlace = try #require(try lazy.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) in try BlueZSnapshot(managedObjects: &r) })
        #expect(inPlace == decoded)
        #expect(inPlace.devices.count == 2)
        let id = try #require(DeviceID(path: "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"))
        #expect(inPlace.devices[id]?.rssi == -61 && inPlace.batteries[id] == 87)
        // An empty reply: bluetoothd with no adapter.
        let none = try Self.reply([]).deferringBody()
        let empty = try #require(try none.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) in try BlueZSnapshot(managedObjects: &r) })
        #expect(empty.available && empty.devices.isEmpty)
    }

    @Test func aBadPathOrTruncatedReplyIsATypedError() throws {
        let message = Self.reply(Self.objects)
        func read(_ m: DBusMessage) throws -> BlueZSnapshot? {
            try m.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) in try BlueZSnapshot(managedObjects: &r) }
        }
        // The first path "/org/bluez/hci0" made "org/bluez/hci0/" (no leading slash): not an object path.
        let badPath = try message.deferringBody { body in
            let at = 12   // array length, padding to 8, the path's length: its first byte
            body.replaceSubrange(at..<(at + 15), with: Array("org/bluez/hci0/".utf8))
        }
        #expect(throws: DBusError.self) { try read(badPath) }
        // The body cut short in its last object.
        let truncated = try message.deferringBody { body in body.removeLast(8) }
        #expect(throws: DBusError.self) { try read(truncated) }
    }
}
