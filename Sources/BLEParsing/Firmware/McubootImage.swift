internal import CLibCrypto
import Vocabulary

/// An MCUboot image file as `imgtool sign` writes it (what a Zephyr or
/// mynewt device's bootloader takes): a header, the firmware, protected TLVs
/// (covered by the hash and signature), and TLVs (the hash, key hash and
/// signature). Pure: bytes in, the parts out; bad bytes give a
/// ``DecodeError`` naming what is wrong.
///
/// Layout (MCUboot `bootutil/image.h`, imgtool `image.py`; little endian
/// unless the magic is written big-endian, `imgtool sign --endian big`):
///
/// | offset | field |
/// |---|---|
/// | 0 | magic 0x96f3b83d (uint32) |
/// | 4 | load address (uint32) |
/// | 8 | header size (uint16: the header and its padding; the firmware starts here) |
/// | 10 | protected TLV area size (uint16, with its info header; 0: none) |
/// | 12 | firmware size (uint32, without the header) |
/// | 16 | flags (uint32) |
/// | 20 | version: major (uint8), minor (uint8), revision (uint16), build (uint32) |
/// | 28 | padding (uint32) |
///
/// After the firmware: the protected TLV area (info: magic 0x6908, total size
/// uint16), then the TLV area (magic 0x6907, total size). Each TLV: type
/// (uint8 and a zero byte, or uint16 for vendor types), length (uint16), data.
/// The image hash TLV (SHA-256/384/512) covers the header, the firmware and
/// the protected TLV area.
public struct McubootImage: Sendable, Equatable {
    public static let magic: UInt32 = 0x96F3_B83D
    public static let headerLength = 32
    public static let tlvInfoMagic: UInt16 = 0x6907
    public static let protectedTLVInfoMagic: UInt16 = 0x6908

    public typealias Endian = FieldLayout.Endian

    public struct Version: Sendable, Equatable, Comparable, CustomStringConvertible {
        public var major: UInt8, minor: UInt8, revision: UInt16, build: UInt32
        public init(major: UInt8, minor: UInt8, revision: UInt16, build: UInt32) {
            (self.major, self.minor, self.revision, self.build) = (major, minor, revision, build)
        }
        /// `1.2.3+4`, as imgtool and mcumgr write it.
        public var description: String { "\(major).\(minor).\(revision)+\(build)" }
        /// SMP's image list writes the build only when it is not zero: `1.2.3`, `1.2.3.4`.
        public var smpString: String { build == 0 ? "\(major).\(minor).\(revision)" : "\(major).\(minor).\(revision).\(build)" }
        public static func < (a: Version, b: Version) -> Bool {
            (a.major, a.minor, a.revision, a.build) < (b.major, b.minor, b.revision, b.build)
        }
    }

    public struct TLV: Sendable, Equatable {
        public var type: UInt16
        public var data: [UInt8]
        /// In the protected area (covered by the hash and signature).
        public var protected: Bool
        /// Offset of the TLV's own header in the file.
        public var offset: Int
        /// imgtool's name for the type (`SHA256`, `ECDSASIG`, …), nil for one it does not know.
        public var name: String? { McubootImage.tlvNames[type] }
    }

    public var endian: Endian
    public var loadAddress: UInt32
    public var headerSize: Int
    /// The protected TLV area's size with its info header (0: none).
    public var protectedTLVSize: Int
    public var imageSize: Int
    public var flags: UInt32
    public var version: Version
    /// Protected TLVs first, then the others, in file order.
    public var tlvs: [TLV]
    /// Where the (unprotected) TLV area starts, and its size with its info header.
    public var tlvAreaOffset: Int
    public var tlvAreaSize: Int
    /// Bytes of the file up to the end of the TLV area (what is uploaded).
    public var length: Int

    /// imgtool's TLV names (`TLV_VALUES` in imgtool 2.x).
    public static let tlvNames: [UInt16: String] = [
        0x01: "KEYHASH", 0x02: "PUBKEY", 0x10: "SHA256", 0x11: "SHA384", 0x12: "SHA512", 0x20: "RSA2048", 0x22: "ECDSASIG",
        0x23: "RSA3072", 0x24: "ED25519", 0x25: "SIG_PURE", 0x30: "ENCRSA2048", 0x31: "ENCKW", 0x32: "ENCEC256",
        0x33: "ENCX25519", 0x34: "ENCX25519_SHA512", 0x40: "DEPENDENCY", 0x50: "SEC_CNT", 0x60: "BOOT_RECORD",
        0x70: "DECOMP_SIZE", 0x71: "DECOMP_SHA", 0x72: "DECOMP_SIGNATURE", 0x73: "COMP_DEC_SIZE", 0x74: "UUID_VID", 0x75: "UUID_CID",
    ]

    /// Header flags (MCUboot `IMAGE_F_*`).
    public static let flagNames: [(UInt32, String)] = [
        (0x01, "PIC"), (0x04, "ENCRYPTED_AES128"), (0x08, "ENCRYPTED_AES256"), (0x10, "NON_BOOTABLE"), (0x20, "RAM_LOAD"),
        (0x100, "ROM_FIXED"), (0x200, "COMPRESSED_LZMA1"), (0x400, "COMPRESSED_LZMA2"), (0x800, "COMPRESSED_ARM_THUMB"),
    ]

