import ArgumentParser
import BLEParsing
import Foundation
import Vocabulary

/// `blecompanion fw …`: firmware of MCUboot devices (docs/FIRMWARE.md).
struct FirmwareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fw",
        abstract: "Firmware of MCUboot (Zephyr, mynewt) devices: images, and updates over Bluetooth (mcumgr SMP).",
        subcommands: [FirmwareInfoCommand.self, FirmwareStateCommand.self, FirmwareUploadCommand.self, FirmwareTestCommand.self,
                      FirmwareConfirmCommand.self, FirmwareResetCommand.self, FirmwareEraseCommand.self, FirmwareEchoCommand.self])
}

/// `blecompanion fw info FILE`: what an image would flash — version, size,
/// hash (checked against the file), signature — as `imgtool dumpinfo` reads it.
struct FirmwareInfoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show an MCUboot image's header, hash, signature and TLVs.",
        discussion: """
            The image is a file `imgtool sign` wrote (signed or not). The hash TLV is checked against the \
            header, firmware and protected TLVs it covers.

            EXIT STATUS
              0  a valid image whose hash matches
              65 not an MCUboot image, a malformed one, or one whose hash does not match (said on standard error)
              66 the file cannot be read
            """)

    @Argument(help: "The image file.") var file: String
    @Flag(help: "Print JSON: every header field, the TLV areas and TLVs (as imgtool dumpinfo names them), the hash check.")
    var json = false

    func run() throws {
        let (bytes, image) = try loadImage(file)
        let matches = image.hashMatches(bytes)
        if json {
            print(Self.json(image, file: file, hashMatches: matches))
        } else {
            print(Self.text(image, file: file, hashMatches: matches))
        }
        if matches == false {
            printError("Error: \(file): the image's hash does not match its contents (corrupt, or changed after signing)")
            throw ExitCode(65)
        }
    }

}

/// An image file's bytes and header: exit 66 when it cannot be read, 65
/// when it is not an MCUboot image (the reason on standard error).
func loadImage(_ file: String) throws -> ([UInt8], McubootImage) {
    guard let data = FileManager.default.contents(atPath: file) else {
        printError("Error: cannot read \(file)")
        throw ExitCode(66)
    }
    let bytes = [UInt8](data)
    do throws(DecodeError) { return (bytes, try McubootImage.parse(bytes)) } catch {
        printError("Error: \(file): \(error.description)")
        throw ExitCode(65)
    }
}

extension FirmwareInfoCommand {
    static func json(_ image: McubootImage, file: String, hashMatches: Bool?) -> String {
        image.summary(file: file, hashMatches: hashMatches).compact
    }

    static func text(_ image: McubootImage, file: String, hashMatches: Bool?) -> String {
        var lines = ["\(file): MCUboot image (\(image.endian.rawValue)-endian)"]
        func row(_ name: String, _ value: String) { lines.append("  " + name.padding(toLength: 15, withPad: " ", startingAt: 0) + value) }
        row("version", image.version.description)
        row("image size", "\(image.imageSize) bytes (header \(image.headerSize), TLVs \(image.tlvAreaSize)\(image.protectedTLVSize > 0 ? " + \(image.protectedTLVSize) protected" : ""); \(image.length) bytes to upload)")
        row("load address", "0x" + String(image.loadAddress, radix: 16))
        row("flags", image.flagList.isEmpty ? "none" : image.flagList.joined(separator: ", "))
        if let tlv = image.hashTLV {
            let check = hashMatches.map { $0 ? "matches the image" : "DOES NOT MATCH the image" } ?? "not checked"
            row("hash", "\(tlv.name ?? "hash") \(Hex.string(tlv.data)) (\(check))")
        } else {
            row("hash", "none")
        }
        if let key = image.keyHash { row("key hash", Hex.string(key)) }
        row("signature", image.signature ?? "none (unsigned)")
        row("TLVs", image.tlvs.map { "\($0.name ?? hexString($0.type)) (\($0.data.count) bytes\($0.protected ? ", protected" : ""))" }.joined(separator: ", "))
        return lines.joined(separator: "\n")
    }
}
