import BLEParsing
import ScenarioFormat

/// The SMP server a simulated device runs — MCUboot's two image slots behind Zephyr's image and OS
/// management groups, as a pure state machine: a request in, a response
/// out. The simulator answers writes to the SMP characteristic with it
/// (notifications cut to the MTU) and swaps images on reset.
///
/// What it answers (Zephyr `img_mgmt`/`os_mgmt`, SMP v2 header version 1):
/// - OS echo (0/0, write): `{"d": text}` → `{"r": text}`
/// - OS reset (0/5, write): `{}`; the device then disconnects and boots (a pending image becomes active)
/// - MCUmgr parameters (0/6, read): `{"buf_size": N, "buf_count": K}`
/// - image state (1/0, read): `{"images": [{slot, version, hash, bootable, pending, confirmed, active, permanent}], "splitStatus": 0}`
/// - image state (1/0, write): `{"hash": h, "confirm": false}` tests slot 1; `{"confirm": true}` (no hash) confirms the running image
/// - upload (1/1, write): the first chunk `{"image": 0, "len": total, "off": 0, "data": …, "sha": …}`, then
///   `{"off": n, "data": …}`; answers `{"off": next}` — an offset other than the expected one is answered with the
///   expected one (how a client resumes); the last chunk checks the image (MCUboot header and hash TLV)
/// - erase (1/5, write): clears slot 1
/// Anything else: `rc` 8 (not supported).
///
/// The upload survives a disconnection (Zephyr keeps it in RAM), not a reset.
struct SMPServerState {
    struct Slot: Equatable {
        var version: String
        var hash: [UInt8]
        var bootable = true
        var pending = false
        var confirmed = false
        var active = false
        var permanent = false
    }

    struct Upload {
        var length: Int
        var data: [UInt8]
        var sha: [UInt8]?
    }

    /// Faults a scenario injects.
    struct Faults: Equatable {
        /// The device drops the link once this many bytes of an upload have arrived (once).
        var disconnectAfterBytes: Int?
        /// Every upload chunk is answered busy (rc 10) this many times first.
        var busyChunks = 0
        /// The finished upload's hash is reported wrong (rc 9, corrupt) — a device that got a bad image.
        var badHash = false
    }

    var slots: [Slot?]
    var upload: Upload?
    var bufferSize: Int
    var bufferCount: Int
    var faults: Faults
    /// Set by a reset request: the simulator disconnects and calls ``boot()``.
    var resetRequested = false
    /// Set when the upload passed `disconnectAfterBytes`: the simulator drops the link.
    var disconnectRequested = false
    private var busyLeft: Int

    init(running version: String, hash: [UInt8], bufferSize: Int = 1024, bufferCount: Int = 4, faults: Faults = Faults()) {
        slots = [Slot(version: version, hash: hash, confirmed: true, active: true), nil]
        self.bufferSize = bufferSize
        self.bufferCount = bufferCount
        self.faults = faults
        busyLeft = faults.busyChunks
    }

    init(_ spec: SMPSpec) {
        let hash = spec.hash ?? McubootImage.digest("SHA256", Array(spec.version.utf8)[...]) ?? [UInt8](repeating: 0, count: 32)
        self.init(running: spec.version, hash: hash, bufferSize: spec.bufferSize, bufferCount: spec.bufferCount,
                  faults: Faults(disconnectAfterBytes: spec.disconnectAfterBytes, busyChunks: spec.busyChunks, badHash: spec.badHash))
    }

    /// The response to one request (same group, command and sequence; op + 1).
    mutating func respond(to request: SMP.Message) -> SMP.Message {
        let h = request.header
        let body: CBOR
        switch (h.group, h.command, h.op) {
        case (0, 0, .write): body = .object([("r", .text(request.body["d"]?.string ?? ""))])
        case (0, 5, .write):
            resetRequested = true
            body = .map([])
        case (0, 6, .read): body = .object([("buf_size", .int(bufferSize)), ("buf_count", .int(bufferCount))])
        case (1, 0, .read): body = stateBody()
        case (1, 0, .write): body = setState(request.body)
        case (1, 1, .write): body = uploadChunk(request.body)
        case (1, 5, .write):
            slots[1] = nil
            upload = nil
            body = .map([])
        default: body = Self.rc(8)
        }
        let header = SMP.Header(op: h.op.response, version: h.version, flags: 0, length: body.encoded.count, group: h.group,
                                sequence: h.sequence, command: h.command)
        return SMP.Message(header: header, body: body)
    }

