import BLEParsing
import BlueZ
import Locking
import Vocabulary

/// SMP over bluetoothd: requests written to the SMP characteristic as ATT
/// write commands (WriteValue, type "command"), answers taken from its
/// notifications (StartNotify, PropertiesChanged). The fragments end when
/// the device disconnects.
public final class BlueZSMPTransport: SMPTransport {
    public let client: BlueZClient
    public let characteristic: GATTCharacteristic
    public let fragmentSize: Int
    public let fragments: AsyncStream<[UInt8]>
    private let pump: Task<Void, Never>
    private let continuation: AsyncStream<[UInt8]>.Continuation

    /// The SMP characteristic of `device` (connected, services resolved), notifications on.
    public static func open(client: BlueZClient, device: DeviceID) async throws(DomainError) -> BlueZSMPTransport {
        guard let c = client.mirror.snapshot().characteristic(SMP.characteristic, inService: SMP.service, on: device) else {
            throw DomainError("\(device.address) has no SMP service (\(SMP.service.string)): it does not speak mcumgr over Bluetooth "
                              + "(Zephyr needs CONFIG_MCUMGR_TRANSPORT_BT)")
        }
        // Subscribed before StartNotify, so no answer is missed; only this
        // characteristic's values and what ends the link pass the filter.
        let path = c.id.path, devicePath = device.path
        let events = client.mirror.events(bufferCapacity: 4096) { event in
            switch event {
            case let .propertiesChanged(p, interface, _, _): return p == path && interface == BlueZInterface.gattCharacteristic
            case let .deviceChanged(d, _): return d == device
            case let .interfacesRemoved(p, _): return p == path || p == devicePath
            case .availability, .resynchronized: return true
            default: return false
            }
        }
        do { try await client.startNotify(c.id) } catch {
            throw DomainError("cannot start SMP notifications on \(device.address): \(error.description)", cause: error)
        }
        return BlueZSMPTransport(client: client, characteristic: c, events: events)
    }

    private init(client: BlueZClient, characteristic: GATTCharacteristic, events: AsyncStream<BlueZEvent>) {
        self.client = client
        self.characteristic = characteristic
        // bluetoothd reports the ATT MTU on the characteristic (5.62+); 23 is the least any link has.
        fragmentSize = Int(characteristic.mtu ?? 23) - 3
        let (stream, continuation) = AsyncStream<[UInt8]>.makeStream(bufferingPolicy: .bufferingOldest(4096))
        fragments = stream
        self.continuation = continuation
        pump = Task {
            // The link is gone when the services are no longer resolved, the
            // characteristic or device goes, or bluetoothd does.
            loop: for await event in events {
                switch event {
                case .propertiesChanged:
                    if let (_, bytes) = event.characteristicValue { continuation.yield(bytes) }
                case let .deviceChanged(_, changed):
                    if changed[.servicesResolved] == .boolean(false) || changed[.connected] == .boolean(false) { break loop }
                case .interfacesRemoved, .availability(false), .resynchronized:
                    break loop
                default:
                    break
                }
            }
            continuation.finish()
        }
    }

    public func send(_ fragment: [UInt8]) async throws(DomainError) {
        do { try await client.writeValue(characteristic.id, fragment, type: .command) } catch {
            throw DomainError("writing to the SMP characteristic of \(characteristic.id.device.address) failed: \(error.description)", cause: error)
        }
    }

    /// Stops notifications (and waits for bluetoothd to have stopped them,
    /// so a session opened next on the same connection is not undone by it).
    public func close() async {
        pump.cancel()
        continuation.finish()
        let snapshot = client.mirror.snapshot()
        if snapshot.devices[characteristic.id.device]?.connected == true, snapshot.characteristics[characteristic.id.path]?.notifying == true {
            try? await client.stopNotify(characteristic.id)
        }
    }
}

extension SMPSession {
    /// Opens a session with `connect`, runs `body` on it and closes it. When
    /// the link drops before the answer came (another client letting the
    /// device go, a device that resets by itself), the request is made once
    /// more on a new connection if `again` (for requests that may be repeated).
    public static func perform<T: Sendable>(_ connect: FirmwareUpload.Connect, again: Bool = true,
                                            _ body: (SMPSession) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            let session = try await connect()
            do {
                let result = try await body(session)
                await session.close()
                return result
            } catch {
                let dropped = await !session.isOpen
                await session.close()
                attempt += 1
                guard again, dropped, attempt < 2 else { throw error }
            }
        }
    }

    /// An SMP session with `device` over bluetoothd: connects it (and waits
    /// for its services) when it is not connected, opens the transport and
    /// starts the session.
    public static func open(client: BlueZClient, device: DeviceID, connectTimeout: Duration = .seconds(30),
                            timeout: Duration = .seconds(5), retries: Int = 2) async throws(DomainError) -> SMPSession {
        // A device that has just reset is not there for a moment (it boots,
        // then advertises again), and a link another client is letting go
        // drops under us: connection attempts go on, backing off, until the
        // connection timeout.
        let clock = ContinuousClock()
        let deadline = clock.now + connectTimeout
        var pause = Duration.milliseconds(250)
        while true {
            do throws(DomainError) {
                let snapshot = client.mirror.snapshot()
                if snapshot.devices[device]?.connected != true || snapshot.devices[device]?.servicesResolved != true {
                    do { try await client.connectResolvingServices(device, timeout: max(deadline - clock.now, .milliseconds(100))) } catch {
                        throw DomainError("cannot connect to \(device.address): \(error.description)", cause: error)
                    }
                }
                let transport = try await BlueZSMPTransport.open(client: client, device: device)
                let session = SMPSession(transport: transport, timeout: timeout, retries: retries)
                await session.start()
                return session
            } catch {
                // No SMP service is an answer, not a moment's trouble.
                let gone = client.mirror.snapshot().devices[device]?.connected != true
                guard gone, !error.description.contains("has no SMP service"),
                      clock.now + pause < deadline, !Task.isCancelled else { throw error }
                try? await Task.sleep(for: pause)
                pause = min(pause * 2, .seconds(2))
            }
        }
    }
}
