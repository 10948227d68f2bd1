import BLEParsing
import BlueZ
import Domain
import Locking
import Vocabulary

/// Firmware of one device (docs/FIRMWARE.md): its image slots, the image
/// chosen to flash, an upload with its progress, test/confirm/reset, and
/// Improv Wi-Fi provisioning. The dashboard's firmware screen and the
/// gateway's `firmware_*`/`provision` commands both drive it.
public final class FirmwarePresenter: Presenter {
    /// What an image file says about itself (`fw info`'s essentials).
    public struct ImageSummary: Sendable, Equatable {
        public var name: String
        public var version: String
        public var bytes: Int
        public var hash: [UInt8]?
        public var signature: String?
    }

    public enum Mark: String, Sendable, Equatable, CaseIterable {
        case none, test, confirm
    }

    /// The one thing the presenter is doing for the device, or what it did last.
    public enum Job: Sendable, Equatable {
        case idle
        case uploading(UploadProgress)
        case marking
        case resetting
        case provisioning
        /// Done; the sentence says what.
        case finished(String)
        /// Stopped by the user at this byte; the same upload resumes from the device's offset.
        case cancelled(acknowledged: Int, total: Int)
        case failed(String)

        public var isRunning: Bool {
            switch self {
            case .uploading, .marking, .resetting, .provisioning: return true
            default: return false
            }
        }
    }

    public struct State: Sendable, Equatable {
        public var device: DeviceID
        public var slots: Loadable<[FirmwareSlot]> = .loading
        public var image: ImageSummary?
        /// Why the chosen file cannot be flashed (nil when it can, or none is chosen).
        public var imageProblem: String?
        public var job: Job = .idle
        /// The last finished upload (rate, resume, reconnections).
        public var lastUpload: UploadOutcome?
        /// Jobs started so far (a request refused at once counts too): tells one job's end from
        /// the last one's, even when both say the same.
        public var jobsStarted = 0
        public init(device: DeviceID) { self.device = device }
    }

    public enum Action: Sendable, Equatable {
        case refreshRequested
        /// The user chose an image (the front end read the file).
        case imageChosen(name: String, bytes: [UInt8])
        case uploadRequested(mark: Mark, reset: Bool)
        case cancelRequested
        /// Test or confirm by hash (nil: confirm the running image / test the secondary slot's).
        case testRequested(hash: [UInt8]?)
        case confirmRequested(hash: [UInt8]?)
        case resetRequested
        /// Wi-Fi credentials over Improv; the password is not kept in the state.
        case provisionRequested(ssid: String, password: [UInt8])
        case closed
        // From the work the presenter runs:
        case progressed(UploadProgress)
        case slotsLoaded(Result<[FirmwareSlot], DomainError>)
        case jobFinished(Result<String, DomainError>, slots: [FirmwareSlot]?, upload: UploadOutcome?)

        public static func == (a: Action, b: Action) -> Bool { "\(a)" == "\(b)" }
    }

    private let store: StateStore<State>
    private let service: any FirmwareService
    private let navigator: Navigator?
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.firmware")
    /// The image's bytes (not in the state: states are compared and copied often).
    private let imageBytes = Lock<[UInt8]>([])
    private let job = Lock<Task<Void, Never>?>(nil)

