import BLEParsing
import Vocabulary

/// Where an upload is: bytes the device has acknowledged, of how many, how
/// fast, and how long it should still take.
public struct UploadProgress: Sendable, Equatable {
    public var acknowledged: Int
    public var total: Int
    /// Seconds since this upload started (across reconnections).
    public var elapsed: Double
    /// Bytes the device took during this run, per second (0 until the first acknowledgement).
    public var bytesPerSecond: Double
    /// Where the device's earlier, interrupted upload of this image ended (nil when it started from 0).
    public var resumedFrom: Int?
    public var reconnects: Int

    public init(acknowledged: Int, total: Int, elapsed: Double = 0, bytesPerSecond: Double = 0, resumedFrom: Int? = nil, reconnects: Int = 0) {
        (self.acknowledged, self.total, self.elapsed, self.bytesPerSecond) = (acknowledged, total, elapsed, bytesPerSecond)
        (self.resumedFrom, self.reconnects) = (resumedFrom, reconnects)
    }

    public var fraction: Double { total == 0 ? 1 : Double(acknowledged) / Double(total) }
    /// Seconds left at the current rate; nil before there is a rate.
    public var eta: Double? { bytesPerSecond > 0 ? Double(total - acknowledged) / bytesPerSecond : nil }
}

/// What an upload did.
public struct UploadOutcome: Sendable, Equatable {
    public var bytes: Int
    public var seconds: Double
    public var resumedFrom: Int?
    public var reconnects: Int
    /// Requests the device answered busy, and sent again.
    public var busy: Int
    /// Bytes per request and requests in flight that were used.
    public var chunk: Int
    public var window: Int
    /// The slot the device reports with the image's hash.
    public var slot: FirmwareSlot?

    public init(bytes: Int, seconds: Double, resumedFrom: Int? = nil, reconnects: Int = 0, busy: Int = 0, chunk: Int = 0, window: Int = 1,
                slot: FirmwareSlot? = nil) {
        (self.bytes, self.seconds, self.resumedFrom, self.reconnects) = (bytes, seconds, resumedFrom, reconnects)
        (self.busy, self.chunk, self.window, self.slot) = (busy, chunk, window, slot)
    }

    public var bytesPerSecond: Double { seconds > 0 ? Double(bytes) / seconds : 0 }

    /// Nothing uploaded (stopped before it began).
    public static let none = UploadOutcome(bytes: 0, seconds: 0, resumedFrom: nil, reconnects: 0, busy: 0, chunk: 0, window: 0)
}

/// Uploads an image over SMP (`img_mgmt` upload): chunks sized to the
/// device's buffer (MCUmgr parameters) or, without them, to one write;
/// several requests in flight when the device buffers several; the
/// device's offset is the truth — a chunk it answers with another offset
/// (it had more, or less) makes the upload carry on from there, which is
/// also how an interrupted upload resumes after a reconnection (the first
/// request repeats the image's length and SHA-256, and the device answers
/// where it stopped). Busy answers are waited out.
public enum FirmwareUpload {
    /// Opens a session to the device: connects when needed.
    public typealias Connect = @Sendable () async throws(DomainError) -> SMPSession

    public struct Options: Sendable {
        /// Requests in flight at most (the device's buffer count caps it); 1: one at a time.
        public var window: Int = 4
        /// Reconnections after the link dropped before giving up.
        public var reconnects: Int = 5
        /// Busy answers waited out per chunk before giving up.
        public var busyRetries: Int = 20
        /// A largest request the user asked for (bytes); nil: what the device says.
        public var requestLimit: Int?
        /// The image number (multi-image devices); 0 for most.
        public var imageNumber: Int = 0

        public init(window: Int = 4, reconnects: Int = 5, requestLimit: Int? = nil, imageNumber: Int = 0) {
            (self.window, self.reconnects, self.requestLimit, self.imageNumber) = (window, reconnects, requestLimit, imageNumber)
        }
    }

