import DBus
import Locking
import Vocabulary

/// The discovery filter of Adapter1.SetDiscoveryFilter.
public struct DiscoveryFilter: Sendable, Equatable {
    public enum Transport: String, Sendable { case auto, bredr, le }
    /// Only report devices advertising one of these service UUIDs.
    public var uuids: [String] = []
    /// Only report devices at least this strong (dBm).
    public var rssi: Int16?
    /// Only report devices within this path loss (dB).
    public var pathloss: UInt16?
    public var transport: Transport?
    /// Report every advertisement (true, BlueZ's default) or only changes.
    public var duplicateData: Bool?
    /// Make the adapter discoverable while discovering.
    public var discoverable: Bool?
    /// Only report devices whose address or name starts with this.
    public var pattern: String?

    public init(uuids: [String] = [], rssi: Int16? = nil, pathloss: UInt16? = nil, transport: Transport? = nil,
                duplicateData: Bool? = nil, discoverable: Bool? = nil, pattern: String? = nil) {
        self.uuids = uuids
        self.rssi = rssi
        self.pathloss = pathloss
        self.transport = transport
        self.duplicateData = duplicateData
        self.discoverable = discoverable
        self.pattern = pattern
    }

    var dictionary: DBusValue {
        var entries: [DBusDictEntry] = []
        if !uuids.isEmpty { entries.append(.init(.string("UUIDs"), .variant(.array(.string, uuids.map { .string($0) })))) }
        if let rssi { entries.append(.init(.string("RSSI"), .variant(.int16(rssi)))) }
        if let pathloss { entries.append(.init(.string("Pathloss"), .variant(.uint16(pathloss)))) }
        if let transport { entries.append(.init(.string("Transport"), .variant(.string(transport.rawValue)))) }
        if let duplicateData { entries.append(.init(.string("DuplicateData"), .variant(.boolean(duplicateData)))) }
        if let discoverable { entries.append(.init(.string("Discoverable"), .variant(.boolean(discoverable)))) }
        if let pattern { entries.append(.init(.string("Pattern"), .variant(.string(pattern)))) }
        return .dictionary(key: .string, value: .variant, entries)
    }
}

/// How a characteristic write is carried out (WriteValue's "type" option).
public enum WriteType: String, Sendable {
    /// Write request: the device acknowledges.
    case request
    /// Write command: no acknowledgement.
    case command
    /// Reliable write (prepare + execute).
    case reliable
}

/// bluetoothd's operations, typed. Every call maps BlueZ's error replies
/// to ``BlueZError``; calls are sent to `org.bluez` on the mirror's connection.
public struct BlueZClient: Sendable {
    public let mirror: BlueZMirror
    public var connection: DBusConnection { mirror.connection }
    /// Timeout for ordinary calls; Connect and Pair take their own.
    public var timeout: Duration = .seconds(25)

    public init(mirror: BlueZMirror) { self.mirror = mirror }

