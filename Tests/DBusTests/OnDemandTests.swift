import Foundation
import Testing
@testable import DBus

@Suite(.timeLimit(.minutes(1))) struct OnDemandDecodingTests {
    static let body: [DBusValue] = [
        .string("org.bluez.Device1"),
        .propertyMap([
            "RSSI": .int16(-61),
            "ManufacturerData": .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(0x0499), .variant(.bytes([5, 1, 2, 250])))]),
            "Name": .string("Ruuvi 1234"),
        ]),
        .array(.string, [.string("TxPower")]),
    ]

    @Test func onDemandAndEagerSubscribersShareARuleAndSeeTheSameValues() async throws {
        try await withBus { bus in
            let sender = try await DBusConnection.connect(to: .address(bus.address))
            let receiver = try await DBusConnection.connect(to: .address(bus.address))
            let rule = DBusMatchRule(interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", pathNamespace: "/org/bluez")
            let lazy = try await receiver.signals(matching: rule, decoding: .onDemand)
            let eager = try await receiver.signals(matching: rule)
            let arg0 = try await receiver.signals(matching: DBusMatchRule(interface: "org.freedesktop.DBus.Properties", arguments: [0: "org.bluez.Device1"]), decoding: .onDemand)
            #expect(try await ruleCount(receiver) == 2)
            try sender.emitSignal(path: "/org/bluez/hci0/dev_1", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", arguments: Self.body)
            try sender.emitSignal(path: "/org/bluez/hci0/dev_1", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                  arguments: [.string("org.bluez.Adapter1"), .propertyMap([:]), .array(.string, [])])

            let l = try await collect(lazy, count: 2)
            let e = try await collect(eager, count: 2)
            let a = try await collect(arg0, count: 1)
            #expect(l.count == 2 && e.count == 2 && a.count == 1)
            #expect(l[0].isBodyDeferred && l[0].body.isEmpty)
            #expect(!e[0].isBodyDeferred && e[0].body == Self.body)
            #expect(try l[0].decodedBody() == Self.body)
            #expect(try e[0].decodedBody() == Self.body)
            #expect(try e[0].withBodyReader { _ in 1 } == nil)
            // The arg0 rule matched only the Device1 change, on a deferred message.
            #expect(a[0].isBodyDeferred)
            #expect(try a[0].decodedBody().first == .string("org.bluez.Device1"))

            // Reading in place.
            let read = try l[0].withBodyReader { (r: inout DBusBodyReader) throws(DBusError) -> [String: String] in
                var seen: [String: String] = [:]
                seen["interface"] = try r.readString()
                let end = try r.beginArray(elementAlignment: 8)
                while r.hasElement(before: end) {
                    try r.beginStruct()
                    let key = try r.readString()
                    let sig = try r.readVariantSignature()
                    let type = try DBusSignature(String(decoding: sig, as: UTF8.self)).types[0]
                    seen[key] = "\(try r.readValue(type))"
                }
                let invalidated = try r.beginArray(elementAlignment: 4)
                while r.hasElement(before: invalidated) { seen["invalidated"] = try r.readString() }
                #expect(r.isAtEnd)
                return seen
            }
            #expect(read?["interface"] == "org.bluez.Device1")
            #expect(read?["RSSI"] == "int16 -61")
            #expect(read?["Name"] == "string \"Ruuvi 1234\"")
            #expect(read?["invalidated"] == "TxPower")
        }
    }

    @Test func aCallCanLeaveItsReplyInWireFormAndOnlyThatCall() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let manager = try await server.exportObjectManager(at: .root)
            let device = try await server.export("/org/bluez/hci0/dev_AA", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Device1", properties: [
                    DBusPropertyDescription("RSSI", .int16), DBusPropertyDescription("Name", .string),
                ]), values: ["RSSI": .int16(-50), "Name": .string("Ruuvi 1234")]),
            ])
            func managed(_ decoding: DBusBodyDecoding) async throws -> DBusMessage {
                try await client.call(destination: server.uniqueName, path: .root, interface: "org.freedesktop.DBus.ObjectManager",
                                      member: "GetManagedObjects", replyDecoding: decoding)
            }
            let lazy = try await managed(.onDemand)
            let eager = try await managed(.eager)
            #expect(lazy.isBodyDeferred && lazy.body.isEmpty && lazy.signature.rawValue == "a{oa{sa{sv}}}")
            #expect(!eager.isBodyDeferred && eager.body.count == 1)
            #expect(try lazy.decodedBody() == eager.body)
            // Read in place: the object's path, then its interfaces.
            let paths = try lazy.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) -> [String] in
                var paths: [String] = []
                let end = try r.beginArray(elementAlignment: 8)
                while r.hasElement(before: end) {
                    try r.beginStruct()
                    paths.append(try r.readString())
                    try r.skip(.dictionary(key: .string, value: .dictionary(key: .string, value: .variant)))
                }
                try r.endArray(end)
                return paths
            }
            #expect(paths == ["/org/bluez/hci0/dev_AA"])
            // An error reply is an error either way, with its message.
            do {
                _ = try await client.call(destination: server.uniqueName, path: "/nowhere", interface: "org.freedesktop.DBus.Properties",
                                          member: "GetAll", arguments: [.string("x.y")], replyDecoding: .onDemand)
                Issue.record("a call to a missing object succeeded")
            } catch let error as DBusError {
                #expect(error.remoteName != nil)
            }
            withExtendedLifetime((manager, device)) {}
        }
    }

    @Test func anArrayElementRunningPastTheArraysLengthIsAnError() throws {
        // a{oa{sa{sv}}} whose array length (8) ends inside its first element.
        var message = DBusMessage(kind: .methodReturn, replySerial: 1,
                                  body: [.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)),
                                                     [DBusDictEntry(.objectPath("/a"), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), []))])])
        message = try message.deferringBody { body in
            #expect(body[0] > 8)   // the array's length: the path "/a", padding, the empty inner array
            body[0] = 8
        }
        #expect(throws: DBusError.self) {
            try message.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) in
                let end = try r.beginArray(elementAlignment: 8)
                while r.hasElement(before: end) {
                    try r.beginStruct()
                    _ = try r.readString()
                    try r.skip(.dictionary(key: .string, value: .dictionary(key: .string, value: .variant)))
                }
                try r.endArray(end)
            }
        }
    }

    @Test func aReaderSharingStringsKeepsOneCopyOfARepeatedKey() throws {
        // Two objects with the same (long, so heap-allocated) interface name, as GetManagedObjects repeats it.
        let interfaces: DBusType = .dictionary(key: .string, value: .dictionary(key: .string, value: .variant))
        func object(_ path: String) -> DBusDictEntry {
            DBusDictEntry(.objectPath(ObjectPath(unchecked: path)), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                DBusDictEntry(.string("org.example.SomeLongInterfaceName1"), .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("RSSI"), .variant(.int16(-60)))])),
            ]))
        }
        let message = try DBusMessage(kind: .methodReturn, replySerial: 1,
                                      body: [.dictionary(key: .objectPath, value: interfaces, [object("/a"), object("/b")])]).deferringBody()
        func keys(sharing: Bool) throws -> [String] {
            try #require(try message.withBodyReader(sharingStrings: sharing) { (r: inout DBusBodyReader) throws(DBusError) -> [String] in
                var keys: [String] = []
                let end = try r.beginArray(elementAlignment: 8)
                while r.hasElement(before: end) {
                    try r.beginStruct()
                    _ = try r.readString()
                    guard case let .dictionary(_, _, entries) = try r.readValue(interfaces), case let .string(k)? = entries.first?.key else { return [] }
                    keys.append(k)
                }
                try r.endArray(end)
                return keys
            })
        }
        func storage(_ s: String) -> UnsafeRawPointer? {
            var copy = s
            return copy.withUTF8 { UnsafeRawPointer($0.baseAddress) }
        }
        let shared = try keys(sharing: true), separate = try keys(sharing: false)
        #expect(shared == ["org.example.SomeLongInterfaceName1", "org.example.SomeLongInterfaceName1"] && separate == shared)
        #expect(storage(shared[0]) == storage(shared[1]))
        #expect(storage(separate[0]) != storage(separate[1]))
    }

    @Test func readerFailsCleanlyOnMisreadsAndTruncation() throws {
        let raw = DBusRawBody(bytes: [3, 0, 0, 0, 0x61, 0x62, 0x63], bigEndian: false, signature: DBusSignature([.string]))
        var message = DBusMessage(kind: .signal, path: "/x", interface: "a.b", member: "C")
        message.rawBody = raw
        // "abc" without its NUL: a typed error, not a trap.
        #expect(throws: DBusError.self) { try message.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) -> String in try r.readString() } }
        #expect(throws: DBusError.self) { try message.decodedBody() }
        // Reading past the end.
        let empty = DBusRawBody(bytes: [], bigEndian: false, signature: DBusSignature([]))
        message.rawBody = empty
        #expect(throws: DBusError.self) { try message.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) -> Int32 in try r.readInt32() } }
        #expect(try message.decodedBody() == [])
    }
}

