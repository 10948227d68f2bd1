import ArgumentParser
import BLEParsing
import BlueZ
import Bounds
import Domain
import Foundation
import Locking
import Vocabulary

/// Options of every `fw` command that talks to a device over SMP.
struct SMPOptions: ParsableArguments {
    @OptionGroup var options: BlueZOptions
    @Argument(help: "The device address.") var address: String
    @Option(parsing: .unconditional, help: "Seconds to find (scan for) and connect to the device.") var connectTimeout: Double = 30
    @Option(parsing: .unconditional, help: "Seconds to wait for each answer before the request is sent again (twice).") var timeout: Double = 5

    func validate() throws {
        try checkSeconds(connectTimeout, "--connect-timeout")
        try checkSeconds(timeout, "--timeout")
    }

    /// Runs `body` with a session to the device (found by scanning when
    /// bluetoothd does not know it yet, connected when needed), and lets the
    /// device go afterwards if it was not connected before.
    func withSession<T>(_ body: (Device, @escaping FirmwareUpload.Connect) async throws -> T) async throws -> T {
        let client = try await options.client()
        let device = try await find(client)
        let connectedBefore = device.connected
        let id = device.id
        let connectTimeout = Bounds.duration(seconds: self.connectTimeout), timeout = Bounds.duration(seconds: self.timeout)
        let connect: FirmwareUpload.Connect = { () async throws(DomainError) -> SMPSession in
            try await SMPSession.open(client: client, device: id, connectTimeout: connectTimeout, timeout: timeout)
        }
        // Let go of a device this command connected, on every way out, and
        // wait for it: a Disconnect still under way when the next command
        // starts would drop that command's link.
        do {
            let result = try await body(device, connect)
            if !connectedBefore { try? await client.disconnect(id) }
            return result
        } catch {
            if !connectedBefore { try? await client.disconnect(id) }
            if let e = error as? DomainError { throw CLIError(e.description) }
            throw error
        }
    }

    /// The device with `address`: scans for it (up to --connect-timeout) when bluetoothd does not know it.
    func find(_ client: BlueZClient) async throws -> Device {
        try await findDevice(address, options: options, client: client, within: connectTimeout)
    }
}

/// The device with `address` on the chosen adapter: bluetoothd's, or found by
/// scanning for up to `seconds` when bluetoothd does not know it yet (as
/// bleak's `find_device_by_address` does), so a command works on a device
/// nobody has scanned for.
func findDevice(_ address: String, options: BlueZOptions, client: BlueZClient, within seconds: Double) async throws -> Device {
    let adapter = try options.adapter(of: client)
    let addr: BluetoothAddress
    do { addr = try BluetoothAddress(address) } catch { throw CLIError(error) }
    if let d = client.mirror.snapshot().device(addr, on: adapter.id) { return d }
    let events = client.mirror.events(bufferCapacity: 64)
    let session: DiscoverySession
    do { session = try await client.discover(adapter: adapter.id) } catch { throw CLIError("cannot scan for \(addr): \(error.description)") }
    defer { Task { await session.stop() } }
    let found = await withTaskGroup(of: Device?.self) { group -> Device? in
        group.addTask {
            if let d = client.mirror.snapshot().device(addr, on: adapter.id) { return d }
            for await _ in events {
                if let d = client.mirror.snapshot().device(addr, on: adapter.id) { return d }
            }
            return nil
        }
        group.addTask {
            try? await Task.sleep(for: Bounds.duration(seconds: seconds))
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
    guard let found else {
        throw CLIError("\(addr) was not found in \(Int(seconds)) s of scanning: is it advertising and in range?")
    }
    return found
}

func slotsJSON(_ slots: [FirmwareSlot]) -> [[String: Any]] {
    slots.map {
        ["image": $0.image, "slot": $0.slot, "version": $0.version, "hash": Hex.string($0.hash), "bootable": $0.bootable,
         "pending": $0.pending, "confirmed": $0.confirmed, "active": $0.active, "permanent": $0.permanent]
    }
}

func slotsText(_ slots: [FirmwareSlot]) -> String {
    if slots.isEmpty { return "No images." }
    return slots.map { s in
        let flags = s.flags.isEmpty ? "" : "  " + s.flags.joined(separator: " ")
        return "slot \(s.slot)\(s.image != 0 ? " (image \(s.image))" : "")  \(s.version)\(flags)\n        hash \(Hex.string(s.hash))"
    }.joined(separator: "\n")
}

/// `blecompanion fw state ADDRESS`
struct FirmwareStateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "state", abstract: "Show the image slots of a device (mcumgr SMP).")
    @OptionGroup var smp: SMPOptions

    func run() async throws {
        try await runReporting {
            try await smp.withSession { device, connect in
                let slots = try await SMPSession.perform(connect) { try await $0.imageState() }
                out(smp.options.json ? jsonLine(["address": device.address.description, "images": slotsJSON(slots)]) : slotsText(slots))
            }
        }
    }
}

