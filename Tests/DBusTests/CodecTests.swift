import Foundation
import Testing
@testable import DBus

/// One value of every basic type and every nesting shape.
let sampleValues: [DBusValue] = [
    .byte(0), .byte(255),
    .boolean(true), .boolean(false),
    .int16(-32768), .int16(32767), .uint16(65535),
    .int32(Int32.min), .uint32(UInt32.max),
    .int64(Int64.min), .uint64(UInt64.max),
    .double(-0.5), .double(1e300), .double(.infinity),
    .string(""), .string("héllo wörld ✓ 🚀"),
    .objectPath("/org/bluez/hci0"), .signature(DBusSignature([.dictionary(key: .string, value: .variant)])),
    .bytes([]), .bytes([0, 1, 2, 254, 255]),
    .array(.string, []), .array(.string, [.string("a"), .string("b")]),
    .array(.int64, [.int64(1), .int64(-1)]),
    .array(.array(.int32), [.array(.int32, [.int32(1)]), .array(.int32, [])]),
    .dictionary(key: .string, value: .variant, [
        DBusDictEntry(.string("RSSI"), .variant(.int16(-60))),
        DBusDictEntry(.string("ManufacturerData"), .variant(.dictionary(key: .uint16, value: .variant, [
            DBusDictEntry(.uint16(0x0499), .variant(.bytes([5, 0x12, 0xfc]))),
        ]))),
    ]),
    .dictionary(key: .uint32, value: .string, []),
    .structure([.int32(1), .string("x"), .structure([.double(2.5), .bytes([9])])]),
    .array(.structure([.byte, .variant]), [.structure([.byte(1), .variant(.string("v"))])]),
    .variant(.variant(.variant(.uint64(3)))),
    .variant(.array(.objectPath, [.objectPath("/a"), .objectPath("/b/c")])),
]

@Suite struct CodecTests {
    @Test(arguments: sampleValues)
    func everyValueRoundTripsThroughBothDecoders(_ value: DBusValue) throws {
        let message = DBusMessage(kind: .signal, path: "/t", interface: "com.example.T", member: "S", body: [value, .int32(42)])
        let (wire, iterators) = try LibDBusCodec.roundTrip(message)
        #expect(wire.body == [value, .int32(42)])
        #expect(iterators.body == [value, .int32(42)])
        #expect(wire.signature == message.signature)
        #expect(wire.path == "/t")
        #expect(wire.interface == "com.example.T")
        #expect(wire.member == "S")
        #expect(wire.serial == 7)
    }

    @Test func allSamplesInOneMessage() throws {
        let message = DBusMessage(kind: .methodCall, path: "/x", interface: "com.example.X", member: "M",
                                  destination: "com.example.svc", body: sampleValues)
        let (wire, iterators) = try LibDBusCodec.roundTrip(message)
        #expect(wire.body == sampleValues)
        #expect(iterators.body == sampleValues)
        #expect(wire.destination == "com.example.svc")
    }

