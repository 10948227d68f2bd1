import Testing
import Vocabulary

@Suite("BluetoothUUID")
struct UUIDTests {
    @Test func shortAndFullForms() throws {
        let hr = BluetoothUUID(uuid16: 0x180D)
        #expect(hr.string == "0000180d-0000-1000-8000-00805f9b34fb")
        #expect(hr.shortString == "180d")
        #expect(hr.uuid16 == 0x180D)
        #expect(hr.uuid32 == 0x180D)
        for spelling in ["180d", "0x180D", "0X180d", "0000180D", "0000180D-0000-1000-8000-00805F9B34FB", "0000180d00001000800000805f9b34fb"] {
            #expect(try BluetoothUUID(parsing: spelling) == hr, "\(spelling)")
        }
        #expect(BluetoothUUID.canonical("0x180D") == hr.string)
        let literal: BluetoothUUID = 0x2A37
        #expect(literal.string == "00002a37-0000-1000-8000-00805f9b34fb")
    }

    @Test func thirtyTwoBitAndCustom() throws {
        let u32 = BluetoothUUID(uuid32: 0x1234_5678)
        #expect(u32.string == "12345678-0000-1000-8000-00805f9b34fb")
        #expect(u32.uuid16 == nil)
        #expect(u32.shortString == "12345678")
        #expect(BluetoothUUID(uuid32: 0xFE95).shortString == "fe95")
        let custom = try BluetoothUUID(parsing: "E95D9250-251D-470A-A062-FA1922DFA9A8")
        #expect(custom.string == "e95d9250-251d-470a-a062-fa1922dfa9a8")
        #expect(custom.uuid16 == nil)
        #expect(custom.uuid32 == nil)
        #expect(custom.shortString == custom.string)
        #expect(custom.bigEndianBytes.first == 0xE9)
        #expect(custom.littleEndianBytes.first == 0xA8)
    }

    @Test func airOrder() throws {
        #expect(BluetoothUUID(littleEndianBytes: [0x0D, 0x18]) == BluetoothUUID(uuid16: 0x180D))
        #expect(BluetoothUUID(littleEndianBytes: [0x78, 0x56, 0x34, 0x12]) == BluetoothUUID(uuid32: 0x1234_5678))
        let custom = try BluetoothUUID(parsing: "e95d9250-251d-470a-a062-fa1922dfa9a8")
        #expect(BluetoothUUID(littleEndianBytes: custom.littleEndianBytes) == custom)
        #expect(BluetoothUUID(bigEndianBytes: custom.bigEndianBytes) == custom)
        #expect(BluetoothUUID(uuid16: 0x180D).littleEndianBytes == [0x0D, 0x18])
        #expect(BluetoothUUID(littleEndianBytes: [1, 2, 3]) == nil)
        #expect(BluetoothUUID(bigEndianBytes: [1, 2]) == nil)
    }

    @Test func badSpellingsSayWhatWasExpected() {
        for bad in ["18d", "180g", "", "0x", "0000180d-00001000-8000-00805f9b34fb", "0000180d-0000-1000-8000-00805f9b34fb00", "180d ", "1234567890"] {
            #expect(throws: SpellingError.self, "\(bad)") { try BluetoothUUID(parsing: bad) }
            #expect(BluetoothUUID.canonical(bad) == nil)
        }
        do {
            _ = try BluetoothUUID(parsing: "0xyz")
            Issue.record("0xyz parsed")
        } catch {
            #expect(error.kind == .uuid)
            #expect(error.offset == 2)
            #expect(error.description.hasPrefix("\"0xyz\" is not a Bluetooth UUID (expected 4 or 8 hex digits"))
        }
    }

    @Test func ordering() {
        #expect(BluetoothUUID(uuid16: 0x1800) < BluetoothUUID(uuid16: 0x1801))
    }
}

@Suite("BluetoothAddress")
struct AddressTests {
    @Test func everySpellingReadsTheSameAddress() throws {
        let a = try BluetoothAddress("aa:bb:cc:dd:ee:ff")
        #expect(a.description == "AA:BB:CC:DD:EE:FF")
        #expect(a.pathComponent == "AA_BB_CC_DD_EE_FF")
        #expect(a.compact == "aabbccddeeff")
        #expect(a.value == 0xAABB_CCDD_EEFF)
        #expect(a.bytes == [0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF])
        #expect(a.littleEndianBytes == [0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA])
        for spelling in ["AA-BB-CC-DD-EE-FF", "aa_bb_cc_dd_ee_ff", "aabbccddeeff", "AABBCCDDEEFF", a.description, a.pathComponent, a.compact] {
            #expect(try BluetoothAddress(spelling) == a, "\(spelling)")
        }
        #expect(BluetoothAddress(littleEndianBytes: [0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA]) == a)
        #expect(BluetoothAddress(bytes: a.bytes) == a)
        #expect(BluetoothAddress(value: 0xFFFF_AABB_CCDD_EEFF) == a)
        #expect(a.isWritten(as: "AA:BB:CC:DD:EE:FF"))
        #expect(!a.isWritten(as: "aa:bb:cc:dd:ee:ff"))
        #expect(!a.isWritten(as: "AA:BB:CC:DD:EE:F"))
    }

