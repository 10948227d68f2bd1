import BLEParsing
import BlueZ
import BlueZSimulator
import ScenarioFormat
import Vocabulary

/// Makes a recording shareable: every Bluetooth address and every name is
/// replaced, consistently, and the MACs that advertisement formats carry in
/// their payloads are rewritten to the same fake addresses, so decoded
/// readings do not change.
///
/// Fake addresses are handed out **sequentially, in order of first
/// appearance** (adapters, then devices in file order, then MACs found only
/// inside payloads). Why not a hash: a 48-bit address with a known vendor
/// prefix leaves about 2^24 candidates, so an unkeyed hash is reversible by
/// brute force, and a keyed one with a per-file salt gives no more
/// consistency across files than a counter does — while a counter is
/// readable, collision-free and makes the output deterministic (the same
/// recording redacts to the same file). The low 24 bits carry the counter;
/// the top byte keeps the address type: public addresses become
/// `00:00:00:…`, random addresses keep their two sub-type bits (static
/// `C0:00:00:…`, resolvable `40:00:00:…`, non-resolvable `00:00:00:…`).
///
/// Names become "Device 1", "Device 2", … (adapters: "Adapter 1", …), the
/// same real name always the same fake one; names that decoders read to
/// recognise a format and that identify nobody (Inkbird's "sps", "tps",
/// "iBBQ", "xBBQ") are kept. GATT values that name the device (Device Name
/// 0x2A00) follow the name map; Serial Number (0x2A25) and System ID
/// (0x2A23, usually derived from the MAC) are zeroed.
///
/// Payload MACs rewritten: pvvx custom (0x181A, 15 bytes, MAC little-endian
/// in 0–5), ATC1441 (0x181A, 13 bytes, MAC big-endian in 0–5), RuuviTag
/// data format 5 (0x0499, last 6 bytes), Xiaomi MiBeacon (0xFE95, MAC field
/// when frame control bit 4 says it is there, little-endian), BTHome v2
/// (0xFCD2, MAC field when device-information bit 1 says so, little-endian)
/// and SwitchBot manufacturer data (0x0969, MAC big-endian in 0–5).
///
/// Encrypted frames (BTHome v1/v2, MiBeacon v4/v5, pvvx 11-byte) use the
/// advertiser's real MAC in the AES-CCM nonce. Re-encrypting them for the
/// fake address would need the bindkey, which a recording does not have:
/// they are **kept** as they are (their plaintext MAC field, if any, is
/// rewritten), so the device's presence and timing stay in the file, but
/// they no longer decrypt — not even with the key. Their ciphertext reveals
/// nothing without the key. Other identifiers inside payloads (iBeacon
/// UUID/major/minor, Eddystone UID or URL) are kept.
public struct Redaction: Sendable {
    /// Real address (upper case) → fake address.
    public private(set) var addresses: [String: String] = [:]
    /// Real name → fake name.
    public private(set) var names: [String: String] = [:]
    private var nextAddress: UInt64 = 1
    private var nextDeviceName = 1
    private var nextAdapterName = 1

    public init() {}

    /// Names decoders read to recognise a format; they identify nobody.
    static let keptNames: Set<String> = ["sps", "tps", "ibbq", "xbbq"]

