import Testing
@testable import BLEParsing

private func bytes(_ hex: String) -> [UInt8] { (try? parseHex(hex)) ?? [] }
private func range(_ a: UInt8, _ b: UInt8) -> [UInt8] { Array(a..<b) }

@Suite("AES-CCM (libcrypto)")
struct AdvAESCCMTests {
    /// NIST SP 800-38C Appendix C, Examples 1-3 (key 40..4f).
    @Test("NIST SP 800-38C examples 1-3")
    func nist() throws {
        let key = range(0x40, 0x50)
        let cases: [(nonce: [UInt8], aad: [UInt8], pt: [UInt8], tagLen: Int, out: String)] = [
            (range(0x10, 0x17), range(0x00, 0x08), range(0x20, 0x24), 4, "7162015b4dac255d"),
            (range(0x10, 0x18), range(0x00, 0x10), range(0x20, 0x30), 6, "d2a1f0e051ea5f62081a7792073d593d1fc64fbfaccd"),
            (range(0x10, 0x1C), range(0x00, 0x14), range(0x20, 0x38), 8,
             "e3b201a9f5b71a7a9b1ceaeccd97e70b6176aad9a4428aa5484392fbc1b09951"),
        ]
        for c in cases {
            let (ct, tag) = try AESCCM.encrypt(key: key, nonce: c.nonce, plaintext: c.pt, aad: c.aad, tagLength: c.tagLen)
            #expect(ct + tag == bytes(c.out))
            let expected = bytes(c.out)
            let pt = try AESCCM.decrypt(key: key, nonce: c.nonce, ciphertext: Array(expected.dropLast(c.tagLen)),
                                        tag: Array(expected.suffix(c.tagLen)), aad: c.aad)
            #expect(pt == c.pt)
        }
    }

    /// RFC 3610 section 8, packet vectors #1 and #2 (M = 8, L = 2, 8-byte header as AAD).
    @Test("RFC 3610 packet vectors 1 and 2")
    func rfc3610() throws {
        let key = range(0xC0, 0xD0)
        let v1 = try AESCCM.encrypt(key: key, nonce: bytes("00000003020100a0a1a2a3a4a5"), plaintext: range(0x08, 0x1F),
                                    aad: range(0x00, 0x08), tagLength: 8)
        #expect(v1.ciphertext + v1.tag == bytes("588c979a61c663d2f066d0c2c0f989806d5f6b61dac38417e8d12cfdf926e0"))
        let v2 = try AESCCM.encrypt(key: key, nonce: bytes("00000004030201a0a1a2a3a4a5"), plaintext: range(0x08, 0x20),
                                    aad: range(0x00, 0x08), tagLength: 8)
        #expect(v2.ciphertext + v2.tag == bytes("72c91a36e135f8cf291ca894085c87e3cc15c439c9e43a3ba091d56e10400916"))
    }

