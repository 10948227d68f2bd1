import BLEParsing
import BlueZ
import Locking
import Vocabulary

/// How SMP requests reach a device and its answers come back: fragments of
/// at most ``fragmentSize`` bytes out (ATT write commands), notification
/// payloads in. ``BlueZSMPTransport`` is the one over bluetoothd.
public protocol SMPTransport: Sendable {
    /// The largest write: the ATT MTU − 3.
    var fragmentSize: Int { get }
    /// Notification payloads, in order; finishes when the link is gone.
    var fragments: AsyncStream<[UInt8]> { get }
    func send(_ fragment: [UInt8]) async throws(DomainError)
    func close() async
}

/// One SMP conversation with a device: sequence numbers, requests cut to
/// the transport's fragments, answers gathered back into messages and
/// matched to their requests, timeouts and retries. Several requests may
/// be in flight (the upload pipelines); their fragments never interleave.
///
/// The groups and commands (Zephyr `os_mgmt`, `img_mgmt`) are in
/// ``SMPSession/echo(_:)`` and friends; ``FirmwareUpload`` drives an upload.
public actor SMPSession {
    public let transport: any SMPTransport
    /// How long an answer may take, and how often a request is sent again before giving up.
    public let timeout: Duration
    public let retries: Int

    private var sequence: UInt8 = 0
    private var pending: [UInt8: CheckedContinuation<SMP.Message, any Error>] = [:]
    /// A timed-out attempt's sequence number → the attempt that repeats it.
    private var late: [UInt8: UInt8] = [:]
    private var timers: [UInt8: Task<Void, Never>] = [:]
    private var writeTail: Task<Void, Never>?
    private var receiver: Task<Void, Never>?
    /// Why the conversation ended (the link went, the device spoke nonsense).
    private var ended: DomainError?
    private var inbox = SMP.Reassembler()

    public init(transport: any SMPTransport, timeout: Duration = .seconds(5), retries: Int = 2) {
        self.transport = transport
        self.timeout = timeout
        self.retries = retries
    }

    /// Starts reading the device's answers; call once, before the first request.
    public func start() {
        guard receiver == nil else { return }
        let fragments = transport.fragments
        receiver = Task { [weak self] in
            for await fragment in fragments {
                guard let self else { return }
                await self.received(fragment)
            }
            await self?.end(DomainError("the device disconnected"))
        }
    }

    /// Stops: outstanding requests fail, the transport closes. A request
    /// whose first fragments went out is written to its end first: the
    /// device reassembles fragments per connection, so half a request left
    /// there would take the next session's fragments as its rest (an upload
    /// cancelled mid-chunk then resumed got a chunk of mixed bytes and
    /// failed the image check). Requests not begun are not sent.
    public func close() async {
        end(DomainError("the SMP session was closed"))
        receiver?.cancel()
        await writeTail?.value
        await transport.close()
    }

    public var isOpen: Bool { ended == nil }

    // MARK: Requests

    /// Sends `body` as `op` of `command` and returns the answer; a device
    /// error (`rc`/`err`) is thrown as ``DomainError`` whose cause is the
    /// ``SMPError``. Sent again after `timeout` up to `retries` times.
    public func request(_ op: SMP.Op, _ command: SMP.Command, _ body: CBOR = .map([]), timeout: Duration? = nil) async throws(DomainError) -> CBOR {
        let answer = try await exchange(op, command, body, timeout: timeout ?? self.timeout)
        if let e = answer.error { throw DomainError("\(Self.name(command)): the device answered \(e.description)", cause: e) }
        return answer.body
    }

    /// Like ``request(_:_:_:timeout:)`` but hands back the whole answer, error or not.
    public func exchange(_ op: SMP.Op, _ command: SMP.Command, _ body: CBOR, timeout: Duration) async throws(DomainError) -> SMP.Message {
        var attempt = 0
        var earlier: [UInt8] = []
        defer { for seq in earlier { late.removeValue(forKey: seq) } }
        while true {
            do {
                return try await once(op, command, body, timeout: timeout, earlier: &earlier)
            } catch let e as TimedOut {
                attempt += 1
                guard attempt <= retries, ended == nil else {
                    throw DomainError("\(Self.name(command)): no answer from the device in \(e.seconds) s (\(attempt) attempt\(attempt == 1 ? "" : "s"))")
                }
            } catch let e as DomainError {
                throw e
            } catch {
                throw DomainError("\(Self.name(command)): \(error)")
            }
        }
    }

    struct TimedOut: Error {
        var seconds: String
    }

    /// One attempt. The answer to an earlier attempt of the same request
    /// (`earlier`: their sequence numbers), arriving late, counts as this
    /// one's: the device did the request then, and a repeat may find it done
    /// (an upload's last chunk repeated is answered "bad state").
    private func once(_ op: SMP.Op, _ command: SMP.Command, _ body: CBOR, timeout: Duration, earlier: inout [UInt8]) async throws -> SMP.Message {
        if let ended { throw ended }
        sequence &+= 1
        let seq = sequence
        for e in earlier { late[e] = seq }
        earlier.append(seq)
        let bytes = SMP.Message(op, command, sequence: seq, body: body).bytes
        return try await withCheckedThrowingContinuation { (c: CheckedContinuation<SMP.Message, any Error>) in
            // A request whose sequence number is still waiting (256 in flight): the old one has lost.
            pending.removeValue(forKey: seq)?.resume(throwing: TimedOut(seconds: Self.seconds(timeout)))
            pending[seq] = c
            timers[seq] = Task { [weak self] in
                do { try await Task.sleep(for: timeout) } catch { return }
                await self?.expire(seq, TimedOut(seconds: Self.seconds(timeout)))
            }
            let previous = writeTail
            let transport = self.transport
            let size = max(20, transport.fragmentSize)
            writeTail = Task { [weak self] in
                await previous?.value
                guard let self, await self.isOpen else { return }
                var start = 0
                while start < bytes.count {
                    let end = min(start + size, bytes.count)
                    do { try await transport.send(Array(bytes[start..<end])) } catch {
                        await self.expire(seq, error)
                        return
                    }
                    start = end
                }
            }
        }
    }

    private func expire(_ seq: UInt8, _ error: any Error) {
        timers.removeValue(forKey: seq)?.cancel()
        pending.removeValue(forKey: seq)?.resume(throwing: error)
    }

    private func received(_ fragment: [UInt8]) {
        let messages: [SMP.Message]
        do { messages = try inbox.append(fragment) } catch {
            // A broken answer: the requests waiting for it time out and are sent again.
            return
        }
        for m in messages where m.header.op.isResponse {
            let seq = pending[m.header.sequence] != nil ? m.header.sequence : late[m.header.sequence] ?? m.header.sequence
            timers.removeValue(forKey: seq)?.cancel()
            pending.removeValue(forKey: seq)?.resume(returning: m)
        }
    }

    private func end(_ error: DomainError) {
        if ended == nil { ended = error }
        for (_, t) in timers { t.cancel() }
        timers.removeAll()
        let waiting = pending
        pending.removeAll()
        for (_, c) in waiting { c.resume(throwing: error) }
    }

    static func seconds(_ d: Duration) -> String {
        let (s, atto) = d.components
        return atto == 0 ? "\(s)" : String(Double(s) + Double(atto) / 1e18)
    }

    static func name(_ c: SMP.Command) -> String {
        switch c {
        case .echo: return "echo"
        case .reset: return "reset"
        case .parameters: return "MCUmgr parameters"
        case .imageState: return "image state"
        case .imageUpload: return "image upload"
        case .imageErase: return "image erase"
        }
    }

    // MARK: The commands

    /// OS echo: the device sends `text` back.
    public func echo(_ text: String) async throws(DomainError) -> String {
        let r = try await request(.write, .echo, .object([("d", .text(text))]))
        guard let back = r["r"]?.string else { throw DomainError("echo: the answer has no \"r\" text") }
        return back
    }

    /// MCUmgr parameters (`buf_size`, `buf_count`); nil when the device does
    /// not know the command (older Zephyr).
    public func parameters() async throws(DomainError) -> (bufferSize: Int, bufferCount: Int)? {
        let answer = try await exchange(.read, .parameters, .map([]), timeout: timeout)
        if let e = answer.error {
            if e.rc == 8 { return nil }
            throw DomainError("MCUmgr parameters: the device answered \(e.description)", cause: e)
        }
        guard let size = answer.body["buf_size"]?.int, let count = answer.body["buf_count"]?.int, size > 0, count > 0 else { return nil }
        return (min(size, 65_535), min(count, 64))
    }

    /// The image slots the device reports.
    public func imageState() async throws(DomainError) -> [FirmwareSlot] {
        try Self.slots(try await request(.read, .imageState))
    }

    /// Marks the image with `hash` for a test boot (`confirm` false) or for
    /// good; without a hash, confirms the running image. The new state.
    public func setImageState(hash: [UInt8]?, confirm: Bool) async throws(DomainError) -> [FirmwareSlot] {
        var members: [(String, CBOR)] = [("confirm", .bool(confirm))]
        if let hash { members.append(("hash", .bytes(hash))) }
        return try Self.slots(try await request(.write, .imageState, .object(members)))
    }

    /// OS reset: the device answers, then restarts (and drops the link).
    public func reset() async throws(DomainError) {
        _ = try await request(.write, .reset)
    }

    /// Erases the secondary slot.
    public func erase() async throws(DomainError) {
        _ = try await request(.write, .imageErase, .map([]), timeout: .seconds(30))
    }

    static func slots(_ body: CBOR) throws(DomainError) -> [FirmwareSlot] {
        guard let images = body["images"]?.items else { throw DomainError("image state: the answer has no \"images\" list") }
        var out: [FirmwareSlot] = []
        for item in images {
            guard let slot = item["slot"]?.int, let version = item["version"]?.string else {
                throw DomainError("image state: an image without \"slot\" or \"version\": \(item)")
            }
            out.append(FirmwareSlot(image: item["image"]?.int ?? 0, slot: slot, version: version, hash: item["hash"]?.data ?? [],
                                    bootable: item["bootable"]?.boolValue ?? false, pending: item["pending"]?.boolValue ?? false,
                                    confirmed: item["confirmed"]?.boolValue ?? false, active: item["active"]?.boolValue ?? false,
                                    permanent: item["permanent"]?.boolValue ?? false))
        }
        return out
    }
}

/// One image slot as the device reports it (`img_mgmt` state).
public struct FirmwareSlot: Sendable, Equatable {
    public var image: Int
    public var slot: Int
    public var version: String
    public var hash: [UInt8]
    public var bootable: Bool
    public var pending: Bool
    public var confirmed: Bool
    public var active: Bool
    public var permanent: Bool

    public init(image: Int = 0, slot: Int, version: String, hash: [UInt8], bootable: Bool = true, pending: Bool = false,
                confirmed: Bool = false, active: Bool = false, permanent: Bool = false) {
        (self.image, self.slot, self.version, self.hash) = (image, slot, version, hash)
        (self.bootable, self.pending, self.confirmed, self.active, self.permanent) = (bootable, pending, confirmed, active, permanent)
    }

    /// "active confirmed", "pending permanent", … as mcumgr lists them.
    public var flags: [String] {
        [(active, "active"), (confirmed, "confirmed"), (pending, "pending"), (permanent, "permanent"), (!bootable, "not bootable")]
            .filter(\.0).map(\.1)
    }
}