    /// Uploads `file` (an MCUboot image as `imgtool` wrote it) and checks
    /// that the device then reports a slot with the image's hash.
    public static func run(_ file: [UInt8], options: Options = Options(), connect: Connect,
                           progress: @escaping @Sendable (UploadProgress) -> Void = { _ in }) async throws(DomainError) -> UploadOutcome {
        guard !file.isEmpty else { throw DomainError("the image is empty") }
        let sha = McubootImage.digest("SHA256", file[...]) ?? []
        let imageHash = (try? McubootImage.parse(file))?.hash
        let clock = ContinuousClock()
        let started = clock.now
        var state = RunState(total: file.count)
        var session = try await connect()
        while true {
            do {
                try await uploadOnce(file, sha: sha, session: session, options: options, state: &state, clock: clock, started: started, progress: progress)
                break
            } catch {
                guard await !session.isOpen, state.reconnects < options.reconnects, !Task.isCancelled else {
                    await session.close()
                    throw error
                }
                state.reconnects += 1
                await session.close()
                // The device may need a moment before it takes a connection again.
                try? await Task.sleep(for: .milliseconds(200 * state.reconnects))
                session = try await connect()
            }
        }
        let seconds = Self.seconds(clock.now - started)
        var outcome = UploadOutcome(bytes: file.count, seconds: seconds, resumedFrom: state.resumedFrom, reconnects: state.reconnects,
                                    busy: state.busy, chunk: state.chunk, window: state.window)
        if let imageHash {
            let slots = try await session.imageState()
            guard let slot = slots.first(where: { $0.hash == imageHash }) else {
                await session.close()
                throw DomainError("the upload finished but the device reports no slot with the image's hash \(Hex.string(imageHash)) "
                                  + "(it has \(slots.map { "slot \($0.slot): \(Hex.string($0.hash))" }.joined(separator: ", ")))")
            }
            outcome.slot = slot
        }
        await session.close()
        return outcome
    }

    struct RunState {
        var total: Int
        var acknowledged = 0
        var resumedFrom: Int?
        var reconnects = 0
        var busy = 0
        var chunk = 0
        var window = 1
        var rateStart: (ContinuousClock.Instant, Int)?
    }

    public static func seconds(_ d: Duration) -> Double {
        let (s, atto) = d.components
        return Double(s) + Double(atto) / 1e18
    }

    /// The request body for bytes `offset..<offset+count` of `file`.
    static func body(_ file: [UInt8], offset: Int, count: Int, sha: [UInt8], image: Int) -> CBOR {
        var members: [(String, CBOR)] = []
        if offset == 0 {
            members += [("image", .int(image)), ("len", .int(file.count))]
            if !sha.isEmpty { members.append(("sha", .bytes(sha))) }
        }
        members += [("off", .int(offset)), ("data", .bytes(Array(file[offset..<offset + count])))]
        return .object(members)
    }

    /// How many data bytes fit a request of `limit` bytes (header included) at `offset`.
    static func dataBytes(limit: Int, offset: Int, total: Int, sha: [UInt8], image: Int) -> Int {
        var members: [(String, CBOR)] = []
        if offset == 0 { members += [("image", .int(image)), ("len", .int(total))] + (sha.isEmpty ? [] : [("sha", .bytes(sha))]) }
        members += [("off", .int(offset)), ("data", .bytes([]))]
        let fixed = SMP.headerLength + CBOR.object(members).encoded.count
        // The byte string's length field grows with its length: 0, 1 or 2 more bytes.
        for extra in [2, 1, 0] {
            let n = limit - fixed - extra
            let needed = n < 24 ? 0 : n < 256 ? 1 : 2
            if n > 0, needed == extra { return min(n, total - offset) }
        }
        return max(1, min(limit - fixed, total - offset))
    }

