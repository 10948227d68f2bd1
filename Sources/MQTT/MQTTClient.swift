// The MQTT client the headless gateway publishes readings with:
// libmosquitto underneath, a Swift-concurrency API on top.
//
// Threads. Each client has one network thread of ours (`NetworkThread`),
// which drives libmosquitto through its external-loop functions: it reads
// and writes the socket, sends keep-alives and reconnects with a doubling
// delay. libmosquitto calls our callbacks there; they only record what
// happened in `ClientCore` (under a `Lock`) and resume or yield to whoever
// waits — nothing blocks there. Publishing and subscribing call libmosquitto
// from the caller's thread, which only queues the packets (libmosquitto's
// "threaded" mode, `mosquitto_threaded_set`), then wake the network thread
// once per call — once per batch for `publish(_:)` of many. The calls that
// block (the initial TCP connect, joining the network thread) run on a
// Dispatch queue, never on Swift's cooperative pool.
//
// Idle cost. Nothing here polls: an idle client's thread sleeps in `poll()`
// until data arrives or a quarter of the keep-alive has passed (keepAlive
// 60: one wake-up in 15 s), when libmosquitto decides whether a PINGREQ is due.
//
// Callers wait for the broker, not for the library: `connect` returns once
// CONNACK arrived, `publish` (QoS ≥ 1) once PUBACK/PUBCOMP arrived (matched by
// the message id `mosquitto_publish` hands out), `subscribe` once SUBACK
// arrived. After a reconnect the client subscribes again to every filter a
// live stream still uses.
internal import CMosquitto
import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Locking
import Synchronization

/// `mosquitto_lib_init` once per process (a global's initialiser runs once, thread-safely).
private let libraryInitialised: Int32 = mosquitto_lib_init()

/// The libmosquitto handle. libmosquitto's client functions may be called
/// from any thread (the handle is in threaded mode); `MQTTClient` owns the
/// handle and destroys it only after the network thread has stopped.
struct MosquittoHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

/// A connection to one MQTT broker. Create with ``connect(_:)``; end with
/// ``disconnect()`` (dropping the last reference also disconnects cleanly,
/// but blocks the releasing thread until the network thread has stopped).
public final class MQTTClient: Sendable {
    /// Messages kept per subscription stream when its consumer falls behind
    /// (the oldest are dropped first).
    public static let subscriptionBufferLimit = 1024

    public let configuration: MQTTConfiguration
    let handle: MosquittoHandle
    let core: ClientCore
    private let network = Lock<NetworkThread?>(nil)

    private init(configuration: MQTTConfiguration, handle: MosquittoHandle, core: ClientCore) {
        self.configuration = configuration
        self.handle = handle
        self.core = core
    }

    deinit {
        if core.beginClose() { mosquitto_disconnect(handle.raw) }
        stopLoop()
        core.finishAll()
        mosquitto_destroy(handle.raw)
    }

    private var endpoint: String { configuration.endpoint }

    // MARK: Connecting

    /// Connects and returns once the broker accepted the connection (CONNACK).
    /// Throws with the broker's reason when it refuses (e.g. bad credentials),
    /// the system's when the TCP/TLS connection fails.
    public static func connect(_ configuration: MQTTConfiguration) async throws(MQTTError) -> MQTTClient {
        try configuration.validate()
        let endpoint = configuration.endpoint
        guard libraryInitialised == mosqOK else {
            throw .connectionFailed(endpoint: endpoint, reason: "libmosquitto initialisation failed: \(errorText(libraryInitialised))")
        }
        let core = ClientCore(endpoint: endpoint, protocolVersion: configuration.protocolVersion)
        // The core outlives the handle (the client owns both and destroys the
        // handle first), so callbacks may use it unretained.
        guard let raw = mosquitto_new(configuration.clientID, configuration.cleanSession, Unmanaged.passUnretained(core).toOpaque()) else {
            throw .invalidConfiguration(endpoint: endpoint, reason: "mosquitto_new failed: \(cText(strerror(errno), orCode: errno))")
        }
        let client = MQTTClient(configuration: configuration, handle: MosquittoHandle(raw: raw), core: core)
        try client.applyOptions()

        switch await client.openConnection(timeout: configuration.connectTimeout) {
        case .opened: break
        case let .failed(reason): throw .connectionFailed(endpoint: endpoint, reason: reason)
        case .timedOut: throw .timedOut(endpoint: endpoint, operation: "the TCP/TLS connection")
        case .cancelled: throw .cancelled(endpoint: endpoint, operation: "CONNECT")
        }

        let thread = try NetworkThread(handle: client.handle, core: core, keepAlive: configuration.keepAlive,
                                       reconnectDelay: configuration.reconnectDelayMin...configuration.reconnectDelayMax)
        client.network.withLock { $0 = thread }
        thread.wake()   // CONNECT is queued

        switch await core.awaitConnack(timeout: configuration.connectTimeout) {
        case .success:
            return client
        case let .failure(error):
            await client.disconnect()
            throw error
        }
    }

