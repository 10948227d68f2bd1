internal import CDBus
import DequeModule
import Locking
import Synchronization
import Threads
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A libdbus message reference that can cross threads once (it is handed
/// from the caller that built it to the I/O thread that sends it).
struct CMessage: @unchecked Sendable {
    let pointer: OpaquePointer
}

@inline(__always) func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Per-call state shared between the caller (cancellation) and the I/O thread.
final class CallState: @unchecked Sendable {
    enum Phase { case new, started(serial: UInt32), cancelled, done }
    let lock = Lock<Void>()
    var phase: Phase = .new
}

/// Something that receives the signals of one match rule.
protocol SignalSink: AnyObject, Sendable {
    var id: UInt64 { get }
    /// Takes messages with their body still in wire form.
    var onDemand: Bool { get }
    /// Returns true when a consumer waits and ``wake()`` must follow.
    func deliver(_ message: DBusMessage) -> Bool
    func wake()
    func finish(_ error: DBusError?)
}

final class BufferedSignalSink: SignalSink, @unchecked Sendable {
    let id: UInt64
    let onDemand: Bool
    let buffer: AsyncBuffer<DBusMessage>
    init(id: UInt64, capacity: Int, onDemand: Bool = false) {
        self.id = id
        self.onDemand = onDemand
        self.buffer = AsyncBuffer(capacity: capacity)
    }
    func deliver(_ message: DBusMessage) -> Bool { buffer.push(message, deferWake: true) }
    func wake() { buffer.wake() }
    func finish(_ error: DBusError?) { buffer.finish(throwing: error) }
}

/// A sink run on the I/O thread itself (internal bookkeeping).
final class InlineSignalSink: SignalSink, @unchecked Sendable {
    let id: UInt64
    let onDemand: Bool
    let handler: (DBusMessage) -> Void
    init(id: UInt64, onDemand: Bool = false, handler: @escaping (DBusMessage) -> Void) {
        self.id = id
        self.onDemand = onDemand
        self.handler = handler
    }
    func deliver(_ message: DBusMessage) -> Bool {
        handler(message)
        return false
    }
    func wake() {}
    func finish(_ error: DBusError?) {}
}

/// The engine behind ``DBusConnection``: one libdbus connection driven by a
/// dedicated I/O thread blocked in `epoll_wait` (zero CPU when idle).
///
/// Threading rule: every libdbus call on the connection, and every field
/// marked "loop" below, is touched only on the I/O thread. Other threads
/// talk to it by ``execute(_:)``, which queues a closure and wakes the loop
/// through an eventfd.
final class ConnectionCore: @unchecked Sendable {
    let address: String
    private(set) var connection: OpaquePointer?   // loop
    private let epollFD: Int32
    private let wakeFD: Int32

    // Cross-thread queue.
    private let queueLock = Lock<Void>()
    private var queue: [() -> Void] = []
    private var accepting = true
    private var wakePending = false

    // Loop-only state, in parts (each in its own file).
    /// libdbus's watches and timeouts in our epoll set.
    let libdbus: LibDBusWatches
    /// Method calls awaiting replies.
    var calls = CallTable()
    /// Match rules, their subscribers, wake batching.
    let router = SignalRouter()
    /// Owners of the well-known names rules and watchers follow.
    let names = NameOwnerTracker()
    private var running = true
    private(set) var dead = false                   // loop
    /// Called once the connection is gone (``whenLost(_:)``).
    private var lostWaiters: [@Sendable () -> Void] = []   // loop
    var exports = ExportRegistry()                  // loop
    /// How long exported objects take to answer (``DBusConnection/delayReplies(by:)``).
    var replyDelayNanoseconds: UInt64 = 0           // loop
    /// Method calls held for `replyDelayNanoseconds`, oldest first: each is
    /// handled when its delay is over, so its answer is built from the state
    /// of then, as a slow service answers, in the order the calls came.
    var delayedCalls = Deque<DBusMessage>()         // loop
    /// At most this many calls are held; one more is answered at once with
    /// LimitsExceeded (a client flooding a slow service gets refused, not queued forever).
    static let maximumDelayedCalls = 4096
    private var idCounter: UInt64 = 0
    private let idLock = Lock<Void>()
    /// Written once on the I/O thread while connecting, read from any
    /// thread afterwards. The lock is the happens-before edge: the one the
    /// continuation gives lives in the (uninstrumented) Swift runtime, which
    /// ThreadSanitizer cannot see when the resume wins the race with the
    /// awaiting task's suspension.
    private let identityLock = Lock<Void>()
    private var identity = (uniqueName: "", canPassUnixFDs: false)
    var uniqueName: String { identityLock.withLock { identity.uniqueName } }
    var canPassUnixFDs: Bool { identityLock.withLock { identity.canPassUnixFDs } }
    var malformedCount = 0                          // loop
    let decodeCache = DecodeCache()                 // loop
    /// Set once the socket is read by us instead of libdbus (bus
    /// connections, after registration): the socket read and the framer.
    private var reader: SocketReader?               // loop
    private var framer: WireFramer?                 // loop
    /// Why our receiver gave up on the connection, if it did.
    private(set) var failureReason: String?         // loop
    /// Deadlines kept for others (``DBusConnection/addLoopDeadline(next:due:)``).
    private var loopDeadlines: [UInt64: LoopDeadlineSource] = [:]   // loop

    private init(address: String, epollFD: Int32, wakeFD: Int32) {
        self.address = address
        self.epollFD = epollFD
        self.wakeFD = wakeFD
        self.libdbus = LibDBusWatches(epollFD: epollFD)
    }

    func nextID() -> UInt64 {
        idLock.withLock {
            idCounter &+= 1
            return idCounter
        }
    }

    // MARK: Start-up

    /// Opens a private connection to `address`, registers with the bus
    /// (Hello), and starts the I/O thread. All of it happens on the new
    /// thread; the caller is resumed with the result.
    static func open(address: String, register: Bool) async throws -> ConnectionCore {
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else { throw DBusError.connectionFailed(address: address, reason: "epoll_create1 failed: errno \(errno)") }
        let ev = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard ev >= 0 else {
            Glibc.close(ep)
            throw DBusError.connectionFailed(address: address, reason: "eventfd failed: errno \(errno)")
        }
        let core = ConnectionCore(address: address, epollFD: ep, wakeFD: ev)
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = ev
        epoll_ctl(ep, EPOLL_CTL_ADD, ev, &event)
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<ConnectionCore, any Error>) in
            let started = core.startThread {
                do {
                    try core.connectOnLoop(register: register)
                    cont.resume(returning: core)
                    return true
                } catch {
                    cont.resume(throwing: error)
                    return false
                }
            }
            if !started {
                cont.resume(throwing: DBusError.connectionFailed(address: address, reason: "cannot start the I/O thread"))
            }
        }
    }

    private func connectOnLoop(register: Bool) throws(DBusError) {
        assertOnLoop()
        var err = DBusError_C()
        dbus_error_init(&err)
        defer { dbus_error_free(&err) }
        guard let conn = dbus_connection_open_private(address, &err) else {
            throw .connectionFailed(address: address, reason: ConnectionCore.describe(err))
        }
        dbus_connection_set_exit_on_disconnect(conn, 0)
        if register {
            guard dbus_bus_register(conn, &err) != 0 else {
                let reason = ConnectionCore.describe(err)
                dbus_connection_close(conn)
                dbus_connection_unref(conn)
                throw .connectionFailed(address: address, reason: reason)
            }
            if let u = dbus_bus_get_unique_name(conn) {
                let name = String(cString: u)
                identityLock.withLock { identity.uniqueName = name }
            }
        }
        // Bus connections are read by our own receiver from here on. A
        // round trip to the bus first makes the hand-over exact: once its
        // reply is in, libdbus has read everything the bus sent so far
        // (the Hello reply, NameAcquired) and the bus sends nothing more
        // until we ask (no match rules yet). Peer connections, whose other
        // end may talk at any time, stay with libdbus's reader.
        var ownReceive = false
        if register {
            do throws(DBusError) {
                try ConnectionCore.roundTrip(conn)
                ownReceive = true
            } catch {
                dbus_connection_close(conn)
                dbus_connection_unref(conn)
                throw .connectionFailed(address: address, reason: "the bus did not answer GetId: \(error)")
            }
        }
        connection = conn
        let fds = dbus_connection_can_send_type(conn, TypeCode.unixFD) != 0
        identityLock.withLock { identity.canPassUnixFDs = fds }
        let me = Unmanaged.passUnretained(self).toOpaque()
        guard dbus_connection_add_filter(conn, LibDBusCallbacks.filter, me, nil) != 0 else {
            dbus_connection_close(conn)
            dbus_connection_unref(conn)
            connection = nil
            throw .outOfMemory
        }
        if ownReceive {
            // What libdbus has already read is dispatched through it, in order,
            // before the first byte we read ourselves.
            dispatchAll()
            var fd: Int32 = -1
            if dbus_connection_get_unix_fd(conn, &fd) != 0, fd >= 0 {
                reader = SocketReader(socket: fd)
                framer = WireFramer()
                libdbus.ownSocket = fd
            }
        }
        guard dbus_connection_set_watch_functions(conn, LibDBusCallbacks.watchAdd, LibDBusCallbacks.watchRemove,
                                                  LibDBusCallbacks.watchToggled, me, nil) != 0,
              dbus_connection_set_timeout_functions(conn, LibDBusCallbacks.timeoutAdd, LibDBusCallbacks.timeoutRemove,
                                                    LibDBusCallbacks.timeoutToggled, me, nil) != 0
        else {
            dbus_connection_remove_filter(conn, LibDBusCallbacks.filter, me)
            dbus_connection_close(conn)
            dbus_connection_unref(conn)
            connection = nil
            throw .outOfMemory
        }
    }

    /// A blocking GetId call to the bus (before the loop runs).
    private static func roundTrip(_ conn: OpaquePointer) throws(DBusError) {
        guard let msg = dbus_message_new_method_call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                     "org.freedesktop.DBus", "GetId") else { throw .outOfMemory }
        defer { dbus_message_unref(msg) }
        var err = DBusError_C()
        dbus_error_init(&err)
        defer { dbus_error_free(&err) }
        guard let reply = dbus_connection_send_with_reply_and_block(conn, msg, 25_000, &err) else {
            throw .remote(name: err.name.map { String(cString: $0) } ?? DBusErrorName.failed, message: describe(err))
        }
        dbus_message_unref(reply)
    }

    static func describe(_ err: DBusError_C) -> String {
        let name = err.name.map { String(cString: $0) } ?? "unknown error"
        let message = err.message.map { String(cString: $0) } ?? ""
        return message.isEmpty ? name : "\(message) (\(name))"
    }

    // MARK: The loop

    /// The I/O thread's id, set as it starts (0 before): what
    /// ``assertOnLoop(_:_:)`` compares with.
    private let loopThread = Atomic<UInt>(0)

    /// Traps in debug builds when called anywhere but on the I/O thread:
    /// the confinement of the "loop" state, checked rather than only
    /// commented. Compiled out of release builds (`assert`).
    @inline(__always)
    func assertOnLoop(_ function: StaticString = #function, _ line: UInt = #line) {
        assert(loopThread.load(ordering: .relaxed) == UInt(pthread_self()),
               "ConnectionCore.\(function) called off the I/O thread", line: line)
    }

    private func startThread(first: @escaping () -> Bool) -> Bool {
        do {
            try DetachedThread.start(name: "dbus-io") { [self] in
                loopThread.store(UInt(pthread_self()), ordering: .relaxed)
                if first() { runLoop() } else { teardownAfterFailedStart() }
            }
            return true
        } catch {
            return false
        }
    }

    private func teardownAfterFailedStart() {
        queueLock.withLock { accepting = false }
        Glibc.close(epollFD)
        Glibc.close(wakeFD)
    }

    /// Queues work for the I/O thread. Returns false when the connection is
    /// gone (the work is not run).
    @discardableResult
    func execute(_ work: @escaping @Sendable () -> Void) -> Bool {
        let needWake: Bool? = queueLock.withLock {
            guard accepting else { return nil }
            queue.append(work)
            if wakePending { return false }
            wakePending = true
            return true
        }
        guard let needWake else { return false }
        if needWake {
            var one: UInt64 = 1
            _ = write(wakeFD, &one, 8)
        }
        return true
    }

    private func runLoop() {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while running {
            // With deliveries waiting to be announced, only peek for more
            // input: a flood is then handed over in batches, and the
            // consumers are woken as soon as the socket runs dry.
            let timeout = router.hasPendingWakes ? 0 : nextTimeoutMilliseconds()
            let n = events.withUnsafeMutableBufferPointer { epoll_wait(epollFD, $0.baseAddress, 64, timeout) }
            if n < 0 {
                if errno == EINTR { continue }
                break
            }
            if n == 0 && router.hasPendingWakes {
                router.flushWakes()
                fireTimeouts()
                continue
            }
            for i in 0..<Int(n) {
                let fd = events[i].data.fd
                if fd == wakeFD {
                    var value: UInt64 = 0
                    _ = read(wakeFD, &value, 8)
                } else {
                    handleEvents(fd: fd, epollEvents: events[i].events)
                }
            }
            runQueued()
            fireTimeouts()
            dispatchAll()
            fireLoopDeadlines()
            if router.batchIsDue(now: monotonicNanoseconds()) { router.flushWakes() }
        }
        router.flushWakes()
        shutdownOnLoop()
    }

    private func runQueued() {
        while true {
            let work: [() -> Void] = queueLock.withLock {
                wakePending = false
                if queue.isEmpty { return [] }
                let w = queue
                queue = []
                return w
            }
            if work.isEmpty { return }
            for w in work { w() }
            dispatchAll()
        }
    }

    private func dispatchAll() {
        guard let conn = connection else { return }
        while dbus_connection_get_dispatch_status(conn) == DBUS_DISPATCH_DATA_REMAINS {
            _ = dbus_connection_dispatch(conn)
            if connection == nil { return }
        }
    }

    private func shutdownOnLoop() {
        assertOnLoop()
        let leftovers: [() -> Void] = queueLock.withLock {
            accepting = false
            let w = queue
            queue.removeAll()
            return w
        }
        markDead()
        for w in leftovers { w() }
        if let conn = connection {
            dbus_connection_set_watch_functions(conn, nil, nil, nil, nil, nil)
            dbus_connection_set_timeout_functions(conn, nil, nil, nil, nil, nil)
            let me = Unmanaged.passUnretained(self).toOpaque()
            dbus_connection_remove_filter(conn, LibDBusCallbacks.filter, me)
            dbus_connection_close(conn)
            dbus_connection_unref(conn)
            connection = nil
        }
        Glibc.close(epollFD)
        Glibc.close(wakeFD)
    }

    /// Fails everything outstanding once the connection is gone.
    /// Calls `action` once the connection is gone (at once if it is), on
    /// the loop thread or, when the loop has already stopped, here.
    func whenLost(_ action: @escaping @Sendable () -> Void) {
        if !execute({ [self] in
            if dead { action() } else { lostWaiters.append(action) }
        }) {
            action()
        }
    }

    private func markDead() {
        guard !dead else { return }
        dead = true
        let lost = lostWaiters
        lostWaiters.removeAll()
        for action in lost { action() }
        for call in calls.removeAll() { call.completion(.failure(.disconnected)) }
        for w in router.removeAll(finishing: .disconnected) { w(.disconnected) }
        for w in names.removeAll(finishing: .disconnected) { w(.disconnected) }
        exports.failAll()
    }

    /// Requests an orderly close (from any thread).
    func close() {
        execute { [self] in
            if let conn = connection { dbus_connection_flush(conn) }
            running = false
        }
    }

    // MARK: Events and timers (loop thread)

    /// What epoll reported for `fd`: our own receiver reads the bus socket
    /// it took over; everything else (and writability) goes to libdbus.
    private func handleEvents(fd: Int32, epollEvents: UInt32) {
        if fd == libdbus.ownSocket {
            if epollEvents & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 { receiveOnLoop() }
            if dead { return }
        }
        libdbus.handle(fd: fd, epollEvents: epollEvents)
    }

    /// How long `epoll_wait` may sleep: until the earliest call deadline or
    /// libdbus timeout (-1: no timer, sleep until woken).
    private func nextTimeoutMilliseconds() -> Int32 {
        let now = monotonicNanoseconds()
        let earliest = min(calls.earliestDeadline ?? UInt64.max, libdbus.earliest, loopDeadlineNanoseconds(now: now))
        if earliest == UInt64.max { return -1 }
        if earliest <= now { return 0 }
        let ms = (earliest - now + 999_999) / 1_000_000
        return Int32(min(ms, UInt64(Int32.max)))
    }

    // MARK: Deadlines kept for others (loop thread)

    func addLoopDeadlineOnLoop(_ source: LoopDeadlineSource, id: UInt64) { loopDeadlines[id] = source }
    func removeLoopDeadlineOnLoop(id: UInt64) { loopDeadlines[id] = nil }

    /// The earliest of the sources' deadlines on the monotonic clock (max: none).
    private func loopDeadlineNanoseconds(now: UInt64) -> UInt64 {
        guard !loopDeadlines.isEmpty else { return UInt64.max }
        var earliest = UInt64.max
        let clockNow = ContinuousClock.now
        for source in loopDeadlines.values {
            guard let instant = source.next() else { continue }
            let left = clockNow.duration(to: instant)
            if left <= .zero { return now }
            let (seconds, attoseconds) = left.components
            // Whole milliseconds are all epoll_wait takes; a day is as good as longer.
            let ns = seconds >= 86_400 ? UInt64(86_400_000_000_000) : UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
            earliest = min(earliest, now &+ ns)
        }
        return earliest
    }

    /// Tells each source whose deadline has come (it must then stop reporting it).
    private func fireLoopDeadlines() {
        guard !loopDeadlines.isEmpty else { return }
        let now = ContinuousClock.now
        for source in loopDeadlines.values {
            if let instant = source.next(), instant <= now { source.due() }
        }
    }

    private func fireTimeouts() {
        let now = monotonicNanoseconds()
        libdbus.fireDue(now: now)
        while let call = calls.nextExpired(now: now) {
            call.completion(.failure(.timedOut(member: call.member, milliseconds: call.timeoutMs)))
        }
    }

    // MARK: Sending (loop thread)

    /// Sends a message; returns its serial.
    @discardableResult
    func sendOnLoop(_ message: CMessage) -> UInt32? {
        assertOnLoop()
        defer { dbus_message_unref(message.pointer) }
        guard let conn = connection, !dead else { return nil }
        var serial: UInt32 = 0
        guard dbus_connection_send(conn, message.pointer, &serial) != 0 else { return nil }
        return serial
    }

    /// Sends a method call and arranges for `completion` (run on the loop
    /// thread) to get the reply, an error reply, a timeout or a disconnect.
    func callOnLoop(
        _ message: CMessage, member: String, timeoutMs: Int, state: CallState?,
        onCancel: (() -> Void)? = nil, lazyReply: Bool = false,
        completion: @escaping (Result<DBusMessage, DBusError>) -> Void
    ) {
        assertOnLoop()
        if dead {
            dbus_message_unref(message.pointer)
            completion(.failure(.disconnected))
            return
        }
        guard let serial = sendOnLoop(message) else {
            completion(.failure(dead ? .disconnected : .outOfMemory))
            return
        }
        calls.add(.init(member: member, timeoutMs: timeoutMs, completion: completion, state: state, onCancel: onCancel,
                        lazyReply: lazyReply),
                  serial: serial, now: monotonicNanoseconds())
    }

    /// Abandons a pending call: its reply, if one comes, is discarded.
    func cancelCallOnLoop(serial: UInt32) {
        assertOnLoop()
        calls.cancel(serial)?.onCancel?()
    }

    /// A method call to the bus daemon from the loop thread.
    func busCallOnLoop(_ member: String, _ args: [DBusValue], completion: @escaping (Result<DBusMessage, DBusError>) -> Void) {
        assertOnLoop()
        let msg = DBusMessage(kind: .methodCall, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                              member: member, destination: "org.freedesktop.DBus", body: args)
        do {
            let c = try LibDBusCodec.makeCMessage(msg)
            callOnLoop(CMessage(pointer: c), member: member, timeoutMs: 25_000, state: nil, completion: completion)
        } catch {
            completion(.failure(error))
        }
    }

    // MARK: Incoming (loop thread)

    /// A message that libdbus read (peer connections; on bus connections
    /// only what arrived before the hand-over, and libdbus's own
    /// Disconnected signal).
    func handle(_ cmsg: OpaquePointer) -> Bool {
        let message: DBusMessage
        do {
            // Signals stay undecoded for on-demand subscribers, a reply for a
            // call that asked so; everything else is decoded here, once.
            let kind = dbus_message_get_type(cmsg)
            let lazy = kind == Int32(DBUS_MESSAGE_TYPE_SIGNAL) ? router.onDemandSinks > 0
                : kind == Int32(DBUS_MESSAGE_TYPE_METHOD_RETURN) && calls.wantsLazyReply(dbus_message_get_reply_serial(cmsg))
            message = try LibDBusCodec.decode(cmsg, cache: decodeCache, lazyBody: lazy)
        } catch {
            malformedCount += 1
            if dbus_message_get_type(cmsg) == Int32(DBUS_MESSAGE_TYPE_METHOD_CALL), dbus_message_get_no_reply(cmsg) == 0 {
                replyMalformed(serial: dbus_message_get_serial(cmsg),
                               sender: dbus_message_get_sender(cmsg).map { String(cString: $0) }, error: error)
            }
            return true
        }
        dispatch(message)
        return true
    }

    private func replyMalformed(serial: UInt32, sender: String?, error: any Error) {
        let reply = DBusMessage(kind: .error, replySerial: serial, errorName: DBusErrorName.invalidArgs,
                                destination: sender, body: [.string("\(error)")])
        if let c = try? LibDBusCodec.makeCMessage(reply) { sendOnLoop(CMessage(pointer: c)) }
    }

    /// Reads what the socket has and dispatches every complete message.
    private func receiveOnLoop() {
        assertOnLoop()
        guard let reader, let framer, !dead else { return }
        let outcome = reader.read(into: framer)
        switch outcome {
        case .received:
            break
        case .wouldBlock:
            return
        case .endOfStream:
            connectionLost()
            return
        case let .failed(reason):
            malformedCount += 1
            reportFailure(reason)
            connectionLost()
            return
        }
        do throws(DBusError) {
            while running, !dead, let frame = try framer.nextMessage() {
                dispatchFrame(frame, framer)
                framer.consume(frame.count)
            }
        } catch {
            // The stream is out of step: nothing after this can be trusted.
            malformedCount += 1
            reportFailure("\(error)")
            connectionLost()
        }
    }

    private func dispatchFrame(_ frame: UnsafeRawBufferPointer, _ framer: WireFramer) {
        let header: WireHeader
        do {
            header = try WireDecoder.decodeHeader(frame, cache: decodeCache)
        } catch {
            // Without a header its fds cannot be told from the next message's:
            // as libdbus does, give up on the connection.
            malformedCount += 1
            reportFailure("\(error)")
            connectionLost()
            return
        }
        let message: DBusMessage
        do {
            let fds = header.unixFDCount > 0 ? try framer.takeDescriptors(header.unixFDCount) : []
            let lazy = header.kind == .signal ? router.onDemandSinks > 0
                : header.kind == .methodReturn && calls.wantsLazyReply(header.replySerial)
            message = try WireDecoder.decodeBody(of: header, in: frame, cache: decodeCache, lazyBody: lazy, fds: fds)
        } catch {
            malformedCount += 1
            if header.kind == .methodCall, !header.flags.contains(.noReplyExpected) {
                replyMalformed(serial: header.serial, sender: header.sender, error: error)
            }
            return
        }
        dispatch(message)
    }

    private func reportFailure(_ reason: String) {
        if failureReason == nil { failureReason = reason }
    }

    /// The bus went away (or sent what cannot be read): fail everything.
    private func connectionLost() {
        markDead()
        running = false
    }

    private func dispatch(_ message: DBusMessage) {
        switch message.kind {
        case .methodReturn, .error:
            guard let rs = message.replySerial, let call = calls.answer(rs) else { return }
            if message.kind == .error {
                call.completion(.failure(.remote(name: message.errorName ?? DBusErrorName.failed, message: message.errorMessage)))
            } else {
                call.completion(.success(message))
            }
        case .signal:
            if message.interface == "org.freedesktop.DBus.Local", message.member == "Disconnected" {
                connectionLost()
                return
            }
            var decoded = DecodedOnce()
            if message.sender == "org.freedesktop.DBus", message.member == "NameOwnerChanged",
               message.interface == "org.freedesktop.DBus", let eager = decoded.get(message), eager.body.count == 3,
               case let .string(name) = eager.body[0], case let .string(newOwner) = eager.body[2] {
                names.ownerChanged(name, to: newOwner)
            }
            malformedCount += router.route(message, &decoded, ownerOf: names.owner(of:))
        case .methodCall:
            if replyDelayNanoseconds > 0 {
                holdCall(message)
            } else {
                exports.handleCall(message, core: self)
            }
        }
    }


}
