import Testing
import Vocabulary
@testable import BLEParsing

@Suite("Resolvable private addresses (IRK, ah)")
struct AdvPrivateAddressTests {
    /// Core Specification Vol 3 Part H Appendix D.7 (ah sample data), most
    /// significant byte first: IRK ec0234a3 57c8ad05 341010a6 0a397d9b,
    /// prand 708194, ah = 0dfbaa.
    static let specKey = "ec0234a357c8ad05341010a60a397d9b"

    @Test("ah matches the Core Specification's sample data")
    func sampleData() throws {
        let k = try IdentityResolvingKey(hex: Self.specKey)
        #expect(k.hash(0x708194) == 0x0DFBAA)
        // The address that sample makes: prand in the top 24 bits, hash in the low 24.
        let rpa = try BluetoothAddress("70:81:94:0D:FB:AA")
        #expect(rpa.randomAddressType == .resolvablePrivate)
        #expect(k.resolves(rpa))
        #expect(k.resolvablePrivateAddress(prand: 0x708194) == rpa)
    }

    @Test("one changed bit in the hash, the prand or the key, and it no longer resolves")
    func nearMisses() throws {
        let k = try IdentityResolvingKey(hex: Self.specKey)
        #expect(!k.resolves(try BluetoothAddress("70:81:94:0D:FB:AB")))
        #expect(!k.resolves(try BluetoothAddress("70:81:95:0D:FB:AA")))
        var other = k.bytes
        other[15] ^= 1
        let k2 = try #require(IdentityResolvingKey(bytes: other))
        #expect(!k2.resolves(try BluetoothAddress("70:81:94:0D:FB:AA")))
    }

    @Test("only resolvable private addresses resolve: public, static and non-resolvable never do")
    func addressKinds() throws {
        let k = try IdentityResolvingKey(hex: Self.specKey)
        // Same low 24 bits and the same prand bits below the top two, other address kinds.
        for top in ["30", "B0", "F0"] {  // 0b00.., 0b10.., 0b11..
            let a = try BluetoothAddress("\(top):81:94:0D:FB:AA")
            #expect(!k.resolves(a), "\(a) is \(a.randomAddressType)")
        }
    }

    @Test("bluetoothd stores the key least significant byte first")
    func bluetoothdOrder() throws {
        // The spec key as bluetoothd would write it in [IdentityResolvingKey] Key=.
        let stored = "9B7D390AA6101034 05ADC857A33402EC".replacingOccurrences(of: " ", with: "")
        let fromStore = try IdentityResolvingKey(bluetoothdStorage: stored)
        #expect(fromStore == (try IdentityResolvingKey(hex: Self.specKey)))
        #expect(fromStore.bluetoothdStorage == stored)
        #expect(fromStore.resolves(try BluetoothAddress("70:81:94:0D:FB:AA")))
    }

    @Test("a key of the wrong length or spelling is an error that says so")
    func badKeys() {
        #expect(throws: SpellingError.self) { try IdentityResolvingKey(hex: "ec0234") }
        #expect(throws: SpellingError.self) { try IdentityResolvingKey(hex: Self.specKey + "00") }
        #expect(throws: SpellingError.self) { try IdentityResolvingKey(hex: "zz0234a357c8ad05341010a60a397d9b") }
        do {
            _ = try IdentityResolvingKey(hex: "ec0234")
        } catch {
            #expect(error.description.contains("16 bytes"))
        }
        #expect(IdentityResolvingKey(bytes: [1, 2, 3]) == nil)
        // The key never appears in its description (it ends in logs).
        #expect((try? IdentityResolvingKey(hex: Self.specKey))?.description.contains("57c8ad05") == false)
    }

    @Test("a rotating address stays one identity; strangers resolve to none, and are remembered")
    func resolver() throws {
        let alice = try IdentityResolvingKey(hex: Self.specKey)
        let bob = try #require(IdentityResolvingKey(bytes: Array(1...16)))
        var r = IdentityResolver(identities: [.init(name: "alice", key: alice), .init(name: "bob", key: bob)], capacity: 64)
        for prand in stride(from: UInt32(1), to: 400_000, by: 40_009) {
            let a = try #require(alice.resolvablePrivateAddress(prand: prand))
            let b = try #require(bob.resolvablePrivateAddress(prand: prand))
            #expect(r.identity(for: a)?.name == "alice")
            #expect(r.identity(for: b)?.name == "bob")
        }
        let stranger = try BluetoothAddress("4A:00:00:12:34:56")
        #expect(r.identity(for: stranger) == nil)
        let tried = r.attempts
        #expect(r.identity(for: stranger) == nil)
        #expect(r.attempts == tried, "a remembered miss is not tried again")
        #expect(r.identity(for: try BluetoothAddress("C4:7C:8D:6A:00:01")) == nil)  // static: never tried
        #expect(r.attempts == tried)
    }

    @Test("the resolver's memory stays within its capacity under a flood of new addresses")
    func bounded() throws {
        let alice = try IdentityResolvingKey(hex: Self.specKey)
        var r = IdentityResolver(identities: [.init(name: "alice", key: alice)], capacity: 100)
        for i in 0..<1_000 {
            _ = r.identity(for: BluetoothAddress(value: 0x4000_0000_0000 | UInt64(i)))
            #expect(r.rememberedCount <= 100)
        }
        #expect(r.attempts == 1_000)
        // Still right after forgetting.
        let a = try #require(alice.resolvablePrivateAddress(prand: 0x123456))
        #expect(r.identity(for: a)?.name == "alice")
    }
}

@Suite("IRK from bluetoothd's bonding store")
struct BluetoothdInfoIRKTests {
    @Test("the Key= of [IdentityResolvingKey] is read, not the other groups' keys")
    func readsTheRightGroup() throws {
        let info = """
        [General]
        Name=Watch
        AddressType=public

        [LongTermKey]
        Key=47972653016AF21CF7C38A192E3A4930
        Authenticated=1

        [IdentityResolvingKey]
        Key=9B7D390AA610103405ADC857A33402EC

        [LocalSignatureKey]
        Key=6D49B52312B30EB0757454839C97E40D
        """
        let k = try #require(try IdentityResolvingKey(bluetoothdInfo: info))
        #expect(k == (try IdentityResolvingKey(hex: AdvPrivateAddressTests.specKey)))
    }

    @Test("no IRK group is nil; a broken key is an error")
    func absentOrBroken() throws {
        #expect(try IdentityResolvingKey(bluetoothdInfo: "[General]\nName=x\n[LongTermKey]\nKey=00\n") == nil)
        #expect(throws: SpellingError.self) { try IdentityResolvingKey(bluetoothdInfo: "[IdentityResolvingKey]\nKey=12\n") }
    }
}
