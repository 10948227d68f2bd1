import Vocabulary
/// One AD structure of an advertising or scan response payload:
/// `length (1) | AD type (1) | data (length - 1)`.
public struct ADStructure: Equatable, Sendable {
    public let type: UInt8
    /// The structure's bytes as a slice of the parsed payload (no copy).
    let bytes: ArraySlice<UInt8>
    public var data: [UInt8] { Array(bytes) }
    /// Offset of the structure's length byte in the payload.
    public let offset: Int

    init(type: UInt8, bytes: ArraySlice<UInt8>, offset: Int) {
        self.type = type
        self.bytes = bytes
        self.offset = offset
    }

    public static func == (a: ADStructure, b: ADStructure) -> Bool {
        a.type == b.type && a.offset == b.offset && a.bytes.elementsEqual(b.bytes)
    }
}

/// Service data keyed by UUID (AD types 0x16, 0x20, 0x21).
public struct ServiceData: Equatable, Sendable {
    public var uuid: BluetoothUUID
    public var data: [UInt8]
    public init(uuid: BluetoothUUID, data: [UInt8]) { self.uuid = uuid; self.data = data }
}

/// Manufacturer specific data (AD type 0xFF); `data` excludes the company id.
public struct ManufacturerData: Equatable, Sendable {
    public var companyID: UInt16
    public var data: [UInt8]
    public init(companyID: UInt16, data: [UInt8]) { self.companyID = companyID; self.data = data }
}

/// An advertisement as the detector sees it, built either from BlueZ
/// properties (address, name, ManufacturerData, ServiceData, UUIDs) or from
/// raw AD bytes with ``AdvertisingData``.
public struct Advertisement: Equatable, Sendable {
    public var address: BluetoothAddress?
    public var localName: String?
    public var manufacturerData: [ManufacturerData]
    public var serviceData: [ServiceData]
    public var serviceUUIDs: [BluetoothUUID]

    public init(address: BluetoothAddress? = nil, localName: String? = nil, manufacturerData: [ManufacturerData] = [],
                serviceData: [ServiceData] = [], serviceUUIDs: [BluetoothUUID] = []) {
        self.address = address
        self.localName = localName
        self.manufacturerData = manufacturerData
        self.serviceData = serviceData
        self.serviceUUIDs = serviceUUIDs
    }
}

/// Parser for the AD structures of an advertising/scan-response payload
/// (Core Specification Vol 3 Part C §11, Supplement to the Core Spec Part A).
///
/// Malformed input:
/// * A zero length byte ends the data (the spec allows it for early
///   termination); the remaining bytes are counted as `padding_bytes` and
///   not parsed.
/// * A length running past the end of the buffer is a `.truncated` error at
///   the offset of that length byte.
/// * A structure whose content is malformed for its type (e.g. a 16-bit UUID
///   list of odd length, service data shorter than its UUID) is an
///   `.invalidValue` error at that structure's offset.
///
/// ``parse(_:)`` is strict and throws the first error. ``parsePartial(_:)``
/// keeps partial results: it returns everything decoded from the well-formed
/// structures plus the list of errors; after a framing error (bad length)
/// nothing further can be parsed, a content error only skips its structure.
public struct AdvertisingData: Sendable {
    public var structures: [ADStructure] = []
    public var flags: UInt8?
    public var localName: String?
    public var localNameIsComplete = false
    public var serviceUUIDs: [BluetoothUUID] = []
    public var serviceUUIDsComplete = false
    public var solicitedUUIDs: [BluetoothUUID] = []
    public var serviceData: [ServiceData] = []
    public var manufacturerData: [ManufacturerData] = []
    public var txPower: Int8?
    public var appearance: UInt16?
    public var uri: String?
    /// Peripheral connection interval range in 1.25 ms units (0xFFFF = no specific value).
    public var connectionIntervalRange: (min: UInt16, max: UInt16)?
    public var leRole: UInt8?
    public var advertisingInterval: UInt32?
    public var leAddress: (address: BluetoothAddress, random: Bool)?
    public var paddingBytes = 0

    public init() {}

