import Locking
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Which bus to connect to.
public enum DBusBusAddress: Sendable, Hashable, CustomStringConvertible {
    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
    case system
    /// The session bus: `DBUS_SESSION_BUS_ADDRESS`.
    case session
    /// Any D-Bus address (`unix:path=…`, `unix:abstract=…`, `tcp:…`).
    case address(String)

    public static let defaultSystemAddress = "unix:path=/var/run/dbus/system_bus_socket"

    /// Parses the command-line form: `system`, `session` or an address.
    public init(parsing text: String) {
        switch text {
        case "system": self = .system
        case "session": self = .session
        default: self = .address(text)
        }
    }

    /// The concrete address to open.
    public func resolve() throws(DBusError) -> String {
        switch self {
        case .system:
            if let env = getenv("DBUS_SYSTEM_BUS_ADDRESS"), env.pointee != 0 { return String(cString: env) }
            return DBusBusAddress.defaultSystemAddress
        case .session:
            guard let env = getenv("DBUS_SESSION_BUS_ADDRESS"), env.pointee != 0 else {
                throw .connectionFailed(address: "session bus", reason: "DBUS_SESSION_BUS_ADDRESS is not set")
            }
            return String(cString: env)
        case let .address(a):
            guard a.contains(":") else {
                throw .connectionFailed(address: a, reason: "not a D-Bus address (expected e.g. unix:path=/run/dbus/system_bus_socket)")
            }
            return a
        }
    }

    public var description: String {
        switch self {
        case .system: return "system bus"
        case .session: return "session bus"
        case let .address(a): return a
        }
    }
}

/// When a subscription's message bodies are decoded.
public enum DBusBodyDecoding: Sendable, Hashable {
    /// On the connection's I/O thread, into ``DBusMessage/body``.
    case eager
    /// By the consumer, when and as far as it reads (see ``DBusMessage/withBodyReader(_:)``).
    case onDemand
}

/// A connection to a D-Bus message bus (or a peer), built on libdbus.
///
/// Every connection is a *private* libdbus connection owned by this object
/// and driven by its own I/O thread, which sleeps in `epoll_wait` when
/// there is nothing to do. All methods are safe to call from any task.
/// The connection closes when ``close()`` is called or the object is freed.
public final class DBusConnection: Sendable {
    let core: ConnectionCore

    /// The bus-assigned unique name (":1.42"), empty for peer connections.
    public var uniqueName: String { core.uniqueName }
    /// The address this connection was opened on.
    public var address: String { core.address }
    /// Whether Unix file descriptors can be sent and received.
    public var canPassUnixFileDescriptors: Bool { core.canPassUnixFDs }

    private init(core: ConnectionCore) { self.core = core }

    /// Connects to a bus and registers (Hello).
    public static func connect(to bus: DBusBusAddress) async throws -> DBusConnection {
        let address = try bus.resolve()
        return DBusConnection(core: try await ConnectionCore.open(address: address, register: true))
    }

    /// Opens a peer-to-peer connection (no bus, no Hello).
    public static func connectPeer(address: String) async throws -> DBusConnection {
        DBusConnection(core: try await ConnectionCore.open(address: address, register: false))
    }

    deinit { core.close() }

    /// Flushes queued messages and closes the connection. Pending calls fail
    /// with ``DBusError/disconnected``; signal streams end.
    public func close() { core.close() }