    @Test func randomAddressTypes() throws {
        #expect(try BluetoothAddress("AA:00:00:00:00:01").randomAddressType == .reserved)  // 0b10…
        #expect(try BluetoothAddress("4A:00:00:00:00:01").randomAddressType == .resolvablePrivate)
        #expect(try BluetoothAddress("C0:00:00:00:00:01").randomAddressType == .staticRandom)
        #expect(try BluetoothAddress("3F:00:00:00:00:01").randomAddressType == .nonResolvablePrivate)
    }

    @Test func badSpellingsSayWhereTheyWentWrong() {
        for bad in ["AA:BB:CC:DD:EE", "AA:BB:CC:DD:EE:FF:00", "AA:BB:CC:DD:EE:FG", "AAB:BCC:DDE:EFF", "", "A:BB:CC:DD:EE:FF0",
                    "AA:BB-CC:DD:EE:FF", "AA BB CC DD EE FF", "aabbccddeefg", "AA:BB:CC:DD:EE:FF ",
                    "AAA:BB:CC:DD:EE:F", "aabbccddee0", "aabbccddee0fa", "aabbccdd:e0f", "+abbccddee0f"] {
            #expect(throws: SpellingError.self, "\(bad)") { try BluetoothAddress(bad) }
        }
        #expect(BluetoothAddress(bytes: [1, 2, 3]) == nil)
        #expect(BluetoothAddress(littleEndianBytes: [1, 2, 3, 4, 5, 6, 7]) == nil)
        do {
            _ = try BluetoothAddress("AA:BB:CC:DD:EE:FG")
            Issue.record("FG parsed")
        } catch {
            #expect(error.offset == 16)
            #expect(error.description == "\"AA:BB:CC:DD:EE:FG\" is not a Bluetooth address (expected six hex pairs like AA:BB:CC:DD:EE:FF, with ':', '-' or '_' between them or none, at character 17)")
        }
    }

    @Test func ordersAsWrittenAndRecognisesItsOwnSpelling() throws {
        let a = try BluetoothAddress("01:FF:FF:FF:FF:FF"), b = try BluetoothAddress("02:00:00:00:00:00")
        // Ordered by the first-written byte first, as the bytes compare.
        #expect(a < b && !(b < a))
        #expect(a.bytes.lexicographicallyPrecedes(b.bytes))
        let c = try BluetoothAddress("c4:7c:8d:6a:12:34")
        for other in ["c4:7c:8d:6a:12:34", "C4:7C:8D:6A:12:35", "C4:7C:8D:6A:12:3", "C4:7C:8D:6A:12:34 ", "C4-7C-8D-6A-12-34", "Tag", ""] {
            #expect(!c.isWritten(as: other), "\(other)")
        }
    }
}

@Suite("Hex")
struct HexTests {
    @Test func readsWhatPeopleWrite() throws {
        for spelling in ["0a1b", "0A1B", "0x0a1b", "0X0A1B", "0a 1b", "0a:1b", "0a-1b", "0a\t1b\n"] {
            #expect(try Hex.bytes(spelling) == [0x0A, 0x1B], "\(spelling)")
        }
        #expect(try Hex.bytes("") == [])
        #expect(Hex.string([0x0A, 0x1B, 0xFF]) == "0a1bff")
        #expect(Hex.string([0x0A, 0x1B, 0xFF], uppercase: true) == "0A1BFF")
        #expect(Hex.string([UInt8]()) == "")
        for b in 0...255 { #expect(Hex.string([UInt8(b)]) == (b < 16 ? "0" : "") + String(b, radix: 16)) }
    }

    @Test func roundTrips() throws {
        let bytes: [UInt8] = (0...255).map { UInt8($0) }
        #expect(try Hex.bytes(Hex.string(bytes)) == bytes)
        #expect(try Hex.bytes(Hex.string(bytes, uppercase: true)) == bytes)
    }

    @Test func badHexSaysWhere() {
        for (bad, offset) in [("0a1", nil), ("0g", 1), ("0a 1 b", 4), ("zz", 0), ("0x0a1", nil), ("0xq", 2)] as [(String, Int?)] {
            do {
                _ = try Hex.bytes(bad)
                Issue.record("\(bad) parsed")
            } catch {
                #expect(error.kind == .hex)
                #expect(error.offset == offset, "\(bad)")
            }
        }
    }
}
