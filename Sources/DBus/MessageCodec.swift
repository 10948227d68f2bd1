/// Decodes marshalled D-Bus messages (the wire format, as `dbus-monitor
/// --binary` or a capture gives them) into ``DBusMessage`` values.
///
/// Keeps memo tables for repeated signatures and names, so reuse one
/// decoder for a stream of messages. Not thread-safe: one per thread.
public final class DBusMessageDecoder {
    private let cache = DecodeCache()

    public init() {}

    /// Decodes one complete marshalled message. Messages that declare Unix
    /// fds cannot be decoded from bytes alone and are rejected.
    public func decode(_ bytes: UnsafeRawBufferPointer) throws(DBusError) -> DBusMessage {
        try WireDecoder.decodeMessage(bytes, cache: cache)
    }

    public func decode(_ bytes: [UInt8]) throws(DBusError) -> DBusMessage {
        let result: Result<DBusMessage, DBusError> = bytes.withUnsafeBytes { raw in
            do throws(DBusError) {
                return .success(try WireDecoder.decodeMessage(raw, cache: cache))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}

extension DBusMessage {
    /// The message in wire format (little-endian), as libdbus marshals it.
    public func marshalled(serial: UInt32 = 1) throws(DBusError) -> [UInt8] {
        try LibDBusCodec.marshal(self, serial: serial)
    }
}

extension DBusMessage {
    /// This message as a subscription made with `decoding: .onDemand`
    /// delivers it: no decoded arguments, the body kept in wire form
    /// (little-endian, as libdbus marshals it), after `patch` — which tests
    /// use to damage it on purpose. For tests of the code that reads such
    /// bodies (``withBodyReader(_:)``) without a bus.
    package func deferringBody(patch: (inout [UInt8]) -> Void = { _ in }) throws(DBusError) -> DBusMessage {
        let wire = try marshalled()
        // The header's bytes 4–7: the body's length (little-endian).
        let bodyLength = Int(wire[4]) | Int(wire[5]) << 8 | Int(wire[6]) << 16 | Int(wire[7]) << 24
        var bytes = Array(wire.suffix(bodyLength))
        patch(&bytes)
        var message = self
        message.body = []
        message.rawBody = DBusRawBody(bytes: bytes, bigEndian: false, signature: signature)
        return message
    }
}