    /// Connects to `bus`, starts a mirror and returns a client over it.
    public static func connect(to bus: DBusBusAddress) async throws(BlueZError) -> BlueZClient {
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus)
        } catch {
            throw .from(error)
        }
        return BlueZClient(mirror: try await BlueZMirror.start(connection: connection))
    }

    // MARK: Finding things

    /// The adapter to use: the named one, else the first. Fails with a
    /// clear reason when bluetoothd is absent or has no adapter.
    public func adapter(_ name: String? = nil) throws(BlueZError) -> Adapter {
        let snap = mirror.snapshot()
        guard snap.available else { throw .unavailable }
        if let name {
            let id = try AdapterID(name: name)
            guard let a = snap.adapters[id] else {
                let known = snap.sortedAdapters.map(\.id.name).joined(separator: ", ")
                throw .notFound("adapter \(name) (bluetoothd has \(known.isEmpty ? "no adapters" : known))")
            }
            return a
        }
        guard let first = snap.sortedAdapters.first else {
            throw .notFound("no Bluetooth adapter (bluetoothd runs but has no controller; see `blecompanion doctor`)")
        }
        return first
    }

    /// A device bluetoothd knows on `adapter`.
    public func device(_ address: BluetoothAddress, on adapter: AdapterID) throws(BlueZError) -> Device {
        let snap = mirror.snapshot()
        guard snap.available else { throw .unavailable }
        guard let d = snap.devices[DeviceID(adapter: adapter, address: address)] else {
            throw .notFound("device \(address) on \(adapter.name) (not discovered yet? run `blecompanion scan` first)")
        }
        return d
    }

    // MARK: Adapter

    public func setPowered(_ on: Bool, adapter: AdapterID) async throws(BlueZError) {
        try await set(adapter.path, BlueZInterface.adapter, AdapterProperty.powered.rawValue, .boolean(on))
    }
    public func setAlias(_ alias: String, adapter: AdapterID) async throws(BlueZError) {
        try await set(adapter.path, BlueZInterface.adapter, AdapterProperty.alias.rawValue, .string(alias))
    }
    public func setDiscoverable(_ on: Bool, adapter: AdapterID) async throws(BlueZError) {
        try await set(adapter.path, BlueZInterface.adapter, AdapterProperty.discoverable.rawValue, .boolean(on))
    }
    public func setPairable(_ on: Bool, adapter: AdapterID) async throws(BlueZError) {
        try await set(adapter.path, BlueZInterface.adapter, AdapterProperty.pairable.rawValue, .boolean(on))
    }

    public func setDiscoveryFilter(_ filter: DiscoveryFilter, adapter: AdapterID) async throws(BlueZError) {
        _ = try await call(adapter.path, BlueZInterface.adapter, "SetDiscoveryFilter", [filter.dictionary])
    }
    public func startDiscovery(adapter: AdapterID) async throws(BlueZError) {
        _ = try await call(adapter.path, BlueZInterface.adapter, "StartDiscovery")
    }
    public func stopDiscovery(adapter: AdapterID) async throws(BlueZError) {
        _ = try await call(adapter.path, BlueZInterface.adapter, "StopDiscovery")
    }
    /// Forgets a device (and its pairing).
    public func removeDevice(_ device: DeviceID) async throws(BlueZError) {
        _ = try await call(device.adapter.path, BlueZInterface.adapter, "RemoveDevice", [.objectPath(device.path)])
    }

    // MARK: Device

    public func connect(_ device: DeviceID, timeout: Duration = .seconds(60)) async throws(BlueZError) {
        _ = try await call(device.path, BlueZInterface.device, "Connect", timeout: timeout)
    }
    /// Connects and waits until bluetoothd has resolved the device's
    /// services, both within `timeout`. Connect replies at link-up; the
    /// services follow once bluetoothd has read the attribute database. When
    /// they do not (an ATT server that never answers; a daemon or mock that
    /// never sets ServicesResolved), the link is closed again and the error
    /// says so, as bleak does: a link without services serves no read, write
    /// or notification, and would stay up after we exit.
    ///
    /// A device bluetoothd already lists as connected but without services
    /// is given 5 s to resolve them (another client's connection may be
    /// under way); then its link is taken for one the kernel kept across a
    /// bluetoothd restart, on which bluetoothd never opens ATT and which
    /// Connect does not touch, and it is disconnected first (``reconnect(_:)``).
    public func connectResolvingServices(_ device: DeviceID, timeout: Duration = .seconds(30)) async throws(BlueZError) {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        if let d = mirror.snapshot().devices[device], d.connected, !d.servicesResolved {
            do {
                try await waitForServicesResolved(device, timeout: min(.seconds(5), timeout))
                return
            } catch {
                guard case .timedOut = error else { throw error }
                try await dropStaleLink(device)
            }
        }
        try await connect(device, timeout: max(deadline - clock.now, .milliseconds(100)))
        do {
            try await waitForServicesResolved(device, timeout: max(deadline - clock.now, .milliseconds(100)))
        } catch {
            guard case .timedOut = error else { throw error }
            try? await disconnect(device)
            let (whole, fraction) = timeout.components
            let seconds = fraction == 0 ? "\(whole)" : "\(Double(whole) + Double(fraction) / 1e18)"
            throw .timedOut("\(device.address) connected, but bluetoothd had not resolved its GATT services after "
                            + "\(seconds) s, so it was disconnected again "
                            + "(a slow device may need a longer timeout)")
        }
    }

    public func disconnect(_ device: DeviceID) async throws(BlueZError) {
        _ = try await call(device.path, BlueZInterface.device, "Disconnect")
    }
    public func connectProfile(_ uuid: String, device: DeviceID) async throws(BlueZError) {
        _ = try await call(device.path, BlueZInterface.device, "ConnectProfile", [.string(uuid)], timeout: .seconds(60))
    }
    public func disconnectProfile(_ uuid: String, device: DeviceID) async throws(BlueZError) {
        _ = try await call(device.path, BlueZInterface.device, "DisconnectProfile", [.string(uuid)])
    }
    /// Pairs, asking the registered agent for whatever the device needs.
    public func pair(_ device: DeviceID, timeout: Duration = .seconds(120)) async throws(BlueZError) {
        _ = try await call(device.path, BlueZInterface.device, "Pair", timeout: timeout)
    }
    public func cancelPairing(_ device: DeviceID) async throws(BlueZError) {
        _ = try await call(device.path, BlueZInterface.device, "CancelPairing")
    }
    public func setTrusted(_ on: Bool, device: DeviceID) async throws(BlueZError) {
        try await set(device.path, BlueZInterface.device, DeviceProperty.trusted.rawValue, .boolean(on))
    }
    public func setBlocked(_ on: Bool, device: DeviceID) async throws(BlueZError) {
        try await set(device.path, BlueZInterface.device, DeviceProperty.blocked.rawValue, .boolean(on))
    }
    public func setAlias(_ alias: String, device: DeviceID) async throws(BlueZError) {
        try await set(device.path, BlueZInterface.device, DeviceProperty.alias.rawValue, .string(alias))
    }

    /// Waits until bluetoothd has exported the device's GATT database.
    public func waitForServicesResolved(_ device: DeviceID, timeout: Duration = .seconds(30)) async throws(BlueZError) {
        try await mirror.wait(for: "services of \(device.address) to be resolved", timeout: timeout) { snap in
            !snap.available || snap.devices[device]?.servicesResolved == true || snap.devices[device]?.connected == false
        }
        let snap = mirror.snapshot()
        guard snap.available else { throw .unavailable }
        guard let d = snap.devices[device] else { throw .notFound("device \(device.address) disappeared") }
        guard d.servicesResolved else { throw .bluez(.notConnected, message: "\(device.address) disconnected before its services were resolved") }
    }

    // MARK: GATT

    /// ReadValue on a characteristic or descriptor.
    public func readValue(_ attribute: GATTAttributeID, offset: UInt16 = 0, descriptor: Bool = false) async throws(BlueZError) -> [UInt8] {
        let reply = try await call(attribute.path, descriptor ? BlueZInterface.gattDescriptor : BlueZInterface.gattCharacteristic,
                                   "ReadValue", [options(["offset": .uint16(offset)])])
        guard reply.count == 1, let bytes = PropertyReader.bytes(reply[0]) else {
            throw .unexpectedReply("ReadValue returned \"\(DBusSignature(reply.map(\.type)))\" instead of \"ay\"")
        }
        return bytes
    }

    /// WriteValue on a characteristic or descriptor.
    public func writeValue(_ attribute: GATTAttributeID, _ value: [UInt8], offset: UInt16 = 0, type: WriteType? = nil,
                           descriptor: Bool = false) async throws(BlueZError) {
        var opts: [String: DBusValue] = ["offset": .uint16(offset)]
        if let type, !descriptor { opts["type"] = .string(type.rawValue) }
        _ = try await call(attribute.path, descriptor ? BlueZInterface.gattDescriptor : BlueZInterface.gattCharacteristic,
                           "WriteValue", [.bytes(value), options(opts)])
    }

    public func startNotify(_ characteristic: GATTAttributeID) async throws(BlueZError) {
        _ = try await call(characteristic.path, BlueZInterface.gattCharacteristic, "StartNotify")
    }
    public func stopNotify(_ characteristic: GATTAttributeID) async throws(BlueZError) {
        _ = try await call(characteristic.path, BlueZInterface.gattCharacteristic, "StopNotify")
    }

    /// AcquireNotify: a socket that delivers each notification as one packet,
    /// and the MTU. Only when the characteristic offers it.
    public func acquireNotify(_ characteristic: GATTAttributeID) async throws(BlueZError) -> (UnixFileDescriptor, mtu: UInt16) {
        try await acquire("AcquireNotify", characteristic)
    }
    /// AcquireWrite: a socket to write values into, and the MTU.
    public func acquireWrite(_ characteristic: GATTAttributeID) async throws(BlueZError) -> (UnixFileDescriptor, mtu: UInt16) {
        try await acquire("AcquireWrite", characteristic)
    }

    /// Notifications of `characteristic`, from now on: starts notifications,
    /// yields every new Value, and stops notifications when the consumer
    /// stops iterating. When the characteristic goes away (the device
    /// disconnected, or bluetoothd restarted) the stream yields
    /// ``NotificationEvent/paused(_:)`` and, once the characteristic is back,
    /// starts notifications again and yields ``NotificationEvent/resumed``.
    ///
    /// `reconnect`: while paused, connect the device again whenever it is
    /// there to connect to (``reconnect(_:)``), backing off from 1 s to 30 s
    /// between failed attempts, instead of waiting for someone else to.
    public func notifications(_ characteristic: GATTAttributeID, bufferCapacity: Int = 1024,
                              reconnect: Bool = false) async throws(BlueZError) -> AsyncStream<NotificationEvent> {
        let events = mirror.events(bufferCapacity: bufferCapacity)
        try await startNotify(characteristic)
        let path = characteristic.path
        let client = self
        let (stream, continuation) = AsyncStream<NotificationEvent>.makeStream(bufferingPolicy: .bufferingNewest(bufferCapacity))
        let reconnector = reconnect ? Task { await client.keepConnected(characteristic.device) } : nil
        let task = Task {
            // bluetoothd keeps the GATT objects of a disconnected device
            // ([GATT] Cache=always), so a disconnection is seen on the device's
            // ServicesResolved, not only as the characteristic going away;
            // notifications must be asked for again once it is back.
            var paused = false
            func pause(_ reason: BlueZError) {
                guard !paused else { return }
                paused = true
                continuation.yield(.paused(reason))
            }
            func resume() async {
                guard paused else { return }
                do throws(BlueZError) {
                    try await client.startNotify(characteristic)
                    paused = false
                    continuation.yield(.resumed)
                } catch {
                    continuation.yield(.paused(error))
                }
            }
            for await event in events {
                switch event {
                case let .propertiesChanged(p, interface, changed, _) where p == path && interface == BlueZInterface.gattCharacteristic:
                    if let v = changed["Value"], let bytes = PropertyReader.bytes(v) { continuation.yield(.value(bytes)) }
                case let .deviceChanged(device, changed) where device == characteristic.device:
                    switch changed[.servicesResolved] {
                    case .boolean(false)?: pause(.bluez(.notConnected, message: "the device disconnected"))
                    case .boolean(true)? where client.mirror.snapshot().characteristics[path] != nil: await resume()
                    default: break
                    }
                case let .interfacesRemoved(p, names) where p == path && names.contains(BlueZInterface.gattCharacteristic):
                    pause(.bluez(.notConnected, message: "the device disconnected"))
                case .availability(false):
                    pause(.unavailable)
                case let .interfacesAdded(p, names) where p == path && names.contains(BlueZInterface.gattCharacteristic):
                    await resume()
                case .resynchronized:
                    // After a bluetoothd restart the characteristic may already be back.
                    let snap = client.mirror.snapshot()
                    if snap.characteristics[path] != nil, snap.devices[characteristic.device]?.servicesResolved == true { await resume() }
                default:
                    break
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in
            task.cancel()
            reconnector?.cancel()
            Task { try? await client.stopNotify(characteristic) }
        }
        return stream
    }

    /// Connects `device` again, and waits for its services, when bluetoothd
    /// knows it but has no usable link to it. After bluetoothd was killed
    /// and started again, the kernel still holds the link (seen on the real
    /// stack): the new bluetoothd lists the device as Connected, without
    /// GATT objects, and answers Connect at once without opening ATT
    /// (`dev_connect()` returns for an LE device it thinks connected). So a
    /// connected device without resolved services is disconnected first
    /// (bluetoothd then forgets it; the kernel may keep the link, and ATT is
    /// opened over it), then connected.
    public func reconnect(_ device: DeviceID, timeout: Duration = .seconds(30)) async throws(BlueZError) {
        guard let d = mirror.snapshot().devices[device] else { throw .notFound("device \(device.address)") }
        guard !d.servicesResolved else { return }
        if d.connected { try await dropStaleLink(device) }
        try await connectResolvingServices(device, timeout: timeout)
    }

    /// Disconnect, and wait until bluetoothd says so: Connected=false
    /// follows Disconnect's reply, and a Connect before it would be answered
    /// at once again.
    private func dropStaleLink(_ device: DeviceID) async throws(BlueZError) {
        try? await disconnect(device)
        try await mirror.wait(for: "\(device.address) to be disconnected", timeout: .seconds(10)) { snap in
            !snap.available || snap.devices[device]?.connected != true
        }
    }

    /// Until cancelled: whenever bluetoothd is there and lists `device`
    /// without resolved services, ``reconnect(_:)`` it; after a failure
    /// wait 1 s, doubling to 30 s, before the next attempt.
    func keepConnected(_ device: DeviceID) async {
        var pause = Duration.seconds(1)
        while !Task.isCancelled {
            do {
                try await mirror.wait(for: "\(device.address) to be there without its services", timeout: .seconds(86_400)) { snap in
                    snap.available && snap.devices[device].map { !$0.servicesResolved } == true
                }
            } catch {
                if case .cancelled = error { return }
                continue
            }
            do throws(BlueZError) {
                try await reconnect(device)
                pause = .seconds(1)
            } catch {
                if case .cancelled = error { return }
                do { try await Task.sleep(for: pause) } catch { return }
                pause = min(pause * 2, .seconds(30))
            }
        }
    }

    /// Starts discovery with `filter` and keeps it running — across
    /// bluetoothd restarts too — until the session is stopped or released.
    ///
    /// When bluetoothd exits while these calls wait (D-Bus NoReply, "recipient
    /// disconnected", or it is gone when they are made), the session is
    /// returned anyway and starts discovery when bluetoothd is back, as after
    /// any restart: under the real stack a StartDiscovery can wait seconds
    /// for the controller, and a restart then failed the whole scan. Any
    /// other error, a NoReply timeout with bluetoothd still there included,
    /// is thrown.
    public func discover(adapter: AdapterID, filter: DiscoveryFilter? = nil) async throws(BlueZError) -> DiscoverySession {
        do {
            if let filter { try await setDiscoveryFilter(filter, adapter: adapter) }
            try await startDiscovery(adapter: adapter)
        } catch {
            guard Self.wentAway(error) else { throw error }
            // The error reply can resume this call before the mirror has
            // taken in the NameOwnerChanged that came before it (seen under
            // load): a moment for it. Still there after it: a timeout or
            // another failure, thrown as it was.
            let original = error
            do { try await mirror.wait(for: "bluetoothd gone", timeout: .seconds(2)) { !$0.available } } catch { throw original }
            let session = DiscoverySession(client: self, adapter: adapter, filter: filter)
            // Back already, before the session listened for it.
            if mirror.snapshot().available { await session.startAgain(self) }
            return session
        }
        return DiscoverySession(client: self, adapter: adapter, filter: filter)
    }

    /// The errors a call gets when bluetoothd exits before answering or is gone.
    static func wentAway(_ error: BlueZError) -> Bool {
        switch error {
        case .unavailable: return true
        case let .dbus(.remote(name, _)): return name == DBusErrorName.noReply
        default: return false
        }
    }

    // MARK: Plumbing

    private func acquire(_ member: String, _ characteristic: GATTAttributeID) async throws(BlueZError) -> (UnixFileDescriptor, mtu: UInt16) {
        let reply = try await call(characteristic.path, BlueZInterface.gattCharacteristic, member, [options([:])])
        guard reply.count == 2, case let .unixFD(fd) = reply[0], case let .uint16(mtu) = reply[1] else {
            throw .unexpectedReply("\(member) returned \"\(DBusSignature(reply.map(\.type)))\" instead of \"hq\"")
        }
        return (fd, mtu)
    }

    private func options(_ values: [String: DBusValue]) -> DBusValue {
        .dictionary(key: .string, value: .variant, values.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .variant($0.value)) })
    }

    func call(_ path: ObjectPath, _ interface: String, _ member: String, _ args: [DBusValue] = [],
              timeout: Duration? = nil) async throws(BlueZError) -> [DBusValue] {
        guard mirror.snapshot().available else { throw .unavailable }
        do {
            return try await connection.call(destination: BlueZInterface.service, path: path, interface: interface,
                                              member: member, arguments: args, timeout: timeout ?? self.timeout).body
        } catch {
            throw .from(error)
        }
    }

    func set(_ path: ObjectPath, _ interface: String, _ name: String, _ value: DBusValue) async throws(BlueZError) {
        _ = try await call(path, BlueZInterface.properties, "Set", [.string(interface), .string(name), .variant(value)])
    }
}

