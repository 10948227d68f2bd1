import Vocabulary
/// An LE advertiser address type as HCI reports it (Vol 4 Part E §7.7.65.2, §7.7.65.13).
public enum CaptureAddressType: Hashable, Sendable, CustomStringConvertible {
    case publicDevice  // 0x00
    case random  // 0x01
    /// 0x02: a public identity address the controller resolved from an RPA.
    case publicIdentity
    /// 0x03: a random (static) identity address the controller resolved from an RPA.
    case randomIdentity
    /// 0xFF in extended reports: no address in the PDU.
    case anonymous
    case other(UInt8)

    public init(code: UInt8) {
        switch code {
        case 0x00: self = .publicDevice
        case 0x01: self = .random
        case 0x02: self = .publicIdentity
        case 0x03: self = .randomIdentity
        case 0xFF: self = .anonymous
        default: self = .other(code)
        }
    }

    /// Whether BlueZ would call the address "random" (its AddressType property).
    public var isRandom: Bool {
        switch self {
        case .random, .randomIdentity: return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .publicDevice: return "public"
        case .random: return "random"
        case .publicIdentity: return "public identity"
        case .randomIdentity: return "random identity"
        case .anonymous: return "anonymous"
        case let .other(c): return "address type " + hexString(c)
        }
    }
}

/// One advertising report, legacy or extended.
public struct LEAdvertisingReport: Equatable, Sendable {
    public enum Format: String, Sendable { case legacy, extended }
    /// Extended reports: whether the data is all there (Event_Type bits 5–6).
    public enum DataStatus: UInt8, Sendable {
        case complete = 0
        case incompleteMoreToCome = 1
        case incompleteTruncated = 2
        case reserved = 3
    }

    public var format: Format
    /// Legacy: 0x00 ADV_IND, 0x01 ADV_DIRECT_IND, 0x02 ADV_SCAN_IND, 0x03 ADV_NONCONN_IND, 0x04 SCAN_RSP.
    /// Extended: bit field (0 connectable, 1 scannable, 2 directed, 3 scan response, 4 legacy PDU, 5–6 data status).
    public var eventType: UInt16
    public var addressType: CaptureAddressType
    public var address: BluetoothAddress
    public var data: [UInt8]
    /// nil when the controller reports 127 ("not available").
    public var rssi: Int8?
    /// Extended only; nil when 127 ("not available") or legacy.
    public var txPower: Int8?
    /// Extended only: 0x01 LE 1M, 0x03 LE Coded.
    public var primaryPHY: UInt8?
    /// Extended only: 0x00 none, 0x01 LE 1M, 0x02 LE 2M, 0x03 LE Coded.
    public var secondaryPHY: UInt8?
    /// Extended only: Advertising_SID (0xFF: none).
    public var sid: UInt8?
    /// Extended only: periodic advertising interval in 1.25 ms units (0: none).
    public var periodicInterval: UInt16?
    /// Extended directed advertising only: the address type and address the PDU was directed to.
    public var directAddressType: UInt8?
    public var directAddress: BluetoothAddress?

    public init(format: Format, eventType: UInt16, addressType: CaptureAddressType, address: BluetoothAddress, data: [UInt8],
                rssi: Int8?, txPower: Int8? = nil, primaryPHY: UInt8? = nil, secondaryPHY: UInt8? = nil, sid: UInt8? = nil,
                periodicInterval: UInt16? = nil) {
        self.format = format
        self.eventType = eventType
        self.addressType = addressType
        self.address = address
        self.data = data
        self.rssi = rssi
        self.txPower = txPower
        self.primaryPHY = primaryPHY
        self.secondaryPHY = secondaryPHY
        self.sid = sid
        self.periodicInterval = periodicInterval
    }

    public var isScanResponse: Bool {
        format == .legacy ? eventType == 0x04 : eventType & 0x08 != 0
    }