    enum Opening: Sendable {
        case opened, failed(String), timedOut, cancelled
    }

    /// libmosquitto's blocking connect (name lookup, TCP, TLS handshake), on
    /// a Dispatch thread, bounded by `timeout` and by cancellation of the
    /// caller. A host that drops packets would otherwise hold the caller for
    /// the kernel's SYN retries (about two minutes) — longer than systemd
    /// waits for a stopping gateway. When the caller gives up, the thread
    /// keeps this client until the call returns; the client is then released
    /// there (its deinit closes the socket), never while libmosquitto uses it.
    private func openConnection(timeout: Duration) async -> Opening {
        let outcome = OneShot<Opening>()
        let host = configuration.host, port = Int32(configuration.port), keepAlive = Int32(configuration.keepAlive)
        DispatchQueue.global().async { [self] in
            let rc = mosquitto_connect(handle.raw, host, port, keepAlive)
            outcome.resolve(rc == mosqOK ? .opened : .failed(errorText(rc)))
            // `self` (captured strongly) is released here, after the call.
        }
        let timer = Task {
            try? await Task.sleep(for: timeout)
            if !Task.isCancelled { outcome.resolve(.timedOut) }
        }
        defer { timer.cancel() }
        return await withTaskCancellationHandler {
            await outcome.value()
        } onCancel: {
            outcome.resolve(.cancelled)
        }
    }

    /// How many QoS 1/2 publishes may await their acknowledgement at once
    /// (libmosquitto's default is 20; an MQTT 5 broker that asks for fewer
    /// in CONNACK's Receive Maximum gets fewer). `QueuePublisher` hands over
    /// this many per batch: with 20 in flight, the rest of a batch left one
    /// by one, each after a PUBACK, a write and a TCP segment apiece
    /// (docs/PERFORMANCE.md, twentieth pass).
    public static let inFlightLimit: Int32 = 64

    private func applyOptions() throws(MQTTError) {
        let c = configuration
        let mosq = handle.raw
        func check(_ rc: Int32, _ what: String) throws(MQTTError) {
            guard rc == mosqOK else { throw .invalidConfiguration(endpoint: endpoint, reason: "\(what): \(errorText(rc))") }
        }
        // Our network thread does the I/O; callers only queue packets.
        try check(mosquitto_threaded_set(mosq, true), "threaded mode")
        let version: Int32 = c.protocolVersion == .v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311
        try check(mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION, version), "protocol version")
        try check(mosquitto_int_option(mosq, MOSQ_OPT_SEND_MAXIMUM, Self.inFlightLimit), "messages in flight")
        if let username = c.username {
            try check(mosquitto_username_pw_set(mosq, username, c.password), "username/password")
        }
        if let will = c.will {
            let rc = will.payload.withUnsafeBytes { bytes in
                mosquitto_will_set(mosq, will.topic, Int32(bytes.count), bytes.baseAddress, Int32(will.qos.rawValue), will.retain)
            }
            try check(rc, "will on \(will.topic)")
        }
        if let tls = c.tls {
            try check(mosquitto_tls_set(mosq, tls.caFile, nil, tls.certificateFile, tls.keyFile, nil), "TLS (CA \(tls.caFile))")
            try check(mosquitto_tls_insecure_set(mosq, tls.insecure), "TLS insecure flag")
        }

