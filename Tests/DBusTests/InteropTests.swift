import Foundation
import Testing
@testable import DBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Interoperability with third-party D-Bus implementations, each test on its
// own private dbus-daemon:
//  - dbus-send (libdbus' command-line client) calling, introspecting and
//    reading/writing properties of objects we export;
//  - a python3-dbus ObjectManager client watching our signals;
//  - a python3-dbus service called by our client (values, errors, signals,
//    properties, name ownership, Unix fd passing both ways).
// The python helpers live in fixtures/dbus-interop/.

/// fixtures/dbus-interop, found from this source file.
private let interopFixtures: String = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("fixtures/dbus-interop").path

private let dbusSendPath = "/usr/bin/dbus-send"

/// A background process whose stdout is split into lines as it arrives, so
/// a test can wait for "READY" without blocking a cooperative thread. It is
/// stopped by ``stop()`` (call it in a `defer`) or when released.
///
/// Its stdin is a pipe that stays open while it runs: the python helpers
/// exit when it reaches end of file, so they also go away if the test
/// process itself dies. (A child started from a test thread can inherit a
/// signal mask blocking SIGTERM; the helpers unblock it, and ``stop()``
/// falls back to SIGKILL anyway.)
final class InteropProcess: @unchecked Sendable {
    let process = Process()
    private let input = Pipe()
    private let out = Pipe()
    private let err = Pipe()
    private let lock = NSLock()
    private var lines: [String] = []
    private var pending = Data()
    private var consumed = 0
    private var outClosed = false
    private var errData = Data()
    private var inputClosed = false

    init(_ executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["PYTHONPATH"] = nil
        env["PYTHONHOME"] = nil
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        process.environment = env
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        let outHandle = out.fileHandleForReading, errHandle = err.fileHandleForReading
        Thread.detachNewThread { [weak self] in
            while true {
                let chunk = outHandle.availableData
                if chunk.isEmpty { break }
                self?.received(chunk)
            }
            self?.closedOutput()
        }
        Thread.detachNewThread { [weak self] in
            while true {
                let chunk = errHandle.availableData
                if chunk.isEmpty { break }
                self?.receivedError(chunk)
            }
        }
    }

    /// A python helper from fixtures/dbus-interop, run by the Debian interpreter.
    static func python(_ script: String, _ arguments: [String]) throws -> InteropProcess {
        try InteropProcess(systemPython, ["-B", "-u", "\(interopFixtures)/\(script)"] + arguments)
    }

    private func received(_ chunk: Data) {
        lock.withLock {
            pending.append(chunk)
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                pending = Data(pending[pending.index(after: newline)...])
            }
        }
    }

    private func closedOutput() { lock.withLock { outClosed = true } }
    private func receivedError(_ chunk: Data) { lock.withLock { errData.append(chunk) } }

    /// What the process wrote to stderr so far (for failure messages).
    var stderrText: String { lock.withLock { String(decoding: errData, as: UTF8.self) } }

    /// The next line not yet returned, or nil when the process closed stdout
    /// or `seconds` passed.
    func nextLine(within seconds: Double = 10) async -> String? {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while true {
            let (line, closed): (String?, Bool) = lock.withLock {
                if consumed < lines.count {
                    consumed += 1
                    return (lines[consumed - 1], false)
                }
                return (nil, outClosed)
            }
            if let line { return line }
            if closed || ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Skips lines until one starts with `prefix` (e.g. "READY").
    func waitFor(prefix: String, within seconds: Double = 10) async -> String? {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            let left = (deadline - ContinuousClock.now).components
            let remaining = Double(left.seconds) + Double(left.attoseconds) / 1e18
            guard let line = await nextLine(within: remaining) else { return nil }
            if line.hasPrefix(prefix) { return line }
        }
        return nil
    }

    /// Waits for the process to exit by itself; its status, or nil.
    func exitStatus(within seconds: Double = 10) async -> Int32? {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while process.isRunning {
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return process.terminationStatus
    }

    /// Every remaining line after stdout closes (or `seconds` pass).
    func remainingLines(within seconds: Double = 10) async -> [String] {
        var result: [String] = []
        while let line = await nextLine(within: seconds) { result.append(line) }
        return result
    }

    /// SIGKILL, as if the service crashed.
    func kill() {
        if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGKILL) }
    }

    /// Closes stdin, then SIGTERM, then SIGKILL after 2 s; waits for the exit.
    func stop() {
        lock.withLock {
            if !inputClosed {
                inputClosed = true
                try? input.fileHandleForWriting.close()
            }
        }
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(2)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        kill()
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// `run()` from Support.swift, but on a thread of its own: a blocking wait
/// on a cooperative thread could starve the tasks that run our exported
/// methods' handlers, which dbus-send is waiting for.
private func runTool(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
    try await withCheckedThrowingContinuation { (c: CheckedContinuation<(status: Int32, stdout: String, stderr: String), any Error>) in
        Thread.detachNewThread {
            do { c.resume(returning: try run(executable, arguments, timeout: 15)) } catch { c.resume(throwing: error) }
        }
    }
}

/// The result of one `dbus-send --print-reply` call.
private struct SendResult {
    var status: Int32
    /// The "method return time=… sender=… -> destination=…" line.
    var header: String
    /// The printed reply body with all whitespace runs collapsed to one space.
    var body: String
    var stderr: String
    /// The D-Bus error name dbus-send printed ("Error NAME: message"), if any.
    var errorName: String? {
        guard let range = stderr.range(of: "Error ") else { return nil }
        let rest = stderr[range.upperBound...]
        return rest.split(separator: ":", maxSplits: 1).first.map(String.init)
    }
}

private func collapse(_ s: some StringProtocol) -> String {
    s.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" }).joined(separator: " ")
}

/// Runs `dbus-send --bus=ADDRESS --print-reply --dest=DEST PATH IFACE.MEMBER ARGS…`.
private func dbusSend(_ bus: PrivateBus, dest: String, path: String, _ member: String, _ args: [String] = [],
                      literal: Bool = false) async throws -> SendResult {
    let r = try await runTool(dbusSendPath, ["--bus=\(bus.address)", literal ? "--print-reply=literal" : "--print-reply",
                                         "--reply-timeout=10000", "--dest=\(dest)", path, member] + args)
    if literal {
        return SendResult(status: r.status, header: "", body: r.stdout, stderr: r.stderr)
    }
    let lines = r.stdout.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
    let header = lines.first.map(String.init) ?? ""
    let body = lines.count > 1 ? collapse(lines[1]) : ""
    return SendResult(status: r.status, header: header, body: body, stderr: r.stderr)
}

/// Remembers what exported methods received.
private final class CallLog: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [(String, [DBusValue])] = []
    func add(_ member: String, _ body: [DBusValue]) { lock.withLock { entries.append((member, body)) } }
    func last(_ member: String) -> [DBusValue]? { lock.withLock { entries.last { $0.0 == member }?.1 } }
}

private struct Oops: Error {}