    private static func uploadOnce(_ file: [UInt8], sha: [UInt8], session: SMPSession, options: Options, state: inout RunState,
                                   clock: ContinuousClock, started: ContinuousClock.Instant,
                                   progress: @escaping @Sendable (UploadProgress) -> Void) async throws(DomainError) {
        let total = file.count
        let fragment = max(20, session.transport.fragmentSize)
        let parameters = try await session.parameters()
        // A request no bigger than the device's buffer; without parameters, one write.
        var limit = parameters.map(\.bufferSize) ?? fragment
        if let asked = options.requestLimit { limit = min(limit, asked) }
        limit = max(limit, 128)
        let window = max(1, min(options.window, parameters.map(\.bufferCount) ?? 1))
        state.window = window
        let image = options.imageNumber

        func report() {
            var rate = 0.0
            if let (t0, b0) = state.rateStart {
                let dt = seconds(clock.now - t0)
                if dt > 0 { rate = Double(state.acknowledged - b0) / dt }
            }
            progress(UploadProgress(acknowledged: state.acknowledged, total: total, elapsed: seconds(clock.now - started),
                                    bytesPerSecond: rate, resumedFrom: state.resumedFrom, reconnects: state.reconnects))
        }

        // The first request names the image (length, SHA-256); the device
        // answers where it wants to go on from: 0 + what it took, or where an
        // earlier upload of the same image stopped.
        var offset = 0
        var busyLeft = options.busyRetries
        while true {
            let n = dataBytes(limit: limit, offset: 0, total: total, sha: sha, image: image)
            state.chunk = max(state.chunk, n)
            let answer = try await session.exchange(.write, .imageUpload, body(file, offset: 0, count: n, sha: sha, image: image),
                                                    timeout: max(session.timeout, .seconds(20)))
            if let e = answer.error {
                if e.rc == 10, busyLeft > 0 {
                    busyLeft -= 1
                    state.busy += 1
                    try? await Task.sleep(for: .milliseconds(100))
                    continue
                }
                throw DomainError("image upload: the device refused the image: \(e.description)", cause: e)
            }
            guard let off = answer.body["off"]?.int, (0...total).contains(off) else {
                throw DomainError("image upload: the device's answer has no offset within the image: \(answer.body)")
            }
            if off != n, off > 0, state.resumedFrom == nil { state.resumedFrom = off }
            offset = off
            break
        }
        state.acknowledged = offset
        if state.rateStart == nil { state.rateStart = (clock.now, offset) }
        report()

        // Then chunk after chunk, `window` in flight.
        var next = offset
        var inFlight: [(offset: Int, count: Int, task: Task<SMP.Message, any Error>)] = []
        defer { for f in inFlight { f.task.cancel() } }
        while state.acknowledged < total {
            // Stopped: what the device has is kept (the running image is not
            // touched); the same upload later resumes from it.
            if Task.isCancelled { throw DomainError("the upload was stopped at byte \(state.acknowledged) of \(total)") }
            while inFlight.count < window, next < total {
                let n = dataBytes(limit: limit, offset: next, total: total, sha: sha, image: image)
                state.chunk = max(state.chunk, n)
                let request = body(file, offset: next, count: n, sha: sha, image: image)
                let timeout = session.timeout
                let task = Task { () throws -> SMP.Message in
                    do { return try await session.exchange(.write, .imageUpload, request, timeout: timeout) } catch { throw error }
                }
                inFlight.append((next, n, task))
                next += n
            }
            let head = inFlight.removeFirst()
            let answer: SMP.Message
            do { answer = try await head.task.value } catch let e as DomainError { throw e } catch { throw DomainError("image upload: \(error)") }
            if let e = answer.error {
                guard e.rc == 10, busyLeft > 0 else {
                    if e.rc == 9, head.offset + head.count == total {
                        throw DomainError("image upload: the device found the uploaded image corrupt (\(e.description)): it failed the "
                                          + "device's check; the running image is untouched", cause: e)
                    }
                    throw DomainError("image upload at byte \(head.offset): the device answered \(e.description)", cause: e)
                }
                busyLeft -= 1
                state.busy += 1
                // Everything sent after it is answered with the device's offset: let it come, then go on from there.
                let expected = await drain(&inFlight) ?? head.offset
                try? await Task.sleep(for: .milliseconds(100))
                next = expected
                continue
            }
            guard let off = answer.body["off"]?.int, (0...total).contains(off) else {
                throw DomainError("image upload: the device's answer has no offset within the image: \(answer.body)")
            }
            busyLeft = options.busyRetries
            if off == head.offset + head.count {
                state.acknowledged = off
            } else {
                // The device wants another offset (it lost a chunk, or had it already).
                let expected = await drain(&inFlight) ?? off
                state.acknowledged = min(expected, total)
                next = state.acknowledged
            }
            report()
        }
    }

    /// Waits for the requests still in flight and returns the offset the last one was answered with.
    private static func drain(_ inFlight: inout [(offset: Int, count: Int, task: Task<SMP.Message, any Error>)]) async -> Int? {
        var last: Int?
        for f in inFlight {
            if let m = try? await f.task.value, m.error == nil, let off = m.body["off"]?.int { last = off }
        }
        inFlight.removeAll()
        return last
    }
}
