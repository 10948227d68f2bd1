import BLEParsing
import BlueZ
import Domain
import Foundation
import Locking
import Presenters
import Vocabulary

/// The gateway's firmware and provisioning work (docs/FIRMWARE.md,
/// "Gateway"): a ``FirmwarePresenter`` per device that is being worked on,
/// at most ``limit`` at once, each one's state published to
/// `<base>/<device>/firmware` (retained; the HTTP event stream shows it as a
/// `firmware` event) — during an upload every half second or tenth of the
/// image, whichever comes first; every other change at once.
final class FirmwareJobs: Sendable {
    static let limit = 4
    let service: any FirmwareService
    let topics: GatewayTopics
    let publish: @Sendable ([OutgoingMessage]) -> Void
    private let table = Lock<[BluetoothAddress: Entry]>([:])

    struct Entry {
        let presenter: FirmwarePresenter
        let observer: Task<Void, Never>
    }

    init(service: any FirmwareService, topics: GatewayTopics, publish: @escaping @Sendable ([OutgoingMessage]) -> Void) {
        self.service = service
        self.topics = topics
        self.publish = publish
    }

    deinit { table.withLock { for e in $0.values { e.observer.cancel() } } }

    /// The device's presenter; nil when ``limit`` other devices have work running.
    func presenter(for id: DeviceID) -> FirmwarePresenter? {
        table.withLock { t -> FirmwarePresenter? in
            if let e = t[id.address] { return e.presenter }
            // Room is made by forgetting devices whose work has ended.
            if t.count >= Self.limit {
                for (address, e) in t where !e.presenter.state.job.isRunning {
                    e.observer.cancel()
                    t[address] = nil
                    if t.count < Self.limit { break }
                }
            }
            guard t.count < Self.limit else { return nil }
            let p = FirmwarePresenter(device: id, service: service)
            let topic = topics.firmware(id.address), publish = self.publish
            let observer = Task {
                var last: FirmwarePresenter.State?
                var lastSent = ContinuousClock.now - .seconds(1)
                var sentBytes = 0
                for await s in p.states() {
                    // Progress goes out every half second or tenth of the image,
                    // whichever comes first; anything else as it happens.
                    if case let .uploading(now) = s.job, case .uploading = last?.job, s.slots == last?.slots, s.image == last?.image {
                        last = s
                        let due = ContinuousClock.now - lastSent >= .milliseconds(500) || (now.acknowledged - sentBytes) * 10 >= now.total
                        guard due else { continue }
                        sentBytes = now.acknowledged
                    } else {
                        last = s
                        sentBytes = 0
                    }
                    lastSent = ContinuousClock.now
                    publish([OutgoingMessage(topic: topic, payload: Self.json(s), retain: true, qos: 1)])
                }
            }
            t[id.address] = Entry(presenter: p, observer: observer)
            return p
        }
    }

    func existing(_ address: BluetoothAddress) -> FirmwarePresenter? { table.withLock { $0[address]?.presenter } }

    /// The state as the gateway publishes it.
    static func json(_ s: FirmwarePresenter.State) -> [UInt8] {
        var members: [(String, FieldValue)] = [("address", .string(s.device.address.description))]
        switch s.job {
        case .idle: members.append(("job", .string("idle")))
        case let .uploading(p):
            members += [("job", .string("uploading")), ("acknowledged", .int(p.acknowledged)), ("total", .int(p.total)),
                        ("bytes_per_second", .int(Int(p.bytesPerSecond))), ("eta", p.eta.map { .number(($0 * 10).rounded() / 10) } ?? .null),
                        ("reconnects", .int(p.reconnects)), ("resumed_from", p.resumedFrom.map { .int($0) } ?? .null)]
        case .marking: members.append(("job", .string("marking")))
        case .resetting: members.append(("job", .string("resetting")))
        case .provisioning: members.append(("job", .string("provisioning")))
        case let .finished(text): members += [("job", .string("finished")), ("message", .string(text))]
        case let .cancelled(at, total): members += [("job", .string("cancelled")), ("acknowledged", .int(at)), ("total", .int(total))]
        case let .failed(text): members += [("job", .string("failed")), ("error", .string(text))]
        }
        if let image = s.image {
            members.append(("image", .nested([("name", .string(image.name)), ("version", .string(image.version)), ("bytes", .int(image.bytes)),
                                              ("hash", image.hash.map { .string(Hex.string($0)) } ?? .null)])))
        }
        if let slots = s.slots.value {
            members.append(("images", .list(slots.map { slot in
                .nested([("slot", .int(slot.slot)), ("version", .string(slot.version)), ("hash", .string(Hex.string(slot.hash))),
                         ("active", .bool(slot.active)), ("confirmed", .bool(slot.confirmed)), ("pending", .bool(slot.pending)),
                         ("permanent", .bool(slot.permanent))])
            })))
        }
        return SortedJSON.bytes(members)
    }
}