    @Test func typedDecodingOfBlueZShapes() throws {
        let tree: DBusValue = .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), [
            DBusDictEntry(.objectPath("/org/bluez/hci0"), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                DBusDictEntry(.string("org.bluez.Adapter1"), .propertyMap(["Powered": .boolean(true), "Address": .string("00:11:22:33:44:55")])),
            ])),
        ])
        let decoded: [ObjectPath: [String: [String: DBusValue]]] = try tree.decode()
        #expect(decoded["/org/bluez/hci0"]?["org.bluez.Adapter1"]?["Powered"] == .boolean(true))
        let props: [String: DBusValue] = try DBusValue.propertyMap(["RSSI": .int16(-40)]).decode()
        #expect(props["RSSI"] == .int16(-40))
        let bytes: [UInt8] = try DBusValue.bytes([1, 2]).decode()
        #expect(bytes == [1, 2])
        #expect(throws: DBusError.self) { let _: [String] = try DBusValue.bytes([1]).decode() }
        #expect(throws: DBusError.self) { let _: [String: Int32] = try DBusValue.propertyMap([:]).decode() }
        // Encoding typed values yields the same wire type.
        #expect(["a": Int32(1)].dbusValue.type == .dictionary(key: .string, value: .int32))
        #expect([UInt8(1)].dbusValue == .bytes([1]))
    }

    @Test func invalidValuesAreRejectedBeforeLibdbusSeesThem() {
        let cases: [(DBusValue, String)] = [
            (.string("a\u{0}b"), "NUL"),
            (.array(.string, [.int32(1)]), "array element 0"),
            (.dictionary(key: .string, value: .int32, [DBusDictEntry(.string("k"), .string("v"))]), "dictionary value 0"),
            (.structure([]), "empty struct"),
        ]
        for (value, reason) in cases {
            let message = DBusMessage(kind: .signal, path: "/t", interface: "com.example.T", member: "S", body: [value])
            do {
                _ = try LibDBusCodec.makeCMessage(message)
                Issue.record("accepted \(value)")
            } catch {
                #expect(error.description.contains(reason), "\(error)")
            }
        }
        let badMember = DBusMessage(kind: .signal, path: "/t", interface: "com.example.T", member: "no-dash")
        #expect(throws: DBusError.self) { try LibDBusCodec.makeCMessage(badMember) }
        let badInterface = DBusMessage(kind: .methodCall, path: "/t", interface: "nodots", member: "M")
        #expect(throws: DBusError.self) { try LibDBusCodec.makeCMessage(badInterface) }
    }

    @Test func truncatedAndCorruptWireDataNeverTraps() throws {
        let message = DBusMessage(kind: .signal, path: "/org/bluez/hci0/dev_1", interface: "org.freedesktop.DBus.Properties",
                                  member: "PropertiesChanged", body: [.string("org.bluez.Device1"), sampleValues[24], .array(.string, [])])
        let bytes = try LibDBusCodec.marshal(message)
        #expect(try bytes.withUnsafeBytes { try WireDecoder.decodeMessage($0) }.body == message.body)
        // Every truncation fails with a typed error.
        for cut in 0..<bytes.count {
            let prefix = Array(bytes[0..<cut])
            #expect(throws: DBusError.self) { try prefix.withUnsafeBytes { try WireDecoder.decodeMessage($0) } }
        }
        // Random corruption: decode or throw, never trap.
        var rng = SplitMix64(seed: 0xB1E)
        var failures = 0
        for _ in 0..<5000 {
            var corrupt = bytes
            for _ in 0..<Int(rng.next() % 4 + 1) {
                corrupt[Int(rng.next() % UInt64(corrupt.count))] = UInt8(truncatingIfNeeded: rng.next())
            }
            do { _ = try corrupt.withUnsafeBytes { try WireDecoder.decodeMessage($0) } } catch { failures += 1 }
        }
        #expect(failures > 0)
        // Specific diagnoses.
        var badEndian = bytes
        badEndian[0] = UInt8(ascii: "X")
        #expect(throws: DBusError.malformedMessage("unknown byte-order mark 0x58")) { try badEndian.withUnsafeBytes { try WireDecoder.decodeMessage($0) } }
    }

    @Test func bigEndianMessagesDecode() throws {
        // Hand-built big-endian signal: path /a, interface a.b, member C, body "u" = 258.
        var m: [UInt8] = [UInt8(ascii: "B"), 4, 0, 1, 0, 0, 0, 4, 0, 0, 0, 9]
        var fields: [UInt8] = []
        func pad(_ a: inout [UInt8], _ n: Int) { while (a.count + 16) % n != 0 { a.append(0) } }
        fields += [1, 1, UInt8(ascii: "o"), 0, 0, 0, 0, 2, UInt8(ascii: "/"), UInt8(ascii: "a"), 0]
        pad(&fields, 8)
        fields += [2, 1, UInt8(ascii: "s"), 0, 0, 0, 0, 3] + Array("a.b".utf8) + [0]
        pad(&fields, 8)
        fields += [3, 1, UInt8(ascii: "s"), 0, 0, 0, 0, 1, UInt8(ascii: "C"), 0]
        pad(&fields, 8)
        fields += [8, 1, UInt8(ascii: "g"), 0, 1, UInt8(ascii: "u"), 0]
        let length = UInt32(fields.count)
        m += [UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff)]
        m += fields
        while m.count % 8 != 0 { m.append(0) }
        m += [0, 0, 1, 2]
        let decoded = try m.withUnsafeBytes { try WireDecoder.decodeMessage($0) }
        #expect(decoded.body == [.uint32(258)])
        #expect(decoded.member == "C")
        #expect(decoded.serial == 9)
    }
}

/// A small deterministic generator for property-style tests.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}