    /// What a reset does: a pending image in slot 1 becomes the running one
    /// (confirmed only when it was made permanent); an unconfirmed running
    /// image that was a test is reverted.
    mutating func boot() {
        resetRequested = false
        if var next = slots[1], next.pending, var current = slots[0] {
            next.active = true
            next.pending = false
            next.confirmed = next.permanent
            current.active = false
            current.pending = false
            slots = [next, current]
        } else if let current = slots[0], !current.confirmed, var previous = slots[1] {
            // A test image that was not confirmed: MCUboot swaps back.
            previous.active = true
            previous.confirmed = true
            var reverted = current
            reverted.active = false
            slots = [previous, reverted]
        }
    }

    static func rc(_ code: Int) -> CBOR { .object([("rc", .int(code))]) }

    func stateBody() -> CBOR {
        var images: [CBOR] = []
        for (i, slot) in slots.enumerated() {
            guard let s = slot else { continue }
            images.append(.object([
                ("slot", .int(i)), ("version", .text(s.version)), ("hash", .bytes(s.hash)), ("bootable", .bool(s.bootable)),
                ("pending", .bool(s.pending)), ("confirmed", .bool(s.confirmed)), ("active", .bool(s.active)),
                ("permanent", .bool(s.permanent)),
            ]))
        }
        return .object([("images", .array(images)), ("splitStatus", .int(0))])
    }

    mutating func setState(_ body: CBOR) -> CBOR {
        let confirm = body["confirm"]?.boolValue ?? false
        if let hash = body["hash"]?.data {
            guard let i = slots.firstIndex(where: { $0?.hash == hash }), var slot = slots[i] else { return Self.rc(3) }
            if i == 0 {
                // The running image: confirming it is allowed, testing it is not.
                guard confirm else { return Self.rc(3) }
                slot.confirmed = true
            } else {
                slot.pending = true
                slot.permanent = confirm
            }
            slots[i] = slot
        } else {
            guard confirm, var running = slots[0] else { return Self.rc(3) }
            running.confirmed = true
            slots[0] = running
            // MCUboot no longer has anything to revert to.
            if var other = slots[1] {
                other.confirmed = false
                slots[1] = other
            }
        }
        return stateBody()
    }

    mutating func uploadChunk(_ body: CBOR) -> CBOR {
        guard let off = body["off"]?.int, let data = body["data"]?.data else { return Self.rc(3) }
        if busyLeft > 0 {
            busyLeft -= 1
            return Self.rc(10)
        }
        if off == 0 {
            guard let length = body["len"]?.int, length > 0 else { return Self.rc(3) }
            // The same image again (its sha) after an interruption: carry on where it stopped.
            if let u = upload, let sha = body["sha"]?.data, u.sha == sha, u.length == length, !u.data.isEmpty {
                return .object([("off", .int(u.data.count))])
            }
            // img_mgmt looks at the first chunk's header: not an MCUboot image, no upload.
            guard data.count >= 4, Array(data.prefix(4)) == [0x3D, 0xB8, 0xF3, 0x96] || Array(data.prefix(4)) == [0x96, 0xF3, 0xB8, 0x3D] else {
                return Self.rc(3)
            }
            upload = Upload(length: length, data: [], sha: body["sha"]?.data)
            slots[1] = nil
        }
        guard var u = upload else { return Self.rc(6) }
        guard off == u.data.count else { return .object([("off", .int(u.data.count))]) }
        guard u.data.count + data.count <= u.length else { return Self.rc(3) }
        u.data += data
        upload = u
        if let limit = faults.disconnectAfterBytes, u.data.count >= limit {
            faults.disconnectAfterBytes = nil
            disconnectRequested = true
        }
        if u.data.count == u.length {
            upload = nil
            guard !faults.badHash, let image = try? McubootImage.parse(u.data), image.hashMatches(u.data) == true,
                  let hash = image.hash else {
                return Self.rc(9)
            }
            slots[1] = Slot(version: image.version.smpString, hash: hash)
        }
        return .object([("off", .int(u.data.count))])
    }
}