    public static func parse(_ bytes: [UInt8]) throws(DecodeError) -> AdvertisingData {
        let (ad, errors) = parsePartial(bytes)
        if let first = errors.first { throw first }
        return ad
    }

    public static func parsePartial(_ bytes: [UInt8]) -> (AdvertisingData, [DecodeError]) {
        parsePartial(bytes, recordingStructures: true)
    }

    /// ``parsePartial(_:)``; without `recordingStructures`, `structures` stays
    /// empty (for callers that need only the decoded content).
    static func parsePartial(_ bytes: [UInt8], recordingStructures: Bool) -> (AdvertisingData, [DecodeError]) {
        var ad = AdvertisingData()
        if recordingStructures { ad.structures.reserveCapacity(min(bytes.count / 2, 8)) }
        var errors: [DecodeError] = []
        var i = 0
        while i < bytes.count {
            let length = Int(bytes[i])
            if length == 0 {
                ad.paddingBytes = bytes.count - i
                break
            }
            if i + 1 + length > bytes.count {
                errors.append(DecodeError.truncated(context: "advertising data", offset: i, needed: length,
                                                    available: bytes.count - i - 1,
                                                    what: "the AD structure announced by its length byte"))
                break
            }
            let type = bytes[i + 1]
            let s = ADStructure(type: type, bytes: bytes[(i + 2)..<(i + 1 + length)], offset: i)
            if recordingStructures { ad.structures.append(s) }
            do {
                try ad.apply(s)
            } catch {
                errors.append(error)
            }
            i += 1 + length
        }
        return (ad, errors)
    }

    static let typeNames: [UInt8: String] = [
        0x01: "flags", 0x02: "incomplete_uuid16_list", 0x03: "complete_uuid16_list", 0x04: "incomplete_uuid32_list",
        0x05: "complete_uuid32_list", 0x06: "incomplete_uuid128_list", 0x07: "complete_uuid128_list",
        0x08: "shortened_local_name", 0x09: "complete_local_name", 0x0A: "tx_power_level", 0x0D: "class_of_device",
        0x0E: "simple_pairing_hash_c", 0x0F: "simple_pairing_randomizer_r", 0x10: "device_id", 0x11: "sm_oob_flags",
        0x12: "peripheral_connection_interval_range", 0x14: "solicitation_uuid16_list",
        0x15: "solicitation_uuid128_list", 0x16: "service_data_uuid16", 0x17: "public_target_address",
        0x18: "random_target_address", 0x19: "appearance", 0x1A: "advertising_interval",
        0x1B: "le_bluetooth_device_address", 0x1C: "le_role", 0x1F: "solicitation_uuid32_list",
        0x20: "service_data_uuid32", 0x21: "service_data_uuid128", 0x24: "uri", 0x27: "le_supported_features",
        0x2A: "mesh_message", 0x2B: "mesh_beacon", 0x2C: "big_info", 0x2D: "broadcast_code",
        0x30: "broadcast_name", 0x3D: "3d_information_data", 0xFF: "manufacturer_specific_data",
    ]

    /// URI scheme codes (Bluetooth assigned numbers) for the common schemes.
    static let uriSchemes: [UInt8: String] = [0x01: "", 0x16: "http:", 0x17: "https:"]

