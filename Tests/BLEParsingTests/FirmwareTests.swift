import Foundation
import Testing
import TestSupport
import Vocabulary
@testable import BLEParsing

private func firmware(_ name: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: packageRoot().appendingPathComponent("fixtures/firmware/\(name)")))
}

private func json(_ text: String) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
}

/// MCUboot images (fixtures/firmware, made with imgtool 2.5.0): what the
/// parser says agrees with `imgtool dumpinfo --format json` on every field both print.
@Suite("MCUboot images")
struct FirmwareImageTests {
    @Test("every header field, TLV area and TLV agrees with imgtool dumpinfo",
          arguments: ["unsigned", "ecdsa-p256", "ed25519", "rsa-2048", "protected"])
    func agreesWithImgtool(_ name: String) throws {
        let bytes = try firmware("\(name).bin")
        let image = try McubootImage.parse(bytes)
        let ours = try json(image.summary(file: "\(name).bin", hashMatches: image.hashMatches(bytes)).compact)
        let theirs = try json(String(contentsOf: packageRoot().appendingPathComponent("fixtures/firmware/\(name).dumpinfo.json"), encoding: .utf8))
        let header = try #require(ours["header"] as? [String: Any]), theirHeader = try #require(theirs["header"] as? [String: Any])
        for key in ["magic", "load_addr", "hdr_size", "protected_tlv_size", "img_size", "flags"] {
            #expect(header[key] as? Int == theirHeader[key] as? Int, "\(name): header.\(key)")
        }
        #expect(header["version"] as? String == theirHeader["version"] as? String, "\(name): version")
        let area = try #require(ours["tlv_area"] as? [String: Any]), theirArea = try #require(theirs["tlv_area"] as? [String: Any])
        for (hdr, list) in [("tlv_hdr", "tlvs"), ("tlv_hdr_prot", "tlvs_prot")] {
            let a = area[hdr] as? [String: Any] ?? [:], b = theirArea[hdr] as? [String: Any] ?? [:]
            #expect(a["magic"] as? Int == b["magic"] as? Int && a["tlv_tot"] as? Int == b["tlv_tot"] as? Int, "\(name): \(hdr)")
            let x = area[list] as? [[String: Any]] ?? [], y = theirArea[list] as? [[String: Any]] ?? []
            #expect(x.count == y.count, "\(name): \(list)")
            for (t, u) in zip(x, y) {
                #expect(t["type"] as? Int == u["type"] as? Int && t["type_name"] as? String == u["type_name"] as? String
                        && t["len"] as? Int == u["len"] as? Int && t["data"] as? String == u["data"] as? String, "\(name): \(list) \(u)")
            }
        }
        #expect(ours["hash_ok"] as? Bool == true, "\(name): the SHA-256 TLV is the hash of header, firmware and protected TLVs")
        #expect(image.length == bytes.count)
    }

    @Test("what a user wants to know: version, size, hash, signature kind")
    func summary() throws {
        let signed = try McubootImage.parse(try firmware("ecdsa-p256.bin"))
        #expect(signed.version == .init(major: 2, minor: 3, revision: 4, build: 5) && signed.version.description == "2.3.4+5")
        #expect(signed.imageSize == 1000 && signed.headerSize == 0x200)
        #expect(signed.signature == "ECDSA P-256" && signed.keyHash?.count == 32 && signed.hash?.count == 32)
        #expect(try McubootImage.parse(try firmware("ed25519.bin")).signature == "Ed25519")
        #expect(try McubootImage.parse(try firmware("rsa-2048.bin")).signature == "RSA-2048 PSS")
        #expect(try McubootImage.parse(try firmware("rsa-2048.bin")).version.description == "10.0.65535+4294967295")
        #expect(try McubootImage.parse(try firmware("unsigned.bin")).signature == nil)
        let protected = try McubootImage.parse(try firmware("protected.bin"))
        #expect(protected.tlvs.filter(\.protected).map(\.name) == ["SEC_CNT", "BOOT_RECORD"])
        #expect(protected.tlvs.first { $0.name == "SEC_CNT" }?.data == [7, 0, 0, 0])
        // Big-endian (imgtool --endian big): the same fields, read the other way round.
        let bigBytes = try firmware("big-endian.bin")
        let big = try McubootImage.parse(bigBytes)
        #expect(big.endian == .big && big.version.description == "1.2.3+0" && big.imageSize == 1000 && big.headerSize == 0x20)
        #expect(big.signature == "ECDSA P-256" && big.hashMatches(bigBytes) == true)
    }

    @Test("a changed byte, a short file, another file: said, never a crash")
    func badImages() throws {
        var bytes = try firmware("ecdsa-p256.bin")
        bytes[0x200 + 17] ^= 0x01
        #expect(try McubootImage.parse(bytes).hashMatches(bytes) == false)
        let good = try firmware("protected.bin")
        for cut in [0, 10, 31, 0x200, 0x200 + 999, 0x200 + 1000 + 2, good.count - 1] {
            #expect(throws: DecodeError.self, "cut at \(cut)") { try McubootImage.parse(Array(good.prefix(cut))) }
        }
        do { _ = try McubootImage.parse(Array("#!/bin/sh\necho not firmware\n".utf8) + [UInt8](repeating: 0, count: 40)) } catch {
            #expect(error.description.contains("not an MCUboot image"))
        }
        // A protected area whose size disagrees with the header's.
        var wrong = good
        wrong[10] = wrong[10] &+ 4
        #expect(throws: DecodeError.self) { try McubootImage.parse(wrong) }
        // Random bytes behind a valid magic: refused or read, never a trap.
        var rng = SeededGenerator(seed: 0x1DB7)
        for _ in 0..<3000 {
            var b = (0..<Int.random(in: 32...400, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            b.replaceSubrange(0..<4, with: [0x3D, 0xB8, 0xF3, 0x96])
            b[8] = 32; b[9] = 0
            if let image = try? McubootImage.parse(b) { #expect(image.length <= b.count) }
        }
    }
}

/// CBOR (RFC 8949): the examples of its Appendix A, decoded; the preferred
/// serialisation of each definite one, encoded back.
@Suite("CBOR")
struct CBORTests {
    static let vectors: [(String, CBOR, Bool)] = [
        ("00", .unsigned(0), true), ("01", .unsigned(1), true), ("0a", .unsigned(10), true), ("17", .unsigned(23), true),
        ("1818", .unsigned(24), true), ("1819", .unsigned(25), true), ("1864", .unsigned(100), true), ("1903e8", .unsigned(1000), true),
        ("1a000f4240", .unsigned(1_000_000), true), ("1b000000e8d4a51000", .unsigned(1_000_000_000_000), true),
        ("1bffffffffffffffff", .unsigned(.max), true), ("20", .int(-1), true), ("29", .int(-10), true), ("3863", .int(-100), true),
        ("3903e7", .int(-1000), true), ("3bffffffffffffffff", .negative(.max), true),
        ("f90000", .float(0), false), ("f93c00", .float(1), false), ("f93e00", .float(1.5), false), ("f97bff", .float(65504), false),
        ("fa47c35000", .float(100_000), false), ("fb3ff199999999999a", .float(1.1), true), ("fb7e37e43c8800759c", .float(1.0e300), true),
        ("f4", .bool(false), true), ("f5", .bool(true), true), ("f6", .null, true), ("f7", .undefined, true), ("f0", .simple(16), true),
        ("f8ff", .simple(255), true),
        ("c074323031332d30332d32315432303a30343a30305a", .tagged(0, .text("2013-03-21T20:04:00Z")), true),
        ("40", .bytes([]), true), ("4401020304", .bytes([1, 2, 3, 4]), true), ("60", .text(""), true), ("6161", .text("a"), true),
        ("6449455446", .text("IETF"), true), ("62c3bc", .text("\u{00fc}"), true), ("63e6b0b4", .text("\u{6c34}"), true),
        ("80", .array([]), true), ("83010203", .array([.unsigned(1), .unsigned(2), .unsigned(3)]), true),
        ("8301820203820405", .array([.unsigned(1), .array([.unsigned(2), .unsigned(3)]), .array([.unsigned(4), .unsigned(5)])]), true),
        ("a0", .map([]), true), ("a201020304", .map([.init(.unsigned(1), .unsigned(2)), .init(.unsigned(3), .unsigned(4))]), true),
        ("a26161016162820203", .object([("a", .unsigned(1)), ("b", .array([.unsigned(2), .unsigned(3)]))]), true),
        ("5f42010243030405ff", .bytes([1, 2, 3, 4, 5]), false), ("7f657374726561646d696e67ff", .text("streaming"), false),
        ("9fff", .array([]), false),
        ("9f018202039f0405ffff", .array([.unsigned(1), .array([.unsigned(2), .unsigned(3)]), .array([.unsigned(4), .unsigned(5)])]), false),
        ("bf61610161629f0203ffff", .object([("a", .unsigned(1)), ("b", .array([.unsigned(2), .unsigned(3)]))]), false),
    ]

    @Test("RFC 8949 Appendix A")
    func appendixA() throws {
        for (hex, value, preferred) in Self.vectors {
            let bytes = try Hex.bytes(hex)
            #expect(try CBOR.decode(bytes) == value, "\(hex)")
            if preferred { #expect(Hex.string(value.encoded) == hex, "\(value)") }
            // Every value reads back from what the encoder writes.
            #expect(try CBOR.decode(value.encoded) == value, "\(value)")
        }
    }

    @Test("malformed items are refused with the offset, never a crash")
    func malformed() throws {
        for hex in ["", "18", "1c", "5f01ff", "7f4100ff", "9f", "a1", "a101", "ff", "62c3", "61ff", "fc", "f801", "9f01", "bf6161ff",
                    "1f", "3f", "df01"] {
            #expect(throws: DecodeError.self, "\(hex)") { try CBOR.decode(try Hex.bytes(hex)) }
        }
        #expect(throws: DecodeError.self) { try CBOR.decode([0x01, 0x02]) }  // a second item
        // Deep nesting is refused, not a stack overflow.
        #expect(throws: DecodeError.self) { try CBOR.decode([UInt8](repeating: 0x81, count: 10_000) + [0x00]) }
        // A length past the input is refused before anything is allocated.
        #expect(throws: DecodeError.self) { try CBOR.decode([0x9B, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) }
        var rng = SeededGenerator(seed: 0xCB0)
        for _ in 0..<5000 {
            let b = (0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if let v = try? CBOR.decode(b) { #expect(try CBOR.decode(v.encoded) == v) }
        }
    }
}

/// SMP framing: the header, a message's bytes, and responses reassembled from notifications.
@Suite("SMP framing")
struct SMPFramingTests {
    @Test("a request's header and body")
    func request() throws {
        let echo = SMP.Message(.write, .echo, sequence: 7, body: .object([("d", .text("hi"))]))
        // Write (2) with version 1 (bit 3), no flags, length 5, group 0 (OS), sequence 7, command 0 (echo).
        #expect(Hex.string(echo.bytes) == "0a000006000007" + "00" + "a1616462" + "6869")  // body a1 61 64 62 68 69: 6 bytes
        let parsed = try SMP.Message.parse(echo.bytes)
        #expect(parsed.header.op == .write && parsed.header.version == 1 && parsed.header.group == 0 && parsed.header.sequence == 7)
        #expect(parsed.body["d"]?.string == "hi")
        let upload = SMP.Message(.write, .imageUpload, sequence: 255, body: .object([("off", .unsigned(0)), ("data", .bytes([1, 2]))]))
        #expect(upload.header.group == 1 && upload.header.command == 1)
    }

    @Test("responses split over notifications, several in one, and errors")
    func reassembly() throws {
        let a = SMP.Message(header: .init(op: .writeResponse, length: 0, group: 1, sequence: 1, command: 1),
                            body: .object([("rc", .unsigned(0)), ("off", .unsigned(4096))]))
        let b = SMP.Message(header: .init(op: .readResponse, length: 0, group: 1, sequence: 2, command: 0),
                            body: .object([("images", .array([.object([("slot", .unsigned(0)), ("version", .text("1.0.0"))])]))]))
        let stream = a.bytes + b.bytes
        for cut in 1..<stream.count {
            var r = SMP.Reassembler()
            let first = try r.append(Array(stream[..<cut]))
            let rest = try r.append(Array(stream[cut...]))
            #expect((first + rest).map(\.header.sequence) == [1, 2], "cut at \(cut)")
            #expect(r.waiting == 0)
        }
        var r = SMP.Reassembler()
        let whole = try r.append(stream)
        #expect(whole.first?.body["off"]?.int == 4096 && whole.last?.body["images"]?.items?.count == 1)
        // Errors: v1 rc, v2 err {group, rc}.
        let busy = SMP.Message(header: .init(op: .writeResponse, length: 0, group: 1, sequence: 3, command: 1), body: .object([("rc", .unsigned(10))]))
        #expect(busy.error == SMPError(group: nil, rc: 10) && busy.error?.description.contains("busy") == true)
        let v2 = SMP.Message(header: .init(op: .writeResponse, length: 0, group: 1, sequence: 3, command: 1),
                             body: .object([("err", .object([("group", .unsigned(1)), ("rc", .unsigned(2))]))]))
        #expect(v2.error == SMPError(group: 1, rc: 2))
        #expect(a.error == nil)
        // A header announcing more than the limit: refused, the buffer emptied.
        var small = SMP.Reassembler(limit: 64)
        #expect(throws: DecodeError.self) { try small.append([0x03, 0, 0xFF, 0xFF, 0, 1, 0, 0]) }
        #expect(small.waiting == 0)
        // A body that is not CBOR: refused.
        var bad = SMP.Reassembler()
        #expect(throws: DecodeError.self) { try bad.append([0x03, 0, 0, 1, 0, 1, 0, 0, 0xFF]) }
    }
}

@Suite("Improv Wi-Fi frames")
struct ImprovTests {
    @Test("the Wi-Fi settings frame, byte for byte (improv-wifi.com/ble: command, length, strings, sum checksum)")
    func wifiSettings() throws {
        let frame = try #require(Improv.RPC.wifiSettings(ssid: Array("ab".utf8), password: Array("c".utf8)).bytes)
        // 0x01 + 0x05 + 0x02 + 'a' + 'b' + 0x01 + 'c' = 303 → 0x2F.
        #expect(frame == [0x01, 0x05, 0x02, 0x61, 0x62, 0x01, 0x63, 0x2F])
        #expect(try Improv.RPC.parse(frame) == Improv.RPC(command: 1, strings: [Array("ab".utf8), Array("c".utf8)]))
        // An open network: an empty password string.
        let open = try #require(Improv.RPC.wifiSettings(ssid: Array("x".utf8), password: []).bytes)
        #expect(try Improv.RPC.parse(open).strings == [Array("x".utf8), []])
        #expect(Improv.RPC(command: 1, strings: [[UInt8](repeating: 1, count: 256)]).bytes == nil, "a string longer than 255 bytes cannot be framed")
    }

    @Test("broken frames are refused with what is wrong")
    func broken() {
        for (frame, words) in [
            ([0x01, 0x05], "3 bytes"),
            ([0x01, 0x02, 0x01, 0x61, 0x00], "checksum"),
            ([0x01, 0x04, 0x01, 0x61, 0x67], "bytes (the length byte says 4"),
            ([0x01, 0x02, 0x05, 0x61, 0x69], "string 1"),
        ] as [([UInt8], String)] {
            #expect { _ = try Improv.RPC.parse(frame) } throws: { "\($0)".contains(words) }
        }
    }

    @Test("the advertised service data: state and capabilities")
    func serviceData() throws {
        let data = try Improv.ServiceData.parse([0x02, 0x01, 0, 0, 0, 0])
        #expect(data.state == .authorized && data.capabilities.contains(.identify))
        #expect(data.bytes == [0x02, 0x01, 0, 0, 0, 0])
        #expect(throws: DecodeError.self) { try Improv.ServiceData.parse([0x07, 0, 0, 0, 0, 0]) }
        #expect(throws: DecodeError.self) { try Improv.ServiceData.parse([0x02, 0]) }
    }
}
