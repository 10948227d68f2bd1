import Vocabulary
/// A handle with a value (Read By Type Response entries, Multiple Handle Value Notification).
public struct ATTHandleValue: Equatable, Sendable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

/// A handle with a UUID (Find Information Response entries).
public struct ATTHandleUUID: Equatable, Sendable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public init(handle: UInt16, uuid: BluetoothUUID) { self.handle = handle; self.uuid = uuid }
}

/// A group (Read By Group Type Response entries): handle range and value.
public struct ATTGroup: Equatable, Sendable {
    public var handle: UInt16
    public var endHandle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, endHandle: UInt16, value: [UInt8]) { self.handle = handle; self.endHandle = endHandle; self.value = value }
}

/// Attribute protocol PDUs (Core v5.4 Vol 3 Part F §3.4). The first byte is
/// the opcode; all multi-byte fields are little-endian.
public enum ATTPDU: Equatable, Sendable {
    /// 0x01: `Request_Opcode (1) | Attribute_Handle (2) | Error_Code (1)` (§3.4.1.1).
    case errorResponse(requestOpcode: UInt8, handle: UInt16, error: UInt8)
    /// 0x02 / 0x03: `MTU (2)` (§3.4.2).
    case exchangeMTURequest(mtu: UInt16)
    case exchangeMTUResponse(mtu: UInt16)
    /// 0x04: `Starting_Handle (2) | Ending_Handle (2)` (§3.4.3.1).
    case findInformationRequest(start: UInt16, end: UInt16)
    /// 0x05: `Format (1)` (0x01 16-bit UUIDs, 0x02 128-bit), then `Handle (2) | UUID` pairs (§3.4.3.2).
    case findInformationResponse([ATTHandleUUID])
    /// 0x06: `Starting_Handle (2) | Ending_Handle (2) | Attribute_Type (2) | Attribute_Value` (§3.4.3.3).
    case findByTypeValueRequest(start: UInt16, end: UInt16, type: UInt16, value: [UInt8])
    /// 0x07: `Found_Attribute_Handle (2) | Group_End_Handle (2)` pairs (§3.4.3.4).
    case findByTypeValueResponse([ClosedRange<UInt16>])
    /// 0x08: `Starting_Handle (2) | Ending_Handle (2) | Attribute_Type (2 or 16)` (§3.4.4.1).
    case readByTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    /// 0x09: `Length (1)`, then entries of `Handle (2) | Value (Length - 2)` (§3.4.4.2).
    case readByTypeResponse([ATTHandleValue])
    /// 0x0A: `Attribute_Handle (2)` (§3.4.4.3).
    case readRequest(handle: UInt16)
    /// 0x0B: `Attribute_Value` (§3.4.4.4).
    case readResponse(value: [UInt8])
    /// 0x0C: `Attribute_Handle (2) | Value_Offset (2)` (§3.4.4.5).
    case readBlobRequest(handle: UInt16, offset: UInt16)
    /// 0x0D: `Part_Attribute_Value` (§3.4.4.6).
    case readBlobResponse(value: [UInt8])
    /// 0x10: `Starting_Handle (2) | Ending_Handle (2) | Attribute_Group_Type (2 or 16)` (§3.4.4.9).
    case readByGroupTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    /// 0x11: `Length (1)`, then entries of `Handle (2) | End_Group_Handle (2) | Value (Length - 4)` (§3.4.4.10).
    case readByGroupTypeResponse([ATTGroup])
    /// 0x12: `Attribute_Handle (2) | Attribute_Value` (§3.4.5.1).
    case writeRequest(handle: UInt16, value: [UInt8])
    /// 0x13 (§3.4.5.2).
    case writeResponse
    /// 0x52: `Attribute_Handle (2) | Attribute_Value` (§3.4.5.3).
    case writeCommand(handle: UInt16, value: [UInt8])
    /// 0xD2: `Attribute_Handle (2) | Attribute_Value | Authentication_Signature (12)` (§3.4.5.4).
    case signedWriteCommand(handle: UInt16, value: [UInt8])
    /// 0x1B: `Attribute_Handle (2) | Attribute_Value` (§3.4.7.1).
    case handleValueNotification(handle: UInt16, value: [UInt8])
    /// 0x1D: `Attribute_Handle (2) | Attribute_Value` (§3.4.7.2).
    case handleValueIndication(handle: UInt16, value: [UInt8])
    /// 0x1E (§3.4.7.3).
    case handleValueConfirmation
    /// 0x23: `Handle (2) | Length (2) | Value (Length)` tuples (§3.4.7.4).
    case multipleHandleValueNotification([ATTHandleValue])
    /// Any other opcode (prepare/execute write, read multiple, …).
    case other(opcode: UInt8)

