import BLEParsing
import Vocabulary

/// Routes one fuzz input to a BLEParsing entry point. The first byte selects
/// the entry point (low 3 bits) and whether a device address and bindkey
/// follow (bit 7); the rest is the payload. Layouts after the selector:
///
/// | mode | entry point | layout |
/// |---|---|---|
/// | 0 | `decodeRawAdvertisement` (AD parser + detector) | [mac+key]? AD bytes |
/// | 1 | `decodeServiceData` | [mac+key]? uuid16 LE, data |
/// | 2 | `decodeManufacturerData` (+ `recognises`) | [mac+key]? company LE, name length, name, data |
/// | 3 | `GATTDecoder.decode` (known characteristics; unknown ids map onto one) | uuid16 LE, value |
/// | 4 | `GATTDecoder.decode` with a presentation format | 7-byte 0x2904 value, value |
/// | 5 | `AdvertisementDecoder.decode` (detector) with SwitchBot-style service + manufacturer data | [mac+key]? split, bytes |
/// | 6 | text parsers: `parseHex`, `BluetoothUUID(parsing:)`, `BluetoothAddress(parsing:)`, `IdentityResolvingKey(bluetoothdInfo:)` | UTF-8 text |
/// | 7 | strict `AdvertisingData.parse`, `PresentationFormat(bytes:)`, a profile `FieldLayout` (decode, encode, decode again), CBOR (decode, encode, decode again), SMP reassembly, `McubootImage.parse`, Improv RPC frames (parse, frame again) and service data | bytes |
///
/// "mac+key" is 6 address bytes (display order) and a 16-byte bindkey.
/// Every successful model is serialised to JSON so the writer is covered too.
enum FuzzHarness {
    static let customUUID = BluetoothUUID(high: 0xE95D_9250_251D_470A, low: 0xA062_FA19_22DF_A9A8)
    static let gattUUIDs: [BluetoothUUID] = GATTDecoder.supportedUUIDs

