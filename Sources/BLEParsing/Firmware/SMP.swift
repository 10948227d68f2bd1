import Vocabulary

/// Zephyr's Simple Management Protocol (SMP, the mcumgr protocol): an
/// 8-byte header and a CBOR body, over the SMP GATT service (written
/// without response, answered by notifications). Pure: framing, the groups
/// and commands this program uses, and the reassembly of a response that
/// arrives in several notifications.
///
/// Header (big-endian fields):
///
/// | byte | field |
/// |---|---|
/// | 0 | bits 0–2 op (0 read, 1 read response, 2 write, 3 write response), bits 3–4 version (0: SMP v1, 1: v2) |
/// | 1 | flags |
/// | 2–3 | body length (uint16) |
/// | 4–5 | group (uint16: 0 OS, 1 image management) |
/// | 6 | sequence number |
/// | 7 | command id within the group |
public enum SMP {
    /// The SMP GATT service and its one characteristic (write without response, notify).
    public static let service = BluetoothUUID(high: 0x8D53_DC1D_1DB7_4CD3, low: 0x868B_8A52_7460_AA84)
    public static let characteristic = BluetoothUUID(high: 0xDA2E_7828_FBCE_4E01, low: 0xAE9E_2611_7499_7C48)

    public static let headerLength = 8

    public enum Op: UInt8, Sendable {
        case read = 0, readResponse = 1, write = 2, writeResponse = 3

        public var response: Op { self == .read ? .readResponse : self == .write ? .writeResponse : self }
        public var isResponse: Bool { rawValue & 1 == 1 }
    }

    /// The groups and commands this program sends.
    public enum Command: Sendable, Equatable {
        case echo, reset, parameters
        case imageState, imageUpload, imageErase

        public var group: UInt16 {
            switch self {
            case .echo, .reset, .parameters: return 0
            case .imageState, .imageUpload, .imageErase: return 1
            }
        }

        public var id: UInt8 {
            switch self {
            case .echo: return 0
            case .reset: return 5
            case .parameters: return 6
            case .imageState: return 0
            case .imageUpload: return 1
            case .imageErase: return 5
            }
        }
    }

    public struct Header: Sendable, Equatable {
        public var op: Op
        public var version: UInt8
        public var flags: UInt8
        public var length: Int
        public var group: UInt16
        public var sequence: UInt8
        public var command: UInt8

        public init(op: Op, version: UInt8 = 1, flags: UInt8 = 0, length: Int, group: UInt16, sequence: UInt8, command: UInt8) {
            (self.op, self.version, self.flags, self.length, self.group, self.sequence, self.command) = (op, version, flags, length, group, sequence, command)
        }

        public var bytes: [UInt8] {
            [op.rawValue | (version & 0x3) << 3, flags, UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length),
             UInt8(truncatingIfNeeded: group >> 8), UInt8(truncatingIfNeeded: group), sequence, command]
        }

        public static func parse(_ b: [UInt8], at offset: Int = 0) throws(DecodeError) -> Header {
            guard b.count - offset >= SMP.headerLength else {
                throw DecodeError.truncated(context: "SMP", offset: offset, needed: SMP.headerLength, available: b.count - offset, what: "the header")
            }
            guard let op = Op(rawValue: b[offset] & 0x7) else {
                throw DecodeError(kind: .reserved, context: "SMP", offset: offset, expected: "op 0…3", found: "\(b[offset] & 0x7)")
            }
            return Header(op: op, version: b[offset] >> 3 & 0x3, flags: b[offset + 1], length: Int(b[offset + 2]) << 8 | Int(b[offset + 3]),
                          group: UInt16(b[offset + 4]) << 8 | UInt16(b[offset + 5]), sequence: b[offset + 6], command: b[offset + 7])
        }
    }

    public struct Message: Sendable, Equatable {
        public var header: Header
        public var body: CBOR

        public init(header: Header, body: CBOR) {
            self.header = header
            self.body = body
        }

        /// A request: `command` with `body` (a map), header length filled in.
        public init(_ op: Op, _ command: Command, sequence: UInt8, body: CBOR = .map([])) {
            let length = body.encoded.count
            self.init(header: Header(op: op, length: length, group: command.group, sequence: sequence, command: command.id), body: body)
        }

        public var bytes: [UInt8] {
            let body = self.body.encoded
            var h = header
            h.length = body.count
            return h.bytes + body
        }

        /// One whole message (header and exactly its body).
        public static func parse(_ b: [UInt8]) throws(DecodeError) -> Message {
            let header = try Header.parse(b)
            guard b.count == SMP.headerLength + header.length else {
                throw DecodeError.invalidValue(context: "SMP", offset: 2, expected: "a body of \(header.length) bytes (the header's)",
                                               found: "\(b.count - SMP.headerLength)")
            }
            let body = try CBOR.decode(Array(b[SMP.headerLength...]), context: "SMP body")
            return Message(header: header, body: body)
        }

        /// The SMP v1 `rc` or the v2 `err: {group, rc}` of a response; nil when it succeeded (0 or absent).
        public var error: SMPError? {
            if let rc = body["rc"]?.int, rc != 0 { return SMPError(group: nil, rc: rc) }
            if let err = body["err"], let rc = err["rc"]?.int, rc != 0 { return SMPError(group: err["group"]?.int, rc: rc) }
            return nil
        }
    }

    /// Gathers notification payloads into whole messages: a response larger
    /// than the ATT MTU arrives in pieces, each continuing the last; a header
    /// says how long its body is. At most `limit` bytes wait (a peer that
    /// announces more is refused, the buffer emptied).
    public struct Reassembler: Sendable {
        public let limit: Int
        private var buffer: [UInt8] = []

        public init(limit: Int = 65_536 + SMP.headerLength) { self.limit = limit }

        public var waiting: Int { buffer.count }

        public mutating func reset() { buffer.removeAll(keepingCapacity: true) }

        /// The messages `fragment` completes (zero, one or several).
        public mutating func append(_ fragment: [UInt8]) throws(DecodeError) -> [Message] {
            buffer += fragment
            var out: [Message] = []
            while buffer.count >= SMP.headerLength {
                let header: Header
                do { header = try Header.parse(buffer) } catch {
                    buffer.removeAll()
                    throw error
                }
                let total = SMP.headerLength + header.length
                guard total <= limit else {
                    buffer.removeAll()
                    throw DecodeError.invalidValue(context: "SMP", offset: 2, expected: "a message of at most \(limit) bytes", found: "\(total)")
                }
                guard buffer.count >= total else { break }
                let bytes = Array(buffer[0..<total])
                buffer.removeFirst(total)
                out.append(try Message.parse(bytes))
            }
            if buffer.count > limit { buffer.removeAll() }
            return out
        }
    }
}

/// An SMP error response: `rc` (MGMT_ERR_*, SMP v1) or a group's own code (v2).
public struct SMPError: Error, Sendable, Equatable, CustomStringConvertible {
    public var group: Int?
    public var rc: Int

    /// MCUmgr's common codes (Zephyr `mgmt/mcumgr/mgmt/mgmt_defines.h`, MGMT_ERR_*).
    static let names: [Int: String] = [
        1: "unknown error", 2: "out of memory", 3: "invalid value", 4: "timeout", 5: "no such entry", 6: "bad state",
        7: "message too large", 8: "not supported", 9: "corrupt", 10: "busy", 11: "access denied", 12: "protocol version too old",
        13: "protocol version too new",
    ]

    public var description: String {
        if let group { return "SMP error \(rc) in group \(group)" }
        return "SMP error \(rc) (\(Self.names[rc] ?? "unknown code"))"
    }
}