/// A typed interface for dbus-send: ints, arrays, dictionaries, variants.
private func typedInterface(_ log: CallLog) -> DBusExportedInterface {
    DBusExportedInterface(DBusInterfaceDescription("com.example.Typed", methods: [
        DBusMethodDescription("Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int32)]) { call in
            log.add("Add", call.arguments)
            let a: Int32 = try call.argument(0), b: Int32 = try call.argument(1)
            return [.int32(a &+ b)]
        },
        DBusMethodDescription("Join", inputs: [.init("parts", .array(.string)), .init("separator", .string)],
                              outputs: [.init("joined", .string)]) { call in
            log.add("Join", call.arguments)
            let parts: [String] = try call.argument(0), sep: String = try call.argument(1)
            return [.string(parts.joined(separator: sep))]
        },
        DBusMethodDescription("Sum", inputs: [.init("values", .dictionary(key: .string, value: .int32))],
                              outputs: [.init("total", .int64), .init("keys", .array(.string))]) { call in
            log.add("Sum", call.arguments)
            let d: [String: Int32] = try call.argument(0)
            return [.int64(d.values.reduce(0) { $0 + Int64($1) }), .array(.string, d.keys.sorted().map { .string($0) })]
        },
        DBusMethodDescription("Take", inputs: [.init("value", .variant)], outputs: [.init("type", .signature)]) { call in
            log.add("Take", call.arguments)
            guard case let .variant(v) = call.arguments[0] else { return [.signature(.empty)] }
            return [.signature(DBusSignature([v.type]))]
        },
        DBusMethodDescription("Bytes", inputs: [.init("data", .array(.byte))], outputs: [.init("reversed", .array(.byte))]) { call in
            log.add("Bytes", call.arguments)
            let data: [UInt8] = try call.argument(0)
            return [.bytes(data.reversed())]
        },
        DBusMethodDescription("Throws") { _ in throw Oops() },
        DBusMethodDescription("WrongReply", outputs: [.init("n", .uint32)]) { _ in [.string("not a uint32")] },
    ]))
}

