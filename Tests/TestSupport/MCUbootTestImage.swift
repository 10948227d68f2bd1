import BLEParsing

/// An MCUboot image made here: header, firmware bytes, a TLV area with the
/// SHA-256 over header and firmware (the layout `imgtool sign` writes
/// without a key; see fixtures/firmware/README.md).
public struct MCUbootTestImage: Sendable {
    public var bytes: [UInt8]
    public var hash: [UInt8]

    public init(bytes: [UInt8], hash: [UInt8]) {
        self.bytes = bytes
        self.hash = hash
    }

    public static func make(size: Int, version: (UInt8, UInt8, UInt16, UInt32)) -> MCUbootTestImage {
        func le16(_ v: Int) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF)] }
        func le32(_ v: Int) -> [UInt8] { le16(v & 0xFFFF) + le16(v >> 16 & 0xFFFF) }
        var header = le32(0x96F3_B83D) + le32(0) + le16(32) + le16(0) + le32(size) + le32(0)
        header += [version.0, version.1] + le16(Int(version.2)) + le32(Int(version.3)) + le32(0)
        var generator = SystemRandomNumberGenerator()
        let firmware = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let covered = header + firmware
        let hash = McubootImage.digest("SHA256", covered[...]) ?? []
        let tlvs = le16(0x6907) + le16(4 + 4 + 32) + [0x10, 0] + le16(32) + hash
        return MCUbootTestImage(bytes: covered + tlvs, hash: hash)
    }
}