    /// Whether the advertiser accepts connections (ADV_IND / ADV_DIRECT_IND, or extended bit 0).
    public var isConnectable: Bool {
        switch format {
        case .legacy: return eventType == 0x00 || eventType == 0x01
        case .extended: return eventType & 0x01 != 0
        }
    }

    public var dataStatus: DataStatus {
        format == .legacy ? .complete : DataStatus(rawValue: UInt8((eventType >> 5) & 0x3)) ?? .reserved
    }
}

/// LE Connection Complete (subevent 0x01) and LE Enhanced Connection Complete
/// (0x0A, v2 0x29): what maps a connection handle to a peer.
public struct LEConnectionComplete: Equatable, Sendable {
    public var status: UInt8
    public var handle: UInt16
    /// 0x00 central, 0x01 peripheral (our role).
    public var role: UInt8
    public var peerAddressType: CaptureAddressType
    public var peerAddress: BluetoothAddress
    /// Connection interval in 1.25 ms units.
    public var interval: UInt16
}

/// The HCI events this importer reads; everything else is `.other`.
public enum HCIEvent: Equatable, Sendable {
    /// LE Meta 0x02 (Vol 4 Part E §7.7.65.2), every report of the event.
    case advertisingReports([LEAdvertisingReport])
    /// LE Meta 0x0D (§7.7.65.13).
    case extendedAdvertisingReports([LEAdvertisingReport])
    /// LE Meta 0x01 (§7.7.65.1), 0x0A (§7.7.65.10) or 0x29 (v2).
    case connectionComplete(LEConnectionComplete)
    /// Disconnection Complete, event 0x05 (§7.7.5).
    case disconnectionComplete(status: UInt8, handle: UInt16, reason: UInt8)
    /// Any other event; `subevent` for other LE Meta events.
    case other(code: UInt8, subevent: UInt8?)

    public static func decode(code: UInt8, parameters: ArraySlice<UInt8>) throws(DecodeError) -> HCIEvent {
        switch code {
        case 0x05:
            var r = ByteReader(parameters, context: "HCI Disconnection Complete")
            let status = try r.u8("status")
            let handle = try r.u16("connection handle") & 0x0FFF
            let reason = try r.u8("reason")
            try r.expectEnd()
            return .disconnectionComplete(status: status, handle: handle, reason: reason)
        case 0x3E:
            var r = ByteReader(parameters, context: "HCI LE Meta event")
            let subevent = try r.u8("subevent code")
            switch subevent {
            case 0x02: return .advertisingReports(try legacyReports(&r))
            case 0x0D: return .extendedAdvertisingReports(try extendedReports(&r))
            case 0x01, 0x0A, 0x29: return .connectionComplete(try connection(&r, subevent: subevent))
            default: return .other(code: code, subevent: subevent)
            }
        default:
            return .other(code: code, subevent: nil)
        }
    }

    static func rssi(_ v: Int8) -> Int8? { v == 127 ? nil : v }

    /// `Num_Reports (1)`, then per report `Event_Type (1) | Address_Type (1) |
    /// Address (6) | Data_Length (1) | Data | RSSI (1)`. Reports follow one
    /// another, each complete, as controllers send them and Linux reads them.
    static func legacyReports(_ r: inout ByteReader) throws(DecodeError) -> [LEAdvertisingReport] {
        let count = Int(try r.u8("Num_Reports"))
        guard count >= 1 else { throw r.invalid(expected: "Num_Reports of 1 or more", found: "0", at: r.offset - 1) }
        var reports: [LEAdvertisingReport] = []
        reports.reserveCapacity(count)
        for _ in 0..<count {
            let type = try r.u8("Event_Type")
            let addressType = try r.u8("Address_Type")
            let address = try r.address("Address")
            let length = Int(try r.u8("Data_Length"))
            guard length <= 31 else {
                throw r.invalid(expected: "a legacy Data_Length of at most 31", found: "\(length)", at: r.offset - 1)
            }
            let data = Array(try r.bytes(length, "advertising data"))
            let rssi = try r.i8("RSSI")
            reports.append(LEAdvertisingReport(format: .legacy, eventType: UInt16(type), addressType: CaptureAddressType(code: addressType),
                                               address: address, data: data, rssi: HCIEvent.rssi(rssi)))
        }
        try r.expectEnd()
        return reports
    }