@Suite(.serialized, .timeLimit(.minutes(1))) struct InteropTests {
    // MARK: 1. dbus-send calling what we export

    @Test func dbusSendCallsOurMethodsWithManyArgumentTypes() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            #expect(try await server.requestName("com.example.Interop.Swift") == .primaryOwner)
            let log = CallLog()
            let reg = try await server.export("/interop", interfaces: [echoObject(), typedInterface(log)])
            defer { reg.unexport() }
            let dest = "com.example.Interop.Swift"

            var r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Echo.EchoString", ["string:héllo wörld, \"quoted\""])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.header.hasPrefix("method return "))
            #expect(r.header.contains("sender=\(server.uniqueName) "))
            #expect(r.body == #"string "héllo wörld, "quoted"""#)

            r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Typed.Add", ["int32:-7", "int32:2147483647"])
            #expect(r.body == "int32 2147483640")
            #expect(log.last("Add") == [.int32(-7), .int32(Int32.max)])

            r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Typed.Join", ["array:string:a,b,c", "string:-"])
            #expect(r.body == #"string "a-b-c""#)
            #expect(log.last("Join") == [.array(.string, [.string("a"), .string("b"), .string("c")]), .string("-")])

            r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Typed.Sum", ["dict:string:int32:one,1,two,2,big,40"])
            #expect(r.body == #"int64 43 array [ string "big" string "one" string "two" ]"#)
            #expect(log.last("Sum") == [.dictionary(key: .string, value: .int32, [
                DBusDictEntry(.string("one"), .int32(1)), DBusDictEntry(.string("two"), .int32(2)), DBusDictEntry(.string("big"), .int32(40)),
            ])])

            r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Typed.Bytes", ["array:byte:1,2,255"])
            #expect(r.body == "array of bytes [ ff 02 01 ]")
            #expect(log.last("Bytes") == [.bytes([1, 2, 255])])

            // Variants of several types, decoded by us and echoed back.
            let variants: [(String, DBusValue, String)] = [
                ("variant:int32:42", .int32(42), "variant int32 42"),
                ("variant:int16:-5", .int16(-5), "variant int16 -5"),
                ("variant:byte:7", .byte(7), "variant byte 7"),
                ("variant:uint64:18446744073709551615", .uint64(.max), "variant uint64 18446744073709551615"),
                ("variant:boolean:true", .boolean(true), "variant boolean true"),
                ("variant:double:1.5", .double(1.5), "variant double 1.5"),
                ("variant:string:x y", .string("x y"), #"variant string "x y""#),
                ("variant:objpath:/org/bluez/hci0", .objectPath("/org/bluez/hci0"), #"variant object path "/org/bluez/hci0""#),
            ]
            for (arg, value, printed) in variants {
                r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Echo.EchoVariant", [arg])
                #expect(r.status == 0, "\(arg): \(r.stderr)")
                #expect(r.body == printed, "\(arg)")
                r = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Typed.Take", [arg])
                #expect(log.last("Take") == [.variant(value)], "\(arg)")
                #expect(r.body == "signature \"\(value.type.signature)\"", "\(arg)")
            }

            // Calls by unique name work too.
            r = try await dbusSend(bus, dest: server.uniqueName, path: "/interop", "com.example.Echo.EchoString", ["string:by unique name"])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.body == #"string "by unique name""#)
        }
    }

    @Test func dbusSendReceivesOurErrorReplies() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            _ = try await server.requestName("com.example.Interop.Swift")
            let reg = try await server.export("/interop", interfaces: [echoObject(), typedInterface(CallLog())])
            defer { reg.unexport() }
            let dest = "com.example.Interop.Swift"
            let cases: [(path: String, member: String, args: [String], error: String, text: String?)] = [
                ("/interop", "com.example.Echo.Fail", [], "org.bluez.Error.NotReady", "Resource Not Ready"),
                ("/interop", "com.example.Echo.EchoString", ["int32:1"], DBusErrorName.invalidArgs, #"EchoString expects arguments "s", got "i""#),
                ("/interop", "com.example.Typed.Add", ["int32:1"], DBusErrorName.invalidArgs, nil),
                ("/interop", "com.example.Echo.Nope", [], DBusErrorName.unknownMethod, nil),
                ("/interop", "com.example.Missing.EchoString", ["string:x"], DBusErrorName.unknownInterface, nil),
                ("/elsewhere", "com.example.Echo.EchoString", ["string:x"], DBusErrorName.unknownObject, nil),
                ("/interop", "com.example.Typed.Throws", [], DBusErrorName.failed, nil),
                ("/interop", "com.example.Typed.WrongReply", [], DBusErrorName.failed, nil),
            ]
            for c in cases {
                let r = try await dbusSend(bus, dest: dest, path: c.path, c.member, c.args)
                #expect(r.status != 0, "\(c.member) succeeded: \(r.body)")
                #expect(r.errorName == c.error, "\(c.member): \(r.stderr)")
                if let text = c.text {
                    #expect(r.stderr.contains("Error \(c.error): \(text)"), "\(r.stderr)")
                }
            }
            // The connection keeps serving after all those errors.
            let ok = try await dbusSend(bus, dest: dest, path: "/interop", "com.example.Echo.EchoString", ["string:still here"])
            #expect(ok.body == #"string "still here""#)
        }
    }

    @Test func dbusSendIntrospectsOurTreeAndPythonParsesIt() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            _ = try await server.requestName("com.example.Interop.Swift")
            let manager = try await server.exportObjectManager(at: .root)
            let adapter = try await server.export("/org/bluez/hci0", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Adapter1", methods: [
                    DBusMethodDescription("StartDiscovery") { _ in [] },
                    DBusMethodDescription("RemoveDevice", inputs: [.init("device", .objectPath)]) { _ in [] },
                ], properties: [
                    DBusPropertyDescription("Powered", .boolean, access: .readwrite),
                    DBusPropertyDescription("Address", .string),
                    DBusPropertyDescription("UUIDs", .array(.string)),
                    DBusPropertyDescription("Cookie", .uint32, access: .write),
                ]), values: ["Powered": .boolean(false), "Address": .string("00:11:22:33:44:55"), "UUIDs": .array(.string, [])]),
            ])
            let device = try await server.export("/org/bluez/hci0/dev_AA", interfaces: [echoObject(), DBusExportedInterface(
                DBusInterfaceDescription("com.example.Escaping", methods: [
                    DBusMethodDescription("Odd", inputs: [.init(#"a<b>&"c""#, .dictionary(key: .string, value: .variant))]) { _ in [] },
                ], properties: [DBusPropertyDescription("Fixed", .uint16, emitsChange: .const)]), values: ["Fixed": .uint16(1)]),
            ])
            defer { device.unexport(); adapter.unexport(); _ = manager }
            let dest = "com.example.Interop.Swift"

            func introspect(_ path: String) async throws -> IntrospectionSummary? {
                let r = try await dbusSend(bus, dest: dest, path: path, "org.freedesktop.DBus.Introspectable.Introspect", literal: true)
                #expect(r.status == 0, "Introspect \(path): \(r.stderr)")
                let xml = r.body.trimmingCharacters(in: .whitespacesAndNewlines)
                #expect(xml.hasPrefix("<!DOCTYPE node"), "\(xml.prefix(80))")
                let parsed = try await runTool(systemPython, ["-B", "\(interopFixtures)/parse_introspection.py", xml])
                #expect(parsed.status == 0, "python rejected the XML of \(path): \(parsed.stderr)\n\(xml)")
                guard parsed.status == 0 else { return nil }
                return try JSONDecoder().decode(IntrospectionSummary.self, from: Data(parsed.stdout.utf8))
            }
            let standard = ["org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer"]

            let root = try #require(try await introspect("/"))
            #expect(root.nodes == ["org"])
            #expect(Set(root.interfaces.keys) == Set(standard + ["org.freedesktop.DBus.ObjectManager"]))
            #expect(root.interfaces["org.freedesktop.DBus.ObjectManager"]?.methods["GetManagedObjects"] == [["objects", "a{oa{sa{sv}}}", "out"]])
            #expect(root.interfaces["org.freedesktop.DBus.ObjectManager"]?.signals["InterfacesAdded"] == [["object", "o"], ["interfaces", "a{sa{sv}}"]])
            #expect(root.interfaces["org.freedesktop.DBus.ObjectManager"]?.signals["InterfacesRemoved"] == [["object", "o"], ["interfaces", "as"]])

            let org = try #require(try await introspect("/org"))
            #expect(org.nodes == ["bluez"])
            #expect(Set(org.interfaces.keys) == Set(standard))
            let bluez = try #require(try await introspect("/org/bluez"))
            #expect(bluez.nodes == ["hci0"])

            let hci0 = try #require(try await introspect("/org/bluez/hci0"))
            #expect(hci0.nodes == ["dev_AA"])
            #expect(Set(hci0.interfaces.keys) == Set(standard + ["org.freedesktop.DBus.Properties", "org.bluez.Adapter1"]))
            let adapter1 = try #require(hci0.interfaces["org.bluez.Adapter1"])
            #expect(adapter1.methods == ["StartDiscovery": [], "RemoveDevice": [["device", "o", "in"]]])
            #expect(adapter1.properties == [
                "Powered": .init(type: "b", access: "readwrite", annotations: [:]),
                "Address": .init(type: "s", access: "read", annotations: [:]),
                "UUIDs": .init(type: "as", access: "read", annotations: [:]),
                "Cookie": .init(type: "u", access: "write", annotations: [:]),
            ])
            let props = try #require(hci0.interfaces["org.freedesktop.DBus.Properties"])
            #expect(props.methods["Get"] == [["interface_name", "s", "in"], ["property_name", "s", "in"], ["value", "v", "out"]])
            #expect(props.methods["GetAll"] == [["interface_name", "s", "in"], ["props", "a{sv}", "out"]])
            #expect(props.methods["Set"] == [["interface_name", "s", "in"], ["property_name", "s", "in"], ["value", "v", "in"]])
            #expect(props.signals["PropertiesChanged"] == [["interface_name", "s"], ["changed_properties", "a{sv}"], ["invalidated_properties", "as"]])

            let dev = try #require(try await introspect("/org/bluez/hci0/dev_AA"))
            #expect(dev.nodes == [])
            let echo = try #require(dev.interfaces[echoInterface])
            #expect(echo.methods["EchoString"] == [["text", "s", "in"], ["text", "s", "out"]])
            #expect(echo.methods["WriteTo"] == [["fd", "h", "in"], ["data", "ay", "in"]])
            #expect(echo.methods["AcquireNotify"] == [["fd", "h", "out"], ["mtu", "q", "out"]])
            #expect(echo.signals == ["Ping": [["n", "u"]]])
            #expect(echo.properties["Secret"] == .init(type: "s", access: "readwrite",
                                                         annotations: ["org.freedesktop.DBus.Property.EmitsChangedSignal": "invalidates"]))
            #expect(echo.properties["Level"] == .init(type: "y", access: "read", annotations: [:]))
            let escaping = try #require(dev.interfaces["com.example.Escaping"])
            #expect(escaping.methods["Odd"] == [[#"a<b>&"c""#, "a{sv}", "in"]])
            #expect(escaping.properties["Fixed"] == .init(type: "q", access: "read",
                                                            annotations: ["org.freedesktop.DBus.Property.EmitsChangedSignal": "const"]))

            // What the XML promises works: Peer (answered by libdbus) and
            // an unknown path is an error.
            let ping = try await dbusSend(bus, dest: dest, path: "/org/bluez/hci0", "org.freedesktop.DBus.Peer.Ping")
            #expect(ping.status == 0, "\(ping.stderr)")
            let machine = try await dbusSend(bus, dest: dest, path: "/", "org.freedesktop.DBus.Peer.GetMachineId")
            #expect(machine.status == 0, "\(machine.stderr)")
            #expect(machine.body.hasPrefix("string \""))
            let missing = try await dbusSend(bus, dest: dest, path: "/nowhere", "org.freedesktop.DBus.Introspectable.Introspect")
            #expect(missing.errorName == DBusErrorName.unknownObject, "\(missing.stderr)")
        }
    }

    @Test func dbusSendReadsAndWritesOurProperties() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let watcher = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close(); watcher.close() }
            _ = try await server.requestName("com.example.Interop.Swift")
            let reg = try await server.export("/echo", interfaces: [echoObject()])
            defer { reg.unexport() }
            let dest = "com.example.Interop.Swift"
            let changes = try await watcher.signals(matching: DBusMatchRule(
                sender: dest, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", path: "/echo"))
            let get = "org.freedesktop.DBus.Properties.Get", set = "org.freedesktop.DBus.Properties.Set"

            var r = try await dbusSend(bus, dest: dest, path: "/echo", get, ["string:\(echoInterface)", "string:Name"])
            #expect(r.body == #"variant string "echo""#)
            r = try await dbusSend(bus, dest: dest, path: "/echo", get, ["string:\(echoInterface)", "string:Level"])
            #expect(r.body == "variant byte 7")
            r = try await dbusSend(bus, dest: dest, path: "/echo", "org.freedesktop.DBus.Properties.GetAll", ["string:\(echoInterface)"])
            #expect(r.body == #"array [ dict entry( string "Name" variant string "echo" ) dict entry( string "Level" variant byte 7 ) dict entry( string "Secret" variant string "s" ) ]"#)

            r = try await dbusSend(bus, dest: dest, path: "/echo", set, ["string:\(echoInterface)", "string:Name", "variant:string:from dbus-send"])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.body == "")
            #expect(await reg.property(echoInterface, "Name") == .string("from dbus-send"))
            r = try await dbusSend(bus, dest: dest, path: "/echo", get, ["string:\(echoInterface)", "string:Name"])
            #expect(r.body == #"variant string "from dbus-send""#)
            let signal = try await first(changes, within: 10)
            #expect(signal?.body == [.string(echoInterface), .propertyMap(["Name": .string("from dbus-send")]), .array(.string, [])])

            let refusals: [([String], String)] = [
                (["string:\(echoInterface)", "string:Level", "variant:byte:1"], DBusErrorName.propertyReadOnly),
                (["string:\(echoInterface)", "string:Name", "variant:int32:1"], DBusErrorName.invalidArgs),
                (["string:\(echoInterface)", "string:Secret", "variant:string:forbidden"], "org.bluez.Error.NotPermitted"),
                (["string:\(echoInterface)", "string:Nope", "variant:string:x"], DBusErrorName.unknownProperty),
                (["string:com.example.Nope", "string:Name", "variant:string:x"], DBusErrorName.unknownInterface),
            ]
            for (args, error) in refusals {
                r = try await dbusSend(bus, dest: dest, path: "/echo", set, args)
                #expect(r.errorName == error, "Set \(args): \(r.stderr)")
            }
            r = try await dbusSend(bus, dest: dest, path: "/echo", get, ["string:\(echoInterface)", "string:Nope"])
            #expect(r.errorName == DBusErrorName.unknownProperty, "\(r.stderr)")
            r = try await dbusSend(bus, dest: dest, path: "/echo", get, ["string:\(echoInterface)"])
            #expect(r.errorName == DBusErrorName.invalidArgs, "\(r.stderr)")
            #expect(await reg.property(echoInterface, "Secret") == .string("s"))
            #expect(await reg.property(echoInterface, "Level") == .byte(7))
        }
    }

    @Test func dbusSendNoReplyCallsRunWithoutAReply() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            _ = try await server.requestName("com.example.Interop.Swift")
            let log = CallLog()
            let reg = try await server.export("/interop", interfaces: [typedInterface(log)])
            defer { reg.unexport() }
            // A method call without --print-reply: dbus-send sets NO_REPLY_EXPECTED and exits at once.
            let r = try await runTool(dbusSendPath, ["--bus=\(bus.address)", "--type=method_call", "--dest=com.example.Interop.Swift",
                                                     "/interop", "com.example.Typed.Add", "int32:20", "int32:22"])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.stdout.isEmpty)
            var seen = log.last("Add")
            for _ in 0..<1000 where seen == nil {
                try await Task.sleep(for: .milliseconds(10))
                seen = log.last("Add")
            }
            #expect(seen == [.int32(20), .int32(22)])
        }
    }

    @Test func pythonClientCallsOurObjectUsingOurIntrospection() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            let log = CallLog()
            let reg = try await server.export("/interop", interfaces: [echoObject(), typedInterface(log)])
            defer { reg.unexport() }
            let r = try await runTool(systemPython, ["-B", "\(interopFixtures)/client.py", bus.address, server.uniqueName, "/interop"])
            #expect(r.status == 0, "client.py: \(r.stderr)")
            guard r.status == 0 else { return }
            let got = try JSONDecoder().decode(ClientResults.self, from: Data(r.stdout.utf8))
            #expect(got.add == "Int32:42")
            #expect(log.last("Add") == [.int32(40), .int32(2)])
            #expect(got.join == #"String:"a+b+c""#)
            #expect(got.sum == ["Int64:3", #"Array<s>[String:"x",String:"y"]"#])
            #expect(got.echoString == #"String:"grüße""#)
            #expect(got.take == [#"Signature:"n""#, #"Signature:"y""#, #"Signature:"a{sv}""#, #"Signature:"(ob)""#])
            #expect(log.last("Take") == [.variant(.structure([.objectPath("/p"), .boolean(true)]))])
            #expect(got.echoVariant == "v:Array<x>[Int64:-1]")
            #expect(got.bytes == "ByteArray:030201")
            #expect(got.get == "v:Byte:7")
            #expect(got.getAll == ["Name": #"v:String:"echo""#, "Level": "v:Byte:7", "Secret": #"v:String:"s""#])
            #expect(got.afterSet == #"v:String:"set by python""#)
            #expect(await reg.property(echoInterface, "Name") == .string("set by python"))
            #expect(got.fail == ["org.bluez.Error.NotReady", "Resource Not Ready"])
            #expect(got.setReadOnly == DBusErrorName.propertyReadOnly)
            #expect(got.writeTo == "to python's pipe")
            #expect(got.acquireNotify == .init(hex: "164b01", mtu: "UInt16:23", seqpacket: true))
        }
    }

    @Test func gdbusPeerTalksToUsWithItsOwnMarshalling() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            let reg = try await server.export("/interop", interfaces: [echoObject()])
            defer { reg.unexport() }
            let signals = try await server.signals(matching: DBusMatchRule(interface: "com.example.GDBus", member: "Sig"))
            let r = try await runTool(systemPython, ["-B", "\(interopFixtures)/gdbus_peer.py", bus.address, server.uniqueName, "/interop"])
            #expect(r.status == 0, "gdbus_peer.py: \(r.stderr)")
            let lines = r.stdout.split(separator: "\n").map(String.init)
            try #require(lines.count == 3, "gdbus_peer.py printed \(lines) \(r.stderr)")
            let echo = try JSONDecoder().decode(GDBusEcho.self, from: Data(lines[0].utf8))
            #expect(echo.echoEqual, "GDBus got back \(echo.echo)")
            let node = try JSONDecoder().decode(GDBusNode.self, from: Data(lines[1].utf8))
            #expect(node.interfaces == ["org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer",
                                        "org.freedesktop.DBus.Properties", echoInterface])
            #expect(node.nodes == [])

            let signal = try #require(try await first(signals, within: 10))
            #expect(signal.path == "/gdbus")
            #expect(signal.sender?.hasPrefix(":") == true)
            #expect(signal.signature.rawValue == "a{sv}(yqxs)ayvao")
            guard signal.body.count == 5 else {
                Issue.record("Sig body \(signal.body)")
                return
            }
            let map: [String: DBusValue] = try signal.argument(0)
            #expect(map == ["k": .uint32(7),
                            "nested": .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("deep"), .variant(.boolean(false)))])])
            #expect(signal.body[1] == .structure([.byte(1), .uint16(65535), .int64(.min), .string("sé")]))
            #expect(signal.body[2] == .bytes([0xde, 0xad]))
            #expect(signal.body[3] == .variant(.structure([.int32(1), .int32(2)])))
            #expect(signal.body[4] == .array(.objectPath, [.objectPath("/a"), .objectPath("/b/c")]))
        }
    }

    // MARK: 2. A python3-dbus client watching our ObjectManager

    @Test func pythonClientSeesObjectManagerAndPropertiesChanged() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            let service = "com.example.Interop.Om"
            _ = try await server.requestName(service)
            let manager = try await server.exportObjectManager(at: .root)
            let adapter = try await server.export("/org/bluez/hci0", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Adapter1", properties: [
                    DBusPropertyDescription("Powered", .boolean, access: .readwrite),
                    DBusPropertyDescription("Address", .string),
                    DBusPropertyDescription("Class", .uint32),
                    DBusPropertyDescription("UUIDs", .array(.string)),
                    DBusPropertyDescription("Cookie", .uint32, access: .write),
                ]), values: ["Powered": .boolean(true), "Address": .string("00:11:22:33:44:55"), "Class": .uint32(0x1f00),
                             "UUIDs": .array(.string, [.string("1800"), .string("1801")]), "Cookie": .uint32(9)]),
            ])
            defer { adapter.unexport(); _ = manager }

            let observer = try InteropProcess.python("observer.py", [bus.address, service, "/", "9", "10"])
            defer { observer.stop() }
            let managedLine = await observer.nextLine()
            let ready = await observer.nextLine()
            #expect(ready == "READY", "observer: \(observer.stderrText)")
            let managed = try #require(try managedLine.map { try JSONDecoder().decode(ManagedEvent.self, from: Data($0.utf8)) })
            #expect(managed.event == "managed")
            #expect(managed.signature == "oa{sa{sv}}")
            #expect(managed.pathTypes == ["ObjectPath"])
            #expect(managed.objects == ["/org/bluez/hci0": ["org.bluez.Adapter1": [
                "Powered": "v:Boolean:true", "Address": #"v:String:"00:11:22:33:44:55""#, "Class": "v:UInt32:7936",
                "UUIDs": #"v:Array<s>[String:"1800",String:"1801"]"#,
            ]]])

            let device1 = DBusInterfaceDescription("org.bluez.Device1", properties: [
                DBusPropertyDescription("RSSI", .int16),
                DBusPropertyDescription("TxPower", .byte),
                DBusPropertyDescription("Paired", .boolean),
                DBusPropertyDescription("Alias", .string, access: .readwrite, emitsChange: .invalidates),
                DBusPropertyDescription("Adapter", .objectPath),
                DBusPropertyDescription("ManufacturerData", .dictionary(key: .uint16, value: .variant)),
                DBusPropertyDescription("ServiceData", .dictionary(key: .string, value: .variant)),
            ])
            let device = try await server.export("/org/bluez/hci0/dev_AA_BB", interfaces: [DBusExportedInterface(device1, values: [
                "RSSI": .int16(-50), "TxPower": .byte(4), "Paired": .boolean(false), "Alias": .string("Sensor"),
                "Adapter": .objectPath("/org/bluez/hci0"),
                "ManufacturerData": .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(0x004c), .variant(.bytes([0x02, 0x15])))]),
                "ServiceData": .propertyMap([:]),
            ])])
            defer { device.unexport() }
            device.setProperty("org.bluez.Device1", "RSSI", .int16(-42))
            device.setProperty("org.bluez.Device1", "RSSI", .int16(-42)) // unchanged: no signal
            device.setProperties("org.bluez.Device1", ["TxPower": .byte(5), "Paired": .boolean(true)])
            device.setProperty("org.bluez.Device1", "Alias", .string("Renamed")) // invalidates
            device.addInterfaces([DBusExportedInterface(DBusInterfaceDescription("org.bluez.Battery1", properties: [
                DBusPropertyDescription("Percentage", .byte),
            ]), values: ["Percentage": .byte(90)])])
            device.removeInterfaces(["org.bluez.Battery1"])
            device.unexport()
            // Plain signals, from a registration and from the connection.
            adapter.emit(echoInterface, "Ping", [.uint32(7)])
            try server.emitSignal(path: "/org/bluez/hci0", interface: echoInterface, member: "Custom", arguments: [
                .structure([.int16(-1), .objectPath("/x")]), .variant(.variant(.byte(3))), .bytes([9, 8]),
                .dictionary(key: .uint16, value: .string, [DBusDictEntry(.uint16(1), .string("one"))]),
            ])

            let status = await observer.exitStatus()
            let lines = await observer.remainingLines()
            #expect(status == 0, "observer: \(lines) \(observer.stderrText)")
            let events = try lines.map { try JSONDecoder().decode(ObservedEvent.self, from: Data($0.utf8)) }
            let dev = #"ObjectPath:"/org/bluez/hci0/dev_AA_BB""#
            let deviceIface = #"String:"org.bluez.Device1""#
            let expected: [ObservedEvent] = [
                ObservedEvent(event: "InterfacesAdded", signalPath: "/", path: dev, added: ["org.bluez.Device1": [
                    "RSSI": "v:Int16:-50", "TxPower": "v:Byte:4", "Paired": "v:Boolean:false", "Alias": #"v:String:"Sensor""#,
                    "Adapter": #"v:ObjectPath:"/org/bluez/hci0""#,
                    "ManufacturerData": #"v:Dict<qv>{"76":v:Array<y>[Byte:2,Byte:21]}"#,
                    "ServiceData": "v:Dict<sv>{}",
                ]], order: ["org.bluez.Device1"]),
                ObservedEvent(event: "PropertiesChanged", signalPath: "/org/bluez/hci0/dev_AA_BB", interface: deviceIface,
                              changed: ["RSSI": "v:Int16:-42"], changedSignature: "sv", invalidated: []),
                ObservedEvent(event: "PropertiesChanged", signalPath: "/org/bluez/hci0/dev_AA_BB", interface: deviceIface,
                              changed: ["TxPower": "v:Byte:5", "Paired": "v:Boolean:true"], changedSignature: "sv", invalidated: []),
                ObservedEvent(event: "PropertiesChanged", signalPath: "/org/bluez/hci0/dev_AA_BB", interface: deviceIface,
                              changed: [:], changedSignature: "sv", invalidated: [#"String:"Alias""#]),
                ObservedEvent(event: "InterfacesAdded", signalPath: "/", path: dev,
                              added: ["org.bluez.Battery1": ["Percentage": "v:Byte:90"]], order: ["org.bluez.Battery1"]),
                ObservedEvent(event: "InterfacesRemoved", signalPath: "/", path: dev, removed: [#"String:"org.bluez.Battery1""#]),
                ObservedEvent(event: "InterfacesRemoved", signalPath: "/", path: dev, removed: [deviceIface]),
                ObservedEvent(event: "signal", signalPath: "/org/bluez/hci0", interface: echoInterface, member: "Ping", args: ["UInt32:7"]),
                ObservedEvent(event: "signal", signalPath: "/org/bluez/hci0", interface: echoInterface, member: "Custom", args: [
                    #"Struct(Int16:-1,ObjectPath:"/x")"#, "v:v:Byte:3", "Array<y>[Byte:9,Byte:8]", #"Dict<qs>{"1":String:"one"}"#,
                ]),
            ]
            #expect(events.count == expected.count)
            for (got, want) in zip(events, expected) { #expect(got == want) }
        }
    }

    @Test func pythonClientSeesStandardInterfacesLikeBlueZ() async throws {
        try await withBus { bus in
            let server = try await DBusConnection.connect(to: .address(bus.address))
            defer { server.close() }
            let manager = try await server.exportObjectManager(at: "/org/bluez", includeStandardInterfaces: true)
            let adapter = try await server.export("/org/bluez/hci0", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Adapter1", properties: [DBusPropertyDescription("Powered", .boolean)]),
                                      values: ["Powered": .boolean(false)]),
            ])
            // Outside the manager's subtree: must not be listed or announced.
            let outside = try await server.export("/other", interfaces: [echoObject()])
            defer { adapter.unexport(); outside.unexport(); _ = manager }

            let observer = try InteropProcess.python("observer.py", [bus.address, server.uniqueName, "/org/bluez", "3", "10"])
            defer { observer.stop() }
            let managedLine = await observer.nextLine()
            #expect(await observer.nextLine() == "READY", "observer: \(observer.stderrText)")
            let managed = try #require(try managedLine.map { try JSONDecoder().decode(ManagedEvent.self, from: Data($0.utf8)) })
            #expect(managed.objects == ["/org/bluez/hci0": [
                "org.freedesktop.DBus.Introspectable": [:], "org.freedesktop.DBus.Properties": [:],
                "org.bluez.Adapter1": ["Powered": "v:Boolean:false"],
            ]])

            let device = try await server.export("/org/bluez/hci0/dev_11", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Device1", properties: [DBusPropertyDescription("RSSI", .int16)]),
                                      values: ["RSSI": .int16(-70)]),
            ])
            // Outside the managed subtree: no InterfacesAdded for it.
            let outsideChild = try await server.export("/other/child", interfaces: [echoObject()])
            defer { outsideChild.unexport() }
            adapter.setProperty("org.bluez.Adapter1", "Powered", .boolean(true))
            device.unexport()

            let status = await observer.exitStatus()
            let lines = await observer.remainingLines()
            #expect(status == 0, "observer: \(lines) \(observer.stderrText)")
            let events = try lines.map { try JSONDecoder().decode(ObservedEvent.self, from: Data($0.utf8)) }
            let dev = #"ObjectPath:"/org/bluez/hci0/dev_11""#
            #expect(events == [
                ObservedEvent(event: "InterfacesAdded", signalPath: "/org/bluez", path: dev, added: [
                    "org.freedesktop.DBus.Introspectable": [:], "org.freedesktop.DBus.Properties": [:],
                    "org.bluez.Device1": ["RSSI": "v:Int16:-70"],
                ], order: ["org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties", "org.bluez.Device1"]),
                ObservedEvent(event: "PropertiesChanged", signalPath: "/org/bluez/hci0", interface: #"String:"org.bluez.Adapter1""#,
                              changed: ["Powered": "v:Boolean:true"], changedSignature: "sv", invalidated: []),
                ObservedEvent(event: "InterfacesRemoved", signalPath: "/org/bluez", path: dev, removed: [
                    #"String:"org.freedesktop.DBus.Introspectable""#, #"String:"org.freedesktop.DBus.Properties""#, #"String:"org.bluez.Device1""#,
                ]),
            ])
        }
    }

    // MARK: 3. Our client calling a python3-dbus service

    @Test func ourClientDecodesWhatPythonServiceReturns() async throws {
        try await withBus { bus in
            let service = try InteropProcess.python("service.py", [bus.address, pyService])
            defer { service.stop() }
            let ready = await service.waitFor(prefix: "READY")
            try #require(ready != nil, "service: \(service.stderrText)")
            let client = try await DBusConnection.connect(to: .address(bus.address))
            defer { client.close() }
            let proxy = DBusProxy(connection: client, destination: pyService, path: pyPath, interface: pyInterface)

            let dictReply = try await client.call(destination: pyService, path: pyPath, interface: pyInterface, member: "GetDict")
            #expect(dictReply.signature.rawValue == "a{sv}")
            let dict: [String: DBusValue] = try dictReply.argument(0)
            #expect(dict == [
                "name": .string("py"), "count": .uint32(3), "ratio": .double(0.5),
                "flags": .array(.boolean, [.boolean(true), .boolean(false)]),
                "nested": .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("x"), .variant(.int16(-2)))]),
                "path": .objectPath("/org/bluez/hci0"),
                "blob": .bytes([0x00, 0x01, 0xff]),
            ])
            // python dicts keep insertion order, and so does the wire.
            if case let .dictionary(_, _, entries)? = dictReply.body.first {
                #expect(entries.map(\.key) == ["name", "count", "ratio", "flags", "nested", "path", "blob"].map { DBusValue.string($0) })
            } else {
                Issue.record("GetDict: \(dictReply.body)")
            }

            let managedReply = try await client.call(destination: pyService, path: pyPath, interface: pyInterface, member: "GetManaged")
            #expect(managedReply.signature.rawValue == "a{oa{sa{sv}}}")
            let managed: [ObjectPath: [String: [String: DBusValue]]] = try managedReply.argument(0)
            #expect(managed == [
                "/org/bluez/hci0": ["org.bluez.Adapter1": ["Powered": .boolean(true), "Address": .string("00:11:22:33:44:55")]],
                "/org/bluez/hci0/dev_AA": [
                    "org.bluez.Device1": ["RSSI": .int16(-60), "UUIDs": .array(.string, [.string("180f")])],
                    "org.freedesktop.DBus.Properties": [:],
                ],
            ])

            #expect(try await proxy.call("GetStruct") == [.structure([
                .byte(200), .boolean(true), .int16(-300), .uint16(60000), .int32(-70000), .uint32(4_000_000_000),
                .int64(-5_000_000_000_000), .uint64(9_223_372_036_854_775_813), .double(2.5), .string("héllo"),
                .objectPath("/a/b"), .signature(try DBusSignature("a{sv}")),
            ])])
            let inner = DBusType.structure([.int16, .int32])
            #expect(try await proxy.call("GetNestedStructs") == [.array(.structure([.string, .array(inner)]), [
                .structure([.string("one"), .array(inner, [.structure([.int16(1), .int32(10)])])]),
                .structure([.string("none"), .array(inner, [])]),
            ])])
            #expect(try await proxy.call("GetNestedVariant") == [.variant(.variant(.array(.string, [.string("a"), .string("b")])))])
            #expect(try await proxy.call("GetBytes") == [.bytes([0x00, 0x7f, 0x80, 0xff])])

            // What python decoded from what we sent.
            let sent: [DBusValue] = [
                .byte(7), .boolean(true), .int16(-2), .uint16(2), .int32(-3), .uint32(3), .int64(-4), .uint64(.max),
                .double(1.25), .string("ünï"), .objectPath("/x/y"), .signature(try DBusSignature("a{sv}")),
                .bytes([1, 2]), .array(.int32, []),
                .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("k"), .variant(.int16(1)))]),
                .structure([.int32(1), .string("s")]), .variant(.variant(.int16(5))),
            ]
            let described = try await proxy.call("Describe", sent)
            #expect(described.first == .string("ybnqiuxtdsogayaia{sv}(is)v"))
            #expect(described.last == .array(.string, [
                "Byte:7", "Boolean:true", "Int16:-2", "UInt16:2", "Int32:-3", "UInt32:3", "Int64:-4", "UInt64:18446744073709551615",
                "Double:1.25", #"String:"ünï""#, #"ObjectPath:"/x/y""#, #"Signature:"a{sv}""#,
                "Array<y>[Byte:1,Byte:2]", "Array<i>[]", #"Dict<sv>{"k":v:Int16:1}"#, #"Struct(Int32:1,String:"s")"#, "v:v:Int16:5",
            ].map { DBusValue.string($0) }))

            // Round trips through python's variant handling keep every type.
            let echoes: [DBusValue] = [
                .int16(-1), .uint16(1), .byte(255), .boolean(false), .uint64(.max), .int64(.min), .double(-0.5),
                .string(""), .objectPath("/"), .signature(.empty), .bytes([]), .bytes([0, 1]),
                .array(.objectPath, [.objectPath("/a"), .objectPath("/b")]),
                .propertyMap(["a": .uint32(1), "b": .array(.string, [.string("x")])]),
                .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(76), .variant(.bytes([2, 21])))]),
                .structure([.byte(1), .structure([.string("in"), .variant(.double(2))])]),
                .variant(.variant(.string("deep"))),
                try #require(managedReply.body.first),
            ]
            for value in echoes {
                #expect(try await proxy.call("Echo", [.variant(value)]) == [.variant(value)], "\(value)")
            }
        }
    }

    @Test func ourClientSeesPythonErrorsPropertiesAndSignals() async throws {
        try await withBus { bus in
            let service = try InteropProcess.python("service.py", [bus.address, pyService])
            defer { service.stop() }
            let ready = try #require(await service.waitFor(prefix: "READY "), "service: \(service.stderrText)")
            let uniqueName = String(ready.dropFirst("READY ".count))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            defer { client.close() }
            #expect(try await client.nameOwner(pyService) == uniqueName)
            let proxy = DBusProxy(connection: client, destination: pyService, path: pyPath, interface: pyInterface)

            await #expect(throws: DBusError.remote(name: "com.example.Interop.Error.Custom", message: "custom failure from python")) {
                try await proxy.call("Fail")
            }
            do { try await proxy.call("NoSuchMethod"); Issue.record("NoSuchMethod succeeded") } catch let e as DBusError {
                #expect(e.remoteName == DBusErrorName.unknownMethod)
            }
            do { try await proxy.call("Emit", [.int32(1)]); Issue.record("bad args accepted") } catch let e as DBusError {
                #expect(e.remoteName != nil, "\(e)")
            }

            // Signals from the well-known name, with arguments.
            let happened = try await client.signals(matching: DBusMatchRule(sender: pyService, interface: pyInterface, member: "Happened"))
            let changed = try await client.signals(matching: DBusMatchRule(
                sender: pyService, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", path: pyPath))
            try await proxy.call("Emit", [.string("hello"), .uint32(42)])
            let signal = try #require(try await first(happened, within: 10))
            #expect(signal.sender == uniqueName)
            #expect(signal.path == pyPath)
            #expect(signal.signature.rawValue == "sua{sv}")
            #expect(signal.body == [.string("hello"), .uint32(42), .propertyMap(["echo": .string("hello")])])

            // Properties served by python's own org.freedesktop.DBus.Properties.
            #expect(try await proxy.property("Volume") == .byte(7))
            #expect(try await proxy.property("Volume", as: UInt8.self) == 7)
            #expect(try await proxy.property("Offset", as: Int16.self) == -12)
            #expect(try await proxy.allProperties() == ["Volume": .byte(7), "Label": .string("python"), "Offset": .int16(-12)])
            try await proxy.setProperty("Volume", .byte(9))
            #expect(try await proxy.property("Volume") == .byte(9))
            let change = try #require(try await first(changed, within: 10))
            #expect(change.body == [.string(pyInterface), .propertyMap(["Volume": .byte(9)]), .array(.string, [])])
            do { try await proxy.setProperty("Volume", .int16(9)); Issue.record("int16 accepted") } catch let e as DBusError {
                #expect(e.remoteName == DBusErrorName.invalidArgs)
            }
            do { try await proxy.setProperty("Label", .string("x")); Issue.record("read-only set") } catch let e as DBusError {
                #expect(e.remoteName == DBusErrorName.propertyReadOnly)
            }
            do { _ = try await proxy.property("Volume", as: String.self); Issue.record("byte decoded as string") } catch let e as DBusError {
                #expect(e == .typeMismatch(expected: "s", actual: "y", context: "property \(pyInterface).Volume"))
            }
        }
    }

    @Test func nameOwnerChangesFollowPythonServiceAndSenderRulesTrackIt() async throws {
        try await withBus { bus in
            let client = try await DBusConnection.connect(to: .address(bus.address))
            defer { client.close() }
            let owners = try await client.nameOwnerChanges(of: pyService)
            var iterator = owners.makeAsyncIterator()
            #expect(try await iterator.next() == .some(nil))
            // Subscribed before the service exists: the sender rule must
            // follow the name to whoever acquires it.
            let happened = try await client.signals(matching: DBusMatchRule(sender: pyService, interface: pyInterface, member: "Happened"))

            let service = try InteropProcess.python("service.py", [bus.address, pyService])
            defer { service.stop() }
            let ready = try #require(await service.waitFor(prefix: "READY "), "service: \(service.stderrText)")
            let uniqueName = String(ready.dropFirst("READY ".count))
            #expect(try await next(&iterator) == .some(uniqueName))

            _ = try await client.call(destination: pyService, path: pyPath, interface: pyInterface, member: "Emit",
                                      arguments: [.string("before"), .uint32(1)])
            let signal = try await first(happened, within: 10)
            #expect(signal?.body.first == .string("before"))
            #expect(signal?.sender == uniqueName)

            service.kill()
            #expect(try await next(&iterator) == .some(nil))
            #expect(await service.exitStatus() != nil)
            #expect(try await client.nameOwner(pyService) == nil)
            do {
                _ = try await client.call(destination: pyService, path: pyPath, interface: pyInterface, member: "Emit",
                                          arguments: [.string("after"), .uint32(2)])
                Issue.record("call to a vanished service succeeded")
            } catch let e as DBusError {
                #expect(e.remoteName == DBusErrorName.serviceUnknown, "\(e)")
            }
        }
    }

    // MARK: 4. Unix fd passing with python

    @Test func unixFileDescriptorsWithPython() async throws {
        try await withBus { bus in
            let service = try InteropProcess.python("service.py", [bus.address, pyService])
            defer { service.stop() }
            try #require(await service.waitFor(prefix: "READY ") != nil, "service: \(service.stderrText)")
            let client = try await DBusConnection.connect(to: .address(bus.address))
            defer { client.close() }
            #expect(client.canPassUnixFileDescriptors)
            let proxy = DBusProxy(connection: client, destination: pyService, path: pyPath, interface: pyInterface)

            // python → us: the read end of a pipe python wrote into.
            let text = "written by python into a pipe ✓"
            let reply = try await proxy.call("GetPipe", [.string(text)])
            guard case let .unixFD(fd)? = reply.first, reply.count == 1 else {
                Issue.record("GetPipe returned \(reply)")
                return
            }
            #expect(fd.rawValue >= 0)
            #expect(readAll(fd.rawValue) == Array(text.utf8))

            // us → python: python reads our pipe to its end.
            var fds: [Int32] = [0, 0]
            try #require(pipe(&fds) == 0)
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) } // no child may inherit the write end
            let message = "written by swift, read by python"
            let written = Array(message.utf8).withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
            close(fds[1])
            #expect(written == message.utf8.count)
            let readEnd = UnixFileDescriptor(owning: fds[0])
            #expect(try await proxy.call("ReadFd", [.unixFD(readEnd)]) == [.string(message)])

            // A received descriptor can be passed on again (python reads
            // back what it wrote).
            let again = try await proxy.call("GetPipe", [.string("round trip")])
            guard case let .unixFD(back)? = again.first else {
                Issue.record("GetPipe returned \(again)")
                return
            }
            #expect(try await proxy.call("ReadFd", [.unixFD(back)]) == [.string("round trip")])

            // Descriptors inside containers: a(sh) from python, a{sh} to it,
            // and one inside a variant both ways.
            let many = try await proxy.call("GetPipes", [.array(.string, [.string("one"), .string("two"), .string("three")])])
            guard case let .array(elementType, items)? = many.first else {
                Issue.record("GetPipes returned \(many)")
                return
            }
            #expect(elementType == .structure([.string, .unixFD]))
            var contents: [String] = []
            var entries: [DBusDictEntry] = []
            for item in items {
                guard case let .structure(fields) = item, case let .string(label)? = fields.first,
                      case let .unixFD(pipeFD)? = fields.last else {
                    Issue.record("GetPipes item \(item)")
                    continue
                }
                contents.append(label + "=" + String(decoding: readAll(pipeFD.rawValue), as: UTF8.self))
                var pair: [Int32] = [0, 0]
                try #require(pipe(&pair) == 0)
                for fd in pair { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
                _ = Array(label.uppercased().utf8).withUnsafeBytes { write(pair[1], $0.baseAddress, $0.count) }
                close(pair[1])
                entries.append(DBusDictEntry(.string(label), .unixFD(UnixFileDescriptor(owning: pair[0]))))
            }
            #expect(contents == ["one=one", "two=two", "three=three"])
            let readBack = try await proxy.call("ReadFds", [.dictionary(key: .string, value: .unixFD, entries)])
            let readMap: [String: String] = try #require(try readBack.first.map { try $0.decode() })
            #expect(readMap == ["one": "ONE", "two": "TWO", "three": "THREE"])

            let inVariant = try await proxy.call("GetPipe", [.string("via a variant")])
            guard case let .unixFD(variantFD)? = inVariant.first else {
                Issue.record("GetPipe returned \(inVariant)")
                return
            }
            let echoed = try await proxy.call("Echo", [.variant(.unixFD(variantFD))])
            guard case let .variant(.unixFD(echoedFD))? = echoed.first else {
                Issue.record("Echo of a variant fd returned \(echoed)")
                return
            }
            #expect(echoedFD.rawValue != variantFD.rawValue)
            #expect(readAll(echoedFD.rawValue) == Array("via a variant".utf8))
        }
    }
}