    /// Returns once the connection is gone: the bus closed it (the daemon
    /// stopped or restarted), it could not be read any more, or ``close()``
    /// was called. Returns at once when the caller is cancelled.
    public func disconnected() async {
        let done = LostSignal()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                if done.install(c) { core.whenLost { done.fire() } }
            }
        } onCancel: {
            done.fire()
        }
    }

    /// Whether the connection is still usable.
    public func isConnected() async -> Bool {
        await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            if !core.execute({ [core] in c.resume(returning: !core.dead && core.connection != nil) }) {
                c.resume(returning: false)
            }
        }
    }

    /// Messages received that could not be decoded (they were answered with
    /// InvalidArgs when they were calls, otherwise dropped). Stays 0 unless a
    /// peer sends something libdbus accepted but the wire decoder rejects.
    public func malformedMessageCount() async -> Int {
        await withCheckedContinuation { (c: CheckedContinuation<Int, Never>) in
            if !core.execute({ [core] in c.resume(returning: core.malformedCount) }) {
                c.resume(returning: 0)
            }
        }
    }

    // MARK: Calls

    /// Sends a method call and waits for the reply.
    ///
    /// - Throws: ``DBusError/remote(name:message:)`` for an error reply,
    ///   ``DBusError/timedOut(member:milliseconds:)``, ``DBusError/disconnected``,
    ///   validation errors, or `CancellationError` when the task is cancelled
    ///   (the reply, if it comes, is then discarded).
    ///
    /// With `replyDecoding: .onDemand` the reply arrives with its body in wire
    /// form, to be read in place with ``DBusMessage/withBodyReader(_:)``: for
    /// large replies (GetManagedObjects of thousands of devices) whose
    /// consumer keeps a little of each part, so that no tree of the whole
    /// reply is ever built (a reply with Unix fds is decoded as usual).
    public func call(
        destination: String?, path: ObjectPath, interface: String?, member: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25), flags: DBusMessage.Flags = [],
        replyDecoding: DBusBodyDecoding = .eager
    ) async throws -> DBusMessage {
        let message = DBusMessage(kind: .methodCall, flags: flags, path: path, interface: interface, member: member,
                                  destination: destination, body: arguments)
        return try await call(message, timeout: timeout, replyDecoding: replyDecoding)
    }

    /// Sends a prepared method-call message and waits for the reply.
    public func call(_ message: DBusMessage, timeout: Duration = .seconds(25),
                     replyDecoding: DBusBodyDecoding = .eager) async throws -> DBusMessage {
        guard message.kind == .methodCall else { throw DBusError.invalidValue("call() needs a method call message") }
        if message.body.contains(where: { $0.containsUnixFD }) && !core.canPassUnixFDs {
            throw DBusError.notSupported("this connection cannot pass Unix file descriptors")
        }
        let cmsg = CMessage(pointer: try LibDBusCodec.makeCMessage(message))
        let member = [message.interface, message.member].compactMap { $0 }.joined(separator: ".")
        let ms = timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
        let timeoutMs = Int(max(1, min(ms, Int64(Int32.max))))
        let state = CallState()
        let core = self.core
        // The loop thread decodes the reply and then marks the call done under
        // `state.lock`; taking that lock after the wait orders the decoding
        // before our reads for ThreadSanitizer, which cannot see the
        // hand-over when the reply came before this task suspended (Swift
        // 6.3's continuation fast path carries no annotation).
        defer { state.lock.withLock {} }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (cont: CheckedContinuation<DBusMessage, any Error>) in
                let queued = core.execute {
                    let proceed: Bool = state.lock.withLock {
                        if case .cancelled = state.phase { return false }
                        return true
                    }
                    guard proceed else {
                        LibDBusCodec.release(cmsg)
                        cont.resume(throwing: CancellationError())
                        return
                    }
                    core.callOnLoop(cmsg, member: member, timeoutMs: timeoutMs, state: state,
                                    onCancel: { cont.resume(throwing: CancellationError()) },
                                    lazyReply: replyDecoding == .onDemand) { result in
                        cont.resume(with: result.mapError { $0 as any Error })
                    }
                }
                if !queued {
                    LibDBusCodec.release(cmsg)
                    cont.resume(throwing: DBusError.disconnected)
                }
            }
        } onCancel: {
            let serial: UInt32? = state.lock.withLock {
                switch state.phase {
                case .new:
                    state.phase = .cancelled
                    return nil
                case let .started(serial):
                    return serial
                case .cancelled, .done:
                    return nil
                }
            }
            if let serial {
                core.execute { core.cancelCallOnLoop(serial: serial) }
            }
        }
    }

    /// Sends a message without waiting for anything (signals, no-reply calls).
    public func send(_ message: DBusMessage) throws {
        if message.body.contains(where: { $0.containsUnixFD }) && !core.canPassUnixFDs {
            throw DBusError.notSupported("this connection cannot pass Unix file descriptors")
        }
        let cmsg = CMessage(pointer: try LibDBusCodec.makeCMessage(message))
        let core = self.core
        guard core.execute({ core.sendOnLoop(cmsg) }) else {
            LibDBusCodec.release(cmsg)
            throw DBusError.disconnected
        }
    }

    /// Emits a signal from this connection.
    public func emitSignal(path: ObjectPath, interface: String, member: String, arguments: [DBusValue] = [], destination: String? = nil) throws {
        var m = DBusMessage(kind: .signal, path: path, interface: interface, member: member, body: arguments)
        m.destination = destination
        try send(m)
    }

    // MARK: The bus daemon

    public struct RequestNameFlags: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let allowReplacement = RequestNameFlags(rawValue: 0x1)
        public static let replaceExisting = RequestNameFlags(rawValue: 0x2)
        public static let doNotQueue = RequestNameFlags(rawValue: 0x4)
    }

    public enum RequestNameReply: UInt32, Sendable {
        case primaryOwner = 1, inQueue = 2, exists = 3, alreadyOwner = 4
    }

    public enum ReleaseNameReply: UInt32, Sendable {
        case released = 1, nonExistent = 2, notOwner = 3
    }

    private func busCall(_ member: String, _ args: [DBusValue]) async throws -> DBusMessage {
        try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                       interface: "org.freedesktop.DBus", member: member, arguments: args)
    }

    /// Asks the bus for a well-known name.
    public func requestName(_ name: String, flags: RequestNameFlags = [.doNotQueue]) async throws -> RequestNameReply {
        try NameValidation.validateBusName(name)
        let reply = try await busCall("RequestName", [.string(name), .uint32(flags.rawValue)])
        let code: UInt32 = try reply.argument(0)
        guard let r = RequestNameReply(rawValue: code) else { throw DBusError.malformedMessage("RequestName returned \(code)") }
        return r
    }

    /// Gives a well-known name back.
    public func releaseName(_ name: String) async throws -> ReleaseNameReply {
        try NameValidation.validateBusName(name)
        let reply = try await busCall("ReleaseName", [.string(name)])
        let code: UInt32 = try reply.argument(0)
        guard let r = ReleaseNameReply(rawValue: code) else { throw DBusError.malformedMessage("ReleaseName returned \(code)") }
        return r
    }

    /// The unique name owning `name`, or nil when nobody owns it.
    public func nameOwner(_ name: String) async throws -> String? {
        try NameValidation.validateBusName(name)
        do {
            return try await busCall("GetNameOwner", [.string(name)]).argument(0, as: String.self)
        } catch let e as DBusError where e.remoteName == DBusErrorName.nameHasNoOwner {
            return nil
        }
    }

    /// Names that can be started on demand on this bus.
    public func activatableNames() async throws -> [String] {
        try await busCall("ListActivatableNames", []).argument(0)
    }

    /// Names currently on the bus.
    public func listNames() async throws -> [String] {
        try await busCall("ListNames", []).argument(0)
    }

    // MARK: Signals

    /// Subscribes to the signals matching `rule`.
    ///
    /// The match rule is registered with the bus before this returns, so a
    /// call made afterwards cannot race ahead of the signals it causes.
    /// Subscriptions with the same rule share one registration and one
    /// decode per message. The rule is removed when the last stream for it
    /// is released. Each stream buffers at most `bufferCapacity` messages;
    /// see ``DBusSignalStream`` for the overflow policy.
    ///
    /// With `decoding: .onDemand` the messages arrive with their body still
    /// in wire form (``DBusMessage/body`` is empty): read it in place with
    /// ``DBusMessage/withBodyReader(_:)`` or decode it with
    /// ``DBusMessage/decodedBody()`` on the consuming task. That moves the
    /// work off the I/O thread and skips building value trees for fields the
    /// consumer does not need — the mode for floods of PropertiesChanged.
    public func signals(matching rule: DBusMatchRule, bufferCapacity: Int = 8192,
                        decoding: DBusBodyDecoding = .eager) async throws -> DBusSignalStream {
        try rule.validate()
        let core = self.core
        let sink = BufferedSignalSink(id: core.nextID(), capacity: bufferCapacity, onDemand: decoding == .onDemand)
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let queued = core.execute {
                core.addSinkOnLoop(sink, rule: rule) { error in
                    if let error { c.resume(throwing: error) } else { c.resume() }
                }
            }
            if !queued { c.resume(throwing: DBusError.disconnected) }
        }
        return DBusSignalStream(token: SubscriptionToken(core: core, sink: sink), rule: rule)
    }

    /// Calls `handler` for every signal matching `rule`, on the connection's
    /// I/O thread, in arrival order, with no buffering and no thread hop.
    ///
    /// For consumers that only fold messages into state (a mirror of
    /// bluetoothd's objects, counters): the cheapest way to absorb a flood.
    /// The handler must return quickly and must not block or wait for this
    /// connection (a call made from it would deadlock); hand anything slow
    /// to a task. Releasing the returned registration removes the handler
    /// (and the bus rule when it was the last user of it).
    public func addSignalHandler(
        matching rule: DBusMatchRule, decoding: DBusBodyDecoding = .eager,
        _ handler: @escaping @Sendable (DBusMessage) -> Void
    ) async throws -> DBusSignalHandlerRegistration {
        try rule.validate()
        let core = self.core
        let sink = InlineSignalSink(id: core.nextID(), onDemand: decoding == .onDemand, handler: handler)
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let queued = core.execute {
                core.addSinkOnLoop(sink, rule: rule) { error in
                    if let error { c.resume(throwing: error) } else { c.resume() }
                }
            }
            if !queued { c.resume(throwing: DBusError.disconnected) }
        }
        return DBusSignalHandlerRegistration(core: core, id: sink.id)
    }

    /// A deadline kept by the connection's I/O thread instead of a timer:
    /// before each wait for input the thread asks `next` (on it, so it must
    /// be quick and must not wait for this connection) and waits no longer
    /// than that; once the instant has come it calls `due`, which must make
    /// `next` answer nil or a later instant. For consumers of a signal
    /// handler's flood (``addSignalHandler(matching:decoding:_:)``) that hold
    /// what it delivers until a moment: while the flood lasts the thread is
    /// awake anyway and no timer is armed per batch (each costs Dispatch two
    /// wake-ups); when it stops, the deadline still comes. Call
    /// ``DBusLoopDeadline/changed()`` when `next` becomes earlier on
    /// another thread.
    public func addLoopDeadline(next: @escaping @Sendable () -> ContinuousClock.Instant?,
                                due: @escaping @Sendable () -> Void) async throws -> DBusLoopDeadline {
        let core = self.core
        let id = core.nextID()
        let source = LoopDeadlineSource(next: next, due: due)
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            let queued = core.execute {
                core.addLoopDeadlineOnLoop(source, id: id)
                c.resume()
            }
            if !queued { c.resume(throwing: DBusError.disconnected) }
        }
        return DBusLoopDeadline(core: core, id: id)
    }

    /// Follows who owns a bus name: the current owner (nil if none) first,
    /// then every change, e.g. bluetoothd stopping (nil) and returning.
    public func nameOwnerChanges(of name: String) async throws -> DBusNameOwnerStream {
        try NameValidation.validateBusName(name)
        let core = self.core
        let id = core.nextID()
        let buffer = AsyncBuffer<String?>(capacity: 1024)
        guard core.execute({ core.addOwnerWatcherOnLoop(name, id: id, buffer: buffer) }) else {
            throw DBusError.disconnected
        }
        return DBusNameOwnerStream(token: OwnerToken(core: core, name: name, id: id, buffer: buffer))
    }

    // MARK: Exporting

    /// Handles every method call made to this connection's exported objects
    /// (and Peer, Introspectable, Properties, ObjectManager) `delay` after it
    /// arrives, in the order they came: a slow service, for simulators and
    /// tests. Its answer carries the state of when it is handled, as a slow
    /// daemon's does; signals are not delayed. Zero: at once.
    public func delayReplies(by delay: Duration) {
        let (seconds, attoseconds) = delay.components
        // Below a second `seconds` is 0 and the delay is all in `attoseconds`
        // (until 2026-12-01 such a delay was taken for none).
        let nanoseconds = seconds < 0 || (seconds == 0 && attoseconds <= 0) ? 0
            : UInt64(min(seconds, 3600)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
        _ = core.execute { [core] in core.replyDelayNanoseconds = nanoseconds }
    }

    /// Exports an object at `path` with the given interfaces. An ObjectManager
    /// above it announces it with InterfacesAdded. The returned registration
    /// keeps it exported; releasing it (or ``DBusObjectRegistration/unexport()``)
    /// removes it (InterfacesRemoved).
    public func export(_ path: ObjectPath, interfaces: [DBusExportedInterface]) async throws -> DBusObjectRegistration {
        for i in interfaces {
            try NameValidation.validateInterface(i.description.name)
            for m in i.description.methods { try NameValidation.validateMember(m.name) }
            for p in i.description.properties {
                try NameValidation.validateMember(p.name)
                if let v = i.values[p.name], v.type != p.type {
                    throw DBusError.typeMismatch(expected: p.type.signature, actual: v.type.signature, context: "property \(i.description.name).\(p.name)")
                }
            }
        }
        let core = self.core
        let owner = core.nextID()
        try await onLoop { core in
            if core.exports.objects[path] != nil { throw DBusError.invalidValue("an object is already exported at \(path)") }
            core.addInterfacesOnLoop(path: path, owner: owner, interfaces)
        }
        return DBusObjectRegistration(core: core, path: path, owner: owner)
    }

    /// Serves `org.freedesktop.DBus.ObjectManager` at `path` for every object
    /// exported below it. `includeStandardInterfaces` makes GetManagedObjects
    /// and InterfacesAdded list Introspectable and Properties too, as BlueZ does.
    public func exportObjectManager(at path: ObjectPath, includeStandardInterfaces: Bool = false) async throws -> DBusObjectManagerRegistration {
        let core = self.core
        let owner = core.nextID()
        try await onLoop { core in
            core.exports.managers[path] = .init(includeStandardInterfaces: includeStandardInterfaces, owner: owner)
        }
        return DBusObjectManagerRegistration(core: core, path: path, owner: owner)
    }

    /// Runs `body` on the I/O thread and waits for it.
    func onLoop<T: Sendable>(_ body: @escaping @Sendable (ConnectionCore) throws -> T) async throws -> T {
        let core = self.core
        // Released by the loop after `body`, acquired here after the wait: the
        // hand-over ThreadSanitizer does not see by itself (see `call`).
        let handoff = Lock<Void>()
        defer { handoff.withLock {} }
        return try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            let queued = core.execute {
                if core.dead { c.resume(throwing: DBusError.disconnected); return }
                let result = Result { try body(core) }
                handoff.withLock {}
                c.resume(with: result)
            }
            if !queued { c.resume(throwing: DBusError.disconnected) }
        }
    }
}

extension LibDBusCodec {
    static func release(_ message: CMessage) {
        releaseCMessage(message.pointer)
    }
}

/// One waiter resumed exactly once, by whichever comes first (the loss or
/// the caller's cancellation, which may come before the waiter is installed).
private final class LostSignal: Sendable {
    private let state = Lock<(fired: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))
    /// False when it already fired (the continuation is then resumed here).
    func install(_ c: CheckedContinuation<Void, Never>) -> Bool {
        let fired = state.withLock { s -> Bool in
            if !s.fired { s.waiter = c }
            return s.fired
        }
        if fired { c.resume() }
        return !fired
    }
    func fire() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            defer { s.fired = true; s.waiter = nil }
            return s.fired ? nil : s.waiter
        }
        waiter?.resume()
    }
}
