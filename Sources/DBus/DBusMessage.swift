/// A D-Bus message as Swift values: header fields and a fully decoded body.
///
/// Received messages are decoded once, on the connection's I/O thread, and
/// then shared (read-only) by every subscriber that wants them.
public struct DBusMessage: Sendable {
    public enum Kind: UInt8, Sendable {
        case methodCall = 1
        case methodReturn = 2
        case error = 3
        case signal = 4
    }

    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let noReplyExpected = Flags(rawValue: 0x1)
        public static let noAutoStart = Flags(rawValue: 0x2)
        public static let allowInteractiveAuthorization = Flags(rawValue: 0x4)
    }

    public var kind: Kind
    public var flags: Flags
    public var serial: UInt32
    public var replySerial: UInt32?
    public var path: ObjectPath?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var destination: String?
    public var sender: String?
    public var signature: DBusSignature
    /// The decoded arguments. Empty for messages delivered by a subscription
    /// made with `decoding: .onDemand`: use ``decodedBody()`` or
    /// ``withBodyReader(_:)`` there.
    public var body: [DBusValue]
    /// The undecoded body of an on-demand message.
    var rawBody: DBusRawBody?

    /// Whether the body is still in wire form (an on-demand message).
    public var isBodyDeferred: Bool { rawBody != nil }

    /// The arguments, decoding them now if this message was delivered
    /// undecoded.
    public func decodedBody() throws(DBusError) -> [DBusValue] {
        guard let rawBody else { return body }
        return try rawBody.decodeAll()
    }

    /// Reads the body in place, without building ``DBusValue`` trees: the
    /// fastest way to consume a flood of on-demand messages. Returns nil for
    /// a message whose body was already decoded (read ``body`` instead).
    ///
    /// `sharingStrings`: values read whole (``DBusBodyReader/readValue(_:)``)
    /// share one copy of each dictionary key and signature that repeats in
    /// the body — for a large reply whose values are kept (GetManagedObjects:
    /// the same interface and property names for every object); a small
    /// table is made for this read.
    public func withBodyReader<T>(sharingStrings: Bool = false,
                                  _ read: (inout DBusBodyReader) throws(DBusError) -> T) throws(DBusError) -> T? {
        guard let rawBody else { return nil }
        let cache = sharingStrings ? DecodeCache(names: 256) : nil
        return try rawBody.bytes.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> Result<T, DBusError> in
            guard let base = raw.baseAddress ?? DBusRawBody.emptyBase else { return .failure(.malformedMessage("no body")) }
            var reader = DBusBodyReader(decoder: WireDecoder(base: base, count: raw.count, bigEndian: rawBody.bigEndian, cache: cache))
            do throws(DBusError) {
                return .success(try read(&reader))
            } catch {
                return .failure(error)
            }
        }.get()
    }

    public init(
        kind: Kind, flags: Flags = [], serial: UInt32 = 0, replySerial: UInt32? = nil,
        path: ObjectPath? = nil, interface: String? = nil, member: String? = nil,
        errorName: String? = nil, destination: String? = nil, sender: String? = nil,
        body: [DBusValue] = []
    ) {
        self.init(kind: kind, flags: flags, serial: serial, replySerial: replySerial, path: path,
                  interface: interface, member: member, errorName: errorName, destination: destination,
                  sender: sender, signature: DBusSignature(body.map(\.type)), body: body)
    }

    init(
        kind: Kind, flags: Flags, serial: UInt32, replySerial: UInt32?, path: ObjectPath?,
        interface: String?, member: String?, errorName: String?, destination: String?,
        sender: String?, signature: DBusSignature, body: [DBusValue]
    ) {
        self.kind = kind
        self.flags = flags
        self.serial = serial
        self.replySerial = replySerial
        self.path = path
        self.interface = interface
        self.member = member
        self.errorName = errorName
        self.destination = destination
        self.sender = sender
        self.signature = signature
        self.body = body
    }

    /// For an error message: the human-readable text (first string argument).
    public var errorMessage: String {
        if case let .string(s)? = body.first { return s }
        return ""
    }

    /// Decodes the body argument at `index` as `T`.
    public func argument<T: DBusRepresentable>(_ index: Int, as _: T.Type = T.self) throws(DBusError) -> T {
        guard index < body.count else {
            throw .typeMismatch(expected: T.dbusType.signature, actual: "nothing", context: "argument \(index) of \(member ?? "message") (signature \"\(signature)\")")
        }
        do {
            return try T(dbusValue: body[index])
        } catch {
            throw .typeMismatch(expected: T.dbusType.signature, actual: body[index].type.signature, context: "argument \(index) of \(member ?? "message")")
        }
    }

    /// Checks that the body has exactly signature `expected`.
    public func expectSignature(_ expected: String) throws(DBusError) {
        guard signature.rawValue == expected else {
            throw .typeMismatch(expected: expected, actual: signature.rawValue, context: "reply to \(member ?? "call")")
        }
    }
}
