import Vocabulary
/// Which way an HCI packet went.
public enum HCIDirection: String, Hashable, Sendable {
    /// Host → controller (commands, outgoing ACL): what our side sent.
    case sent
    /// Controller → host (events, incoming ACL): what the remote side or the controller sent.
    case received
}

/// An ACL data packet (Core v5.4 Vol 4 Part E §5.4.2):
/// `Handle (12 bits) | PB flag (2 bits) | BC flag (2 bits)` little-endian,
/// `Data_Total_Length (2)`, data.
public struct ACLPacket: Equatable, Sendable {
    public var handle: UInt16
    /// Packet boundary flag: 0b00 first non-flushable (host → controller start),
    /// 0b01 continuing fragment, 0b10 first flushable (start), 0b11 complete PDU.
    public var packetBoundary: UInt8
    public var broadcast: UInt8
    public var data: ArraySlice<UInt8>

    /// Whether this fragment starts an L2CAP PDU (every boundary flag but 0b01).
    public var isStart: Bool { packetBoundary != 0b01 }

    public static func decode(_ bytes: ArraySlice<UInt8>) throws(DecodeError) -> ACLPacket {
        var r = ByteReader(bytes, context: "HCI ACL packet")
        let hf = try r.u16("handle and flags")
        let length = Int(try r.u16("data total length"))
        let data = try r.bytes(length, "ACL data")
        try r.expectEnd()
        return ACLPacket(handle: hf & 0x0FFF, packetBoundary: UInt8((hf >> 12) & 0x3), broadcast: UInt8(hf >> 14), data: data)
    }
}

/// What one btsnoop record holds, independent of the datalink it came in.
public enum CapturePacket: Sendable {
    /// HCI command (Vol 4 Part E §5.4.1): `Opcode (2) | Parameter_Total_Length (1) | parameters`.
    case command(opcode: UInt16, parameters: ArraySlice<UInt8>)
    /// HCI event (§5.4.4): `Event_Code (1) | Parameter_Total_Length (1) | parameters`.
    case event(code: UInt8, parameters: ArraySlice<UInt8>)
    case acl(ACLPacket, HCIDirection)
    case sco(HCIDirection)
    case iso(HCIDirection)
    /// Linux monitor: a controller appeared (`Type (1) | Bus (1) | BD_ADDR (6) | Name (8)`).
    case newIndex(type: UInt8, bus: UInt8, address: BluetoothAddress, name: String)
    /// Linux monitor: controller information (`BD_ADDR (6) | Manufacturer (2)`).
    case indexInfo(address: BluetoothAddress, manufacturer: UInt16)
    /// Linux monitor records that carry no HCI packet (open/close/delete index,
    /// notes, logging, management channel), by opcode.
    case monitor(opcode: UInt16)
    /// An H4 packet type byte this reader does not know.
    case unknownType(UInt8)

    /// A short name for counting packets this importer does not use.
    public var kindName: String {
        switch self {
        case let .command(opcode, _): return "HCI command " + hexString(opcode)
        case let .event(code, _): return "HCI event " + hexString(code)
        case .acl: return "ACL data"
        case .sco: return "SCO data"
        case .iso: return "ISO data"
        case .newIndex: return "monitor new index"
        case .indexInfo: return "monitor index info"
        case let .monitor(opcode): return CapturePacket.monitorName(opcode)
        case let .unknownType(t): return "H4 packet type " + hexString(t)
        }
    }

    static func monitorName(_ opcode: UInt16) -> String {
        // BlueZ src/shared/btsnoop.h: BTSNOOP_OPCODE_*.
        switch opcode {
        case 1: return "monitor delete index"
        case 8: return "monitor open index"
        case 9: return "monitor close index"
        case 11: return "monitor vendor diagnostic"
        case 12: return "monitor system note"
        case 13: return "monitor user logging"
        case 14: return "monitor control open"
        case 15: return "monitor control close"
        case 16: return "monitor control command"
        case 17: return "monitor control event"
        default: return "monitor opcode \(opcode)"
        }
    }
}

/// A decoded record: the packet and the controller it belongs to.
public struct CaptureFrame: Sendable {
    /// Controller index (hciN); 0 for datalinks that carry one controller.
    public var controller: UInt16
    public var packet: CapturePacket

