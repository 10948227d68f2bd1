import BLEParsing
import DBus
import ScenarioFormat

/// An `org.bluez` service on a D-Bus bus, driven by scenario files: what
/// stands in for bluetoothd on machines without a Bluetooth radio.
public enum BlueZSimulatorInfo {
    public static let serviceName = "org.bluez"
}

/// Options for running a scenario.
public struct SimulatorOptions: Sendable {
    /// Timeline speed factor: 2 runs every timeline twice as fast.
    public var speed: Double
    /// `simulate --speed max`: the scenario's timelines (bluetoothd and
    /// adapter outages, advertising, battery) play without sleeping, in time
    /// order across devices, starting once a client discovers. After each
    /// event the simulator pings every discovering client
    /// (org.freedesktop.DBus.Peer.Ping): the next event goes out once each
    /// has read everything sent before, so playback runs as fast as the
    /// clients consume. Delays that are not timeline events (connect,
    /// service resolution, temporary-device removal) and notification
    /// timelines run at speed 1000.
    public var asFastAsConsumed: Bool
    /// `simulate --loop`: the scenario's timelines start over after
    /// `Scenario.duration` (else the end of the longest timeline, or the
    /// longest `repeatEvery`), keeping their order across devices.
    public var loop: Bool
    /// With `asFastAsConsumed`: awaited after each event, once the clients
    /// answered (a test waits here until its client has processed it).
    public var afterEvent: (@Sendable () async -> Void)?
    /// Receives one line per notable event (for `blecompanion simulate`).
    public var log: (@Sendable (String) -> Void)?

    public init(speed: Double = 1, asFastAsConsumed: Bool = false, loop: Bool = false,
                afterEvent: (@Sendable () async -> Void)? = nil, log: (@Sendable (String) -> Void)? = nil) {
        self.speed = speed
        self.asFastAsConsumed = asFastAsConsumed
        self.loop = loop
        self.afterEvent = afterEvent
        self.log = log
    }

    /// The factor for delays and notification timelines.
    var effectiveSpeed: Double { asFastAsConsumed ? 1000 : speed }
}

/// Why the simulator could not start.
public enum SimulatorError: Error, Sendable, CustomStringConvertible {
    case nameTaken(String)
    case badOptions(String)
    public var description: String {
        switch self {
        case let .nameTaken(name): return "the name \(name) is already owned on this bus (is bluetoothd or another simulator running?)"
        case let .badOptions(text): return text
        }
    }
}

// MARK: State

struct DiscoveryFilter: Sendable, Equatable {
    var uuids: [String] = []
    var rssi: Int16?
    var pathloss: UInt16?
    var transport = "auto"
    /// false unless the filter says so, as parse_discovery_filter_dict() in
    /// bluetoothd: identical ServiceData/ManufacturerData are not re-signalled.
    var duplicateData = false
    var discoverable = false
    var pattern: String?
}

final class AdapterState {
    let spec: AdapterSpec
    let path: ObjectPath
    var registration: DBusObjectRegistration?
    var present = true
    var powered: Bool
    var discovering = false
    var discoverableTimer: Task<Void, Never>?
    /// Discovery sessions by client unique name.
    var sessions: Set<String> = []
    /// Filters set with SetDiscoveryFilter, by client unique name.
    var filters: [String: DiscoveryFilter] = [:]
    /// Advertisement monitor applications (AdvertisementMonitorManager1.RegisterMonitor).
    var monitorApps: [MonitorApp] = []

    init(spec: AdapterSpec, path: ObjectPath) {
        self.spec = spec
        self.path = path
        self.powered = spec.powered
    }
}

final class DescriptorState {
    let spec: DescriptorSpec
    let path: ObjectPath
    let handle: Int
    var value: [UInt8]
    var registration: DBusObjectRegistration?
    init(spec: DescriptorSpec, path: ObjectPath, handle: Int) {
        self.spec = spec
        self.path = path
        self.handle = handle
        self.value = spec.value
    }
}

final class CharacteristicState {
    let spec: CharacteristicSpec
    let path: ObjectPath
    let servicePath: ObjectPath
    let handle: Int
    var value: [UInt8]
    var notifyClients: Set<String> = []
    var notifyTask: Task<Void, Never>?
    var registration: DBusObjectRegistration?
    var notifySocket: AcquiredSocket?
    var writeSocket: AcquiredSocket?
    var descriptors: [DescriptorState] = []
    var notifying: Bool { !notifyClients.isEmpty || notifySocket != nil }
    init(spec: CharacteristicSpec, path: ObjectPath, servicePath: ObjectPath, handle: Int) {
        self.spec = spec
        self.path = path
        self.servicePath = servicePath
        self.handle = handle
        self.value = spec.value
    }
}