    /// Runs one input; returns a checksum of the output so the work cannot be optimised away.
    @discardableResult
    static func run(_ input: [UInt8]) -> Int {
        guard let selector = input.first else { return 0 }
        var rest = input.dropFirst()
        var mac: BluetoothAddress? = nil
        var key: [UInt8]? = nil
        if selector & 0x80 != 0, rest.count >= 22 {
            mac = BluetoothAddress(bytes: rest.prefix(6))
            key = Array(rest.dropFirst(6).prefix(16))
            rest = rest.dropFirst(22)
        }
        switch selector & 0x07 {
        case 0:
            return sum(AdvertisementDecoder.decodeRawAdvertisement(bytes: Array(rest), address: mac, bindkey: key))
        case 1:
            guard rest.count >= 2 else { return 0 }
            let uuid = BluetoothUUID(uuid16: UInt16(rest[rest.startIndex]) | UInt16(rest[rest.startIndex + 1]) << 8)
            let data = Array(rest.dropFirst(2))
            var total = one { () throws(DecodeError) in
                try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data, mac: mac, bindkey: key)
            }
            if key != nil {
                total &+= one { () throws(DecodeError) in
                    try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data, mac: mac, bindkey: nil)
                }
            }
            return total
        case 2:
            guard rest.count >= 3 else { return 0 }
            let company = UInt16(rest[rest.startIndex]) | UInt16(rest[rest.startIndex + 1]) << 8
            let nameLength = Int(rest[rest.startIndex + 2])
            var body = rest.dropFirst(3)
            var name: String? = nil
            if nameLength > 0, nameLength <= body.count {
                name = String(decoding: body.prefix(nameLength), as: UTF8.self)
                body = body.dropFirst(nameLength)
            }
            let data = Array(body)
            _ = AdvertisementDecoder.recognises(companyID: company, data: data, name: name)
            return one { () throws(DecodeError) in
                try AdvertisementDecoder.decodeManufacturerData(companyID: company, data: data, name: name, mac: mac)
            }
        case 3:
            guard rest.count >= 2, !gattUUIDs.isEmpty else { return 0 }
            var uuid = BluetoothUUID(uuid16: UInt16(rest[rest.startIndex]) | UInt16(rest[rest.startIndex + 1]) << 8)
            if !GATTDecoder.isSupported(uuid) {
                uuid = gattUUIDs[Int(rest[rest.startIndex]) % gattUUIDs.count]
            }
            let value = Array(rest.dropFirst(2))
            return one { () throws(DecodeError) in try GATTDecoder.decode(characteristic: uuid, value: value) }
        case 4:
            guard rest.count >= 7 else { return 0 }
            let pfBytes = Array(rest.prefix(7))
            let value = Array(rest.dropFirst(7))
            return one { () throws(DecodeError) in
                let format = try PresentationFormat(bytes: pfBytes)
                return try GATTDecoder.decode(characteristic: customUUID, value: value, presentationFormat: format)
            }
        case 5:
            guard let split = rest.first else { return 0 }
            let body = rest.dropFirst()
            let cut = body.startIndex + min(Int(split), body.count)
            let service = Array(body[body.startIndex..<cut])
            let manufacturer = Array(body[cut...])
            let uuid: UInt16 = split & 0x80 == 0 ? 0xFD3D : 0x0D00
            let adv = Advertisement(address: mac, localName: nil,
                                    manufacturerData: [ManufacturerData(companyID: 0x0969, data: manufacturer)],
                                    serviceData: [ServiceData(uuid: BluetoothUUID(uuid16: uuid), data: service)])
            return sum(AdvertisementDecoder.decode(adv, bindkey: key))
        case 6:
            let text = String(decoding: rest, as: UTF8.self)
            var total = 0
            if let bytes = try? parseHex(text) { total &+= bytes.count }
            if let uuid = try? BluetoothUUID(parsing: text) { total &+= uuid.string.utf8.count &+ uuid.shortString.utf8.count }
            if let address = try? BluetoothAddress(text) { total &+= address.description.utf8.count }
            if let irk = try? IdentityResolvingKey(bluetoothdInfo: text) {
                total &+= irk.bytes.count
                total &+= (irk.hash(UInt32(text.utf8.count & 0xFF_FFFF)) ?? 0) == 0 ? 0 : 1
            }
            return total
        default:
            var total = 0
            if let ad = try? AdvertisingData.parse(Array(rest)) { total &+= ad.model.jsonString.utf8.count }
            if let pf = try? PresentationFormat(bytes: Array(rest.prefix(7))) {
                total &+= pf.formatName.utf8.count &+ (pf.unitSymbol?.utf8.count ?? 0)
            }
            total &+= layoutRoundTrip(Array(rest))
            total &+= firmwareReaders(Array(rest))
            return total
        }
    }

    /// CBOR (what decodes re-encodes to an item that decodes the same), SMP
    /// reassembly of the bytes cut in two, the MCUboot image parser, and
    /// Improv's frames (what parses frames to the same bytes).
    static func firmwareReaders(_ bytes: [UInt8]) -> Int {
        var total = 0
        if let (item, used) = try? CBOR.decodePrefix(bytes) {
            guard let again = try? CBOR.decode(item.encoded) else {
                preconditionFailure("CBOR: the encoding of a decoded item does not decode (input \(Hex.string(bytes.prefix(used))))")
            }
            // NaN is never equal to itself: compare the encodings.
            precondition(again.encoded == item.encoded, "CBOR: decode(encode(x)) differs from x (input \(Hex.string(bytes.prefix(used))))")
            total &+= used
        }
        var reassembler = SMP.Reassembler(limit: 4096)
        let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % bytes.count
        let first = (try? reassembler.append(Array(bytes[..<cut]))) ?? []
        let second = (try? reassembler.append(Array(bytes[cut...]))) ?? []
        total &+= first.count &+ second.count &+ reassembler.waiting
        if let image = try? McubootImage.parse(bytes) {
            precondition(image.length <= bytes.count, "MCUboot: an image longer than its file")
            total &+= image.tlvs.count &+ (image.hashMatches(bytes) == true ? 1 : 0)
        }
        // Improv: a frame that parses frames again to the same bytes.
        if let rpc = try? Improv.RPC.parse(bytes) {
            precondition(rpc.bytes == bytes, "Improv: parse then frame differs from the input (\(Hex.string(bytes)))")
            total &+= rpc.strings.count
        }
        if let data = try? Improv.ServiceData.parse(bytes) { total &+= Int(data.state.rawValue) }
        return total
    }

    /// A profile-style layout (every kind of field, bit fields, an
    /// enumeration, a repeated tail): what decodes must encode, and decode
    /// again to the same values (encode(decode(b)) is b's canonical form).
    static let layout = try? FieldLayout(fields: [
        .init(name: "kind", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 0, width: 3), values: [1: "a", 2: "b"]),
        .init(name: "signed", offset: 0, encoding: .signed(bytes: 1, .little), bits: .init(shift: 3, width: 5)),
        .init(name: "t", offset: 1, encoding: .signed(bytes: 2, .big), scale: 0.005, add: -3, reading: .temperature, decimals: 3),
        .init(name: "h", offset: 3, encoding: .float(bytes: 2, .little), reading: .humidity),
        .init(name: "f", offset: 5, encoding: .float(bytes: 4, .big)),
        .init(name: "name", offset: 9, encoding: .string(bytes: 4)),
        .init(name: "tail", offset: 13, encoding: .unsigned(bytes: 3, .little), scale: 0.1, count: .rest, decimals: 1),
    ])

    static func layoutRoundTrip(_ bytes: [UInt8]) -> Int {
        guard let layout, let decoded = try? layout.decode(bytes) else { return 0 }
        let values = Dictionary(uniqueKeysWithValues: decoded.map { ($0.name, $0.value) })
        let encoded: [UInt8]
        do { encoded = try layout.encode(values) } catch {
            preconditionFailure("layout: decoded values do not encode: \(error) (input \(Hex.string(bytes)))")
        }
        guard let again = try? layout.decode(encoded) else {
            preconditionFailure("layout: the encoding of decoded values does not decode (input \(Hex.string(bytes)))")
        }
        // NaN is never equal to itself: compare what is not NaN.
        for (x, y) in zip(decoded, again) where x.value != y.value {
            if case let .number(a) = x.value, case let .number(b) = y.value, a.isNaN, b.isNaN { continue }
            preconditionFailure("layout: \(x.name) decoded \(x.value), then \(y.value) after encoding (input \(Hex.string(bytes)))")
        }
        return encoded.count &+ layout.readings(decoded).count
    }

    static func one(_ body: () throws(DecodeError) -> some DecodedModel) -> Int {
        do {
            return try body().jsonString.utf8.count
        } catch {
            return error.description.utf8.count
        }
    }

    static func sum(_ results: [Result<AdvertisementModel, DecodeError>]) -> Int {
        var total = 0
        for result in results {
            switch result {
            case let .success(model): total &+= model.jsonString.utf8.count
            case let .failure(error): total &+= error.description.utf8.count
            }
        }
        return total
    }
}