    @Test("tampered tag, wrong key and bad parameters are rejected")
    func failures() throws {
        let key = range(0x40, 0x50)
        let good = bytes("7162015b4dac255d")
        var badTag = Array(good.suffix(4)); badTag[0] ^= 1
        #expect(throws: AESCCM.Failure.authenticationFailed) {
            try AESCCM.decrypt(key: key, nonce: range(0x10, 0x17), ciphertext: Array(good.prefix(4)), tag: badTag,
                               aad: range(0, 8))
        }
        var wrongKey = key; wrongKey[15] ^= 0x80
        #expect(throws: AESCCM.Failure.authenticationFailed) {
            try AESCCM.decrypt(key: wrongKey, nonce: range(0x10, 0x17), ciphertext: Array(good.prefix(4)),
                               tag: Array(good.suffix(4)), aad: range(0, 8))
        }
        #expect(throws: AESCCM.Failure.badKeyLength(12)) {
            try AESCCM.decrypt(key: Array(key.prefix(12)), nonce: range(0x10, 0x17), ciphertext: [], tag: [0, 0, 0, 0])
        }
        #expect(throws: AESCCM.Failure.badNonceLength(14)) {
            try AESCCM.decrypt(key: key, nonce: Array(repeating: 0, count: 14), ciphertext: [], tag: [0, 0, 0, 0])
        }
        #expect(throws: AESCCM.Failure.badTagLength(5)) {
            try AESCCM.decrypt(key: key, nonce: range(0x10, 0x17), ciphertext: [], tag: [0, 0, 0, 0, 0])
        }
    }

    @Test("empty plaintext round-trips (tag only)")
    func emptyPayload() throws {
        let key = range(0x40, 0x50)
        let (ct, tag) = try AESCCM.encrypt(key: key, nonce: range(0x10, 0x1D), plaintext: [], aad: [0x11], tagLength: 4)
        #expect(ct.isEmpty)
        #expect(tag.count == 4)
        #expect(try AESCCM.decrypt(key: key, nonce: range(0x10, 0x1D), ciphertext: [], tag: tag, aad: [0x11]) == [])
    }

    /// bthome-ble tests/test_parser_v2.py::test_bindkey_correct: MAC 54:48:E6:8F:80:A5,
    /// key 231d39c1d7cc1ab1aee224cd096db932, service data 41 a47266c95f73 00112233 78237214.
    @Test("BTHome v2 example decrypts to temperature 25.06 / humidity 50.55")
    func bthomeExample() throws {
        let nonce = bytes("5448E68F80A5") + [0xD2, 0xFC, 0x41] + bytes("00112233")
        let pt = try AESCCM.decrypt(key: bytes("231d39c1d7cc1ab1aee224cd096db932"), nonce: nonce,
                                    ciphertext: bytes("a47266c95f73"), tag: bytes("78237214"))
        #expect(pt == bytes("02ca0903bf13"))
    }

    /// bthome-ble tests/test_parser_v1.py::test_bindkey_correct: 0x181E, AAD 0x11.
    @Test("BTHome v1 encrypted example")
    func bthomeV1Example() throws {
        let nonce = bytes("5448E68F80A5") + [0x1E, 0x18] + bytes("00112233")
        let pt = try AESCCM.decrypt(key: bytes("231d39c1d7cc1ab1aee224cd096db932"), nonce: nonce,
                                    ciphertext: bytes("fba435e4d3c312fb"), tag: bytes("57d90a99"), aad: [0x11])
        #expect(pt == bytes("2302ca090303bf13"))
    }

    /// xiaomi-ble tests/test_parser.py::test_Xiaomi_CGG1: MiBeacon v5 encrypted humidity.
    @Test("Xiaomi MiBeacon v5 example decrypts to a 0x1006 humidity object")
    func xiaomiExample() throws {
        let data = bytes("5858480b685f12342d585a0b1841e2aa000e00a4964fb5")
        let macLE = Array(data[5..<11])
        let nonce = macLE + Array(data[2..<5]) + Array(data[(data.count - 7)..<(data.count - 4)])
        let pt = try AESCCM.decrypt(key: bytes("814aac74c4f17b6c1581e1ab87816b99"), nonce: nonce,
                                    ciphertext: Array(data[11..<(data.count - 7)]), tag: Array(data.suffix(4)), aad: [0x11])
        #expect(pt.count == 5)
        #expect(pt.prefix(3) == [0x06, 0x10, 0x02])
        #expect(Double(UInt16(pt[3]) | UInt16(pt[4]) << 8) / 10 == 59.6)
    }

    /// The decryption (CCM mode over AES-ECB) against libcrypto's own CCM
    /// encryption, for every nonce and tag length, AAD of 0...40 bytes and
    /// messages of 0...40 bytes (deterministic pseudo-random contents); a
    /// changed tag, ciphertext or AAD byte must fail authentication.
    @Test("decrypt agrees with libcrypto's CCM encryption across lengths")
    func crossCheck() throws {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt8 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
        func random(_ n: Int) -> [UInt8] { (0..<n).map { _ in next() } }
        for nonceLength in 7...13 {
            for tagLength in stride(from: 4, through: 16, by: 2) {
                for length in [0, 1, 5, 15, 16, 17, 31, 32, 40] {
                    let aadLength = [0, 1, 14, 15, 16, 40][(length + tagLength) % 6]
                    let key = random(16), nonce = random(nonceLength), aad = random(aadLength), pt = random(length)
                    let (ct, tag) = try AESCCM.encrypt(key: key, nonce: nonce, plaintext: pt, aad: aad, tagLength: tagLength)
                    #expect(try AESCCM.decrypt(key: key, nonce: nonce, ciphertext: ct, tag: tag, aad: aad) == pt)
                    var badTag = tag
                    badTag[Int(next()) % tagLength] ^= 0x01
                    #expect(throws: AESCCM.Failure.authenticationFailed) {
                        try AESCCM.decrypt(key: key, nonce: nonce, ciphertext: ct, tag: badTag, aad: aad)
                    }
                    if !ct.isEmpty {
                        var badCT = ct
                        badCT[Int(next()) % ct.count] ^= 0x80
                        #expect(throws: AESCCM.Failure.authenticationFailed) {
                            try AESCCM.decrypt(key: key, nonce: nonce, ciphertext: badCT, tag: tag, aad: aad)
                        }
                    }
                    if !aad.isEmpty {
                        var badAAD = aad
                        badAAD[Int(next()) % aad.count] ^= 0x04
                        #expect(throws: AESCCM.Failure.authenticationFailed) {
                            try AESCCM.decrypt(key: key, nonce: nonce, ciphertext: ct, tag: tag, aad: badAAD)
                        }
                    }
                }
            }
        }
        // AAD of 0xFF00 bytes or more takes the 6-byte length encoding.
        let key = random(16), nonce = random(12), aad = random(0xFF00), pt = random(20)
        let (ct, tag) = try AESCCM.encrypt(key: key, nonce: nonce, plaintext: pt, aad: aad, tagLength: 8)
        #expect(try AESCCM.decrypt(key: key, nonce: nonce, ciphertext: ct, tag: tag, aad: aad) == pt)
    }
}