@Suite(.timeLimit(.minutes(1))) struct SignalHandlerTests {
    final class Seen: @unchecked Sendable {
        let lock = NSLock()
        var values: [UInt32] = []
        func add(_ v: UInt32) { lock.lock(); values.append(v); lock.unlock() }
        var snapshot: [UInt32] { lock.lock(); defer { lock.unlock() }; return values }
    }

    @Test func handlersSeeSignalsInOrderAndStopWhenRemoved() async throws {
        try await withBus { bus in
            let sender = try await DBusConnection.connect(to: .address(bus.address))
            let receiver = try await DBusConnection.connect(to: .address(bus.address))
            let seen = Seen()
            let rule = DBusMatchRule(interface: "com.example.Tick")
            let registration = try await receiver.addSignalHandler(matching: rule, decoding: .onDemand) { message in
                if let n = try? message.withBodyReader({ (r: inout DBusBodyReader) throws(DBusError) -> UInt32 in try r.readUInt32() }) {
                    seen.add(n)
                }
            }
            let marker = try await receiver.signals(matching: DBusMatchRule(interface: "com.example.Done"))
            for i in 0..<500 { try sender.emitSignal(path: "/t", interface: "com.example.Tick", member: "N", arguments: [.uint32(UInt32(i))]) }
            try sender.emitSignal(path: "/t", interface: "com.example.Done", member: "End")
            _ = try await first(marker)
            #expect(seen.snapshot == Array(0..<500))
            #expect(try await ruleCount(receiver) == 2)
            registration.remove()
            var rules = try await ruleCount(receiver)
            for _ in 0..<50 where rules != 1 {
                try await Task.sleep(for: .milliseconds(20))
                rules = try await ruleCount(receiver)
            }
            #expect(rules == 1)
            try sender.emitSignal(path: "/t", interface: "com.example.Tick", member: "N", arguments: [.uint32(999)])
            try sender.emitSignal(path: "/t", interface: "com.example.Done", member: "End")
            _ = try await first(marker)
            #expect(seen.snapshot.count == 500)
        }
    }
}