/// One element of ``BlueZClient/notifications(_:bufferCapacity:)``.
public enum NotificationEvent: Sendable, Equatable {
    case value([UInt8])
    /// Notifications stopped arriving, and why; they resume by themselves.
    case paused(BlueZError)
    case resumed
}

/// An active discovery; ``stop()`` or releasing it ends it.
public final class DiscoverySession: Sendable {
    public let adapter: AdapterID
    public let filter: DiscoveryFilter?
    private let client: BlueZClient
    private let watcher: Lock<Task<Void, Never>?> = Lock(nil)
    private let active = Lock(true)

    init(client: BlueZClient, adapter: AdapterID, filter: DiscoveryFilter?) {
        self.client = client
        self.adapter = adapter
        self.filter = filter
        // Adapters and bluetoothd only: an advertisement is no reason to wake.
        let events = client.mirror.events(bufferCapacity: 64) { event in
            switch event {
            case .availability, .interfacesAdded, .adapterChanged: return true
            default: return false
            }
        }
        let task = Task { [weak self] in
            // After a bluetoothd restart, an adapter plugged in again or powered
            // off and on: start again once the adapter is back and powered. A
            // starting bluetoothd exports its adapter unpowered and powers it
            // a moment later, so the adapter's return alone is not enough.
            for await event in events {
                switch event {
                case .availability(true):
                    break
                case let .interfacesAdded(path, names) where path == adapter.path && names.contains(BlueZInterface.adapter):
                    break
                case let .adapterChanged(id, changed)
                    where id == adapter && (changed[.powered] == .boolean(true) || changed[.discovering] == .boolean(false)):
                    // Discovering=false with our session still wanted: bluetoothd
                    // dropped the discovery (it power-cycles the controller to set
                    // privacy while starting, for one).
                    break
                default:
                    continue
                }
                guard let self, self.active.withLock({ $0 }) else { return }
                guard client.mirror.snapshot().adapters[adapter]?.powered == true else { continue }
                await self.startAgain(client)
            }
        }
        watcher.withLock { $0 = task }
    }

