/// One L2CAP basic frame (Core v5.4 Vol 3 Part A §3.1):
/// `Length (2) | Channel ID (2) | Information payload (Length bytes)`.
public struct L2CAPFrame: Equatable, Sendable {
    public var channel: UInt16
    public var payload: [UInt8]

    /// CID 0x0004: the Attribute protocol on LE (Vol 3 Part A §2.1).
    public static let attChannel: UInt16 = 0x0004
    /// CID 0x0005: LE signaling channel.
    public static let leSignalingChannel: UInt16 = 0x0005
    /// CID 0x0006: Security Manager protocol.
    public static let securityManagerChannel: UInt16 = 0x0006

    public init(channel: UInt16, payload: [UInt8]) {
        self.channel = channel
        self.payload = payload
    }
}

/// Rebuilds L2CAP frames from ACL fragments, per connection handle and
/// direction: a start fragment (packet boundary 0b00, 0b10 or 0b11) opens a
/// frame whose length is in its first two bytes, continuation fragments
/// (0b01) append until `4 + Length` bytes are there (Vol 4 Part E §5.4.2,
/// Vol 3 Part A §7.2).
///
/// What goes wrong in real captures is reported, never fatal: a continuation
/// with nothing open (the capture started mid-frame), a new start while a
/// frame is still open (the rest was lost), and fragments that overrun the
/// announced length.
public struct L2CAPReassembler: Sendable {
    public struct Key: Hashable, Sendable {
        public var controller: UInt16
        public var handle: UInt16
        public var direction: HCIDirection
        public init(controller: UInt16, handle: UInt16, direction: HCIDirection) {
            self.controller = controller
            self.handle = handle
            self.direction = direction
        }
    }

    /// What one fragment produced.
    public struct Output: Equatable, Sendable {
        /// A frame completed by this fragment.
        public var frame: L2CAPFrame?
        /// Frames or fragments thrown away, with why ("L2CAP continuation without a start").
        public var dropped: [String] = []
    }

    private var open: [Key: [UInt8]] = [:]

    public init() {}

    /// Number of frames still waiting for fragments.
    public var pendingCount: Int { open.count }

    public mutating func add(_ packet: ACLPacket, key: Key) -> Output {
        var out = Output()
        var buffer: [UInt8]
        if packet.isStart {
            if open[key] != nil { out.dropped.append("L2CAP frame left incomplete") }
            buffer = Array(packet.data)
        } else {
            guard let pending = open[key] else {
                out.dropped.append("L2CAP continuation without a start")
                return out
            }
            buffer = pending + packet.data
        }
        open[key] = nil
        // The basic header may itself be split across fragments.
        guard buffer.count >= 4 else {
            open[key] = buffer
            return out
        }
        let expected = 4 + (Int(buffer[0]) | Int(buffer[1]) << 8)
        if buffer.count < expected {
            open[key] = buffer
            return out
        }
        if buffer.count > expected {
            out.dropped.append("L2CAP frame longer than its length field")
            return out
        }
        out.frame = L2CAPFrame(channel: UInt16(buffer[2]) | UInt16(buffer[3]) << 8, payload: Array(buffer[4...]))
        return out
    }

    /// Forgets open frames of a connection (after a disconnection).
    public mutating func reset(controller: UInt16, handle: UInt16) {
        open[Key(controller: controller, handle: handle, direction: .sent)] = nil
        open[Key(controller: controller, handle: handle, direction: .received)] = nil
    }
}