    static let context = "MCUboot image"

    public static func parse(_ bytes: [UInt8]) throws(DecodeError) -> McubootImage {
        guard bytes.count >= headerLength else {
            throw DecodeError.truncated(context: context, offset: 0, needed: headerLength, available: bytes.count, what: "the image header")
        }
        let endian: Endian
        switch (load32(bytes, 0, .little), load32(bytes, 0, .big)) {
        case (magic, _): endian = .little
        case (_, magic): endian = .big
        default:
            throw DecodeError.invalidValue(context: context, offset: 0, expected: "the MCUboot magic 3d b8 f3 96 (not an MCUboot image; sign it with imgtool)",
                                           found: Hex.string(Array(bytes[0..<4])))
        }
        let headerSize = Int(load16(bytes, 8, endian))
        let protectedSize = Int(load16(bytes, 10, endian))
        let imageSize = Int(load32(bytes, 12, endian))
        guard headerSize >= headerLength else {
            throw DecodeError.invalidValue(context: context, offset: 8, expected: "a header size of at least 32", found: "\(headerSize)")
        }
        let version = Version(major: bytes[20], minor: bytes[21], revision: load16(bytes, 22, endian), build: load32(bytes, 24, endian))
        var image = McubootImage(endian: endian, loadAddress: load32(bytes, 4, endian), headerSize: headerSize, protectedTLVSize: protectedSize,
                                 imageSize: imageSize, flags: load32(bytes, 16, endian), version: version, tlvs: [], tlvAreaOffset: 0,
                                 tlvAreaSize: 0, length: 0)
        var offset = headerSize + imageSize
        guard offset <= bytes.count else {
            throw DecodeError.truncated(context: context, offset: headerSize, needed: imageSize, available: max(0, bytes.count - headerSize),
                                        what: "the firmware the header announces")
        }
        if protectedSize > 0 {
            let end = try readArea(bytes, at: offset, magic: protectedTLVInfoMagic, what: "protected TLV area", endian: endian, protected: true, into: &image.tlvs)
            guard end - offset == protectedSize else {
                throw DecodeError.invalidValue(context: context, offset: offset, expected: "a protected TLV area of \(protectedSize) bytes (the header's)",
                                               found: "\(end - offset) bytes")
            }
            offset = end
        }
        image.tlvAreaOffset = offset
        let end = try readArea(bytes, at: offset, magic: tlvInfoMagic, what: "TLV area", endian: endian, protected: false, into: &image.tlvs)
        image.tlvAreaSize = end - offset
        image.length = end
        return image
    }

    /// One TLV area: its info header, then TLVs to its announced end; returns the end.
    static func readArea(_ bytes: [UInt8], at start: Int, magic expected: UInt16, what: String, endian: Endian, protected: Bool,
                         into tlvs: inout [TLV]) throws(DecodeError) -> Int {
        guard start + 4 <= bytes.count else {
            throw DecodeError.truncated(context: context, offset: start, needed: 4, available: max(0, bytes.count - start), what: "the \(what)'s header")
        }
        let magic = load16(bytes, start, endian)
        guard magic == expected else {
            throw DecodeError.invalidValue(context: context, offset: start, expected: "the \(what) magic \(hexString(expected))", found: hexString(magic))
        }
        let total = Int(load16(bytes, start + 2, endian))
        let end = start + total
        guard total >= 4, end <= bytes.count else {
            throw DecodeError.truncated(context: context, offset: start, needed: total, available: bytes.count - start, what: "the \(what)")
        }
        var at = start + 4
        while at < end {
            guard at + 4 <= end else {
                throw DecodeError.truncated(context: context, offset: at, needed: 4, available: end - at, what: "a TLV header in the \(what)")
            }
            // imgtool writes its known types as a uint8 and a zero byte, vendor types as a
            // uint16: little-endian both read as the uint16; big-endian, a zero second
            // byte means the first is the type.
            let type: UInt16 = endian == .big && bytes[at + 1] == 0 ? UInt16(bytes[at]) : load16(bytes, at, endian)
            let length = Int(load16(bytes, at + 2, endian))
            guard at + 4 + length <= end else {
                throw DecodeError.truncated(context: context, offset: at + 4, needed: length, available: end - at - 4,
                                            what: "TLV \(tlvNames[type] ?? hexString(type)) in the \(what)")
            }
            tlvs.append(TLV(type: type, data: Array(bytes[(at + 4)..<(at + 4 + length)]), protected: protected, offset: at))
            at += 4 + length
        }
        return end
    }

    // MARK: - What it says

    /// The image hash TLV (SHA-256, -384 or -512): what the device reports for the image once uploaded.
    public var hashTLV: TLV? { tlvs.first { [0x10, 0x11, 0x12].contains($0.type) && !$0.protected } }

    public var hash: [UInt8]? { hashTLV?.data }