    /// StartDiscovery again, retried while bluetoothd is still settling: up
    /// to ~30 s, backing off from 0.25 s to 4 s. A bluetoothd 5.66 that has
    /// just started answers InProgress for a while although nothing is
    /// discovering (seen in the real-BlueZ tier), so InProgress counts as
    /// done only once the adapter says Discovering.
    func startAgain(_ client: BlueZClient) async {
        var pause = Duration.milliseconds(250)
        var waited = Duration.zero
        var filterSet = filter == nil
        while active.withLock({ $0 }) && !Task.isCancelled {
            guard client.mirror.snapshot().adapters[adapter]?.powered == true else { return }
            do throws(BlueZError) {
                if !filterSet, let filter {
                    try await client.setDiscoveryFilter(filter, adapter: adapter)
                    filterSet = true
                }
                try await client.startDiscovery(adapter: adapter)
                return
            } catch {
                switch error {
                case .bluez(.inProgress, _):
                    if client.mirror.snapshot().adapters[adapter]?.discovering == true { return }
                case .unavailable, .cancelled: return
                default: break
                }
            }
            guard waited < .seconds(30) else { return }
            do { try await Task.sleep(for: pause) } catch { return }
            waited += pause
            pause = min(pause * 2, .seconds(4))
        }
    }

    /// Stops discovery (bluetoothd stops scanning once no client discovers).
    public func stop() async {
        guard active.withLock({ was in defer { was = false }; return was }) else { return }
        watcher.withLock { $0?.cancel() }
        try? await client.stopDiscovery(adapter: adapter)
    }

    deinit {
        watcher.withLock { $0?.cancel() }
        if active.withLock({ $0 }) {
            let client = self.client, adapter = self.adapter
            Task { try? await client.stopDiscovery(adapter: adapter) }
        }
    }
}