/// `blecompanion fw test|confirm ADDRESS [IMAGE]`: marks an image for the next boot.
struct FirmwareMarkCommand {
    static func run(_ smp: SMPOptions, image: String?, confirm: Bool) async throws {
        try await runReporting {
            var hash: [UInt8]?
            if let image {
                if let bytes = try? Hex.bytes(image), bytes.count == 32 {
                    hash = bytes
                } else {
                    guard let data = FileManager.default.contents(atPath: image) else {
                        throw CLIError("\(image) is neither an image hash (64 hex digits) nor a readable file")
                    }
                    do throws(DecodeError) { hash = try McubootImage.parse([UInt8](data)).hash } catch {
                        throw CLIError("\(image): \(error.description)")
                    }
                    guard hash != nil else { throw CLIError("\(image) has no hash TLV: sign it with imgtool") }
                }
            }
            try await smp.withSession { device, connect in
                let wanted = hash
                let slots = try await SMPSession.perform(connect) { session in
                    let before = try await session.imageState()
                    if let wanted, !before.contains(where: { $0.hash == wanted }) {
                        throw CLIError("\(device.address) has no image with hash \(Hex.string(wanted)); its slots:\n\(slotsText(before))")
                    }
                    var target = wanted
                    if !confirm, target == nil {
                        // test without a hash: the image in the secondary slot.
                        guard let other = before.first(where: { !$0.active && $0.slot != 0 }) else {
                            throw CLIError("\(device.address) has no image to test (its secondary slot is empty); upload one first")
                        }
                        target = other.hash
                    }
                    return try await session.setImageState(hash: target, confirm: confirm)
                }
                out(smp.options.json ? jsonLine(["address": device.address.description, "images": slotsJSON(slots)]) : slotsText(slots))
            }
        }
    }
}

struct FirmwareTestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "test", abstract: "Mark an uploaded image to boot once on the next reset (MCUboot reverts it unless it is confirmed).",
        discussion: "IMAGE is the image's hash (64 hex digits) or its file; without it, the image in the secondary slot.")
    @OptionGroup var smp: SMPOptions
    @Argument(help: "The image's hash or file.") var image: String?
    func run() async throws { try await FirmwareMarkCommand.run(smp, image: image, confirm: false) }
}

struct FirmwareConfirmCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "confirm", abstract: "Confirm the running image (or make IMAGE permanent for the next reset).",
        discussion: "IMAGE is the image's hash (64 hex digits) or its file; without it, the running image is confirmed.")
    @OptionGroup var smp: SMPOptions
    @Argument(help: "The image's hash or file.") var image: String?
    func run() async throws { try await FirmwareMarkCommand.run(smp, image: image, confirm: true) }
}

struct FirmwareResetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "reset", abstract: "Restart the device (a test or permanent image then boots).")
    @OptionGroup var smp: SMPOptions
    func run() async throws {
        try await runReporting {
            try await smp.withSession { device, connect in
                // Not repeated: a reset whose answer was lost may have happened.
                try await SMPSession.perform(connect, again: false) { try await $0.reset() }
                out(smp.options.json ? jsonLine(["address": device.address.description, "reset": true]) : "\(device.displayName) is restarting.")
            }
        }
    }
}

struct FirmwareEraseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "erase", abstract: "Erase the secondary slot (an uploaded image that is not running).")
    @OptionGroup var smp: SMPOptions
    func run() async throws {
        try await runReporting {
            try await smp.withSession { device, connect in
                let slots = try await SMPSession.perform(connect) { session in
                    try await session.erase()
                    return try await session.imageState()
                }
                out(smp.options.json ? jsonLine(["address": device.address.description, "images": slotsJSON(slots)]) : slotsText(slots))
            }
        }
    }
}