/// A deadline the connection's I/O thread keeps for a consumer (the mirror's
/// feeds) instead of a timer: it comes, never early, also while the thread
/// waits for input with nothing arriving, and is asked for again when the
/// consumer says it changed.
@Suite(.timeLimit(.minutes(1))) struct LoopDeadlineTests {
    final class Deadline: @unchecked Sendable {
        private let lock = NSLock()
        private var instant: ContinuousClock.Instant?
        func withLock<T>(_ body: (inout ContinuousClock.Instant?) -> T) -> T {
            lock.lock(); defer { lock.unlock() }
            return body(&instant)
        }
    }

    @Test func theThreadWakesAtTheDeadlineEvenWhenNothingArrives() async throws {
        try await withBus { bus in
            let connection = try await DBusConnection.connect(to: .address(bus.address))
            let deadline = Deadline()
            let (fired, firing) = AsyncStream<ContinuousClock.Instant>.makeStream()
            let registration = try await connection.addLoopDeadline(next: { deadline.withLock { $0 } }, due: {
                // As the contract asks: once due, no longer reported.
                deadline.withLock { $0 = nil }
                firing.yield(.now)
            })
            var times = fired.makeAsyncIterator()

            // Far away first: the thread waits for it (idle, nothing arrives)...
            deadline.withLock { $0 = .now + .seconds(3600) }
            registration.changed()
            try await Task.sleep(for: .milliseconds(50))
            // ...then earlier, set from this thread: it is asked again.
            let soon = ContinuousClock.now + .milliseconds(150)
            deadline.withLock { $0 = soon }
            registration.changed()
            let first = try #require(await times.next())
            #expect(first >= soon, "never before the deadline")
            #expect(first < soon + .seconds(5))

            // Removed: no longer asked.
            registration.remove()
            try await Task.sleep(for: .milliseconds(50))
            deadline.withLock { $0 = .now + .milliseconds(50) }
            let late = Task {
                var more = fired.makeAsyncIterator()
                return await more.next()
            }
            try await Task.sleep(for: .milliseconds(400))
            firing.finish()
            #expect(await late.value == nil, "a removed deadline does not fire")
            _ = times
        }
    }
}
