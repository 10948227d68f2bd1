import Foundation
import Testing
@testable @_spi(Fuzzing) import DBus

/// The receive path of bus connections: our own socket reader and framing,
/// and the checks the wire decoder makes now that libdbus no longer
/// validates incoming messages for us.
@Suite(.timeLimit(.minutes(1))) struct ReceiverTests {
    private func signal(_ n: UInt32, payload: [UInt8] = []) -> DBusMessage {
        DBusMessage(kind: .signal, path: "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF", interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged", body: [.string("org.bluez.Device1"), .uint32(n), .bytes(payload)])
    }

    /// Writes `bytes` into one end of a socket pair in pieces of `step`
    /// bytes, reading after each piece; returns the frames in order.
    private func frames(of bytes: [UInt8], step: Int) throws -> [[UInt8]] {
        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        let receiver = WireFramer()
        var out: [[UInt8]] = []
        var offset = 0
        while offset < bytes.count {
            let n = min(step, bytes.count - offset)
            let written = bytes[offset..<offset + n].withUnsafeBytes { write(pair[1], $0.baseAddress, n) }
            #expect(written == n)
            offset += n
            #expect(SocketReader(socket: pair[0]).read(into: receiver) == .received)
            while let frame = try receiver.nextMessage() {
                out.append([UInt8](frame))
                receiver.consume(frame.count)
            }
        }
        #expect(SocketReader(socket: pair[0]).read(into: receiver) == .wouldBlock)
        return out
    }

    @Test func messagesSplitAnywhereAreReassembledInOrder() throws {
        let messages = try (1...3).map { try LibDBusCodec.marshal(signal($0, payload: Array(repeating: UInt8($0), count: 40)), serial: $0) }
        let stream = messages.flatMap { $0 }
        for step in [1, 7, 16, 100, stream.count] {
            let got = try frames(of: stream, step: step)
            #expect(got == messages, "pieces of \(step) bytes")
        }
    }

    @Test func bytesFedWithoutASocketAreFramedTheSame() throws {
        let messages = try (1...3).map { try LibDBusCodec.marshal(signal($0, payload: Array(repeating: UInt8($0), count: 40)), serial: $0) }
        let stream = messages.flatMap { $0 }
        let receiver = WireFramer()
        var got: [[UInt8]] = []
        for byte in stream {
            [byte].withUnsafeBytes { receiver.receive($0) }
            while let frame = try receiver.nextMessage() {
                got.append([UInt8](frame))
                receiver.consume(frame.count)
            }
        }
        #expect(got == messages)
    }

    /// The fuzz harness's receive path (DBusWireFuzzing) on inputs whose
    /// outcome is known: it decodes what libdbus decodes the same way, and
    /// stops at a stream that is not D-Bus. (Its descriptor check is the
    /// fuzzer's: tests run in parallel and open descriptors meanwhile.)
    @Test func theFuzzHarnessReadsStreamsAsTheConnectionDoes() throws {
        let stream = try (1...3).flatMap { try LibDBusCodec.marshal(signal($0, payload: [1, 2, 3]), serial: $0) }
        // Compared with libdbus, cut at seed 5, bodies on demand: each frame counts its signature and values.
        let decoded = DBusWireFuzzing.run([0x0C, 5] + stream, checkDescriptors: false)
        #expect(decoded == 3 * ("suay".utf8.count + 3))
        #expect(DBusWireFuzzing.run([0x08, 1] + stream, checkDescriptors: false) == decoded)
        // Not D-Bus after the first message: one message, then the stream ends.
        let first = try LibDBusCodec.marshal(signal(1, payload: [1, 2, 3]), serial: 1)
        #expect(DBusWireFuzzing.run([0x08, 1] + first + Array("HTTP/1.1 200 OK\r\n\r\n".utf8), checkDescriptors: false) == "suay".utf8.count + 3)
        // Three descriptors with a stream that claims none.
        #expect(DBusWireFuzzing.run([0x03, 9] + stream, checkDescriptors: false) == decoded)
    }

    @Test func aMessageLargerThanTheReadBufferArrivesWhole() throws {
        let big = try LibDBusCodec.marshal(signal(9, payload: (0..<300_000).map { UInt8(truncatingIfNeeded: $0) }), serial: 9)
        let small = try LibDBusCodec.marshal(signal(10), serial: 10)
        let got = try frames(of: big + small, step: 50_000)
        #expect(got == [big, small])
    }

    /// After a large message the buffer goes back to its usual size even
    /// when the next message has only partly arrived (the usual case under
    /// a flood of signals, when a read seldom ends on a message boundary).
    @Test func aLargeMessageDoesNotPinItsBufferWhileMoreIsArriving() throws {
        let big = try LibDBusCodec.marshal(signal(9, payload: (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0) }), serial: 9)
        let next = try LibDBusCodec.marshal(signal(10, payload: [1, 2, 3]), serial: 10)
        let receiver = WireFramer()
        let usual = receiver.bufferCapacity
        (big + next.prefix(20)).withUnsafeBytes { receiver.receive($0) }
        #expect(receiver.bufferCapacity > 4 * WireFramer.chunk, "the buffer grew to hold the large message")
        let frame = try #require(try receiver.nextMessage())
        #expect([UInt8](frame) == big)
        receiver.consume(frame.count)
        #expect(receiver.bufferCapacity == usual)
        #expect(try receiver.nextMessage() == nil)
        next.dropFirst(20).withUnsafeBytes { receiver.receive($0) }
        let rest = try #require(try receiver.nextMessage())
        #expect([UInt8](rest) == next, "the partial message survived the shrink")
    }

    @Test func aStreamThatIsNotDBusIsRejectedWithTheReason() throws {
        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        let receiver = WireFramer()
        let junk = Array("HTTP/1.1 200 OK\r\n\r\n".utf8)
        _ = junk.withUnsafeBytes { write(pair[1], $0.baseAddress, $0.count) }
        #expect(SocketReader(socket: pair[0]).read(into: receiver) == .received)
        #expect(throws: DBusError.malformedMessage("unknown byte-order mark 0x48 in the incoming stream")) { try receiver.nextMessage() }
        // A frame claiming more than the protocol's 128 MiB.
        var huge = try LibDBusCodec.marshal(signal(1), serial: 1)
        huge[4] = 0xff; huge[5] = 0xff; huge[6] = 0xff; huge[7] = 0x7f
        let other = WireFramer()
        _ = huge.withUnsafeBytes { write(pair[1], $0.baseAddress, $0.count) }
        #expect(SocketReader(socket: pair[0]).read(into: other) == .received)
        #expect(throws: DBusError.self) { try other.nextMessage() }
        close(pair[1])
        pair[1] = -1
        let drained = WireFramer()
        // EOF comes once no process holds the other end: a child another test is spawning
        // at this moment holds a copy until its exec closes it (CLOEXEC), so allow a moment.
        var result = SocketReader(socket: pair[0]).read(into: drained)
        let deadline = ContinuousClock.now + .seconds(5)
        while result == .wouldBlock, ContinuousClock.now < deadline {
            usleep(10_000)
            result = SocketReader(socket: pair[0]).read(into: drained)
        }
        #expect(result == .endOfStream)
    }

    @Test func theDecoderChecksWhatTheBusPromises() throws {
        let good = try LibDBusCodec.marshal(signal(1), serial: 5)
        #expect(try good.withUnsafeBytes { try WireDecoder.decodeMessage($0) }.body == signal(1).body)

        func reject(_ patch: (inout [UInt8]) -> Void, _ why: String) {
            var bytes = good
            patch(&bytes)
            do {
                _ = try bytes.withUnsafeBytes { try WireDecoder.decodeMessage($0) }
                Issue.record("accepted: \(why)")
            } catch let DBusError.malformedMessage(reason) {
                #expect(reason.contains(why), "\(reason)")
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        reject({ $0[3] = 2 }, "protocol version 2")
        reject({ $0[8] = 0; $0[9] = 0; $0[10] = 0; $0[11] = 0 }, "serial is 0")
        // The body's first string, "org.bluez.Device1": break its UTF-8, then put a NUL inside.
        let bodyStart = good.count - bodyLength(good)
        reject({ $0[bodyStart + 4] = 0xC3; $0[bodyStart + 5] = 0x28 }, "not valid UTF-8")
        reject({ $0[bodyStart + 6] = 0 }, "not valid UTF-8 or contains a NUL byte")
        // The path header field (first field): a path may not end in '/'.
        let pathEnd = 16 + 8 + "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF".utf8.count - 1
        reject({ $0[pathEnd] = UInt8(ascii: "/") }, "invalid object path")
        // A signal whose member field (code 3) is renamed to an unknown code 0x42 lacks a member.
        if let memberField = findField(3, in: good) {
            reject({ $0[memberField] = 0x42 }, "signal without a path, interface or member")
        } else {
            Issue.record("no member field found")
        }
    }

    private func bodyLength(_ bytes: [UInt8]) -> Int {
        Int(bytes[4]) | Int(bytes[5]) << 8 | Int(bytes[6]) << 16 | Int(bytes[7]) << 24
    }

    /// The offset of header field `code` in a little-endian message.
    private func findField(_ code: UInt8, in bytes: [UInt8]) -> Int? {
        let fieldsEnd = 16 + (Int(bytes[12]) | Int(bytes[13]) << 8 | Int(bytes[14]) << 16 | Int(bytes[15]) << 24)
        var i = 16
        while i < fieldsEnd {
            if bytes[i] == code { return i }
            // Skip: code, sig length, sig, NUL, then a string/path/signature/u32 value.
            let sigLength = Int(bytes[i + 1])
            let sig = bytes[i + 2]
            var p = i + 2 + sigLength + 1
            switch sig {
            case UInt8(ascii: "g"):
                p += Int(bytes[p]) + 2
            case UInt8(ascii: "u"):
                p = (p + 3) & ~3
                p += 4
            default:
                p = (p + 3) & ~3
                let n = Int(bytes[p]) | Int(bytes[p + 1]) << 8 | Int(bytes[p + 2]) << 16 | Int(bytes[p + 3]) << 24
                p += 4 + n + 1
            }
            i = (p + 7) & ~7
        }
        return nil
    }

    @Test func largeMessagesTravelThroughTheBusBothWays() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let reg = try await server.export("/echo", interfaces: [echoObject()])
            let payload = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let proxy = DBusProxy(connection: client, destination: server.uniqueName, path: "/echo", interface: echoInterface)
            let reply = try await proxy.call("EchoVariant", [.variant(.bytes(payload))])
            #expect(reply == [.variant(.bytes(payload))])
            // Many small replies interleaved with the big one keep their order.
            async let big = proxy.call("EchoVariant", [.variant(.bytes(payload))])
            var smalls: [[DBusValue]] = []
            for i in 0..<50 { smalls.append(try await proxy.call("EchoString", [.string("m\(i)")])) }
            #expect(try await big == [.variant(.bytes(payload))])
            #expect(smalls == (0..<50).map { [.string("m\($0)")] })
            #expect(await client.malformedMessageCount() == 0)
            #expect(await server.malformedMessageCount() == 0)
            _ = reg
        }
    }

    @Test func everyConnectionAnswersThePeerInterface() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let peer = DBusProxy(connection: client, destination: server.uniqueName, path: "/any/path", interface: "org.freedesktop.DBus.Peer")
            #expect(try await peer.call("Ping") == [])
            let ours = try await peer.call("GetMachineId")
            let busPeer = DBusProxy(connection: client, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                    interface: "org.freedesktop.DBus.Peer")
            let daemons = try await busPeer.call("GetMachineId")
            #expect(ours == daemons)
            if case let .string(id)? = ours.first {
                #expect(id.count == 32 && id.allSatisfy(\.isHexDigit))
            } else {
                Issue.record("GetMachineId returned \(ours)")
            }
            do {
                try await peer.call("Nope")
                Issue.record("Peer.Nope succeeded")
            } catch let e as DBusError {
                #expect(e.remoteName == DBusErrorName.unknownMethod)
            }
        }
    }
}