    /// `Num_Reports (1)`, then per report `Event_Type (2) | Address_Type (1) |
    /// Address (6) | Primary_PHY (1) | Secondary_PHY (1) | Advertising_SID (1) |
    /// TX_Power (1) | RSSI (1) | Periodic_Advertising_Interval (2) |
    /// Direct_Address_Type (1) | Direct_Address (6) | Data_Length (1) | Data`.
    static func extendedReports(_ r: inout ByteReader) throws(DecodeError) -> [LEAdvertisingReport] {
        let count = Int(try r.u8("Num_Reports"))
        guard count >= 1 else { throw r.invalid(expected: "Num_Reports of 1 or more", found: "0", at: r.offset - 1) }
        var reports: [LEAdvertisingReport] = []
        reports.reserveCapacity(count)
        for _ in 0..<count {
            let type = try r.u16("Event_Type")
            let addressType = try r.u8("Address_Type")
            let address = try r.address("Address")
            let primary = try r.u8("Primary_PHY")
            let secondary = try r.u8("Secondary_PHY")
            let sid = try r.u8("Advertising_SID")
            let tx = try r.i8("TX_Power")
            let rssi = try r.i8("RSSI")
            let interval = try r.u16("Periodic_Advertising_Interval")
            let directType = try r.u8("Direct_Address_Type")
            let directAddress = try r.address("Direct_Address")
            let length = Int(try r.u8("Data_Length"))
            let data = Array(try r.bytes(length, "advertising data"))
            var report = LEAdvertisingReport(format: .extended, eventType: type, addressType: CaptureAddressType(code: addressType),
                                             address: address, data: data, rssi: HCIEvent.rssi(rssi),
                                             txPower: tx == 127 ? nil : tx, primaryPHY: primary, secondaryPHY: secondary,
                                             sid: sid, periodicInterval: interval)
            if type & 0x04 != 0 {
                report.directAddressType = directType
                report.directAddress = directAddress
            }
            reports.append(report)
        }
        try r.expectEnd()
        return reports
    }

    /// `Status (1) | Connection_Handle (2) | Role (1) | Peer_Address_Type (1) |
    /// Peer_Address (6) | [Local_RPA (6) | Peer_RPA (6) (enhanced)] |
    /// Connection_Interval (2) | Peripheral_Latency (2) | Supervision_Timeout (2) |
    /// Central_Clock_Accuracy (1) | [Advertising_Handle (1) | Sync_Handle (2) (v2)]`.
    static func connection(_ r: inout ByteReader, subevent: UInt8) throws(DecodeError) -> LEConnectionComplete {
        let status = try r.u8("Status")
        let handle = try r.u16("Connection_Handle") & 0x0FFF
        let role = try r.u8("Role")
        let peerType = try r.u8("Peer_Address_Type")
        let peer = try r.address("Peer_Address")
        if subevent != 0x01 {
            try r.skip(12, "Local_Resolvable_Private_Address and Peer_Resolvable_Private_Address")
        }
        let interval = try r.u16("Connection_Interval")
        try r.skip(5, "Peripheral_Latency, Supervision_Timeout and Central_Clock_Accuracy")
        if subevent == 0x29 { try r.skip(3, "Advertising_Handle and Sync_Handle") }
        try r.expectEnd()
        return LEConnectionComplete(status: status, handle: handle, role: role, peerAddressType: CaptureAddressType(code: peerType),
                                    peerAddress: peer, interval: interval)
    }
}