    public var opcode: UInt8 {
        switch self {
        case .errorResponse: return 0x01
        case .exchangeMTURequest: return 0x02
        case .exchangeMTUResponse: return 0x03
        case .findInformationRequest: return 0x04
        case .findInformationResponse: return 0x05
        case .findByTypeValueRequest: return 0x06
        case .findByTypeValueResponse: return 0x07
        case .readByTypeRequest: return 0x08
        case .readByTypeResponse: return 0x09
        case .readRequest: return 0x0A
        case .readResponse: return 0x0B
        case .readBlobRequest: return 0x0C
        case .readBlobResponse: return 0x0D
        case .readByGroupTypeRequest: return 0x10
        case .readByGroupTypeResponse: return 0x11
        case .writeRequest: return 0x12
        case .writeResponse: return 0x13
        case .writeCommand: return 0x52
        case .signedWriteCommand: return 0xD2
        case .handleValueNotification: return 0x1B
        case .handleValueIndication: return 0x1D
        case .handleValueConfirmation: return 0x1E
        case .multipleHandleValueNotification: return 0x23
        case let .other(opcode): return opcode
        }
    }

    /// Requests that expect a response from the server (for pairing responses with requests).
    public var isRequest: Bool {
        switch opcode {
        case 0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20: return true
        default: return false
        }
    }

    /// The opcode's name in the specification ("Read By Type Response").
    public static func name(of opcode: UInt8) -> String {
        let names: [UInt8: String] = [
            0x01: "Error Response", 0x02: "Exchange MTU Request", 0x03: "Exchange MTU Response",
            0x04: "Find Information Request", 0x05: "Find Information Response",
            0x06: "Find By Type Value Request", 0x07: "Find By Type Value Response",
            0x08: "Read By Type Request", 0x09: "Read By Type Response", 0x0A: "Read Request", 0x0B: "Read Response",
            0x0C: "Read Blob Request", 0x0D: "Read Blob Response", 0x0E: "Read Multiple Request",
            0x0F: "Read Multiple Response", 0x10: "Read By Group Type Request", 0x11: "Read By Group Type Response",
            0x12: "Write Request", 0x13: "Write Response", 0x16: "Prepare Write Request", 0x17: "Prepare Write Response",
            0x18: "Execute Write Request", 0x19: "Execute Write Response", 0x1B: "Handle Value Notification",
            0x1D: "Handle Value Indication", 0x1E: "Handle Value Confirmation", 0x20: "Read Multiple Variable Request",
            0x21: "Read Multiple Variable Response", 0x23: "Multiple Handle Value Notification", 0x52: "Write Command",
            0xD2: "Signed Write Command",
        ]
        return "ATT " + (names[opcode] ?? "opcode") + " (" + hexString(opcode) + ")"
    }