    mutating func apply(_ s: ADStructure) throws(DecodeError) {
        let at = s.offset
        // Zero-based view of the structure's bytes; the error context string is built only on failure.
        let data = s.bytes
        let base = data.startIndex
        func bad(_ expected: String) -> DecodeError {
            let ctx = "advertising data (\(AdvertisingData.typeNames[s.type] ?? "type \(hexString(s.type))"))"
            return DecodeError.invalidValue(context: ctx, offset: at, expected: expected, found: "\(data.count) data bytes")
        }
        func uuid(at from: Int, _ size: Int) throws(DecodeError) -> BluetoothUUID {
            let i = base + from
            switch size {
            case 2: return BluetoothUUID(uuid16: UInt16(data[i]) | UInt16(data[i + 1]) << 8)
            case 4:
                return BluetoothUUID(uuid32: UInt32(data[i]) | UInt32(data[i + 1]) << 8 | UInt32(data[i + 2]) << 16
                                         | UInt32(data[i + 3]) << 24)
            default:
                guard let uuid = BluetoothUUID(littleEndianBytes: data[i..<(i + size)]) else {
                    throw DecodeError.invalidValue(context: "UUID", offset: i, expected: "2, 4 or 16 bytes", found: "\(size) bytes")
                }
                return uuid
            }
        }
        func uuids(_ size: Int) throws(DecodeError) -> [BluetoothUUID] {
            guard data.count % size == 0 else { throw bad("a multiple of \(size) bytes") }
            var out: [BluetoothUUID] = []
            out.reserveCapacity(data.count / size)
            var start = 0
            while start < data.count {
                out.append(try uuid(at: start, size))
                start += size
            }
            return out
        }
        switch s.type {
        case 0x01:
            guard data.count >= 1 else { throw bad("1 byte of flags") }
            flags = data[base + 0]
        case 0x02, 0x03:
            serviceUUIDs += try uuids(2); if s.type == 0x03 { serviceUUIDsComplete = true }
        case 0x04, 0x05:
            serviceUUIDs += try uuids(4); if s.type == 0x05 { serviceUUIDsComplete = true }
        case 0x06, 0x07:
            serviceUUIDs += try uuids(16); if s.type == 0x07 { serviceUUIDsComplete = true }
        case 0x14: solicitedUUIDs += try uuids(2)
        case 0x1F: solicitedUUIDs += try uuids(4)
        case 0x15: solicitedUUIDs += try uuids(16)
        case 0x08, 0x09:
            // Names are UTF-8; invalid bytes are replaced rather than failing.
            let name = String(decoding: data, as: UTF8.self)
            if s.type == 0x09 || localName == nil {
                localName = name
                localNameIsComplete = s.type == 0x09
            }
        case 0x0A:
            guard data.count == 1 else { throw bad("1 byte of TX power") }
            txPower = Int8(bitPattern: data[base + 0])
        case 0x12:
            guard data.count == 4 else { throw bad("4 bytes (two uint16 intervals)") }
            connectionIntervalRange = (UInt16(data[base + 0]) | UInt16(data[base + 1]) << 8, UInt16(data[base + 2]) | UInt16(data[base + 3]) << 8)
        case 0x16, 0x20, 0x21:
            let size = s.type == 0x16 ? 2 : (s.type == 0x20 ? 4 : 16)
            guard data.count >= size else { throw bad("at least \(size) bytes of service UUID") }
            let id = try uuid(at: 0, size)
            serviceData.append(ServiceData(uuid: id, data: Array(data[(base + size)...])))
        case 0x19:
            guard data.count == 2 else { throw bad("2 bytes of appearance") }
            appearance = UInt16(data[base + 0]) | UInt16(data[base + 1]) << 8
        case 0x1A:
            guard data.count >= 2, data.count <= 4 else { throw bad("2 to 4 bytes of advertising interval") }
            var v: UInt32 = 0
            for (k, b) in data.enumerated() { v |= UInt32(b) << UInt32(8 * k) }
            advertisingInterval = v
        case 0x1B:
            guard data.count == 7 else { throw bad("7 bytes (address + type)") }
            guard let address = BluetoothAddress(littleEndianBytes: data[base..<(base + 6)]) else { throw bad("6 bytes of address") }
            leAddress = (address, data[base + 6] & 0x01 != 0)
        case 0x1C:
            guard data.count == 1 else { throw bad("1 byte of LE role") }
            leRole = data[base + 0]
        case 0x24:
            guard data.count >= 1 else { throw bad("a URI scheme byte") }
            let scheme = AdvertisingData.uriSchemes[data[base + 0]] ?? "scheme(\(hexString(data[base + 0]))):"
            uri = scheme + String(decoding: data[(base + 1)...], as: UTF8.self)
        case 0xFF:
            guard data.count >= 2 else { throw bad("at least 2 bytes of company identifier") }
            manufacturerData.append(ManufacturerData(companyID: UInt16(data[base + 0]) | UInt16(data[base + 1]) << 8,
                                                     data: Array(data[(base + 2)...])))
        default:
            break
        }
    }