struct FirmwareEchoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "echo", abstract: "Send text that the device sends back (is SMP working?).")
    @OptionGroup var smp: SMPOptions
    @Argument(help: "The text.") var text: String = "hello"
    func run() async throws {
        try await runReporting {
            try await smp.withSession { device, connect in
                let (back, ms) = try await SMPSession.perform(connect) { session in
                    let clock = ContinuousClock()
                    let start = clock.now
                    let back = try await session.echo(text)
                    return (back, FirmwareUpload.seconds(clock.now - start) * 1000)
                }
                out(smp.options.json ? jsonLine(["address": device.address.description, "echo": back, "ms": (ms * 10).rounded() / 10])
                                     : "\(device.displayName): \(back) (\(String(format: "%.1f", ms)) ms)")
            }
        }
    }
}

/// `blecompanion fw upload ADDRESS FILE`: the image into the device's
/// secondary slot, resumable, with progress; then optionally marked and
/// the device reset.
struct FirmwareUploadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "upload", abstract: "Upload an MCUboot image over Bluetooth (mcumgr SMP), with progress; resumes after a dropped link.",
        discussion: """
            The image goes to the device's secondary slot; the running image is not touched, so Ctrl-C (or a lost \
            link that does not come back) leaves the device as it was, and running the same command again carries \
            on where the device stopped. After the upload the device must report a slot with the image's hash.
            --test or --confirm then marks it for the next boot, and --reset restarts the device into it.

            With --json: a JSON line per progress step ({"event":"progress",…}) and one at the end ({"event":"done",…}).

            EXIT STATUS
              0  uploaded (and marked/reset as asked)
              1  the device refused, the link could not be brought back, or no answer
              65 the file is not a valid MCUboot image (fw info says why)
              66 the file cannot be read
              130 stopped by SIGINT/SIGTERM (the upload can be resumed)
            """)
    @OptionGroup var smp: SMPOptions
    @Argument(help: "The image file (imgtool sign output).") var file: String
    @Flag(help: "Mark the image to boot once on the next reset (MCUboot reverts it unless confirmed).") var test = false
    @Flag(help: "Mark the image to boot for good on the next reset.") var confirm = false
    @Flag(help: "Restart the device afterwards (with --test or --confirm: into the new image).") var reset = false
    @Option(help: "Requests in flight at most (1…8; the device's buffer count caps it).") var window: Int = 4
    @Option(help: "Reconnections after a dropped link before giving up (0…100).") var reconnects: Int = 5
    @Option(help: "The largest request in bytes (default: the device's buffer size).") var requestSize: Int?

    func validate() throws {
        guard (1...8).contains(window) else { throw ValidationError("--window must be 1…8, got \(window)") }
        guard (0...100).contains(reconnects) else { throw ValidationError("--reconnects must be 0…100, got \(reconnects)") }
        if let requestSize, !(64...65_535).contains(requestSize) { throw ValidationError("--request-size must be 64…65535, got \(requestSize)") }
        if test && confirm { throw ValidationError("--test and --confirm exclude each other") }
    }

    func run() async throws {
        let (bytes, image) = try loadImage(file)
        if image.hashMatches(bytes) == false {
            printError("Error: \(file): the image's hash does not match its contents (corrupt, or changed after signing)")
            throw ExitCode(65)
        }
        let json = smp.options.json
        let bar = ProgressBar(enabled: !json && isatty(STDERR_FILENO) == 1)
        let options = FirmwareUpload.Options(window: window, reconnects: reconnects, requestLimit: requestSize)
        let stopped = OnceFlag()
        try await runReporting {
            try await smp.withSession { device, connect in
                let outcome: UploadOutcome
                do {
                    outcome = try await withThrowingTaskGroup(of: UploadOutcome?.self) { group in
                        group.addTask {
                            try await FirmwareUpload.run(bytes, options: options, connect: connect) { p in
                                if json {
                                    out(jsonLine(["event": "progress", "acknowledged": p.acknowledged, "total": p.total,
                                                  "bytes_per_second": Int(p.bytesPerSecond), "eta": p.eta.map { ($0 * 10).rounded() / 10 } ?? -1,
                                                  "reconnects": p.reconnects, "resumed_from": p.resumedFrom ?? 0]))
                                } else {
                                    bar.show(p)
                                }
                            }
                        }
                        group.addTask {
                            if await StopSignals.wait() != nil { stopped.set() }
                            return nil
                        }
                        let first = try await group.next() ?? nil
                        group.cancelAll()
                        return first
                    } ?? .none
                } catch {
                    bar.finish()
                    throw error
                }
                bar.finish()
                if stopped.isSet {
                    printError("Stopped. The running image is untouched; the same command resumes the upload where the device stopped.")
                    throw ExitCode(130)
                }
                var slots: [FirmwareSlot] = []
                if test || confirm, let hash = image.hash {
                    slots = try await SMPSession.perform(connect) { try await $0.setImageState(hash: hash, confirm: confirm) }
                }
                if reset { try await SMPSession.perform(connect, again: false) { try await $0.reset() } }
                if json {
                    var done: [String: Any] = ["event": "done", "address": device.address.description, "bytes": outcome.bytes,
                                               "seconds": (outcome.seconds * 1000).rounded() / 1000, "bytes_per_second": Int(outcome.bytesPerSecond),
                                               "reconnects": outcome.reconnects, "busy": outcome.busy, "chunk": outcome.chunk, "window": outcome.window,
                                               "resumed_from": outcome.resumedFrom ?? 0, "version": image.version.smpString,
                                               "hash": image.hash.map { Hex.string($0) } ?? "", "marked": test ? "test" : confirm ? "confirm" : "none",
                                               "reset": reset]
                    if let s = outcome.slot { done["slot"] = s.slot }
                    if !slots.isEmpty { done["images"] = slotsJSON(slots) }
                    out(jsonLine(done))
                } else {
                    var line = "Uploaded \(file) (\(image.version.smpString), \(outcome.bytes) bytes) to \(device.displayName) in "
                        + String(format: "%.1f s, %.1f KiB/s", outcome.seconds, outcome.bytesPerSecond / 1024)
                    if let r = outcome.resumedFrom { line += "; resumed from byte \(r)" }
                    if outcome.reconnects > 0 { line += "; \(outcome.reconnects) reconnection\(outcome.reconnects == 1 ? "" : "s")" }
                    if let s = outcome.slot { line += "; the device reports it in slot \(s.slot)" }
                    out(line + ".")
                    if test { out("Marked to boot once on the next reset\(reset ? " (restarting now)" : "; `blecompanion fw reset \(device.address)` boots it").") }
                    if confirm { out("Marked to boot for good on the next reset\(reset ? " (restarting now)" : "").") }
                    if reset && !(test || confirm) { out("\(device.displayName) is restarting (the image was not marked, so the running one stays).") }
                }
            }
        }
    }
}