final class ServiceState {
    let spec: ServiceSpec
    let path: ObjectPath
    let handle: Int
    var characteristics: [CharacteristicState] = []
    var registration: DBusObjectRegistration?
    init(spec: ServiceSpec, path: ObjectPath, handle: Int) {
        self.spec = spec
        self.path = path
        self.handle = handle
    }
}

final class PairingOperation {
    var cancelled = false
    var agent: AgentRecord?
    var agentCall: Task<DBusMessage, any Error>?
    /// The remote's part after the agent step (`PairingSpec.delay`); CancelPairing cuts it short.
    var remoteStep: Task<Void, any Error>?
}

final class DeviceState {
    let spec: DeviceSpec
    let index: Int
    let path: ObjectPath
    let adapterID: String
    var registration: DBusObjectRegistration?
    var exporting = false
    /// Method calls that reached the object while its export was still
    /// finishing (``BlueZSimulator/exported(_:)``).
    var exportWaiters: [CheckedContinuation<Void, Never>] = []
    var gattExported = false
    var hasBattery = false
    /// bluetoothd's disconnect timer, while a Disconnect waits for it; a
    /// second Disconnect meanwhile waits for the same one.
    var disconnectTimer: Task<Void, Never>?
    var publishedManufacturerData: [UInt16: [UInt8]]?
    var publishedServiceData: [String: [UInt8]]?
    /// The RSSI last announced (bluetoothd's device->rssi), nil when none is.
    var publishedRSSI: Int16?
    // Advertisement state (changes with the timeline).
    var advertising: Bool
    var rssi: Int16
    var txPower: Int16?
    var name: String?
    var manufacturerData: [UInt16: [UInt8]]
    var serviceData: [String: [UInt8]]
    var uuids: [String]
    var battery: UInt8?
    // Link state.
    var alias: String?
    var paired: Bool
    var trusted: Bool
    var blocked: Bool
    var connected = false
    /// The link outlived a killed bluetoothd (``Scenario/Outage/killed``):
    /// Connected again when it returns, without ATT until a Disconnect.
    var linkKept = false
    var connecting = false
    var servicesResolved = false
    var connectFailuresLeft: Int
    var connectionGeneration = 0
    var pairing: PairingOperation?
    var removalTask: Task<Void, Never>?
    var disconnectTask: Task<Void, Never>?
    var services: [ServiceState] = []
    /// The firmware side (scenario key `smp`): slots and upload outlive a connection.
    var smp: SMPServerState?
    /// Request fragments of the current connection (a request longer than one write).
    var smpInbox = SMP.Reassembler()
    /// SMP answers and Improv notifications go out in order: each waits for the one before.
    var outbox: Task<Void, Never>?
    /// Rebooting after an SMP reset: not connectable until the boot time passed.
    var booting = false
    /// Improv Wi-Fi provisioning (scenario key `improv`).
    var improv: ImprovServerState?

    init(spec: DeviceSpec, index: Int, adapterPath: ObjectPath) {
        self.spec = spec
        self.index = index
        self.adapterID = spec.adapter
        self.path = (try? ObjectPath(adapterPath.rawValue + "/" + deviceNodeName(spec.address))) ?? adapterPath
        advertising = spec.advertisingAtStart
        rssi = spec.rssi
        txPower = spec.txPower
        name = spec.name
        manufacturerData = spec.manufacturerData
        serviceData = spec.serviceData
        uuids = spec.uuids
        battery = spec.battery
        alias = spec.alias
        paired = spec.paired
        trusted = spec.trusted
        blocked = spec.blocked
        connectFailuresLeft = spec.faults.connectFailures
        improv = spec.improv.map(ImprovServerState.init)
        if let smp = spec.smp {
            self.smp = SMPServerState(smp)
            smpInbox = SMP.Reassembler(limit: smp.bufferSize)
        }
        // GATT objects: handles increase like an attribute database; BlueZ
        // names each object after the handle of its declaration.
        var handle = 0x000a
        for s in spec.gatt {
            guard let sp = try? ObjectPath(path.rawValue + "/service" + hex4(handle)) else { continue }
            let service = ServiceState(spec: s, path: sp, handle: handle)
            handle += 1
            for c in s.characteristics {
                guard let cp = try? ObjectPath(sp.rawValue + "/char" + hex4(handle)) else { continue }
                let ch = CharacteristicState(spec: c, path: cp, servicePath: sp, handle: handle + 1)
                handle += 2
                for d in c.descriptors {
                    guard let dp = try? ObjectPath(cp.rawValue + "/desc" + hex4(handle)) else { continue }
                    ch.descriptors.append(DescriptorState(spec: d, path: dp, handle: handle))
                    handle += 1
                }
                // A CCCD is implied by notify/indicate, as in a real database.
                if (c.flags.contains("notify") || c.flags.contains("indicate")),
                   !c.descriptors.contains(where: { $0.uuid == normalizeUUID("2902") }),
                   let dp = try? ObjectPath(cp.rawValue + "/desc" + hex4(handle)) {
                    ch.descriptors.append(DescriptorState(spec: DescriptorSpec(uuid: normalizeUUID("2902") ?? "", flags: ["read", "write"], value: [0, 0]),
                                                          path: dp, handle: handle))
                    handle += 1
                }
                service.characteristics.append(ch)
            }
            services.append(service)
        }
    }