// MARK: - Helpers

private let pyService = "com.example.PyService"
private let pyPath: ObjectPath = "/com/example/Interop"
private let pyInterface = "com.example.Interop"

/// `iterator.next()`, failing after 10 s instead of hanging. The outer
/// optional is nil when the stream ended or nothing came in time.
private func next(_ iterator: inout DBusNameOwnerStream.AsyncIterator) async throws -> String?? {
    let box = IteratorBox(iterator)
    let outcome = try await withThrowingTaskGroup(of: OwnerOutcome.self) { group in
        group.addTask { try await box.next().map(OwnerOutcome.owner) ?? .ended }
        group.addTask {
            try await Task.sleep(for: .seconds(10))
            return .timedOut
        }
        let r = try await group.next() ?? .timedOut
        group.cancelAll()
        return r
    }
    iterator = box.iterator
    switch outcome {
    case let .owner(owner): return .some(owner)
    case .ended:
        Issue.record("name owner stream ended")
        return .none
    case .timedOut:
        Issue.record("no name owner change within 10 s")
        return .none
    }
}

private enum OwnerOutcome: Sendable {
    case owner(String?)
    case ended
    case timedOut
}

private final class IteratorBox: @unchecked Sendable {
    var iterator: DBusNameOwnerStream.AsyncIterator
    init(_ iterator: DBusNameOwnerStream.AsyncIterator) { self.iterator = iterator }
    func next() async throws -> String?? { try await iterator.next() }
}