    public var keyHash: [UInt8]? { tlvs.first { $0.type == 0x01 }?.data }

    /// The signature's kind, by its TLV (nil: unsigned).
    public var signature: String? {
        for t in tlvs where !t.protected {
            switch t.type {
            case 0x20: return "RSA-2048 PSS"
            case 0x23: return "RSA-3072 PSS"
            case 0x22: return t.data.count > 80 ? "ECDSA P-384" : "ECDSA P-256"
            case 0x24: return "Ed25519"
            default: continue
            }
        }
        return nil
    }

    public var flagList: [String] {
        Self.flagNames.filter { flags & $0.0 != 0 }.map(\.1) + (flags & ~Self.flagNames.reduce(0) { $0 | $1.0 } != 0 ? [hexString(flags)] : [])
    }

    /// Whether the hash TLV matches the header, firmware and protected TLVs
    /// of `bytes` (the file this image was parsed from); nil without a hash
    /// TLV of a kind this checks (SHA-256, SHA-384, SHA-512).
    public func hashMatches(_ bytes: [UInt8]) -> Bool? {
        guard let tlv = hashTLV else { return nil }
        let covered = headerSize + imageSize + protectedTLVSize
        guard covered <= bytes.count else { return false }
        let name: String = switch tlv.type {
        case 0x10: "SHA256"
        case 0x11: "SHA384"
        default: "SHA512"
        }
        guard let digest = Self.digest(name, bytes[0..<covered]) else { return nil }
        return digest == tlv.data
    }

    /// SHA-2 of `data` by libcrypto (`name`: SHA256, SHA384, SHA512).
    public static func digest(_ name: String, _ data: ArraySlice<UInt8>) -> [UInt8]? {
        guard let md = EVP_MD_fetch(nil, name, nil) else { return nil }
        defer { EVP_MD_free(md) }
        var out = [UInt8](repeating: 0, count: 64)
        var size: UInt32 = 0
        let ok = data.withUnsafeBytes { input in
            out.withUnsafeMutableBytes { output in
                EVP_Digest(input.baseAddress, input.count, output.baseAddress?.assumingMemoryBound(to: UInt8.self), &size, md, nil)
            }
        }
        guard ok == 1 else { return nil }
        return Array(out.prefix(Int(size)))
    }

    /// What `imgtool dumpinfo --format json` prints of the image, member for
    /// member (`header`, `tlv_area` with `tlv_hdr_prot`/`tlvs_prot` when there
    /// are protected TLVs, `tlv_hdr`/`tlvs`), and what it does not: the byte
    /// order, version, hash and its check, key hash, signature kind, flags by
    /// name, and the bytes to upload.
    public func summary(file: String, hashMatches: Bool?) -> JSONValue {
        let null = JSONValue.rendered("null")
        func tlvList(_ protected: Bool) -> JSONValue {
            .array(tlvs.filter { $0.protected == protected }.map { t in
                .object([("type", .int(t.type)), ("type_name", t.name.map { .string($0) } ?? null), ("len", .int(t.data.count)),
                         ("data", .hex(t.data))])
            })
        }
        var area: [(String, JSONValue)] = []
        if protectedTLVSize > 0 {
            area.append(("tlv_hdr_prot", .object([("magic", .int(Self.protectedTLVInfoMagic)), ("tlv_tot", .int(protectedTLVSize))])))
            area.append(("tlvs_prot", tlvList(true)))
        }
        area.append(("tlv_hdr", .object([("magic", .int(Self.tlvInfoMagic)), ("tlv_tot", .int(tlvAreaSize))])))
        area.append(("tlvs", tlvList(false)))
        return .object([
            ("filename", .string(file)),
            ("header", .object([
                ("magic", .int(Self.magic)), ("load_addr", .int(loadAddress)), ("hdr_size", .int(headerSize)),
                ("protected_tlv_size", .int(protectedTLVSize)), ("img_size", .int(imageSize)), ("flags", .int(flags)),
                ("version", .string(version.description)),
            ])),
            ("tlv_area", .object(area)),
            ("endian", .string(endian.rawValue)),
            ("flag_names", .array(flagList.map { .string($0) })),
            ("payload_offset", .int(headerSize)),
            ("tlv_area_offset", .int(tlvAreaOffset)),
            ("length", .int(length)),
            ("hash", hash.map { .hex($0) } ?? null),
            ("hash_type", hashTLV?.name.map { .string($0) } ?? null),
            ("hash_ok", hashMatches.map { .bool($0) } ?? null),
            ("key_hash", keyHash.map { .hex($0) } ?? null),
            ("signature", signature.map { .string($0) } ?? null),
        ])
    }

    static func load16(_ b: [UInt8], _ at: Int, _ e: Endian) -> UInt16 { UInt16(truncatingIfNeeded: FieldLayout.load(b, at, 2, e)) }

    static func load32(_ b: [UInt8], _ at: Int, _ e: Endian) -> UInt32 { UInt32(truncatingIfNeeded: FieldLayout.load(b, at, 4, e)) }
}