    /// Known to bluetoothd across discovery sessions (kept, not temporary).
    var isKept: Bool { paired || trusted || connected || connecting || pairing != nil }

    var displayAlias: String {
        if let alias, !alias.isEmpty { return alias }
        if let name { return name }
        return String(spec.address.map { $0 == ":" ? "-" : $0 })
    }

    var allUUIDs: [String] {
        var set = Set(uuids)
        // The services of bluetoothd's attribute cache, kept after a disconnection.
        if gattExported { for s in spec.gatt where s.primary { set.insert(s.uuid) } }
        return set.sorted()
    }

    /// Forgets every exported object of this device (the bus side is gone).
    func dropRegistrations() {
        for s in services {
            for c in s.characteristics {
                for d in c.descriptors { d.registration = nil }
                c.notifySocket?.close()
                c.notifySocket = nil
                c.writeSocket?.close()
                c.writeSocket = nil
                c.registration = nil
            }
            s.registration = nil
        }
        gattExported = false
        hasBattery = false
        registration = nil
        exporting = false
        publishedManufacturerData = nil
        publishedServiceData = nil
        publishedRSSI = nil
    }

    func characteristic(uuid: String) -> CharacteristicState? {
        for s in services { for c in s.characteristics where c.spec.uuid == uuid { return c } }
        return nil
    }
}

struct AgentRecord {
    var sender: String
    var path: ObjectPath
    var capability: String
}

// MARK: The simulator