extension GatewayRuntime {
    /// A firmware or provisioning command: handed to the device's
    /// ``FirmwarePresenter``. An upload is answered once it started (its
    /// progress and end are on the firmware topic); the others once done.
    func runFirmware(_ command: GatewayCommand, on address: BluetoothAddress) async -> GatewayCommandReply {
        var reply = GatewayCommandReply(id: command.id, action: command.action.rawValue, address: address)
        let id = DeviceID(adapter: adapterID, address: address)
        guard let presenter = command.action == .firmwareCancel ? firmware.existing(address) : firmware.presenter(for: id) else {
            reply.error = command.action == .firmwareCancel ? "no firmware work for \(address) to cancel"
                : "busy: firmware work is running on \(FirmwareJobs.limit) devices; try again when one ends"
            reply.busy = command.action != .firmwareCancel
            return reply
        }
        if command.action != .firmwareCancel, command.action != .firmwareState, presenter.state.job.isRunning {
            reply.error = "busy: firmware work is running on \(address) (its state is on \(options.topics.firmware(address))); cancel it or wait"
            return reply
        }
        /// Sends `action` and waits for the job it starts to end.
        func finished(_ action: FirmwarePresenter.Action, within limit: Duration) async -> String? {
            let before = presenter.state.jobsStarted
            presenter.send(action)
            // This command's job (counted; a refusal counts as one) once it has ended.
            let end = await firstElement(of: presenter.states(), within: limit) { s in s.jobsStarted > before && !s.job.isRunning }
            switch end?.job {
            case let .failed(text)?: return text
            case nil: return "no end within \(limit) (the work goes on; see the firmware topic)"
            default: return nil
            }
        }
        switch command.action {
        case .firmwareState:
            presenter.send(.refreshRequested)
            let s = await firstElement(of: presenter.states(), within: .seconds(60)) { $0.slots != .loading }
            if let problem = s?.slots.problem { reply.error = problem } else if s == nil { reply.error = "no answer within 60 s" }
        case .firmwareUpload:
            let bytes = command.image ?? []
            let (_, problem) = FirmwarePresenter.summary(name: "image", bytes: bytes)
            if let problem {
                reply.error = problem
                return reply
            }
            let before = presenter.state.jobsStarted
            presenter.send(.imageChosen(name: "image", bytes: bytes))
            presenter.send(.uploadRequested(mark: FirmwarePresenter.Mark(rawValue: command.mark ?? "none") ?? .none, reset: command.reset))
            let started = await firstElement(of: presenter.states(), within: .seconds(5)) { $0.jobsStarted > before }
            if started == nil { reply.error = "the upload did not start within 5 s" }
        case .firmwareCancel:
            presenter.send(.cancelRequested)
        case .firmwareTest:
            reply.error = await finished(.testRequested(hash: command.hash), within: .seconds(60))
        case .firmwareConfirm:
            reply.error = await finished(.confirmRequested(hash: command.hash), within: .seconds(60))
        case .firmwareReset:
            reply.error = await finished(.resetRequested, within: .seconds(60))
        case .provision:
            reply.error = await finished(.provisionRequested(ssid: command.ssid ?? "", password: Array((command.password ?? "").utf8)), within: .seconds(180))
        default:
            reply.error = "not a firmware command"
        }
        return reply
    }
}