    /// The detector's view of this payload.
    public func advertisement(address: BluetoothAddress? = nil) -> Advertisement {
        Advertisement(address: address ?? leAddress?.address, localName: localName, manufacturerData: manufacturerData,
                      serviceData: serviceData, serviceUUIDs: serviceUUIDs)
    }

    static let leRoles = ["peripheral_only", "central_only", "peripheral_preferred", "central_preferred"]

    /// The AD structures as a model (format "ad_structures") for JSON output.
    ///
    /// The field tree is built only when `fields` is read, so decoding raw
    /// advertisements does not pay for hex and UUID strings nobody prints.
    public var model: AdvertisementModel { summaryModel(fieldSource: .adStructures(self)) }

    /// ``model`` with its fields taken from `fieldSource` (e.g. the raw bytes this was parsed from).
    func summaryModel(fieldSource: AdvertisementModel.FieldSource) -> AdvertisementModel {
        var readings: [Reading] = []
        if let txPower { readings.append(Reading(.txPower, Double(txPower))) }
        return AdvertisementModel(formatName: "ad_structures", modelName: "advertising_data", readings: readings,
                                  fieldSource: fieldSource)
    }

    /// The fields of ``model``.
    var summaryFields: [(String, FieldValue)] {
        var fields: [(String, FieldValue)] = []
        if let flags {
            var names: [FieldValue] = []
            let bits = ["le_limited_discoverable", "le_general_discoverable", "br_edr_not_supported",
                        "le_br_edr_controller", "le_br_edr_host"]
            for (k, n) in bits.enumerated() where flags & (1 << UInt8(k)) != 0 { names.append(.string(n)) }
            fields.append(("flags", .nested([("value", .string(hexString(flags))), ("set", .list(names))])))
        }
        if let localName {
            fields.append(("local_name", .string(localName)))
            fields.append(("local_name_complete", .bool(localNameIsComplete)))
        }
        if !serviceUUIDs.isEmpty {
            fields.append(("service_uuids", .list(serviceUUIDs.map { .string($0.string) })))
            fields.append(("service_uuids_complete", .bool(serviceUUIDsComplete)))
        }
        if !solicitedUUIDs.isEmpty { fields.append(("solicited_uuids", .list(solicitedUUIDs.map { .string($0.string) }))) }
        if !serviceData.isEmpty {
            fields.append(("service_data", .list(serviceData.map {
                .nested([("uuid", .string($0.uuid.string)), ("data", .bytes($0.data))])
            })))
        }
        if !manufacturerData.isEmpty {
            fields.append(("manufacturer_data", .list(manufacturerData.map {
                .nested([("company_id", .string(hexString($0.companyID))), ("data", .bytes($0.data))])
            })))
        }
        if let txPower { fields.append(("tx_power", .int(Int(txPower)))) }
        if let appearance { fields.append(("appearance", .string(hexString(appearance)))) }
        if let uri { fields.append(("uri", .string(uri))) }
        if let r = connectionIntervalRange {
            fields.append(("connection_interval_range", .nested([
                ("min", r.min == 0xFFFF ? .null : .number(Double(r.min) * 1.25)),
                ("max", r.max == 0xFFFF ? .null : .number(Double(r.max) * 1.25)), ("unit", .string("ms"))])))
        }
        if let leRole {
            fields.append(("le_role", .string(Int(leRole) < AdvertisingData.leRoles.count
                                                ? AdvertisingData.leRoles[Int(leRole)] : "reserved_\(hexString(leRole))")))
        }
        if let advertisingInterval { fields.append(("advertising_interval_ms", .number(Double(advertisingInterval) * 0.625))) }
        if let a = leAddress {
            fields.append(("le_address", .string(a.address.description)))
            fields.append(("le_address_random", .bool(a.random)))
        }
        fields.append(("structures", .list(structures.map {
            .nested([("offset", .int($0.offset)), ("type", .string(hexString($0.type))),
                     ("name", .string(AdvertisingData.typeNames[$0.type] ?? "unknown")), ("data", .bytes($0.data))])
        })))
        if paddingBytes > 0 { fields.append(("padding_bytes", .int(paddingBytes))) }
        return fields
    }
}
