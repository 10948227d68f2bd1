import DBus
#if canImport(Glibc)
import Glibc
#endif

/// The Swift side of scripts/bench-dbus: receives N BlueZ-shaped
/// PropertiesChanged signals through the public API (a match-rule
/// subscription consumed as an AsyncSequence; every message fully decoded
/// into DBusValue trees) and reports CPU per message.
enum DBusReceiveBench {
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    static func run(_ arguments: [String]) async -> Int32 {
        var address: String?
        var count = 0
        var values = false
        var stream = false
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--values":
                values = true
                i += 1
            case "--stream":
                stream = true
                i += 1
            case "--address" where i + 1 < arguments.count:
                address = arguments[i + 1]
                i += 2
            case "--count" where i + 1 < arguments.count:
                count = Int(arguments[i + 1]) ?? 0
                i += 2
            default:
                writeError("bench dbus-receive: unknown argument \(arguments[i])")
                return 64
            }
        }
        guard let address, count > 0 else {
            writeError("bench dbus-receive: needs --address ADDRESS and --count N (N > 0)")
            return 64
        }
        do {
            let connection = try await DBusConnection.connect(to: .address(address))
            let rule = DBusMatchRule(interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                     pathNamespace: "/org/bluez")
            if !stream {
                return try await viaHandler(connection: connection, rule: rule, count: count, values: values)
            }
            let signals = try await connection.signals(matching: rule, bufferCapacity: 1 << 20,
                                                       decoding: values ? .eager : .onDemand)
            printFlushed("READY")
            let cpuStart = cpuSeconds()
            var firstAt: ContinuousClock.Instant?
            var lastAt = ContinuousClock.now
            var checksum = 0
            var malformed = 0
            var received = 0
            for try await message in signals {
                if firstAt == nil { firstAt = .now }
                let ok = values ? checksumOf(message, into: &checksum) : readChecksum(message, into: &checksum)
                if !ok { malformed += 1 }
                received += 1
                if received == count {
                    lastAt = .now
                    break
                }
            }
            let cpu = cpuSeconds() - cpuStart
            report(api: "stream", values: values, received: received, wall: firstAt.map { lastAt - $0 } ?? .zero,
                   cpu: cpu, checksum: checksum, malformed: malformed, dropped: signals.droppedCount)
            connection.close()
            return received == count ? 0 : 1
        } catch {
            writeError("bench dbus-receive: \(error)")
            return 1
        }
    }

    static func report(api: String, values: Bool, received: Int, wall: Duration, cpu: Double, checksum: Int, malformed: Int, dropped: Int) {
        let wallSeconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        printFlushed("{\"impl\":\"swift\",\"api\":\"\(api)\",\"decoding\":\"\(values ? "values" : "reader")\",\"messages\":\(received),\"wall_s\":\(wallSeconds),\"cpu_s\":\(cpu),\"checksum\":\(checksum),\"malformed\":\(malformed),\"dropped\":\(dropped)}")
    }

    /// State folded by a signal handler on the connection's I/O thread.
    /// Only that thread writes it until the count is reached; the waiter
    /// reads it after the completion stream says so.
    final class Tally: @unchecked Sendable {
        var checksum = 0
        var malformed = 0
        var received = 0
        var firstAt: ContinuousClock.Instant?
        var lastAt = ContinuousClock.now
    }

    /// The handler API: messages folded on the I/O thread, no hand-off.
    static func viaHandler(connection: DBusConnection, rule: DBusMatchRule, count: Int, values: Bool) async throws -> Int32 {
        let tally = Tally()
        let (done, finish) = AsyncStream<Void>.makeStream()
        let registration = try await connection.addSignalHandler(matching: rule, decoding: values ? .eager : .onDemand) { message in
            if tally.firstAt == nil { tally.firstAt = .now }
            let ok = values ? checksumOf(message, into: &tally.checksum) : readChecksum(message, into: &tally.checksum)
            if !ok { tally.malformed += 1 }
            tally.received += 1
            if tally.received == count {
                tally.lastAt = .now
                finish.yield()
                finish.finish()
            }
        }
        printFlushed("READY")
        let cpuStart = cpuSeconds()
        for await _ in done { break }
        let cpu = cpuSeconds() - cpuStart
        registration.remove()
        report(api: "handler", values: values, received: tally.received, wall: tally.firstAt.map { tally.lastAt - $0 } ?? .zero,
               cpu: cpu, checksum: tally.checksum, malformed: tally.malformed, dropped: 0)
        connection.close()
        return tally.received == count ? 0 : 1
    }

    /// Reads every value of the body in place (DBusBodyReader), without
    /// building DBusValue trees.
    static func readChecksum(_ message: DBusMessage, into sum: inout Int) -> Bool {
        guard message.signature.rawValue == "sa{sv}as" else { return false }
        do {
            let total: Int? = try message.withBodyReader { (r: inout DBusBodyReader) throws(DBusError) -> Int in
                var local = 0
                local &+= try r.withString { $0.count }
                let end = try r.beginArray(elementAlignment: 8)
                while r.hasElement(before: end) {
                    try r.beginStruct()
                    let key = try r.withString { Key($0) }
                    let signature = try r.readVariantSignature()
                    switch key {
                    case .rssi where Key.equal(signature, "n"):
                        local += Int(try r.readInt16())
                    case .manufacturerData where Key.equal(signature, "a{qv}"):
                        let inner = try r.beginArray(elementAlignment: 8)
                        while r.hasElement(before: inner) {
                            try r.beginStruct()
                            _ = try r.readUInt16()
                            let valueSignature = try r.readVariantSignature()
                            if Key.equal(valueSignature, "ay") {
                                local += try r.withBytes { bytes in bytes.reduce(0) { $0 + Int($1) } }
                            } else {
                                try r.skipVariantValue(signature: valueSignature)
                            }
                        }
                    default:
                        try r.skipVariantValue(signature: signature)
                    }
                }
                let invalidated = try r.beginArray(elementAlignment: 4)
                while r.hasElement(before: invalidated) { local &+= try r.withString { $0.count } }
                return local - 17 // the interface name's length, counted above to touch it
            }
            guard let total else { return false }
            sum += total
            return true
        } catch {
            return false
        }
    }

    enum Key {
        case rssi, manufacturerData, other
        init(_ raw: UnsafeRawBufferPointer) {
            if Key.equal(raw, "RSSI") { self = .rssi }
            else if Key.equal(raw, "ManufacturerData") { self = .manufacturerData }
            else { self = .other }
        }
        static func equal(_ raw: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
            guard raw.count == text.utf8CodeUnitCount, let base = raw.baseAddress else { return false }
            return memcmp(base, text.utf8Start, raw.count) == 0
        }
    }

    /// Walks the decoded body: ("org.bluez.Device1", {"RSSI": n, "ManufacturerData": {id: ay}}, as).
    static func checksumOf(_ message: DBusMessage, into sum: inout Int) -> Bool {
        guard message.body.count == 3, case .string = message.body[0],
              case let .dictionary(_, _, entries) = message.body[1],
              case .array = message.body[2] else { return false }
        for entry in entries {
            guard case let .string(key) = entry.key, case let .variant(value) = entry.value else { return false }
            switch (key, value) {
            case let ("RSSI", .int16(rssi)):
                sum += Int(rssi)
            case let ("ManufacturerData", .dictionary(_, _, companies)):
                for company in companies {
                    guard case let .variant(.bytes(bytes)) = company.value else { return false }
                    for b in bytes { sum += Int(b) }
                }
            default:
                break
            }
        }
        return true
    }
}