/// A set-once flag shared between tasks.
final class OnceFlag: Sendable {
    private let value = Lock(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

/// The upload's bar on standard error: bytes, percentage, rate, ETA.
final class ProgressBar: Sendable {
    let enabled: Bool
    private let last = Lock(0.0)
    init(enabled: Bool) { self.enabled = enabled }

    func show(_ p: UploadProgress) {
        guard enabled else { return }
        // At most ten redraws a second, and always the last one.
        let now = p.elapsed
        let due = last.withLock { t -> Bool in
            guard now - t >= 0.1 || p.acknowledged == p.total else { return false }
            t = now
            return true
        }
        guard due else { return }
        let width = 30
        let filled = Int(p.fraction * Double(width))
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
        let eta = p.eta.map { String(format: "%.0f s", $0) } ?? "…"
        let text = String(format: "\r%@ %5.1f%%  %d/%d bytes  %.1f KiB/s  ETA %@", bar, p.fraction * 100, p.acknowledged, p.total,
                          p.bytesPerSecond / 1024, eta) + (p.reconnects > 0 ? "  (\(p.reconnects) reconnect\(p.reconnects == 1 ? "" : "s"))" : "")
        FileHandle.standardError.write(Data((text + "\u{1B}[K").utf8))
    }

    func finish() {
        guard enabled else { return }
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