    /// Reads `record` according to the file's datalink.
    ///
    /// - 1001 (unencapsulated HCI): flags bit 1 set = command (bit 0 clear) or
    ///   event (bit 0 set); clear = ACL data, bit 0 = received.
    /// - 1002 (H4): the first byte is the packet type (0x01 command, 0x02 ACL,
    ///   0x03 SCO, 0x04 event, 0x05 ISO; Vol 4 Part A §2); flags bit 0 = received.
    /// - 2001 (Linux monitor): flags = controller index << 16 | opcode
    ///   (2 command, 3 event, 4/5 ACL sent/received, 6/7 SCO, 18/19 ISO, 0 new index, 10 index info).
    public static func decode(_ record: BtsnoopRecord, datalink: BtsnoopDatalink) throws(DecodeError) -> CaptureFrame {
        let data = record.data
        let received: HCIDirection = record.flags & 0x01 != 0 ? .received : .sent
        switch datalink {
        case .hciUnencapsulated:
            if record.flags & 0x02 != 0 {
                return CaptureFrame(controller: 0, packet: received == .received ? try event(data) : try command(data))
            }
            return CaptureFrame(controller: 0, packet: .acl(try ACLPacket.decode(data), received))
        case .hciUART:
            var r = ByteReader(data, context: "H4 packet")
            let type = try r.u8("packet type")
            let rest = r.rest()
            switch type {
            case 0x01: return CaptureFrame(controller: 0, packet: try command(rest))
            case 0x02: return CaptureFrame(controller: 0, packet: .acl(try ACLPacket.decode(rest), received))
            case 0x03: return CaptureFrame(controller: 0, packet: .sco(received))
            case 0x04: return CaptureFrame(controller: 0, packet: try event(rest))
            case 0x05: return CaptureFrame(controller: 0, packet: .iso(received))
            default: return CaptureFrame(controller: 0, packet: .unknownType(type))
            }
        case .linuxMonitor:
            let index = UInt16(truncatingIfNeeded: record.flags >> 16)
            let opcode = UInt16(truncatingIfNeeded: record.flags)
            switch opcode {
            case 0:
                var r = ByteReader(data, context: "monitor new index")
                let type = try r.u8("controller type")
                let bus = try r.u8("bus")
                let address = try r.address("controller address")
                let rawName = try r.bytes(8, "controller name")
                let name = String(decoding: rawName.prefix { $0 != 0 }, as: UTF8.self)
                return CaptureFrame(controller: index, packet: .newIndex(type: type, bus: bus, address: address, name: name))
            case 2: return CaptureFrame(controller: index, packet: try command(data))
            case 3: return CaptureFrame(controller: index, packet: try event(data))
            case 4: return CaptureFrame(controller: index, packet: .acl(try ACLPacket.decode(data), .sent))
            case 5: return CaptureFrame(controller: index, packet: .acl(try ACLPacket.decode(data), .received))
            case 6: return CaptureFrame(controller: index, packet: .sco(.sent))
            case 7: return CaptureFrame(controller: index, packet: .sco(.received))
            case 10:
                var r = ByteReader(data, context: "monitor index info")
                let address = try r.address("controller address")
                let manufacturer = try r.u16("manufacturer")
                return CaptureFrame(controller: index, packet: .indexInfo(address: address, manufacturer: manufacturer))
            case 18: return CaptureFrame(controller: index, packet: .iso(.sent))
            case 19: return CaptureFrame(controller: index, packet: .iso(.received))
            default: return CaptureFrame(controller: index, packet: .monitor(opcode: opcode))
            }
        case .hciBCSP, .hciThreeWire, .simulator:
            throw DecodeError.unsupported(context: "btsnoop record", what: "datalink \(datalink)")
        }
    }

    static func command(_ bytes: ArraySlice<UInt8>) throws(DecodeError) -> CapturePacket {
        var r = ByteReader(bytes, context: "HCI command")
        let opcode = try r.u16("opcode")
        let length = Int(try r.u8("parameter total length"))
        let parameters = try r.bytes(length, "command parameters")
        try r.expectEnd()
        return .command(opcode: opcode, parameters: parameters)
    }

    static func event(_ bytes: ArraySlice<UInt8>) throws(DecodeError) -> CapturePacket {
        var r = ByteReader(bytes, context: "HCI event")
        let code = try r.u8("event code")
        let length = Int(try r.u8("parameter total length"))
        let parameters = try r.bytes(length, "event parameters")
        try r.expectEnd()
        return .event(code: code, parameters: parameters)
    }
}