        mosquitto_connect_callback_set(mosq) { mosq, obj, rc in
            guard let mosq, let obj else { return }
            let core = Unmanaged<ClientCore>.fromOpaque(obj).takeUnretainedValue()
            for (filter, qos) in core.connackArrived(rc: rc) {
                var mid: Int32 = 0
                if mosquitto_subscribe(mosq, &mid, filter, Int32(qos.rawValue)) == mosqOK { core.forget(mid: mid) }
            }
        }
        mosquitto_disconnect_callback_set(mosq) { _, obj, rc in
            guard let obj else { return }
            Unmanaged<ClientCore>.fromOpaque(obj).takeUnretainedValue().connectionEnded(rc: rc)
        }
        mosquitto_publish_callback_set(mosq) { _, obj, mid in
            guard let obj else { return }
            Unmanaged<ClientCore>.fromOpaque(obj).takeUnretainedValue().ackArrived(mid: mid, .published)
        }
        mosquitto_subscribe_callback_set(mosq) { _, obj, mid, count, granted in
            guard let obj else { return }
            let list = granted.map { Array(UnsafeBufferPointer(start: $0, count: Int(max(count, 0)))) } ?? []
            Unmanaged<ClientCore>.fromOpaque(obj).takeUnretainedValue().ackArrived(mid: mid, .subscribed(granted: list))
        }
        mosquitto_message_callback_set(mosq) { _, obj, message in
            guard let obj, let m = message?.pointee, let topic = m.topic else { return }
            let payload = m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(max(m.payloadlen, 0)))) } ?? []
            let qos = MQTTQoS(rawValue: Int(m.qos)) ?? .atMostOnce
            Unmanaged<ClientCore>.fromOpaque(obj).takeUnretainedValue()
                .messageArrived(MQTTMessage(topic: String(cString: topic), payload: payload, qos: qos, retain: m.retain))
        }
    }

    // MARK: Publishing and subscribing

    /// Publishes `message`. QoS 0 returns once libmosquitto has it; QoS 1 and 2
    /// once the broker acknowledged it (PUBACK / PUBCOMP) — across reconnects,
    /// since libmosquitto sends unacknowledged messages again.
    public func publish(_ message: MQTTMessage) async throws(MQTTError) {
        guard let mid = try send(message) else {
            wakeNetwork()
            return
        }
        wakeNetwork()
        _ = try await core.awaitAck(mid: mid, kind: .publish, operation: "PUBACK for \(message.topic)").get()
    }

    /// Publishes `messages` in order, pipelined: all are handed to libmosquitto
    /// first (it keeps their order on the wire and up to its in-flight limit
    /// unacknowledged at once), then their acknowledgements are awaited — one
    /// round trip for the batch instead of one per message. Returns how many
    /// from the start were acknowledged, and the error that stopped the rest
    /// (those may still reach the broker: a caller that sends them again
    /// publishes them twice, which QoS 1 allows).
    public func publish(_ messages: [MQTTMessage]) async -> (acknowledged: Int, error: MQTTError?) {
        // The ids to await (QoS ≥ 1), their topics, and where each is in `messages`.
        var mids: [Int32] = [], topics: [String] = [], positions: [Int] = []
        var sent = 0
        var sendError: MQTTError?
        for message in messages {
            do throws(MQTTError) {
                if let mid = try send(message) {
                    mids.append(mid)
                    topics.append(message.topic)
                    positions.append(sent)
                }
                sent += 1
            } catch {
                sendError = error
                break
            }
        }
        // The network thread writes the whole batch after one wake-up, and
        // this caller is woken once, when its last acknowledgement arrives.
        wakeNetwork()
        let (acknowledged, error) = await core.awaitAcks(mids, topics: topics)
        if let error, acknowledged < positions.count { return (positions[acknowledged], error) }
        return (sent, sendError)
    }

    /// Hands `message` to libmosquitto; the message id to await for QoS ≥ 1, nil for QoS 0.
    private func send(_ message: MQTTMessage) throws(MQTTError) -> Int32? {
        var mid: Int32 = 0
        let rc = message.payload.withUnsafeBytes { bytes in
            mosquitto_publish(handle.raw, &mid, message.topic, Int32(bytes.count), bytes.baseAddress, Int32(message.qos.rawValue), message.retain)
        }
        // While disconnected, libmosquitto answers NO_CONN for QoS 1/2 but has
        // queued the message (it has an id) and sends it after reconnecting:
        // wait for that acknowledgement rather than fail — a caller retrying
        // would publish it twice.
        let queuedWhileDisconnected = rc == mosqNoConnection && message.qos != .atMostOnce && mid != 0
        guard rc == mosqOK || queuedWhileDisconnected else {
            throw .operationFailed(endpoint: endpoint, operation: "publish to \(message.topic)", reason: errorText(rc))
        }
        if message.qos == .atMostOnce {
            core.forget(mid: mid)
            return nil
        }
        return mid
    }

    /// Subscribes to `filter` (wildcards `+` and `#` allowed) and returns,
    /// once the broker's SUBACK granted it, the stream of messages whose topic
    /// matches it. Ending the stream (dropping it or cancelling its consumer)
    /// unsubscribes unless another stream of this client uses the same filter.
    /// Brokers may deliver a message once per matching subscription when a
    /// client's filters overlap.
    public func subscribe(_ filter: String, qos: MQTTQoS = .atLeastOnce) async throws(MQTTError) -> AsyncStream<MQTTMessage> {
        let operation = "subscribe to \(filter)"
        guard mosquitto_sub_topic_check(filter) == mosqOK else {
            throw .operationFailed(endpoint: endpoint, operation: operation, reason: "not a valid topic filter")
        }
        let (stream, continuation) = AsyncStream.makeStream(of: MQTTMessage.self, bufferingPolicy: .bufferingNewest(Self.subscriptionBufferLimit))
        // Registered before SUBSCRIBE is sent: retained messages follow the SUBACK at once.
        guard let token = core.addSubscription(filter: filter, qos: qos, continuation: continuation) else {
            throw .closed(endpoint: endpoint)
        }
        // Not here and now: termination runs under the Swift runtime's lock of
        // a task, and UNSUBSCRIBE takes libmosquitto's locks.
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            DispatchQueue.global().async { self.subscriptionEnded(token) }
        }
        func fail(_ error: MQTTError) -> MQTTError {
            _ = core.removeSubscription(token)
            continuation.finish()
            return error
        }

        var mid: Int32 = 0
        let rc = mosquitto_subscribe(handle.raw, &mid, filter, Int32(qos.rawValue))
        wakeNetwork()
        guard rc == mosqOK else { throw fail(.operationFailed(endpoint: endpoint, operation: operation, reason: errorText(rc))) }
        switch await core.awaitAck(mid: mid, kind: .subscribe, operation: "SUBACK for \(filter)") {
        case let .success(.subscribed(granted)):
            // 0x80 (v3.1.1 failure) and every v5 reason code ≥ 0x80 refuse.
            guard let code = granted.first, code < 0x80 else { throw fail(.subscriptionRejected(endpoint: endpoint, filter: filter)) }
            return stream
        case .success(.published):
            throw fail(.operationFailed(endpoint: endpoint, operation: operation, reason: "acknowledgement of the wrong kind"))
        case let .failure(error):
            throw fail(error)
        }
    }

    private func subscriptionEnded(_ token: Int) {
        guard let filter = core.removeSubscription(token) else { return }
        var mid: Int32 = 0
        if mosquitto_unsubscribe(handle.raw, &mid, filter) == mosqOK { core.forget(mid: mid) }
        wakeNetwork()
    }

    // MARK: State and disconnecting

    /// The connection state now (the network thread changes it).
    public var connectionState: MQTTConnectionState { core.connection }
    /// Messages received but dropped because a subscriber was more than
    /// ``subscriptionBufferLimit`` behind (the oldest go first).
    public var droppedMessages: UInt64 { core.droppedMessages.load(ordering: .relaxed) }

    /// The connection state now, then every change. Ends after ``disconnect()``.
    public func states() -> AsyncStream<MQTTConnectionState> {
        let (stream, continuation) = AsyncStream.makeStream(of: MQTTConnectionState.self, bufferingPolicy: .bufferingNewest(64))
        guard let token = core.addObserver(continuation) else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak core] _ in core?.removeObserver(token) }
        return stream
    }

    /// Sends DISCONNECT (so the broker drops the will), stops the network
    /// thread, ends every stream and fails every waiting call. Safe to call twice.
    public func disconnect() async {
        guard core.beginClose() else { return }
        let handle = self.handle
        await offPool { _ = mosquitto_disconnect(handle.raw) }
        await offPool { self.stopLoop() }
        core.finishAll()
    }

    /// Stops the network thread once it wrote what is queued (a DISCONNECT
    /// from `disconnect()`); blocks until it has ended.
    private func stopLoop() {
        network.withLock { t in
            defer { t = nil }
            return t
        }?.stop()
    }

    /// The network thread writes what callers queued.
    private func wakeNetwork() {
        network.withLock { $0 }?.wake()
    }

    /// Test hook: closes the socket without DISCONNECT, as a crash or a cut
    /// cable would (the broker then publishes the will). libmosquitto
    /// reconnects afterwards as after any connection loss.
    func abortWithoutDisconnect() {
        let fd = mosquitto_socket(handle.raw)
        if fd >= 0 { _ = shutdown(fd, Int32(SHUT_RDWR)) }
    }
}

/// Runs a blocking call on a Dispatch thread so it never holds one of the
/// cooperative pool's few threads.
func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { c in
        DispatchQueue.global().async { c.resume(returning: body()) }
    }
}

/// A value that is decided once (later decisions are ignored) and awaited
/// by one caller.
final class OneShot<T: Sendable>: Sendable {
    private struct State {
        var value: T?
        var waiter: CheckedContinuation<T, Never>?
    }
    private let state = Lock(State())

    func resolve(_ value: T) {
        let waiter = state.withLock { s -> CheckedContinuation<T, Never>? in
            guard s.value == nil else { return nil }
            s.value = value
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: value)
    }

    func value() async -> T {
        await withCheckedContinuation { c in
            let ready = state.withLock { s -> T? in
                if let v = s.value { return v }
                s.waiter = c
                return nil
            }
            if let ready { c.resume(returning: ready) }
        }
    }
}
