import ArgumentParser
import BLEParsing
import Vocabulary

struct DecodeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode",
        abstract: "Decode advertisement payloads and GATT characteristic values.",
        discussion: """
            HEX arguments accept upper or lower case, an optional 0x prefix, and spaces, colons or \
            dashes between bytes ("0x16485401", "16 48 54 01", "16:48:54:01").

            OUTPUT
            Human-readable text by default: format, model, readings with units, then every decoded field. \
            --json prints one object per model: {"format": …, "model": …, "readings": [{"kind": …, \
            "value": …, "unit": …}], "fields": {…}} (a reading also has "label" when a model has several \
            readings of one kind). `decode adv` can yield several models (the AD structure summary first, \
            then one per recognised payload): one object per line (JSON Lines).

            EXIT STATUS
              0  decoded
              2  the payload could not be decoded; the reason is on standard error
              64 invalid command line (bad hex, UUID, company id, address or bindkey)
            """,
        subcommands: [DecodeAdvCommand.self, DecodeServiceDataCommand.self, DecodeManufacturerCommand.self,
                      DecodeGATTCommand.self]
    )
}

struct DecodeOutputOptions: ParsableArguments {
    @Flag(help: "Print JSON instead of text (JSON Lines, one object per model, for `adv`).")
    var json = false
}

struct DecodeAdvCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "adv",
        abstract: "Decode raw advertising data (AD structures) and every payload the detector recognises.",
        discussion: """
            Prints the AD structure summary (model advertising_data) and then one model per recognised \
            service data or manufacturer data payload. Malformed structures and payloads that fail to \
            decode are reported on standard error; what could be decoded is still printed, and the exit \
            status is then 2.
            """
    )

    @Argument(help: ArgumentHelp("Advertising data: length-type-value AD structures.", valueName: "hex"),
              transform: DecodeArguments.payload)
    var hex: [UInt8]

    @Option(help: ArgumentHelp("Device address (the nonce input of encrypted BTHome/MiBeacon/pvvx payloads).",
                               valueName: "address"),
            transform: DecodeArguments.mac)
    var mac: BluetoothAddress?

    @Option(help: ArgumentHelp("16-byte key for encrypted payloads, 32 hex digits.", valueName: "hex"),
            transform: DecodeArguments.bindkey)
    var bindkey: [UInt8]?

    @OptionGroup var output: DecodeOutputOptions

    func run() throws {
        let results = AdvertisementDecoder.decodeRawAdvertisement(bytes: hex, address: mac, bindkey: bindkey)
        var failed = false
        var printed = 0
        for result in results {
            switch result {
            case let .success(model):
                if !output.json, printed > 0 { print("") }
                print(output.json ? DecodeOutput.json(model) : DecodeOutput.text(model))
                printed += 1
            case let .failure(e):
                DecodeOutput.error(e.description)
                failed = true
            }
        }
        if failed { throw ExitCode(2) }
    }
}

struct DecodeServiceDataCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "service-data",
        abstract: "Decode one service data payload (BTHome, MiBeacon, ATC/pvvx, Eddystone, Qingping, SwitchBot).",
        discussion: "HEX is the service data after the UUID."
    )

    @Argument(help: ArgumentHelp("Service UUID, e.g. fcd2 or 0xFE95.", valueName: "uuid"),
              transform: DecodeArguments.uuid)
    var uuid: BluetoothUUID

    @Argument(help: ArgumentHelp("Service data bytes (without the UUID).", valueName: "hex"),
              transform: DecodeArguments.payload)
    var hex: [UInt8]

    @Option(help: ArgumentHelp("Device address (the nonce input of encrypted payloads).", valueName: "address"),
            transform: DecodeArguments.mac)
    var mac: BluetoothAddress?

    @Option(help: ArgumentHelp("16-byte key for encrypted payloads, 32 hex digits.", valueName: "hex"),
            transform: DecodeArguments.bindkey)
    var bindkey: [UInt8]?

    @OptionGroup var output: DecodeOutputOptions

    func run() throws {
        let result = Result { () throws(DecodeError) in
            try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: hex, mac: mac, bindkey: bindkey)
        }
        try DecodeOutput.emit(result, json: output.json)
    }
}

struct DecodeManufacturerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "manufacturer",
        abstract: "Decode one manufacturer data payload (Ruuvi, iBeacon, Govee, Inkbird, SwitchBot).",
        discussion: "HEX is the manufacturer data after the 2-byte company identifier."
    )

    @Argument(help: ArgumentHelp("Company identifier: 0x0499 (hex) or 1177 (decimal).", valueName: "company-id"),
              transform: DecodeArguments.companyID)
    var companyID: UInt16

    @Argument(help: ArgumentHelp("Manufacturer data bytes (without the company id).", valueName: "hex"),
              transform: DecodeArguments.payload)
    var hex: [UInt8]

    @Option(help: ArgumentHelp("Local name of the device (tells apart vendors that share company ids).",
                               valueName: "name"))
    var name: String?

    @Option(help: ArgumentHelp("Device address.", valueName: "address"), transform: DecodeArguments.mac)
    var mac: BluetoothAddress?

    @OptionGroup var output: DecodeOutputOptions

    func run() throws {
        let result = Result { () throws(DecodeError) in
            try AdvertisementDecoder.decodeManufacturerData(companyID: companyID, data: hex, name: name, mac: mac)
        }
        try DecodeOutput.emit(result, json: output.json)
    }
}

struct DecodeGATTCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "Decode a GATT characteristic or descriptor value.",
        discussion: """
            Characteristics without a dedicated decoder are decoded from their Characteristic \
            Presentation Format descriptor (0x2904) when --presentation-format gives its 7 bytes.
            """
    )

    @Argument(help: ArgumentHelp("Characteristic or descriptor UUID, e.g. 2a37.", valueName: "characteristic-uuid"),
              transform: DecodeArguments.uuid)
    var characteristic: BluetoothUUID

    @Argument(help: ArgumentHelp("The value bytes as read or notified.", valueName: "hex"),
              transform: DecodeArguments.hex)
    var hex: [UInt8]

    @Option(help: ArgumentHelp("Value of the characteristic's presentation format descriptor (7 bytes).",
                               valueName: "hex"),
            transform: DecodeArguments.hex)
    var presentationFormat: [UInt8]?

    @OptionGroup var output: DecodeOutputOptions

    func validate() throws {
        if let presentationFormat, presentationFormat.count != 7 {
            throw ValidationError(
                "--presentation-format is the 7-byte 0x2904 descriptor value, found \(presentationFormat.count) bytes")
        }
    }

    func run() throws {
        let result = Result { () throws(DecodeError) in
            let format = try presentationFormat.map { (bytes) throws(DecodeError) in try PresentationFormat(bytes: bytes) }
            return try GATTDecoder.decode(characteristic: characteristic, value: hex, presentationFormat: format)
        }
        try DecodeOutput.emit(result, json: output.json)
    }
}
