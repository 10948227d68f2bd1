import BLEParsing
import BlueZ
import Domain
import Locking
import Vocabulary

/// A firmware service that answers as a device would, from memory: an
/// upload reports progress in steps and waits between them (so a test can
/// cancel it), marks and resets change the slots. What it was asked is kept.
public final class FakeFirmwareService: FirmwareService {
    public struct Memory {
        public var slots = [FirmwareSlot(slot: 0, version: "1.0.0", hash: [1], confirmed: true, active: true)]
        public var calls: [String] = []
        public var passwords: [[UInt8]] = []
        public var failUpload: DomainError?
    }
    public let memory = Lock(Memory())
    let stepDelay: Duration

    public init(stepDelay: Duration = .milliseconds(1)) { self.stepDelay = stepDelay }

    public func slots(of device: DeviceID) async throws(DomainError) -> [FirmwareSlot] {
        memory.withLock { $0.calls.append("slots"); return $0.slots }
    }

    public func upload(_ image: [UInt8], to device: DeviceID, options: FirmwareUpload.Options,
                progress: @escaping @Sendable (UploadProgress) -> Void) async throws(DomainError) -> UploadOutcome {
        memory.withLock { $0.calls.append("upload \(image.count)") }
        if let e = memory.withLock({ $0.failUpload }) { throw e }
        var sent = 0
        while sent < image.count {
            if Task.isCancelled { throw DomainError("the upload was stopped at byte \(sent) of \(image.count)") }
            sent = min(image.count, sent + 1000)
            progress(UploadProgress(acknowledged: sent, total: image.count, elapsed: 0.1, bytesPerSecond: 10_000))
            try? await Task.sleep(for: stepDelay)
        }
        let hash = (try? McubootImage.parse(image))?.hash ?? []
        memory.withLock { $0.slots = [$0.slots[0], FirmwareSlot(slot: 1, version: "2.0.0", hash: hash)] }
        return UploadOutcome(bytes: image.count, seconds: 0.5, window: 4)
    }

    public func mark(_ hash: [UInt8]?, confirm: Bool, on device: DeviceID) async throws(DomainError) -> [FirmwareSlot] {
        memory.withLock { m in
            m.calls.append("mark \(hash.map { Hex.string($0) } ?? "running") \(confirm)")
            for i in m.slots.indices where m.slots[i].hash == hash { m.slots[i].pending = true; m.slots[i].permanent = confirm }
            return m.slots
        }
    }

    public func reset(_ device: DeviceID) async throws(DomainError) { memory.withLock { $0.calls.append("reset") } }

    public func provision(_ device: DeviceID, ssid: [UInt8], password: [UInt8]) async throws(DomainError) -> ImprovProvisioning.Outcome {
        memory.withLock { $0.calls.append("provision \(String(decoding: ssid, as: UTF8.self))"); $0.passwords.append(password) }
        guard password == Array("right".utf8) else { throw DomainError("the device could not be provisioned: unable to connect to the network") }
        return ImprovProvisioning.Outcome(url: "http://10.0.0.9/", states: [.authorized, .provisioning, .provisioned])
    }
}