@Suite(.timeLimit(.minutes(1))) struct PropertyRemovalTests {
    @Test func removedPropertiesAreInvalidatedAndGone() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let reg = try await server.export("/dev", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Device1", properties: [
                    DBusPropertyDescription("RSSI", .int16), DBusPropertyDescription("Name", .string),
                ]), values: ["RSSI": .int16(-50), "Name": .string("x")]),
            ])
            let changes = try await client.signals(matching: DBusMatchRule(sender: server.uniqueName, member: "PropertiesChanged"))
            reg.removeProperties("org.bluez.Device1", ["RSSI", "Missing"])
            let signal = try #require(try await first(changes))
            #expect(signal.body == [.string("org.bluez.Device1"), .dictionary(key: .string, value: .variant, []), .array(.string, [.string("RSSI")])])
            let proxy = DBusProxy(connection: client, destination: server.uniqueName, path: "/dev", interface: "org.bluez.Device1")
            #expect(try await proxy.allProperties() == ["Name": .string("x")])
            do {
                _ = try await proxy.property("RSSI")
                Issue.record("RSSI still readable")
            } catch let e as DBusError {
                #expect(e.remoteName == DBusErrorName.unknownProperty)
            }
            // Setting it again announces the value.
            reg.setProperty("org.bluez.Device1", "RSSI", .int16(-60))
            let again = try #require(try await first(changes))
            #expect(again.body[1] == .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("RSSI"), .variant(.int16(-60)))]))
        }
    }
}