    /// The fake address for `real` ("AA:BB:CC:DD:EE:FF"); `random` keeps the
    /// address's two sub-type bits. The same `real` always gives the same result.
    public mutating func address(_ real: String, random: Bool = false) -> String {
        let key = real.uppercased()
        if let known = addresses[key] { return known }
        let bytes = (try? BluetoothAddress(key).bytes) ?? [0, 0, 0, 0, 0, 0]
        let top: UInt8 = random ? bytes[0] & 0xC0 : 0
        let n = nextAddress
        nextAddress += 1
        let fake = [top, 0, 0, UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
        let text = BluetoothAddress(value: fake.reduce(0) { $0 << 8 | UInt64($1) }).description
        addresses[key] = text
        return text
    }

    /// The fake name for a device name.
    public mutating func name(_ real: String) -> String {
        if Self.keptNames.contains(real.lowercased()) { return real }
        if let known = names[real] { return known }
        // A name that is only the address (BlueZ's alias for nameless devices).
        if let a = try? BluetoothAddress(real) {
            let fake = address(a.description)
            return real.contains("-") ? String(fake.map { $0 == ":" ? "-" : $0 }) : fake
        }
        let fake = "Device \(nextDeviceName)"
        nextDeviceName += 1
        names[real] = fake
        return fake
    }

    mutating func adapterName(_ real: String) -> String {
        if let known = names[real] { return known }
        let fake = "Adapter \(nextAdapterName)"
        nextAdapterName += 1
        names[real] = fake
        return fake
    }

    /// The scenario with every address, name and payload MAC replaced.
    public mutating func redact(_ scenario: Scenario) -> Scenario {
        var s = scenario
        // Addresses first, in order of appearance, so that a MAC found in a
        // payload maps to the device's own fake address whatever the order.
        for i in s.adapters.indices {
            s.adapters[i].address = address(s.adapters[i].address, random: s.adapters[i].addressType == "random")
        }
        for d in s.devices { _ = address(d.address, random: d.addressType == "random") }
        for i in s.adapters.indices {
            let real = s.adapters[i].name
            s.adapters[i].name = adapterName(real)
            s.adapters[i].alias = s.adapters[i].alias.map { $0 == real ? s.adapters[i].name : adapterName($0) }
        }
        for i in s.devices.indices {
            var d = s.devices[i]
            d.address = address(d.address, random: d.addressType == "random")
            d.name = d.name.map { name($0) }
            d.alias = d.alias.map { name($0) }
            d.manufacturerData = manufacturerData(d.manufacturerData)
            d.serviceData = serviceData(d.serviceData)
            if var t = d.advertising {
                for j in t.events.indices {
                    t.events[j].name = t.events[j].name.map { name($0) }
                    t.events[j].manufacturerData = t.events[j].manufacturerData.map { manufacturerData($0) }
                    t.events[j].serviceData = t.events[j].serviceData.map { serviceData($0) }
                }
                d.advertising = t
            }
            for si in d.gatt.indices {
                for ci in d.gatt[si].characteristics.indices {
                    var c = d.gatt[si].characteristics[ci]
                    c.value = characteristicValue(uuid: c.uuid, c.value)
                    if var n = c.notifications {
                        for k in n.events.indices { n.events[k].value = characteristicValue(uuid: c.uuid, n.events[k].value) }
                        c.notifications = n
                    }
                    d.gatt[si].characteristics[ci] = c
                }
            }
            s.devices[i] = d
        }
        s.description = s.description.map { $0 + " (redacted)" }
        return s
    }

    mutating func characteristicValue(uuid: String, _ value: [UInt8]) -> [UInt8] {
        switch uuid {
        case "00002a00-0000-1000-8000-00805f9b34fb":
            guard !value.isEmpty else { return value }
            return Array(name(String(decoding: value, as: UTF8.self)).utf8)
        case "00002a25-0000-1000-8000-00805f9b34fb":
            return [UInt8](repeating: UInt8(ascii: "0"), count: value.count)
        case "00002a23-0000-1000-8000-00805f9b34fb":
            return [UInt8](repeating: 0, count: value.count)
        default:
            return value
        }
    }

    /// Manufacturer data with the MACs of known formats rewritten.
    public mutating func manufacturerData(_ data: [UInt16: [UInt8]]) -> [UInt16: [UInt8]] {
        var out: [UInt16: [UInt8]] = [:]
        for (company, bytes) in data { out[company] = manufacturerData(company: company, bytes) }
        return out
    }

    public mutating func manufacturerData(company: UInt16, _ data: [UInt8]) -> [UInt8] {
        switch company {
        case Ruuvi.companyID where data.first == 5 && data.count == 24:
            // RAWv2: the last six bytes are the MAC; all 0xFF means "not available".
            if data.suffix(6).allSatisfy({ $0 == 0xFF }) { return data }
            return rewritingMAC(data, at: 18, littleEndian: false)
        case SwitchBot.companyID where data.count >= 6:
            return rewritingMAC(data, at: 0, littleEndian: false)
        default:
            return data
        }
    }

    /// Service data (keys: BlueZ's 128-bit UUIDs) with payload MACs rewritten.
    public mutating func serviceData(_ data: [String: [UInt8]]) -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for (uuid, bytes) in data { out[uuid] = serviceData(uuid: uuid, bytes) }
        return out
    }

    public mutating func serviceData(uuid: String, _ data: [UInt8]) -> [UInt8] {
        guard let short = uuid16(uuid) else { return data }
        switch short {
        case ATCThermometer.uuid where data.count == 13:
            return rewritingMAC(data, at: 0, littleEndian: false)  // ATC1441
        case ATCThermometer.uuid where data.count == 15:
            return rewritingMAC(data, at: 0, littleEndian: true)  // pvvx custom
        case MiBeacon.uuid where data.count >= 11:
            let frameControl = UInt16(data[0]) | UInt16(data[1]) << 8
            guard frameControl & 0x0010 != 0 else { return data }
            return rewritingMAC(data, at: 5, littleEndian: true)
        case BTHome.uuidV2 where data.count >= 7:
            guard data[0] & 0x02 != 0, data[0] >> 5 == 2 else { return data }
            return rewritingMAC(data, at: 1, littleEndian: true)
        default:
            return data
        }
    }

    private mutating func rewritingMAC(_ data: [UInt8], at offset: Int, littleEndian: Bool) -> [UInt8] {
        guard offset >= 0, offset + 6 <= data.count else { return data }
        var mac = Array(data[offset..<offset + 6])
        if littleEndian { mac.reverse() }
        let real = BluetoothAddress(value: mac.reduce(0) { $0 << 8 | UInt64($1) }).description
        let fake = address(real, random: false)
        guard var bytes = try? BluetoothAddress(fake).bytes else { return data }
        if littleEndian { bytes.reverse() }
        var out = data
        out.replaceSubrange(offset..<offset + 6, with: bytes)
        return out
    }
}

/// The 16-bit form of a Bluetooth-base UUID ("0000181a-0000-1000-8000-00805f9b34fb" → 0x181A).
func uuid16(_ uuid: String) -> UInt16? {
    (try? BluetoothUUID(parsing: uuid))?.uuid16
}