/// Reads `fd` to end of file.
private func readAll(_ fd: Int32) -> [UInt8] {
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = read(fd, &buffer, buffer.count)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        result += buffer[0..<n]
    }
    return result
}

/// parse_introspection.py's output.
private struct IntrospectionSummary: Decodable {
    struct Property: Decodable, Equatable {
        var type: String
        var access: String
        var annotations: [String: String]
    }
    struct Interface: Decodable {
        var methods: [String: [[String]]]
        var signals: [String: [[String]]]
        var properties: [String: Property]
    }
    var interfaces: [String: Interface]
    var nodes: [String]
}

/// client.py's output.
private struct ClientResults: Decodable {
    struct Notify: Decodable, Equatable {
        var hex: String
        var mtu: String
        var seqpacket: Bool
        init(hex: String, mtu: String, seqpacket: Bool) {
            self.hex = hex
            self.mtu = mtu
            self.seqpacket = seqpacket
        }
        init(from decoder: any Decoder) throws {
            var c = try decoder.unkeyedContainer()
            hex = try c.decode(String.self)
            mtu = try c.decode(String.self)
            seqpacket = try c.decode(Bool.self)
        }
    }
    var add: String
    var join: String
    var sum: [String]
    var echoString: String
    var take: [String]
    var echoVariant: String
    var bytes: String
    var get: String
    var getAll: [String: String]
    var afterSet: String
    var fail: [String]
    var setReadOnly: String
    var writeTo: String
    var acquireNotify: Notify
    enum CodingKeys: String, CodingKey {
        case add = "Add", join = "Join", sum = "Sum", echoString = "EchoString", take = "Take", echoVariant = "EchoVariant"
        case bytes = "Bytes", get = "Get", getAll = "GetAll", afterSet = "AfterSet", fail = "Fail", setReadOnly = "SetReadOnly"
        case writeTo = "WriteTo", acquireNotify = "AcquireNotify"
    }
}

/// gdbus_peer.py's lines.
private struct GDBusEcho: Decodable {
    var echo: String
    var echoEqual: Bool
    enum CodingKeys: String, CodingKey {
        case echo
        case echoEqual = "echo_equal"
    }
}

private struct GDBusNode: Decodable {
    var interfaces: [String]
    var nodes: [String]
}

/// observer.py's first line (GetManagedObjects).
private struct ManagedEvent: Decodable {
    var event: String
    var signature: String
    var objects: [String: [String: [String: String]]]
    var pathTypes: [String]
    enum CodingKeys: String, CodingKey {
        case event, signature, objects
        case pathTypes = "path_types"
    }
}

/// One signal as observer.py printed it.
private struct ObservedEvent: Decodable, Equatable {
    var event: String
    var signalPath: String?
    var path: String?
    var added: [String: [String: String]]?
    var order: [String]?
    var removed: [String]?
    var interface: String?
    var changed: [String: String]?
    var changedSignature: String?
    var invalidated: [String]?
    var member: String?
    var args: [String]?
    enum CodingKeys: String, CodingKey {
        case event, path, added, order, removed, interface, changed, invalidated, member, args
        case signalPath = "signal_path"
        case changedSignature = "changed_signature"
    }
}