    public static func decode(_ bytes: [UInt8]) throws(DecodeError) -> ATTPDU {
        var r = ByteReader(bytes, context: "ATT PDU")
        let opcode = try r.u8("opcode")
        let pdu: ATTPDU
        switch opcode {
        case 0x01:
            let request = try r.u8("Request_Opcode_In_Error")
            let handle = try r.u16("Attribute_Handle_In_Error")
            pdu = .errorResponse(requestOpcode: request, handle: handle, error: try r.u8("Error_Code"))
        case 0x02: pdu = .exchangeMTURequest(mtu: try r.u16("Client_Rx_MTU"))
        case 0x03: pdu = .exchangeMTUResponse(mtu: try r.u16("Server_Rx_MTU"))
        case 0x04:
            let start = try r.u16("Starting_Handle")
            pdu = .findInformationRequest(start: start, end: try r.u16("Ending_Handle"))
        case 0x05:
            let format = try r.u8("Format")
            let size: Int
            switch format {
            case 0x01: size = 2
            case 0x02: size = 16
            default: throw r.invalid(expected: "Format 0x01 (16-bit UUIDs) or 0x02 (128-bit)", found: hexString(format), at: 1)
            }
            var entries: [ATTHandleUUID] = []
            repeat {
                let handle = try r.u16("Handle")
                let uuid = size == 2 ? try r.uuid16("UUID") : try r.uuid128("UUID")
                entries.append(ATTHandleUUID(handle: handle, uuid: uuid))
            } while !r.isAtEnd
            pdu = .findInformationResponse(entries)
        case 0x06:
            let start = try r.u16("Starting_Handle")
            let end = try r.u16("Ending_Handle")
            let type = try r.u16("Attribute_Type")
            pdu = .findByTypeValueRequest(start: start, end: end, type: type, value: Array(r.rest()))
        case 0x07:
            var ranges: [ClosedRange<UInt16>] = []
            repeat {
                let found = try r.u16("Found_Attribute_Handle")
                let end = try r.u16("Group_End_Handle")
                guard end >= found else {
                    throw r.invalid(expected: "a Group_End_Handle not below \(hexString(found))", found: hexString(end), at: r.offset - 2)
                }
                ranges.append(found...end)
            } while !r.isAtEnd
            pdu = .findByTypeValueResponse(ranges)
        case 0x08, 0x10:
            let start = try r.u16("Starting_Handle")
            let end = try r.u16("Ending_Handle")
            let type: BluetoothUUID
            switch r.remaining {
            case 2: type = try r.uuid16("Attribute_Type")
            case 16: type = try r.uuid128("Attribute_Type")
            default: throw r.invalid(expected: "a 2- or 16-byte attribute type", found: "\(r.remaining) bytes")
            }
            pdu = opcode == 0x08 ? .readByTypeRequest(start: start, end: end, type: type)
                : .readByGroupTypeRequest(start: start, end: end, type: type)
        case 0x09:
            let length = Int(try r.u8("Length"))
            guard length >= 2 else { throw r.invalid(expected: "a Length of at least 2", found: "\(length)", at: 1) }
            var entries: [ATTHandleValue] = []
            repeat {
                let handle = try r.u16("Attribute_Handle")
                entries.append(ATTHandleValue(handle: handle, value: Array(try r.bytes(length - 2, "Attribute_Value"))))
            } while !r.isAtEnd
            pdu = .readByTypeResponse(entries)
        case 0x0A: pdu = .readRequest(handle: try r.u16("Attribute_Handle"))
        case 0x0B: pdu = .readResponse(value: Array(r.rest()))
        case 0x0C:
            let handle = try r.u16("Attribute_Handle")
            pdu = .readBlobRequest(handle: handle, offset: try r.u16("Value_Offset"))
        case 0x0D: pdu = .readBlobResponse(value: Array(r.rest()))
        case 0x11:
            let length = Int(try r.u8("Length"))
            guard length >= 4 else { throw r.invalid(expected: "a Length of at least 4", found: "\(length)", at: 1) }
            var groups: [ATTGroup] = []
            repeat {
                let handle = try r.u16("Attribute_Handle")
                let end = try r.u16("End_Group_Handle")
                guard end >= handle else {
                    throw r.invalid(expected: "an End_Group_Handle not below \(hexString(handle))", found: hexString(end), at: r.offset - 2)
                }
                groups.append(ATTGroup(handle: handle, endHandle: end, value: Array(try r.bytes(length - 4, "Attribute_Value"))))
            } while !r.isAtEnd
            pdu = .readByGroupTypeResponse(groups)
        case 0x12:
            let handle = try r.u16("Attribute_Handle")
            pdu = .writeRequest(handle: handle, value: Array(r.rest()))
        case 0x13: pdu = .writeResponse
        case 0x52:
            let handle = try r.u16("Attribute_Handle")
            pdu = .writeCommand(handle: handle, value: Array(r.rest()))
        case 0xD2:
            let handle = try r.u16("Attribute_Handle")
            let rest = r.rest()
            guard rest.count >= 12 else {
                throw DecodeError.truncated(context: "ATT PDU", offset: 3, needed: 12, available: rest.count,
                                            what: "Authentication_Signature")
            }
            return .signedWriteCommand(handle: handle, value: Array(rest.dropLast(12)))
        case 0x1B:
            let handle = try r.u16("Attribute_Handle")
            pdu = .handleValueNotification(handle: handle, value: Array(r.rest()))
        case 0x1D:
            let handle = try r.u16("Attribute_Handle")
            pdu = .handleValueIndication(handle: handle, value: Array(r.rest()))
        case 0x1E: pdu = .handleValueConfirmation
        case 0x23:
            var entries: [ATTHandleValue] = []
            repeat {
                let handle = try r.u16("Attribute_Handle")
                let length = Int(try r.u16("Length"))
                entries.append(ATTHandleValue(handle: handle, value: Array(try r.bytes(length, "Attribute_Value"))))
            } while !r.isAtEnd
            pdu = .multipleHandleValueNotification(entries)
        default:
            return .other(opcode: opcode)
        }
        try r.expectEnd()
        return pdu
    }
}

/// A characteristic declaration's value (attribute type 0x2803, Vol 3 Part G §3.3.1):
/// `Properties (1) | Value_Handle (2) | UUID (2 or 16)`.
public struct CharacteristicDeclaration: Equatable, Sendable {
    public var properties: UInt8
    public var valueHandle: UInt16
    public var uuid: BluetoothUUID

    public init(properties: UInt8, valueHandle: UInt16, uuid: BluetoothUUID) {
        self.properties = properties
        self.valueHandle = valueHandle
        self.uuid = uuid
    }

    public static func decode(_ value: [UInt8]) throws(DecodeError) -> CharacteristicDeclaration {
        var r = ByteReader(value, context: "characteristic declaration")
        let properties = try r.u8("Characteristic_Properties")
        let handle = try r.u16("Characteristic_Value_Handle")
        let uuid: BluetoothUUID
        switch r.remaining {
        case 2: uuid = try r.uuid16("Characteristic_UUID")
        case 16: uuid = try r.uuid128("Characteristic_UUID")
        default: throw r.invalid(expected: "a 2- or 16-byte Characteristic_UUID", found: "\(r.remaining) bytes")
        }
        return CharacteristicDeclaration(properties: properties, valueHandle: handle, uuid: uuid)
    }

    /// BlueZ's GattCharacteristic1 flag names for the property bits (Vol 3 Part G §3.3.1.1).
    public static func flagNames(_ properties: UInt8) -> [String] {
        let names = ["broadcast", "read", "write-without-response", "write", "notify", "indicate",
                     "authenticated-signed-writes", "extended-properties"]
        return (0..<8).filter { properties & (1 << $0) != 0 }.map { names[$0] }
    }
}