/// Runs a ``Scenario`` as `org.bluez` on a bus. Start it with
/// ``start(busAddress:)``, stop it with ``stop()``.
public actor BlueZSimulator {
    public let scenario: Scenario
    let options: SimulatorOptions
    var busAddress = ""
    var connection: DBusConnection?
    var objectManager: DBusObjectManagerRegistration?
    var rootRegistration: DBusObjectRegistration?
    var adapters: [AdapterState] = []
    var devices: [DeviceState] = []
    /// Flood changes sent so far (benchmark support): the next flood goes on
    /// from there (see ``floodAdvertisements(count:perSecond:)``).
    var floodChangesSent = 0
    var agents: [AgentRecord] = []
    /// Unique names of agents asked to be the default, most recent first.
    var defaultAgents: [String] = []
    var watchedClients: [String: Task<Void, Never>] = [:]
    var timelineTasks: [Task<Void, Never>] = []
    var startInstant = ContinuousClock.now
    var running = false
    /// Whether the service is on the bus (false during a bluetoothd outage).
    public private(set) var isOnBus = false
    /// Yields when a client starts discovery (max-speed playback waits for one).
    let discoveryGate = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    /// Counts finished passes of the whole-scenario playback (max speed or loop).
    let passes = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(1))

    public init(scenario: Scenario, options: SimulatorOptions = SimulatorOptions()) {
        self.scenario = scenario
        self.options = options
    }

    func log(_ text: String) { options.log?(text) }

    /// The object path of a device (for tests and the CLI).
    public nonisolated func devicePath(address: String, adapter: String = "hci0") -> String {
        "/org/bluez/\(adapter)/" + deviceNodeName(address.uppercased())
    }

    /// Connects to the bus at `busAddress`, takes `org.bluez`, exports the
    /// scenario's objects and starts its timelines.
    public func start(busAddress: String) async throws {
        guard !running else { return }
        guard options.speed >= 0.001, options.speed <= 1000 else {
            throw SimulatorError.badOptions("speed must be between 0.001 and 1000, got \(options.speed)")
        }
        self.busAddress = busAddress
        running = true
        startInstant = .now
        adapters = []
        for spec in scenario.adapters {
            guard let path = try? ObjectPath("/org/bluez/" + spec.id) else { continue }
            adapters.append(AdapterState(spec: spec, path: path))
        }
        devices = []
        for spec in scenario.devices {
            guard let a = adapters.first(where: { $0.spec.id == spec.adapter }) else { continue }
            devices.append(DeviceState(spec: spec, index: devices.count, adapterPath: a.path))
        }
        do {
            try await goOnBus()
        } catch {
            await stop()
            throw error
        }
        startTimelines()
    }

    /// Stops every timeline and stays on the bus: from now on nothing changes
    /// unless a client asks. For comparing what clients saw up to a moment.
    public func freeze() {
        for t in timelineTasks { t.cancel() }
        timelineTasks = []
    }

    /// Leaves the bus and stops every timeline.
    public func stop() async {
        running = false
        for t in timelineTasks { t.cancel() }
        timelineTasks = []
        goOffBus()
    }

    /// Seconds of scenario time → wall-clock duration.
    func duration(_ seconds: Double) -> Duration { .seconds(seconds / options.effectiveSpeed) }

    func sleep(_ seconds: Double) async throws {
        if seconds > 0 { try await Task.sleep(for: duration(seconds)) }
    }

    func adapter(_ id: String) -> AdapterState? { adapters.first { $0.spec.id == id } }

    // MARK: Bus presence

    func goOnBus() async throws {
        let c = try await DBusConnection.connect(to: .address(busAddress))
        connection = c
        if scenario.replyDelay > 0 { c.delayReplies(by: duration(scenario.replyDelay)) }
        // The object tree is complete before the name appears, so a client
        // that sees org.bluez arrive and calls GetManagedObjects gets it all.
        objectManager = try await c.exportObjectManager(at: .root, includeStandardInterfaces: true)
        rootRegistration = try await c.export("/org/bluez", interfaces: [agentManagerInterface()])
        isOnBus = true
        for a in adapters where a.present {
            try await exportAdapter(a)
        }
        let reply = try await c.requestName(BlueZSimulatorInfo.serviceName, flags: [.doNotQueue])
        guard reply == .primaryOwner || reply == .alreadyOwner else {
            goOffBus()
            throw SimulatorError.nameTaken(BlueZSimulatorInfo.serviceName)
        }
        log("org.bluez is on the bus")
    }

    func goOffBus() {
        for d in devices {
            d.removalTask?.cancel()
            d.removalTask = nil
            d.disconnectTask?.cancel()
            d.disconnectTask = nil
            for s in d.services { for c in s.characteristics { c.notifyTask?.cancel(); c.notifyTask = nil; c.notifyClients = [] } }
            d.connected = false
            d.connecting = false
            d.servicesResolved = false
            d.pairing?.cancelled = true
            d.pairing = nil
            d.dropRegistrations()
        }
        for a in adapters {
            dropMonitors(a)
            a.sessions = []
            a.filters = [:]
            a.discovering = false
            a.discoverableTimer?.cancel()
            a.discoverableTimer = nil
            a.registration = nil
        }
        agents = []
        defaultAgents = []
        for (_, t) in watchedClients { t.cancel() }
        watchedClients = [:]
        rootRegistration = nil
        objectManager = nil
        if isOnBus { log("org.bluez left the bus") }
        isOnBus = false
        connection?.close()
        connection = nil
    }

    // MARK: Timelines

    func at(_ seconds: Double, _ body: @escaping @Sendable (BlueZSimulator) async -> Void) {
        let deadline = startInstant + duration(seconds)
        timelineTasks.append(Task { [weak self] in
            do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }
            guard let self else { return }
            await body(self)
        })
    }

    func startTimelines() {
        if options.asFastAsConsumed || options.loop {
            startPlayback()
            return
        }
        for outage in scenario.outages {
            let killed = outage.killed
            at(outage.at) { sim in await sim.bluetoothdVanishes(killed: killed) }
            if let back = outage.returnAt { at(back) { sim in await sim.bluetoothdReturns() } }
        }
        for a in adapters {
            let id = a.spec.id
            for outage in a.spec.outages {
                at(outage.at) { sim in await sim.adapterRemoved(id) }
                if let back = outage.returnAt { at(back) { sim in await sim.adapterAdded(id) } }
            }
        }
        for (index, d) in devices.enumerated() {
            if let timeline = d.spec.advertising, !timeline.events.isEmpty {
                timelineTasks.append(runTimeline(timeline, from: startInstant) { sim, event in
                    await sim.applyAdvertisement(device: index, event)
                })
            }
            if let timeline = d.spec.batteryTimeline, !timeline.events.isEmpty {
                timelineTasks.append(runTimeline(timeline, from: startInstant) { sim, event in
                    await sim.applyBattery(device: index, event.value.first ?? 0)
                })
            }
        }
    }

    /// Plays `timeline` from `origin`, repeating it if asked. Sleeps between
    /// events (no polling).
    func runTimeline<E: TimedEvent>(_ timeline: Timeline<E>, from origin: ContinuousClock.Instant,
                                  apply: @escaping @Sendable (BlueZSimulator, E) async -> Void) -> Task<Void, Never> {
        let speed = options.effectiveSpeed
        return Task { [weak self] in
            var base = origin
            while !Task.isCancelled {
                for event in timeline.events {
                    let deadline = base + .seconds(event.at / speed)
                    do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }
                    guard let self else { return }
                    await apply(self, event)
                }
                guard let period = timeline.repeatEvery else { return }
                base = base + .seconds(period / speed)
            }
        }
    }

    func bluetoothdVanishes(killed: Bool = false) {
        guard isOnBus else { return }
        log(killed ? "bluetoothd is killed (the kernel keeps its links)" : "bluetoothd vanishes")
        for d in devices { d.linkKept = killed && d.connected }
        goOffBus()
    }

    func bluetoothdReturns() async {
        guard running, !isOnBus else { return }
        log("bluetoothd returns")
        // A starting bluetoothd exports its adapters unpowered and powers them
        // on a moment later (AutoEnable): clients see Powered go false → true.
        let autoEnabled = adapters.filter { $0.present && $0.spec.powered }
        for a in autoEnabled { a.powered = false }
        // Links the kernel kept: the new bluetoothd learns them from the
        // kernel (mgmt Get Connections) and lists those devices Connected.
        let kept = devices.filter { $0.linkKept }
        for d in kept { d.connected = true }
        do {
            try await goOnBus()
            for d in kept { try await exportDevice(d) }
            autoEnable(autoEnabled.map(\.spec.id))
        } catch {
            log("could not return to the bus: \(error)")
            goOffBus()
        }
    }

    func adapterRemoved(_ id: String) {
        guard let a = adapter(id), a.present else { return }
        log("adapter \(id) removed")
        a.present = false
        for d in devices where d.adapterID == id {
            d.removalTask?.cancel()
            d.disconnectTask?.cancel()
            for s in d.services { for c in s.characteristics { c.notifyTask?.cancel(); c.notifyClients = [] } }
            d.connected = false
            d.connecting = false
            d.servicesResolved = false
            d.pairing?.cancelled = true
            d.pairing = nil
            d.dropRegistrations()
        }
        releaseMonitors(a)
        a.sessions = []
        a.filters = [:]
        a.discovering = false
        a.powered = a.spec.powered
        a.discoverableTimer?.cancel()
        a.discoverableTimer = nil
        a.registration = nil
    }

    func adapterAdded(_ id: String) async {
        guard let a = adapter(id), !a.present else { return }
        log("adapter \(id) added")
        a.present = true
        guard isOnBus else { return }
        let enable = a.spec.powered
        if enable { a.powered = false }
        do { try await exportAdapter(a) } catch { log("cannot export \(id): \(error)") }
        if enable { autoEnable([id]) }
    }

    /// Powers adapters on shortly after they were exported, as bluetoothd does.
    func autoEnable(_ ids: [String]) {
        guard !ids.isEmpty else { return }
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(50))
            for id in ids { await self?.setPowered(id, true) }
        }
    }

    // MARK: Client tracking

    /// Follows a client's unique name; when it leaves the bus its discovery
    /// sessions, filters, notification sessions and agents go (as in BlueZ).
    func watchClient(_ sender: String) {
        guard watchedClients[sender] == nil, let connection else { return }
        watchedClients[sender] = Task { [weak self] in
            do {
                let stream = try await connection.nameOwnerChanges(of: sender)
                for try await owner in stream where owner == nil {
                    await self?.clientLeft(sender)
                    return
                }
            } catch {
                return
            }
        }
    }

    func clientLeft(_ sender: String) {
        watchedClients[sender] = nil
        agents.removeAll { $0.sender == sender }
        defaultAgents.removeAll { $0 == sender }
        for a in adapters {
            a.filters[sender] = nil
            if a.sessions.remove(sender) != nil && a.sessions.isEmpty { discoveryStopped(a) }
            if a.monitorApps.contains(where: { $0.sender == sender }) {
                dropMonitors(a, sender: sender)
                monitorsChanged(a)
            }
        }
        for d in devices {
            for s in d.services {
                for c in s.characteristics where c.notifyClients.contains(sender) {
                    c.notifyClients.remove(sender)
                    if c.notifyClients.isEmpty { stopNotifying(d, c) }
                }
            }
        }
    }
}
