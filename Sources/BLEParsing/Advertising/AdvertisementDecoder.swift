import Vocabulary
/// Picks the decoder(s) for an advertisement by service-data UUID, company
/// id and payload shape, and returns one result per recognised payload.
///
/// Unrecognised service data and manufacturer data are skipped (they are
/// not errors); a recognised payload that fails to decode yields a
/// `.failure` with the typed error.
public enum AdvertisementDecoder {
    /// Service data UUIDs this module decodes.
    public static let knownServiceUUIDs: Set<UInt16> = [
        BTHome.uuidV2, BTHome.uuidV1, BTHome.uuidV1Encrypted, MiBeacon.uuid, ATCThermometer.uuid, Eddystone.uuid,
        Qingping.uuid, 0xFD3D, 0x0D00,
    ]

    public static func decode(_ adv: Advertisement, bindkey: [UInt8]? = nil) -> [Result<AdvertisementModel, DecodeError>] {
        var results: [Result<AdvertisementModel, DecodeError>] = []
        decode(adv, bindkey: bindkey, into: &results)
        return results
    }

    /// ``decode(_:bindkey:)`` appending to `results` (no intermediate result arrays).
    static func decode(_ adv: Advertisement, bindkey: [UInt8]?, into results: inout [Result<AdvertisementModel, DecodeError>]) {
        var switchBotService: [UInt8]? = nil
        for sd in adv.serviceData {
            guard let short = sd.uuid.uuid16, isKnownServiceUUID(short) else { continue }
            if short == 0xFD3D || short == 0x0D00 {
                switchBotService = sd.data
                continue
            }
            results.append(capture {
                () throws(DecodeError) in try decodeServiceData(uuid: sd.uuid, data: sd.data, mac: adv.address, bindkey: bindkey)
            })
        }
        let switchBotMfr = adv.manufacturerData.first { $0.companyID == SwitchBot.companyID }?.data
        if switchBotService != nil || (switchBotMfr.map { $0.count >= 11 } ?? false) {
            results.append(capture {
                () throws(DecodeError) in try SwitchBot.decode(serviceData: switchBotService, manufacturerData: switchBotMfr)
            })
        }
        for md in adv.manufacturerData where md.companyID != SwitchBot.companyID {
            guard recognises(companyID: md.companyID, data: md.data, name: adv.localName) else { continue }
            results.append(capture {
                () throws(DecodeError) in
                try decodeManufacturerData(companyID: md.companyID, data: md.data, name: adv.localName, mac: adv.address)
            })
        }
    }

    /// `knownServiceUUIDs.contains(short)` without hashing.
    @inline(__always)
    static func isKnownServiceUUID(_ short: UInt16) -> Bool {
        switch short {
        case BTHome.uuidV2, BTHome.uuidV1, BTHome.uuidV1Encrypted, MiBeacon.uuid, ATCThermometer.uuid, Eddystone.uuid,
             Qingping.uuid, 0xFD3D, 0x0D00:
            return true
        default:
            return false
        }
    }

    static func capture(_ body: () throws(DecodeError) -> AdvertisementModel) -> Result<AdvertisementModel, DecodeError> {
        do { return .success(try body()) } catch { return .failure(error) }
    }

    /// Whether ``decodeManufacturerData(companyID:data:name:mac:)`` has a decoder for this payload.
    public static func recognises(companyID: UInt16, data: [UInt8], name: String?) -> Bool {
        if Inkbird.matches(companyID: companyID, data: data, name: name) { return true }
        switch companyID {
        case Ruuvi.companyID: return data.first == 3 || data.first == 5
        case IBeacon.companyID: return IBeacon.matches(data)
        case SwitchBot.companyID: return data.count >= 11
        default: return Govee.matches(companyID: companyID, data: data)
        }
    }

    /// Decodes one service data payload by its UUID.
    public static func decodeServiceData(uuid: BluetoothUUID, data: [UInt8], mac: BluetoothAddress? = nil,
                                         bindkey: [UInt8]? = nil) throws(DecodeError) -> AdvertisementModel {
        guard let short = uuid.uuid16 else {
            throw DecodeError.unsupported(context: "service data", what: "UUID \(uuid.string)")
        }
        switch short {
        case BTHome.uuidV2: return try BTHome.decodeV2(data, mac: mac, bindkey: bindkey)
        case BTHome.uuidV1, BTHome.uuidV1Encrypted: return try BTHome.decodeV1(data, uuid: short, mac: mac, bindkey: bindkey)
        case MiBeacon.uuid: return try MiBeacon.decode(data, mac: mac, bindkey: bindkey)
        case ATCThermometer.uuid: return try ATCThermometer.decode(data, mac: mac, bindkey: bindkey)
        case Eddystone.uuid: return try Eddystone.decode(data)
        case Qingping.uuid: return try Qingping.decode(data)
        case 0xFD3D, 0x0D00: return try SwitchBot.decode(serviceData: data, manufacturerData: nil)
        default:
            throw DecodeError.unsupported(context: "service data", what: "UUID \(hexString(short))")
        }
    }

    /// Decodes one manufacturer data payload (`data` excludes the company id).
    /// `name` (the local name) disambiguates vendors that share company ids.
    public static func decodeManufacturerData(companyID: UInt16, data: [UInt8], name: String? = nil,
                                              mac: BluetoothAddress? = nil) throws(DecodeError) -> AdvertisementModel {
        if Inkbird.matches(companyID: companyID, data: data, name: name) {
            return try Inkbird.decode(companyID: companyID, data: data, name: name)
        }
        switch companyID {
        case Ruuvi.companyID: return try Ruuvi.decode(data)
        case IBeacon.companyID:
            guard IBeacon.matches(data) else {
                throw DecodeError.unsupported(context: "apple manufacturer data",
                                              what: "type \(data.first.map { hexString($0) } ?? "none") (only iBeacon 0x02 0x15)")
            }
            return try IBeacon.decode(data)
        case SwitchBot.companyID: return try SwitchBot.decode(serviceData: nil, manufacturerData: data)
        default:
            if Govee.matches(companyID: companyID, data: data) {
                return try Govee.decode(companyID: companyID, data: data, name: name)
            }
            throw DecodeError.unsupported(context: "manufacturer data",
                                          what: "company \(hexString(companyID)) with \(data.count) bytes")
        }
    }

    /// Decodes a raw advertising / scan response payload (AD structures).
    /// The first result is the AD structure summary (or the framing error);
    /// payload decoders run on whatever structures were well formed, so
    /// partial results are kept. Content errors of single structures follow
    /// as failures.
    public static func decodeRawAdvertisement(bytes: [UInt8], address: BluetoothAddress? = nil, bindkey: [UInt8]? = nil)
        -> [Result<AdvertisementModel, DecodeError>]
    {
        // The summary's fields are parsed again from `bytes` when read, so this
        // pass need not record the structure list.
        let (ad, errors) = AdvertisingData.parsePartial(bytes, recordingStructures: false)
        var results: [Result<AdvertisementModel, DecodeError>] = []
        results.reserveCapacity(2 + errors.count + ad.serviceData.count + ad.manufacturerData.count)
        results.append(.success(ad.summaryModel(fieldSource: .adBytes(bytes))))
        for e in errors { results.append(.failure(e)) }
        decode(ad.advertisement(address: address), bindkey: bindkey, into: &results)
        return results
    }
}