    public init(device: DeviceID, service: any FirmwareService, navigator: Navigator? = nil) {
        store = StateStore(State(device: device))
        self.service = service
        self.navigator = navigator
        runtime.start { [weak self] action in await self?.handle(action) }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        let device = store.state.device
        let service = self.service, runtime = self.runtime
        switch action {
        case .refreshRequested:
            guard !store.state.job.isRunning else { return }
            store.update { $0.slots = .loading }
            runtime.run {
                do throws(DomainError) { runtime.send(.slotsLoaded(.success(try await service.slots(of: device)))) } catch {
                    runtime.send(.slotsLoaded(.failure(error)))
                }
            }
        case let .slotsLoaded(result):
            store.update { s in
                switch result {
                case let .success(slots): s.slots = .loaded(slots)
                case let .failure(e): s.slots = .failed(e.description)
                }
            }
        case let .imageChosen(name, bytes):
            guard !store.state.job.isRunning else { return }
            let (summary, problem) = Self.summary(name: name, bytes: bytes)
            imageBytes.withLock { $0 = problem == nil ? bytes : [] }
            store.update { s in
                s.image = summary
                s.imageProblem = problem
            }
        case let .uploadRequested(mark, reset):
            guard !store.state.job.isRunning else { return }
            let bytes = imageBytes.withLock { $0 }
            guard !bytes.isEmpty, let image = store.state.image else {
                let why = store.state.imageProblem ?? "choose an image first"
                refuse(why)
                return
            }
            store.update {
                $0.job = .uploading(UploadProgress(acknowledged: 0, total: bytes.count))
                $0.jobsStarted += 1
            }
            start {
                do throws(DomainError) {
                    let outcome = try await service.upload(bytes, to: device, options: FirmwareUpload.Options()) { p in
                        runtime.send(.progressed(p))
                    }
                    if Task.isCancelled { throw DomainError("stopped") }
                    var slots: [FirmwareSlot]?
                    var sentence = "Uploaded \(image.version) (\(outcome.bytes) bytes) in " + Self.seconds(outcome.seconds)
                    if mark != .none, let hash = image.hash {
                        slots = try await service.mark(hash, confirm: mark == .confirm, on: device)
                        sentence += mark == .test ? "; it boots once on the next reset" : "; it boots for good on the next reset"
                    }
                    if reset {
                        try await service.reset(device)
                        sentence += "; the device is restarting"
                    }
                    runtime.send(.jobFinished(.success(sentence), slots: slots, upload: outcome))
                } catch {
                    runtime.send(.jobFinished(.failure(error), slots: nil, upload: nil))
                }
            }
        case let .progressed(p):
            guard case .uploading = store.state.job else { return }
            store.update { $0.job = .uploading(p) }
        case .cancelRequested:
            guard case let .uploading(p) = store.state.job else { return }
            job.withLock { $0 }?.cancel()
            store.update { $0.job = .cancelled(acknowledged: p.acknowledged, total: p.total) }
        case let .testRequested(hash):
            guard !store.state.job.isRunning else { return }
            var target = hash
            if target == nil, let slots = store.state.slots.value {
                target = slots.first { !$0.active && $0.slot != 0 }?.hash
            }
            guard let target else {
                refuse("nothing to test: the secondary slot is empty (upload an image first)")
                return
            }
            mark(target, confirm: false)
        case let .confirmRequested(hash):
            guard !store.state.job.isRunning else { return }
            mark(hash, confirm: true)
        case .resetRequested:
            guard !store.state.job.isRunning else { return }
            store.update {
                $0.job = .resetting
                $0.jobsStarted += 1
            }
            start {
                do throws(DomainError) {
                    try await service.reset(device)
                    runtime.send(.jobFinished(.success("The device is restarting."), slots: nil, upload: nil))
                } catch {
                    runtime.send(.jobFinished(.failure(error), slots: nil, upload: nil))
                }
            }
        case let .provisionRequested(ssid, password):
            guard !store.state.job.isRunning else { return }
            guard (1...32).contains(ssid.utf8.count) else {
                refuse("an SSID has 1 to 32 bytes")
                return
            }
            store.update {
                $0.job = .provisioning
                $0.jobsStarted += 1
            }
            start {
                do throws(DomainError) {
                    let outcome = try await service.provision(device, ssid: Array(ssid.utf8), password: password)
                    runtime.send(.jobFinished(.success("Provisioned onto \"\(ssid)\"" + (outcome.url.map { "; it answers at \($0)" } ?? "") + "."),
                                              slots: nil, upload: nil))
                } catch {
                    runtime.send(.jobFinished(.failure(error), slots: nil, upload: nil))
                }
            }
        case let .jobFinished(result, slots, upload):
            job.withLock { $0 = nil }
            // A cancelled upload's end is already shown as cancelled.
            if case .cancelled = store.state.job { return }
            store.update { s in
                switch result {
                case let .success(sentence): s.job = .finished(sentence)
                case let .failure(e): s.job = .failed(e.description)
                }
                if let slots { s.slots = .loaded(slots) }
                if let upload { s.lastUpload = upload }
            }
        case .closed:
            // Leaving the screen does not stop an upload (it resumes anyway); it only goes back.
            navigator?.pop()
        }
    }

    /// A request refused before any work: a job that failed at once (counted, so whoever waits for its end sees it).
    private func refuse(_ why: String) {
        store.update {
            $0.job = .failed(why)
            $0.jobsStarted += 1
        }
    }

    private func mark(_ hash: [UInt8]?, confirm: Bool) {
        let device = store.state.device, service = self.service, runtime = self.runtime
        store.update {
            $0.job = .marking
            $0.jobsStarted += 1
        }
        start {
            do throws(DomainError) {
                let slots = try await service.mark(hash, confirm: confirm, on: device)
                runtime.send(.jobFinished(.success(confirm ? (hash == nil ? "The running image is confirmed." : "The image boots for good on the next reset.")
                                                           : "The image boots once on the next reset."), slots: slots, upload: nil))
            } catch {
                runtime.send(.jobFinished(.failure(error), slots: nil, upload: nil))
            }
        }
    }

    /// Runs the job beside the action queue, cancellable by ``Action/cancelRequested``.
    private func start(_ body: @escaping @Sendable () async -> Void) {
        let task = Task { await body() }
        job.withLock { $0 = task }
        runtime.run { await task.value }
    }

    static func seconds(_ s: Double) -> String {
        s < 10 ? String(Double(Int(s * 10)) / 10) + " s" : "\(Int(s)) s"
    }

    /// The image's summary, or why it cannot be flashed.
    public static func summary(name: String, bytes: [UInt8]) -> (ImageSummary?, String?) {
        let image: McubootImage
        do { image = try McubootImage.parse(bytes) } catch { return (nil, "\(name): \(error.description)") }
        let summary = ImageSummary(name: name, version: image.version.smpString, bytes: bytes.count, hash: image.hash, signature: image.signature)
        if image.hashMatches(bytes) == false {
            return (summary, "\(name): the image's hash does not match its contents (corrupt, or changed after signing)")
        }
        if image.hash == nil { return (summary, "\(name) has no hash TLV: sign it with imgtool") }
        return (summary, nil)
    }
}
