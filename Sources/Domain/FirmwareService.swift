import BLEParsing
import BlueZ
import Vocabulary

/// Firmware and provisioning of one device at a time, for the presenters
/// (the dashboard's firmware screen, the gateway's commands): the image
/// slots, an upload with progress, marking, reset, Wi-Fi credentials.
/// ``BlueZFirmwareService`` is the one over bluetoothd; presenter tests use a
/// fake that implements the same protocol.
public protocol FirmwareService: Sendable {
    func slots(of device: DeviceID) async throws(DomainError) -> [FirmwareSlot]
    func upload(_ image: [UInt8], to device: DeviceID, options: FirmwareUpload.Options,
                progress: @escaping @Sendable (UploadProgress) -> Void) async throws(DomainError) -> UploadOutcome
    /// Test (`confirm` false) or make permanent the image with `hash`; without one, confirm the running image.
    func mark(_ hash: [UInt8]?, confirm: Bool, on device: DeviceID) async throws(DomainError) -> [FirmwareSlot]
    func reset(_ device: DeviceID) async throws(DomainError)
    /// Improv Wi-Fi provisioning; the password is not kept, logged or put in an error.
    func provision(_ device: DeviceID, ssid: [UInt8], password: [UInt8]) async throws(DomainError) -> ImprovProvisioning.Outcome
}

/// ``FirmwareService`` over bluetoothd: connects when the device is not
/// connected (with retries: a device that has just reset is away for a
/// moment) and lets go afterwards of a connection it made.
public final class BlueZFirmwareService: FirmwareService {
    public let client: BlueZClient
    public let connectTimeout: Duration
    public let timeout: Duration

    public init(client: BlueZClient, connectTimeout: Duration = .seconds(30), timeout: Duration = .seconds(5)) {
        self.client = client
        self.connectTimeout = connectTimeout
        self.timeout = timeout
    }

    /// Runs `body` with a session, and disconnects afterwards when the device was not connected before.
    private func withSession<T: Sendable>(_ device: DeviceID, _ body: (FirmwareUpload.Connect) async throws(DomainError) -> T) async throws(DomainError) -> T {
        let wasConnected = client.mirror.snapshot().devices[device]?.connected == true
        let client = self.client, connectTimeout = self.connectTimeout, timeout = self.timeout
        let connect: FirmwareUpload.Connect = { () async throws(DomainError) -> SMPSession in
            try await SMPSession.open(client: client, device: device, connectTimeout: connectTimeout, timeout: timeout)
        }
        do {
            let result = try await body(connect)
            if !wasConnected { try? await client.disconnect(device) }
            return result
        } catch {
            if !wasConnected { try? await client.disconnect(device) }
            throw error
        }
    }

    /// ``SMPSession/perform(_:again:_:)`` with its error as the ``DomainError`` it is.
    private static func once<T: Sendable>(_ connect: FirmwareUpload.Connect, again: Bool = true,
                                          _ body: @escaping (SMPSession) async throws(DomainError) -> T) async throws(DomainError) -> T {
        do { return try await SMPSession.perform(connect, again: again) { s in try await body(s) } } catch let e as DomainError {
            throw e
        } catch {
            throw DomainError("\(error)", cause: error)
        }
    }

    public func slots(of device: DeviceID) async throws(DomainError) -> [FirmwareSlot] {
        try await withSession(device) { connect throws(DomainError) in try await Self.once(connect) { s throws(DomainError) in try await s.imageState() } }
    }

    public func upload(_ image: [UInt8], to device: DeviceID, options: FirmwareUpload.Options,
                       progress: @escaping @Sendable (UploadProgress) -> Void) async throws(DomainError) -> UploadOutcome {
        try await withSession(device) { connect throws(DomainError) in try await FirmwareUpload.run(image, options: options, connect: connect, progress: progress) }
    }

    public func mark(_ hash: [UInt8]?, confirm: Bool, on device: DeviceID) async throws(DomainError) -> [FirmwareSlot] {
        try await withSession(device) { connect throws(DomainError) in
            try await Self.once(connect) { s throws(DomainError) in try await s.setImageState(hash: hash, confirm: confirm) }
        }
    }

    public func reset(_ device: DeviceID) async throws(DomainError) {
        // Not repeated: a reset whose answer was lost may have happened.
        try await withSession(device) { connect throws(DomainError) in try await Self.once(connect, again: false) { s throws(DomainError) in try await s.reset() } }
    }

    public func provision(_ device: DeviceID, ssid: [UInt8], password: [UInt8]) async throws(DomainError) -> ImprovProvisioning.Outcome {
        let wasConnected = client.mirror.snapshot().devices[device].map { $0.connected && $0.servicesResolved } ?? false
        if !wasConnected {
            do { try await client.connectResolvingServices(device, timeout: connectTimeout) } catch {
                throw DomainError("cannot connect to \(device.address): \(error.description)", cause: error)
            }
        }
        do {
            let outcome = try await ImprovProvisioning.provision(client: client, device: device, ssid: ssid, password: password)
            if !wasConnected { try? await client.disconnect(device) }
            return outcome
        } catch {
            if !wasConnected { try? await client.disconnect(device) }
            throw error
        }
    }
}
