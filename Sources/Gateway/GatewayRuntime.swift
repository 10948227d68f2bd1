import Bounds
import BLEParsing
internal import CPosix
import BlueZ
import DBus
import Domain
import Foundation
import HTTPServer
import Logging
import Fleet
import GatewayConfig
import ServiceLifecycle
import MQTT
import Presenters
import Locking
import Vocabulary

/// Everything a gateway needs to know, resolved from the configuration file.
public struct GatewayOptions: Sendable {
    public var topics: GatewayTopics
    public var selection: DeviceSelection
    public var policy: PublishPolicy
    public var discovery: Bool
    /// A device not heard for this long is published offline.
    public var expireAfter: TimeInterval
    /// Adapter name ("hci0"); nil: the first one bluetoothd has.
    public var adapter: String?
    /// Start discovery (active scanning); false: listen to what bluetoothd
    /// reports for other clients' discovery only.
    public var activeScan: Bool
    /// What bluetoothd's discovery filter gets: never UUIDs (see `services`).
    public var filter: DiscoveryFilter
    /// Only devices offering one of these services, in their UUID lists or
    /// as service data (`scan.filter.uuids`). Matched in our process: a
    /// bluetoothd UUID filter matches only the UUID lists, so a BTHome
    /// sensor (fcd2 as service data only) would never be reported.
    public var services: [String]
    public var bindkeys: [BluetoothAddress: [UInt8]]
    /// Devices kept connected, with the characteristics (UUIDs) to subscribe to.
    public var watched: [BluetoothAddress: [String]]
    /// nil: no MQTT (HTTP only). The runtime sets the will itself.
    public var mqtt: MQTTConfiguration?
    public var queueCapacity: Int
    public var http: HTTPOptions?
    public var stateDirectory: URL
    /// How long shutdown waits for the queue to drain to a connected broker
    /// (within ``GatewayRuntime/shutdownLimit`` with the other steps).
    public var flushTimeout: Duration
    /// Advertisements are gathered this long and go through the pipeline
    /// together (`publish.batch`): per pass costs (a snapshot, the planner,
    /// one outbox transaction) are paid once for all of them.
    public var batch: Duration
    /// How the reading store keeps history (and how often it writes).
    public var retention = RetentionPolicy()
    /// How often to check that bluetoothd still answers (`bluez.ping_interval`); nil: never.
    public var bluetoothdPingInterval: Duration? = .seconds(15)
    /// Fleet mode (needs ``mqtt`` and ``topics`` with a fleet); nil: a gateway on its own.
    public var fleet: FleetOptions?
    /// Phones, watches and tags followed as identities across their address rotations.
    public var identities: [IdentityResolver.Identity] = []
    /// Device profile files and directories (docs/PROFILES.md), read at the
    /// start and again on SIGHUP or `POST /api/reload`.
    public var profilePaths: [String] = []
    /// Of those, the ones that need not exist (the default directory beside the configuration).
    public var optionalProfilePaths: Set<String> = []
    /// Devices whose clock the gateway sets, and how often (docs/PROFILES.md, "Time sync").
    public var timeSync: [BluetoothAddress] = []
    public var timeSyncInterval: Duration = .seconds(86_400)

    /// Fleet mode: this gateway's room and the ownership rule (docs/GATEWAY.md, "Fleet").
    public struct FleetOptions: Sendable, Equatable {
        public var room: String
        public var rule: OwnershipTable.Rule
        /// Seconds between two sighting batches.
        public var sightingInterval: Double
        /// Seconds before the first claim (nil: twice the interval, at least 3).
        public var settle: Double?
        public init(room: String, rule: OwnershipTable.Rule = .init(), sightingInterval: Double = 2, settle: Double? = nil) {
            self.room = room
            self.rule = rule
            self.sightingInterval = sightingInterval
            self.settle = settle
        }
    }

    public struct HTTPOptions: Sendable, Equatable {
        public var host: String
        public var port: Int
        public var token: String?
        public init(host: String = "127.0.0.1", port: Int = 8080, token: String? = nil) {
            self.host = host
            self.port = port
            self.token = token
        }
    }

    public init(topics: GatewayTopics, stateDirectory: URL, selection: DeviceSelection = .decodable,
                policy: PublishPolicy = PublishPolicy(), discovery: Bool = true, expireAfter: TimeInterval = 300,
                adapter: String? = nil, activeScan: Bool = true, filter: DiscoveryFilter = DiscoveryFilter(transport: .le),
                bindkeys: [BluetoothAddress: [UInt8]] = [:], watched: [BluetoothAddress: [String]] = [:],
                mqtt: MQTTConfiguration? = nil, queueCapacity: Int = 100_000, http: HTTPOptions? = nil,
                flushTimeout: Duration = .seconds(4), batch: Duration = .milliseconds(100)) {
        self.topics = topics
        self.stateDirectory = stateDirectory
        self.selection = selection
        self.policy = policy
        self.discovery = discovery
        self.expireAfter = expireAfter
        self.adapter = adapter
        self.activeScan = activeScan
        self.filter = filter
        self.services = filter.uuids
        self.filter.uuids = []
        self.bindkeys = bindkeys
        self.watched = watched
        self.mqtt = mqtt
        self.queueCapacity = queueCapacity
        self.http = http
        self.flushTimeout = flushTimeout
        self.batch = max(.zero, batch)
    }
}

/// Why a gateway could not start; each maps to a documented exit code.
public enum GatewayStartError: Error, Sendable, CustomStringConvertible {
    /// The D-Bus bus cannot be reached (EX_UNAVAILABLE).
    case busUnavailable(String)
    /// The state directory or a database cannot be used (EX_IOERR).
    case storage(String)
    /// The HTTP address cannot be bound (EX_UNAVAILABLE).
    case http(String)

    public var description: String {
        switch self {
        case let .busUnavailable(s), let .storage(s), let .http(s): return s
        }
    }
}

/// One running gateway: the repositories and presenters the dashboard uses,
/// with MQTT and HTTP as front ends instead of a terminal.
///
/// Data flow: bluetoothd → `BlueZDeviceRepository` → `DeviceListPresenter`
/// (the same filtering, staleness and expiry as on screen) → ``PublishPlanner``
/// → `OutboundQueue` (SQLite) → ``QueuePublisher`` → broker. Commands from
/// MQTT or HTTP go through ``CommandExecutor`` (a `DeviceDetailPresenter` per
/// device). Readings are also recorded in the reading store (HTTP history).
public final class GatewayRuntime: Sendable {
    public let options: GatewayOptions
    public let metrics = GatewayMetrics()
    let logger: Logger
    let client: BlueZClient
    let devices: BlueZDeviceRepository
    let adapters: BlueZAdapterRepository
    let control: BlueZDeviceControl
    let store: ReadingStore
    let queue: OutboundQueue
    let list: DeviceListPresenter
    let executor: CommandExecutor
    /// Firmware uploads and provisioning, a presenter per device (``FirmwareJobs``).
    let firmware: FirmwareJobs
    let manager: ConnectionManager
    let recorder: ReadingRecorder
    let loop: PublishingLoop
    /// The device profiles in force (replaced by ``reloadProfiles()``).
    let profiles: ProfileSource
    /// What was published (state and availability), for the HTTP event stream.
    let published = Broadcaster<OutgoingMessage>(bufferLimit: 256)
    private let parts = Lock<Parts>(Parts())
    /// The pending return of a whole list's freed memory (``publishLoop()``).
    private let releaseMemory = Lock<Task<Void, Never>?>(nil)
    private let loopEndings = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(1))

    struct Parts {
        var loops: ServiceGroup?
        var loopRunner: Task<Void, Never>?
        var mqtt: MQTTClient?
        var publisher: QueuePublisher?
        var agent: BlueZAgent?
        var http: HTTPServer?
        var stopping = false
    }

    func setHTTPServer(_ server: HTTPServer) { parts.withLock { $0.http = server } }
    var httpServer: HTTPServer? { parts.withLock { $0.http } }

    /// Returns once the D-Bus connection is gone (the bus daemon stopped or
    /// restarted); at once when the caller is cancelled.
    public func busDisconnected() async { await client.mirror.connection.disconnected() }

    /// Changes bluetoothd reported and the mirror applied (benchmarks wait on it).
    package var bluezChangesApplied: UInt64 { client.mirror.appliedChanges }

    /// Brings the polled figures (queue, publisher, repository counters) up to date before a scrape.
    public func refreshMetrics() {
        let (publisher, mqtt) = parts.withLock { ($0.publisher, $0.mqtt) }
        let stats = devices.statistics
        let depth = queue.depth
        let dropped = queue.dropped
        metrics.recordAdvertisements(stats.advertisements, at: Date())
        metrics.recordQueue(depth: depth, dropped: dropped)
        metrics.recordDeviceList(decodeErrors: stats.decodeErrors, coalesced: stats.coalesced, resynchronizations: stats.resynchronizations)
        metrics.recordBluetoothd(available: devices.current.availability == .available)
        metrics.recordMQTT(published: publisher?.publishedCount, receivedDropped: mqtt?.droppedMessages)
    }

    /// The adapter device ids are formed on.
    var adapterID: AdapterID {
        if let name = options.adapter, let id = try? AdapterID(name: name) { return id }
        if let first = client.mirror.snapshot().sortedAdapters.first { return first.id }
        return AdapterID(path: "/org/bluez/hci0")
    }

    private init(options: GatewayOptions, logger: Logger, client: BlueZClient, store: ReadingStore, queue: OutboundQueue,
                 profiles: ProfileSource) {
        self.profiles = profiles
        self.options = options
        self.logger = logger
        self.client = client
        self.store = store
        self.queue = queue
        let bindkeys = options.bindkeys
        // No remembered readings (they would be published as new) and no
        // RSSI history (nothing shows it); the publish interval is the batch.
        var configuration = DomainServices.Configuration(
            adapter: options.adapter, bindkeys: { bindkeys[$0] }, showRemembered: false,
            services: Set(options.services), publishInterval: options.batch, rssiHistory: 0, profiles: profiles)
        // Unwatched, the control only notes when each device was last heard:
        // once a second is enough for that, and each of its batches costs a
        // feed wake-up and a timer (docs/PERFORMANCE.md, "Thirteenth pass").
        configuration.unwatchedPause = Self.unwatchedControlPause
        let domain = DomainServices.open(client: client, store: store, configuration: configuration)
        adapters = domain.adapters
        devices = domain.devices
        control = domain.control
        manager = domain.manager
        recorder = domain.recorder
        list = DeviceListPresenter(repository: devices, navigator: Navigator(),
                                   expiry: .init(staleAfter: options.expireAfter, removeAfter: nil))
        let adapterName = options.adapter
        let mirror = client.mirror
        executor = CommandExecutor(control: control, adapter: {
            if let adapterName, let id = try? AdapterID(name: adapterName) { return id }
            return mirror.snapshot().sortedAdapters.first?.id ?? AdapterID(path: "/org/bluez/hci0")
        })
        let published = self.published, queue = self.queue, mqttConfigured = options.mqtt != nil, metrics = self.metrics
        firmware = FirmwareJobs(service: BlueZFirmwareService(client: client), topics: options.topics) { messages in
            // As enqueue(_:) does, for the firmware topic's few messages.
            if mqttConfigured {
                do throws(DomainError) {
                    try queue.enqueue(messages.map { .init(topic: $0.topic, payload: $0.payload, retain: $0.retain, qos: max($0.qos, 1)) })
                } catch {
                    metrics.countRefused(messages.count)
                }
            }
            for m in messages { published.yield(m) }
        }
        let fleetPublishing = options.fleet.map { PublishPlanner.Fleet(gateway: options.topics.gatewayID, room: $0.room) }
        let coordinator = options.fleet.flatMap { f -> FleetCoordinator? in
            guard options.topics.fleet != nil, options.mqtt != nil else { return nil }
            return FleetCoordinator(me: options.topics.gatewayID, room: f.room, topics: options.topics,
                                    options: .init(rule: f.rule, interval: f.sightingInterval, settle: f.settle))
        }
        let identities = options.identities.isEmpty ? nil : IdentityTracker(
            identities: options.identities, topics: options.topics, discovery: options.discovery,
            fleet: coordinator == nil ? nil : fleetPublishing, expireAfter: options.expireAfter)
        loop = PublishingLoop(planner: PublishPlanner(options: .init(topics: options.topics, selection: options.selection,
                                                                      policy: options.policy, discovery: options.discovery,
                                                                      fleet: coordinator == nil ? nil : fleetPublishing),
                                                        profiles: { profiles.profiles.profile(named: $0) }),
                              fleet: coordinator, identities: identities, watched: Set(options.watched.keys))
    }

    /// Connects to bluetoothd's bus and opens the state directory. Nothing
    /// runs until ``run()``.
    public static func start(bus: DBusBusAddress, options: GatewayOptions, logger: Logger) async throws(GatewayStartError) -> GatewayRuntime {
        let client: BlueZClient
        do { client = try await BlueZClient.connect(to: bus) } catch {
            throw .busUnavailable("cannot reach bluetoothd's bus (\(bus)): \(error.description)")
        }
        let directory = options.stateDirectory
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw .storage("cannot create the state directory \(directory.path): \(error.localizedDescription)")
        }
        // A directory the gateway cannot write (a read-only mount: root is
        // refused too) is refused here, whatever is in it. SQLite would
        // otherwise open databases left with their -shm files read-only and
        // the gateway would run on, storing and publishing nothing.
        if access(directory.path, W_OK) != 0 {
            throw .storage("the state directory \(directory.path) is not writable: \(String(cString: strerror(errno)))")
        }
        let store: ReadingStore
        let queue: OutboundQueue
        do {
            store = try ReadingStore(path: directory.appendingPathComponent("readings.sqlite").path, policy: options.retention)
            queue = try OutboundQueue(path: directory.appendingPathComponent("outbox.sqlite").path, capacity: options.queueCapacity)
        } catch {
            throw .storage("state directory \(directory.path): \(error.description)")
        }
        // Before the repositories exist, so that the first decode of every device uses them.
        let profiles = ProfileSource()
        let runtime = GatewayRuntime(options: options, logger: logger, client: client, store: store, queue: queue, profiles: profiles)
        runtime.reloadProfiles(initial: true)
        return runtime
    }

    /// What a profile reload found.
    public struct ProfileReload: Sendable {
        public var loaded: [String]
        public var errors: [String]
    }

    /// Reads the profile files again and puts the valid ones in force: a bad
    /// file is logged and left out (its device decodes as before it had a
    /// profile), the others apply to the next advertisement of every
    /// device, and every device is decoded again now. SIGHUP and `POST /api/reload`.
    @discardableResult
    public func reloadProfiles(initial: Bool = false) -> ProfileReload {
        guard !options.profilePaths.isEmpty else { return ProfileReload(loaded: [], errors: []) }
        let loaded = ProfileFiles.loadAll(options.profilePaths, optional: options.optionalProfilePaths)
        for error in loaded.errors {
            logger.error("profile left out: \(error.description)")
        }
        profiles.replace(with: loaded.profiles)
        metrics.recordProfiles(loaded: loaded.profiles.profiles.count, fileErrors: loaded.errors.count, reload: !initial)
        let names = loaded.profiles.profiles.map(\.name)
        if !names.isEmpty || !initial {
            logger.info("\(initial ? "profiles loaded" : "profiles reloaded"): \(names.isEmpty ? "none" : names.joined(separator: ", "))",
                        metadata: ["errors": "\(loaded.errors.count)"])
        }
        if !initial { devices.redecode() }
        return ProfileReload(loaded: names, errors: loaded.errors.map(\.description))
    }

    // MARK: - Running

    /// Starts every loop, each a service in one `ServiceGroup`; returns at
    /// once. ``shutdown()`` stops them; ``loopEnded()`` says when one of
    /// them ended on its own.
    public func run() {
        // Published before any device: the gateway's own Home Assistant device.
        if options.discovery, options.mqtt != nil {
            enqueue([GatewayDiscovery.gatewayDevice(topics: options.topics)])
        }
        let pinging = options.bluetoothdPingInterval.map { $0 > .zero } ?? false
        var loops = [
            GatewayLoop("publish") { [weak self] in await self?.publishLoop() },
            GatewayLoop("scan keeper") { [weak self] in await self?.scanKeeper() },
            GatewayLoop("metrics") { [weak self] in await self?.metricsLoop() },
            GatewayLoop("pairing agent", .task) { [weak self] in await self?.agentKeeper() },
            GatewayLoop("bluetoothd liveness", pinging ? .lifelong : .task) { [weak self] in await self?.bluetoothdLiveness() },
            GatewayLoop("reading store failures") { [weak self] in
                guard let failures = self?.recorder.failures() else { return }
                for await failure in failures { self?.storage(.readings, failed: failure) }
            },
        ]
        for (address, uuids) in options.watched.sorted(by: { $0.key < $1.key }) {
            let id = DeviceID(adapter: adapterID, address: address)
            // In a fleet the owner connects (when the fleet gives it the device).
            if !loop.inFleet { manager.watch(id, notify: uuids) }
            loops.append(GatewayLoop("GATT of \(address)") { [weak self] in await self?.followGATT(id, uuids: uuids) })
        }
        if options.mqtt != nil {
            loops.append(GatewayLoop("MQTT link") { [weak self] in await self?.mqttLink() })
        }
        if !options.profilePaths.isEmpty {
            loops.append(GatewayLoop("profile connections") { [weak self] in await self?.profileConnectionsLoop() })
        }
        for address in options.timeSync {
            loops.append(GatewayLoop("time sync of \(address)", .task) { [weak self] in await self?.timeSyncLoop(address) })
        }
        let group = ServiceGroup(configuration: .init(services: loops.map(\.configuration), logger: logger))
        let runner = Task { [weak self] in
            do {
                try await group.run()
            } catch {
                // A loop that ends while the gateway stops is the stop, not a fault.
                guard let self, !parts.withLock({ $0.stopping }) else { return }
                let loop = (error as? GatewayLoopEnded)?.loop ?? "\(error)"
                logger.critical("the \(loop) loop ended on its own; stopping the gateway (exit status 70) so that the service manager starts it again")
                loopEndings.continuation.yield(loop)
            }
        }
        parts.withLock { $0.loops = group; $0.loopRunner = runner }
        logger.info("gateway running", metadata: ["gateway": "\(options.topics.gatewayID)",
                                                   "mqtt": "\(options.mqtt?.endpoint ?? "off")"])
    }

    /// Returns the name of a loop that ended on its own (a bug: its source
    /// finished), once one has; nil when the caller is cancelled first.
    public func loopEnded() async -> String? {
        for await loop in loopEndings.stream { return loop }
        return nil
    }

    /// Stops taking in bluetoothd's signals (the mirror freezes as it is):
    /// the first thing a stopping gateway does, also straight from the
    /// signal handler (``GatewayService/runUntilSignalled(_:logger:)``),
    /// before the cooperative pool, busy with a flood, gets to the shutdown.
    public nonisolated func stopIngesting() { client.mirror.freeze() }

    /// How long ``shutdown()`` may take at most, whatever is broken (broker
    /// gone or blackholed, bus or bluetoothd gone): under the 10 s a user and
    /// systemd's stop timeout allow, with room for the signal to be handled
    /// and the process to exit. With 8 s that room (2 s) was not enough for a
    /// debug build under a flood on a busy 2-core machine (10.6 s from
    /// SIGTERM to exit, `GatewayOverloadTests`); what the shorter drain does
    /// not send stays in the outbox.
    public static let shutdownLimit: Duration = .seconds(6)

    /// Graceful stop: devices and the gateway go offline, the queue drains to
    /// the broker while it is connected (up to the flush timeout; what is left
    /// stays in the outbox for the next start), MQTT disconnects cleanly, the
    /// agent is unregistered and discovery stopped. Every step that waits for
    /// a peer has a time limit, and all of them together end within
    /// ``shutdownLimit``: a peer that is gone or never answers costs time,
    /// never the exit.
    public func shutdown() async {
        let first = parts.withLock { p -> Bool in defer { p.stopping = true }; return !p.stopping }
        guard first else { return }
        stopIngesting()
        let clock = ContinuousClock()
        let end = clock.now + Self.shutdownLimit
        /// What is left of the budget, keeping `reserve` for the steps after this one.
        func budget(_ wanted: Duration, reserve: Duration = .zero) -> Duration {
            max(.zero, min(wanted, end - clock.now - reserve))
        }
        /// Runs a step that waits for a peer; says so when it ran out of time.
        func step(_ name: String, _ wanted: Duration, reserve: Duration = .zero, _ body: @escaping @Sendable () async -> Void) async {
            let limit = budget(wanted, reserve: reserve)
            if await withTimeLimit(limit, body) == nil {
                logger.warning("shutdown: \(name) did not finish within \(limit); going on without it")
            }
        }
        logger.info("gateway stopping")
        // Stop producing: no more list states, scans or commands.
        let (loops, loopRunner, agent, http) = parts.withLock { p in (p.loops, p.loopRunner, p.agent, p.http) }
        if let loops, let loopRunner {
            // Each loop ends when its stream or sleep is cancelled; one stuck
            // in a call that does not heed cancellation is left behind
            // (cancelled) rather than holding up the steps that follow.
            await loops.triggerGracefulShutdown()
            await step("stopping the loops", .milliseconds(500)) { await loopRunner.value }
            loopRunner.cancel()
        }
        if let http { await step("stopping the HTTP API", .seconds(1)) { await http.stop() } }
        for address in options.watched.keys { manager.unwatch(DeviceID(adapter: adapterID, address: address)) }
        let offline = await loop.allOffline()
        enqueue(offline)
        let (mqtt, publisher) = parts.withLock { ($0.mqtt, $0.publisher) }
        if let mqtt, let publisher {
            // A broker that is away gets nothing now: the outbox keeps it for the next start.
            if mqtt.connectionState == .connected {
                let drained = await drainQueue(publisher: publisher, timeout: budget(options.flushTimeout, reserve: .seconds(4)))
                if drained {
                    logger.info("outbound queue flushed", metadata: ["published": "\(publisher.publishedCount)"])
                } else {
                    logger.warning("outbound queue not empty at shutdown; kept for the next start", metadata: ["depth": "\(queue.depth)"])
                }
            } else {
                logger.warning("MQTT broker not connected at shutdown; the outbound queue is kept for the next start",
                               metadata: ["depth": "\(queue.depth)"])
            }
            if mqtt.connectionState == .connected {
                let status = MQTTMessage(topic: options.topics.gatewayAvailability, payload: Array(GatewayTopics.offline.utf8),
                                         qos: .atLeastOnce, retain: true)
                await step("publishing the gateway offline", .seconds(1), reserve: .seconds(2)) { try? await mqtt.publish(status) }
            }
            await step("disconnecting from the MQTT broker", .seconds(2)) { await mqtt.disconnect() }
        }
        // The devices' latest readings the reading store holds back (written
        // once a minute while heard) go to the file.
        do throws(DomainError) { try store.flushPendingRows() } catch {
            logger.warning("shutdown: \(error.description)")
        }
        // Acknowledged messages whose rows are still in the file (deferred
        // by the queue) go now, so the next start does not publish them again.
        do throws(DomainError) { try queue.flushAcknowledged() } catch {
            logger.warning("shutdown: \(error.description); those messages may be published again at the next start")
        }
        if let agent { await step("unregistering the pairing agent", .seconds(1)) { await agent.unregister() } }
        let adapters = self.adapters, id = adapterID, filter = options.filter
        if options.activeScan {
            await step("stopping discovery", .seconds(1)) { try? await adapters.setScanning(false, adapter: id, filter: filter) }
        } else {
            await step("stopping passive scanning", .seconds(1)) { try? await adapters.setPassiveScanning(false, adapter: id, patterns: []) }
        }
        releaseMemory.withLock { $0?.cancel(); $0 = nil }
        parts.withLock { $0.mqtt = nil; $0.publisher = nil; $0.agent = nil; $0.http = nil; $0.loops = nil; $0.loopRunner = nil }
        loopEndings.continuation.finish()
        logger.info("gateway stopped")
    }

    /// Runs the publisher until the queue is empty or `timeout` passes.
    private func drainQueue(publisher: QueuePublisher, timeout: Duration) async -> Bool {
        if queue.depth == 0 { return true }
        guard timeout > .zero else { return false }
        let runner = Task { await publisher.run() }
        defer { runner.cancel() }
        return await firstElement(of: queue.depths(), within: timeout) { $0 == 0 } != nil
    }

    func enqueue(_ messages: [OutgoingMessage]) {
        guard !messages.isEmpty else { return }
        if options.mqtt != nil {
            // One transaction for what one state or tick produced.
            do throws(DomainError) {
                try queue.enqueue(messages.map { .init(topic: $0.topic, payload: $0.payload, retain: $0.retain, qos: max($0.qos, 1)) })
                storage(.outbox, failed: nil)
            } catch {
                // Refused (disk full, read-only, I/O error): lost, so counted as
                // dropped; logged when it starts and when it ends, not per message.
                metrics.countRefused(messages.count)
                storage(.outbox, failed: error.description)
            }
        }
        for m in messages { published.yield(m) }
    }

    /// A store's writes failing (`failed` its error) or working again (nil):
    /// counted, logged once per change, and `/healthz` says degraded meanwhile.
    func storage(_ source: GatewayMetrics.StorageWriter, failed reason: String?) {
        let (was, refused) = metrics.recordStorage(source, failed: reason)
        switch (was, reason) {
        case (nil, let reason?):
            let consequence = switch source {
            case .outbox: "messages are dropped (counted) until it can write again"
            case .readings: "readings are not recorded meanwhile"
            case .outboxPublisher: "publishing waits and tries again"
            }
            logger.error("storage: \(source.rawValue) failing: \(reason); \(consequence)")
        case (_?, nil):
            let note = source == .outbox ? " (\(refused) messages refused in all)" : ""
            logger.info("storage: \(source.rawValue) working again\(note)")
        default:
            break
        }
    }

    // MARK: - Loops

    private func publishLoop() async {
        // At most one state waits while the planner works (a flood makes
        // states faster than it plans); the one waiting carries the changed
        // rows of every state it replaced, so nothing is missed and memory
        // stays bounded.
        let metrics = self.metrics
        let states = list.coalescedStates { metrics.countListStateCoalesced() }
        let timer = Task { [weak self] in await self?.timerLoop() }
        defer { timer.cancel() }
        var lastRelease: ContinuousClock.Instant?
        for await state in states {
            let messages = await loop.listChanged(state.devices, changes: state.changes, now: Date()) { [self] in enqueue($0) }
            enqueue(messages)
            // A whole list (the first, or after lost events) went through
            // every stage at once: its copies are freed by now, but glibc
            // keeps their pages. Give them back once things settled, at most
            // once a minute (at 10 000 devices 7 MB of 76 MB RSS, measured
            // with malloc_trim from gdb; docs/PERFORMANCE.md, ninth pass).
            if state.changes == nil, case .loaded = state.devices,
               lastRelease.map({ ContinuousClock.now - $0 >= Self.memoryReleaseSpacing }) ?? true {
                lastRelease = .now
                releaseMemory.withLock { task in
                    task?.cancel()
                    task = Task {
                        do { try await Task.sleep(for: Self.memoryReleaseDelay) } catch { return }
                        _ = csystem_release_free_memory()
                    }
                }
            }
        }
    }

    /// How often at most the metrics that need the planner (devices online, fleet) are sampled.
    static let metricsSampleSpacing: Duration = .seconds(1)

    /// How long the device control lets advertisements gather while no one watches a device.
    static let unwatchedControlPause: Duration = .seconds(1)

    /// How long after a whole list its memory is given back, and how often at most.
    static let memoryReleaseDelay: Duration = .seconds(10)
    static let memoryReleaseSpacing: Duration = .seconds(60)

    /// Wakes the planner at its next deadline (held-back changes, heartbeats); sleeps otherwise.
    private func timerLoop() async {
        for await deadline in loop.deadlines() {
            guard let deadline else { continue }
            let delay = deadline.timeIntervalSinceNow
            if delay > 0 {
                do { try await Task.sleep(for: Bounds.duration(seconds: delay) + .milliseconds(1)) } catch { return }
            }
            enqueue(await loop.tick(now: Date()))
        }
    }

    /// Readings from a watched device's subscribed characteristics become part of its state.
    func followGATT(_ id: DeviceID, uuids: [String]) async {
        let wanted = Set(uuids.map(BlueZSnapshot.normalizeUUID))
        var last: [Reading]?
        for await snapshot in control.details(of: id) {
            var readings: [Reading] = []
            for service in snapshot.services {
                for c in service.characteristics where wanted.contains(BlueZSnapshot.normalizeUUID(c.uuid)) {
                    if case let .readings(r)? = c.decoded { readings.append(contentsOf: r) }
                }
            }
            guard readings != last else { continue }
            last = readings
            enqueue(await loop.gattChanged(id.address, readings: readings, now: Date()))
        }
    }

    /// Keeps the adapter powered and, for active scanning, discovery running
    /// with the configured filter — again after bluetoothd restarts.
    private func scanKeeper() async {
        var failures = 0
        // Asked for and not seen ending yet: no second request for the same session.
        var requested = false
        for await snapshot in adapters.snapshots() {
            let id = adapterID
            guard snapshot.bluetoothdAvailable, let adapter = snapshot.adapters.first(where: { $0.id == id }), adapter.powered else {
                requested = false
                if snapshot.bluetoothdAvailable, let adapter = snapshot.adapters.first(where: { $0.id == id }), !adapter.powered {
                    do throws(DomainError) {
                        try await adapters.setPowered(true, adapter: id)
                        logger.info("powered \(id.name) on")
                    } catch {
                        metrics.countDBusError()
                        logger.error("cannot power \(id.name) on: \(error.description)")
                    }
                }
                continue
            }
            let passive = !options.activeScan
            if passive {
                // Advertisement monitors for every format we decode; the repository
                // registers them again after bluetoothd restarts.
                guard snapshot.passiveScans[id] == nil else { continue }
            } else if snapshot.discoveryFilters[id] != nil {
                requested = false
                continue
            }
            guard !requested else { continue }
            let what = passive ? "passive scanning" : "scanning"
            do throws(DomainError) {
                if passive {
                    try await adapters.setPassiveScanning(true, adapter: id, patterns: PassiveScanPatterns.decodable())
                } else {
                    try await adapters.setScanning(true, adapter: id, filter: options.filter)
                }
                requested = true
                failures = 0
                logger.info("\(what) on \(id.name)")
            } catch {
                failures += 1
                metrics.countDBusError()
                logger.error("cannot start \(what) on \(id.name): \(error.description)")
                // Try again after a pause (the next snapshot would retry at once).
                do { try await Task.sleep(for: .seconds(min(60, 2 * failures))) } catch { return }
            }
        }
    }

    /// A NoInputNoOutput agent: watched devices may pair "just works" and
    /// use their services; anything needing a passkey is refused (nobody is
    /// there to type it).
    private func agentKeeper() async {
        let watched = Set(options.watched.keys)
        for await snapshot in adapters.snapshots() where snapshot.bluetoothdAvailable {
            if parts.withLock({ $0.agent != nil }) { return }
            do throws(BlueZError) {
                let logger = self.logger
                let agent = try await BlueZAgent.register(client: client, path: "/com/blecompanion/gateway/agent",
                                                          capability: .noInputNoOutput, makeDefault: true,
                                                          onRegisteredAgain: { error in
                    if let error {
                        logger.warning("cannot register the pairing agent with the restarted bluetoothd: \(error.description)")
                    } else {
                        logger.info("pairing agent registered again (bluetoothd restarted)")
                    }
                }) { request in
                    switch request {
                    case let .authorization(id), let .authorizeService(id, _): return watched.contains(id.address) ? .accept : .reject
                    case .cancel, .release: return .accept
                    default: return .reject
                    }
                }
                parts.withLock { $0.agent = agent }
                logger.info("pairing agent registered (NoInputNoOutput)")
                return
            } catch {
                logger.warning("cannot register the pairing agent yet: \(error.description)")
            }
        }
    }

    /// Follows ``BluetoothdLiveness`` (a ping every
    /// ``GatewayOptions/bluetoothdPingInterval``, at most 5 s to answer):
    /// a bluetoothd that keeps its bus name but stops answering becomes a
    /// health signal, a metric and one log line per change.
    private func bluetoothdLiveness() async {
        guard let interval = options.bluetoothdPingInterval, interval > .zero else { return }
        let timeout = min(interval, .seconds(5))
        let liveness = BluetoothdLiveness(client: client, interval: interval, timeout: timeout)
        var answering = true
        for await answered in liveness.states() {
            guard answered != answering else { continue }
            answering = answered
            metrics.recordBluetoothd(answering: answered)
            if answered {
                logger.info("bluetoothd answers again")
            } else {
                logger.warning("bluetoothd holds its bus name but did not answer a ping within \(timeout) (stopped, hung or swamped); /healthz says degraded until it does")
            }
        }
        withExtendedLifetime(liveness) {}
    }

    private func metricsLoop() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [weak self] in
                guard let statuses = self?.manager.statuses() else { return }
                var previous: [DeviceID: ConnectionStatus] = [:]
                for await current in statuses {
                    guard let self else { return }
                    for (id, status) in current where previous[id] != status {
                        switch status {
                        case .connected: metrics.countConnection(established: true)
                        case .retrying: metrics.countConnection(established: false)
                        default: break
                        }
                    }
                    previous = current
                }
            }
            // The queue's depth, the advertisement counters and whether
            // bluetoothd is there are read when /metrics or /healthz asks
            // (`refreshMetrics`); what needs the planner is sampled here, at
            // most once per `metricsSampleSpacing` while snapshots come. A
            // task woken by every state (the depth changes twice per batch,
            // the device list once) cost 2–3 wake-ups per batch
            // (docs/PERFORMANCE.md, "Thirteenth pass").
            group.addTask { [weak self] in
                guard let versions = self?.devices.versions() else { return }
                // A profile that does not fit its device's packets is the user's to fix: say so
                // in the log, at most once a minute per profile, with the last reason.
                var logged: [String: (count: UInt64, at: ContinuousClock.Instant)] = [:]
                for await _ in versions {
                    guard let self else { return }
                    let stats = devices.statistics
                    let now = ContinuousClock.now
                    for (context, count) in stats.decodeErrors where context.hasPrefix("profile ") {
                        let last = logged[context]
                        guard count > (last?.count ?? 0), last.map({ now - $0.at >= .seconds(60) }) ?? true else { continue }
                        logged[context] = (count, now)
                        logger.warning("\(context): \(count - (last?.count ?? 0)) advertisement payload(s) did not decode; last: \(stats.lastDecodeErrors[context] ?? "?")")
                    }
                    metrics.recordAdvertisements(stats.advertisements, at: Date())
                    metrics.recordDeviceList(decodeErrors: stats.decodeErrors, coalesced: stats.coalesced,
                                             resynchronizations: stats.resynchronizations)
                    let online = await loop.onlineCount()
                    metrics.recordDevicesOnline(online)
                    if let fleet = await loop.fleetStatistics() { metrics.recordFleet(fleet) }
                    do { try await Task.sleep(for: Self.metricsSampleSpacing) } catch { return }
                }
            }
        }
    }

    /// Connects to the broker (retrying with backoff while it is away), then
    /// keeps the queue draining, the gateway `online`, and commands answered.
    private func mqttLink() async {
        guard var configuration = options.mqtt else { return }
        configuration.will = MQTTMessage(topic: options.topics.gatewayAvailability, payload: Array(GatewayTopics.offline.utf8),
                                         qos: .atLeastOnce, retain: true)
        var attempt = 0
        var client: MQTTClient?
        while client == nil {
            do throws(MQTTError) {
                client = try await MQTTClient.connect(configuration)
            } catch {
                attempt += 1
                let delay = min(60, 1 << min(attempt, 6))
                logger.error("MQTT: \(error.description); retrying in \(delay) s (readings are queued meanwhile)")
                do { try await Task.sleep(for: .seconds(delay)) } catch { return }
            }
        }
        guard let client else { return }
        let publisher = QueuePublisher(queue: queue, client: client)
        let stopping = parts.withLock { p -> Bool in
            if !p.stopping { p.mqtt = client; p.publisher = publisher }
            return p.stopping
        }
        if stopping { await client.disconnect(); return }
        logger.info("MQTT connected to \(configuration.endpoint)")
        // Commands are subscribed before the gateway says `online`: online means ready for them.
        let filter = "\(options.topics.deviceScope)/+/command"
        let commands: AsyncStream<MQTTMessage>?
        do throws(MQTTError) { commands = try await client.subscribe(filter) } catch {
            logger.error("MQTT: cannot subscribe to \(filter): \(error.description); commands over MQTT are off")
            commands = nil
        }
        let fleetMessages = loop.inFleet ? await subscribeFleet(client) : nil
        let endpoint = configuration.endpoint
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await publisher.run() }
            if let fleetMessages {
                group.addTask { [weak self] in await self?.followFleet(fleetMessages) }
                group.addTask { [weak self] in await self?.fleetTicks() }
            }
            group.addTask { [weak self] in
                // `online` after every (re)connect: the broker published our will when we dropped.
                var lost = false
                for await state in client.states() {
                    guard let self else { return }
                    metrics.recordMQTT(connected: state == .connected, published: publisher.publishedCount)
                    guard state == .connected else {
                        if case let .disconnected(reason) = state {
                            logger.warning("MQTT disconnected: \(reason)")
                            lost = true
                        }
                        continue
                    }
                    if lost {
                        logger.info("MQTT connected again to \(endpoint)")
                        lost = false
                    }
                    try? await client.publish(MQTTMessage(topic: options.topics.gatewayAvailability,
                                                          payload: Array(GatewayTopics.online.utf8), qos: .atLeastOnce, retain: true))
                }
            }
            if let commands {
                group.addTask { [weak self] in
                    // Discarding: a finished command's task is released at once (a
                    // plain task group keeps every child until it is awaited). How
                    // many run at once the executor bounds (beyond it: a busy reply).
                    await withDiscardingTaskGroup { running in
                        for await message in commands {
                            running.addTask { [weak self] in await self?.handleMQTTCommand(message) }
                        }
                    }
                }
            }
            group.addTask { [weak self] in
                for await _ in publisher.lastFailures() {
                    guard let self else { return }
                    metrics.recordMQTT(published: publisher.publishedCount)
                }
            }
            group.addTask { [weak self] in
                for await failure in publisher.storageFailures() {
                    guard let self else { return }
                    storage(.outboxPublisher, failed: failure)
                }
            }
        }
    }

    /// Fleet mode: the other gateways' sightings, the claims, every gateway's
    /// status, merged into one stream (nil if a subscription failed: the
    /// gateway then runs as if the fleet had no other member, logged).
    private func subscribeFleet(_ client: MQTTClient) async -> AsyncStream<MQTTMessage>? {
        let topics = options.topics
        let filters = [topics.gatewayAvailabilityFilter, topics.fleetOwner("+"), topics.fleetSightings("+")]
        var streams: [AsyncStream<MQTTMessage>] = []
        for filter in filters {
            do throws(MQTTError) { streams.append(try await client.subscribe(filter, qos: .atLeastOnce)) } catch {
                logger.error("MQTT: cannot subscribe to \(filter): \(error.description); fleet coordination is off")
                return nil
            }
        }
        let (merged, continuation) = AsyncStream<MQTTMessage>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let pumps = Task {
            await withTaskGroup(of: Void.self) { group in
                for stream in streams {
                    group.addTask { for await m in stream { continuation.yield(m) } }
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in pumps.cancel() }
        await loop.fleetSubscribed(now: Date())
        return merged
    }

    private func followFleet(_ messages: AsyncStream<MQTTMessage>) async {
        for await message in messages {
            let (out, changes, problem) = await loop.fleetReceived(topic: message.topic, payload: message.payload, now: Date())
            if let problem { logger.warning("fleet: ignored a message: \(problem)") }
            for change in changes {
                switch change {
                case let .adopt(address, _):
                    logger.info("fleet: this gateway now speaks for \(address)")
                    if let uuids = options.watched[address] { manager.watch(DeviceID(adapter: adapterID, address: address), notify: uuids) }
                case let .release(address):
                    logger.info("fleet: another gateway speaks for \(address) now")
                    if options.watched[address] != nil {
                        // Its new owner connects: let go of the link (a peripheral often takes one central at a time).
                        let id = DeviceID(adapter: adapterID, address: address)
                        manager.unwatch(id)
                        do { try await control.disconnect(id) } catch {
                            logger.warning("fleet: could not disconnect \(address) after handing it over: \(error.description)")
                        }
                    }
                case let .adoptIdentity(name):
                    logger.info("fleet: this gateway now speaks for identity \(name)")
                case let .releaseIdentity(name):
                    logger.info("fleet: another gateway speaks for identity \(name) now")
                }
            }
            enqueue(out)
        }
    }

    private func fleetTicks() async {
        let interval = Bounds.duration(seconds: options.fleet?.sightingInterval ?? 2)
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            enqueue(await loop.fleetTick(now: Date()))
        }
    }

    /// How long an HTTP command passed on to another gateway of the fleet waits for its reply.
    static let forwardTimeout: Duration = .seconds(45)

    enum Forwarded: Sendable {
        case answered([UInt8], ok: Bool)
        case noBroker
        case timedOut
    }

    /// Fleet mode: sends a command (the HTTP request's JSON `body`) for
    /// `address` to the device's command topic, where its owner takes it, and
    /// returns the owner's reply. `id` is the command's own, or one is made
    /// up so the reply can be told from others'.
    func forward(_ body: [UInt8], id: String?, to address: BluetoothAddress) async -> Forwarded {
        guard let client = parts.withLock({ $0.mqtt }), client.connectionState == .connected else { return .noBroker }
        let tag = id ?? "http-\(UUID().uuidString.lowercased())"
        var payload = body
        if id == nil, var object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] {
            object["id"] = tag
            if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) { payload = Array(data) }
        }
        let replies: AsyncStream<MQTTMessage>
        do throws(MQTTError) { replies = try await client.subscribe(options.topics.reply(address)) } catch { return .noBroker }
        do throws(MQTTError) {
            try await client.publish(MQTTMessage(topic: options.topics.command(address), payload: payload, qos: .atLeastOnce, retain: false))
        } catch { return .noBroker }
        let reply = await firstElement(of: replies, within: Self.forwardTimeout) { message in
            ((try? JSONSerialization.jsonObject(with: Data(message.payload))) as? [String: Any])?["id"] as? String == tag
        }
        guard let reply else { return .timedOut }
        let ok = ((try? JSONSerialization.jsonObject(with: Data(reply.payload))) as? [String: Any])?["ok"] as? Bool ?? false
        return .answered(reply.payload, ok: ok)
    }

    private func handleMQTTCommand(_ message: MQTTMessage) async {
        // <root>/<addr>/command (the subscription's filter)
        let device = options.topics.deviceLevels(of: message.topic)
        guard let device, let address = GatewayTopics.address(fromID: device.id) else {
            // Answered too (on the topic's own reply topic), so the sender is not left waiting.
            let given = device.map { String($0.id) } ?? message.topic
            let text = "\"\(given)\" in \(message.topic) is not a device address (12 hex digits, e.g. e45f01aa1001)"
            logger.warning("MQTT command refused: \(text)")
            metrics.countCommand("invalid", ok: false)
            let id = (try? GatewayCommand.parse(message.payload))?.id
            let body = SortedJSON.bytes([("ok", .bool(false)), ("error", .string(text)), ("id", id.map { .string($0) } ?? .null)])
            let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
            enqueue([OutgoingMessage(topic: levels.dropLast().joined(separator: "/") + "/reply", payload: body, retain: false, qos: 1)])
            return
        }
        // In a fleet every gateway hears the command; the device's owner answers it.
        if loop.inFleet, await !loop.fleetOwns(address) { return }
        let reply: GatewayCommandReply
        do throws(GatewayCommandError) {
            let command = try GatewayCommand.parse(message.payload)
            reply = await execute(command, on: address)
        } catch {
            reply = GatewayCommandReply(id: error.id, action: nil, address: address, error: error.description)
            metrics.countCommand("invalid", ok: false)
        }
        enqueue([OutgoingMessage(topic: options.topics.reply(address), payload: reply.json, retain: false, qos: 1)])
    }

    struct CommandProblem: Error, CustomStringConvertible { var description: String }

    /// A profile command as the write it is: the device's profile (by its
    /// advertisements, as the repository matches it), the command by name,
    /// its arguments encoded by the command's layout.
    func profileWrite(_ command: GatewayCommand, on address: BluetoothAddress) -> Result<GatewayCommand, CommandProblem> {
        let set = profiles.profiles
        let id = DeviceID(adapter: adapterID, address: address)
        guard let device = client.mirror.snapshot().devices[id] else {
            return .failure(CommandProblem(description: "no device \(address) (not heard since bluetoothd started)"))
        }
        guard let profile = set.profile(for: AdvertisementReadings.advertisement(of: device)) else {
            return .failure(CommandProblem(description: "no device profile matches \(address), so it has no commands (docs/PROFILES.md)"))
        }
        guard let name = command.name, let c = profile.commands.first(where: { $0.name == name }) else {
            let known = profile.commands.map(\.name)
            return .failure(CommandProblem(description: "profile \(profile.name) has no command \"\(command.name ?? "")\""
                + (known.isEmpty ? "" : "; it has: \(known.joined(separator: ", "))")))
        }
        do throws(FieldLayout.Problem) {
            let bytes = try c.encode(text: command.arguments)
            if let extra = command.arguments.keys.sorted().first(where: { key in !c.arguments.contains { $0.name == key } }) {
                return .failure(CommandProblem(description: "\(name): \"\(extra)\" is not an argument (arguments: \(c.arguments(described: true)))"))
            }
            return .success(GatewayCommand(action: .write, characteristic: c.characteristic.string, value: bytes,
                                           withoutResponse: !c.withResponse, id: command.id))
        } catch {
            return .failure(CommandProblem(description: "\(name): \(error.description)"))
        }
    }

    /// Runs a device command (MQTT and HTTP both come here).
    public func execute(_ command: GatewayCommand, on address: BluetoothAddress) async -> GatewayCommandReply {
        logger.info("command \(command.action.rawValue)\(command.name.map { " \($0)" } ?? "") for \(address)")
        var reply: GatewayCommandReply
        if command.action.isFirmware {
            reply = await runFirmware(command, on: address)
        } else if command.action == .command {
            switch profileWrite(command, on: address) {
            case let .success(write):
                reply = await executor.execute(write, on: address)
                reply.action = GatewayCommand.Action.command.rawValue
            case let .failure(problem):
                reply = GatewayCommandReply(id: command.id, action: command.action.rawValue, address: address, error: problem.description)
            }
        } else {
            reply = await executor.execute(command, on: address)
        }
        metrics.countCommand(command.action.rawValue, ok: reply.ok, busy: reply.busy)
        if reply.busy {
            // Counted (result "busy"), not logged as a failure: a flood of commands would flood the log.
            return reply
        }
        if let error = reply.error {
            metrics.countDBusError()
            logger.warning("command \(command.action.rawValue) for \(address) failed: \(error)")
        }
        return reply
    }
}

/// The planner behind an actor: list states, GATT readings and timer ticks
/// arrive from different tasks; one at a time changes it.
actor PublishingLoop {
    private var planner: PublishPlanner
    private var gatt: [BluetoothAddress: [Reading]] = [:]
    private var lastList: Loadable<DeviceListPresenter.Rows> = .loading
    private let deadline = StateStore<Date?>(nil)
    /// After ``allOffline()``: a list state still in flight must not bring devices back.
    private var stopped = false
    /// Fleet mode: which devices this gateway publishes.
    private var fleet: FleetCoordinator?
    nonisolated let inFleet: Bool
    /// Identities followed across address rotations (nil: none configured).
    private var identities: IdentityTracker?
    /// Watched devices: in a fleet they are sighted before they have readings
    /// (they have none until connected, and only their owner connects).
    private let watched: Set<BluetoothAddress>

    init(planner: PublishPlanner, fleet: FleetCoordinator? = nil, identities: IdentityTracker? = nil, watched: Set<BluetoothAddress> = []) {
        self.planner = planner
        self.fleet = fleet
        self.identities = identities
        self.watched = watched
        inFleet = fleet != nil
    }

    /// The messages a new list state makes. `emit` takes those of a whole
    /// list in slices as they are made (see ``PublishPlanner``); the rest are returned.
    func listChanged(_ list: Loadable<DeviceListPresenter.Rows>, changes: DeviceListPresenter.RowChanges?, now: Date,
                     emit: (@Sendable ([OutgoingMessage]) -> Void)? = nil) -> [OutgoingMessage] {
        guard !stopped else { return [] }
        var identityMessages: [OutgoingMessage] = []
        if fleet != nil || identities != nil { hear(list, changes: changes, &identityMessages) }
        lastList = list
        var out = planner.update(list, changes: changes, gatt: gatt, now: now, emit: emit)
        out += identityMessages
        updateDeadline()
        return out
    }

    /// The planner's next deadline, or an identity's expiry if sooner.
    private func updateDeadline() {
        let next = [planner.nextDeadline, identities?.nextExpiry].compactMap { $0 }.min()
        deadline.update { $0 = next }
    }

    func gattChanged(_ address: BluetoothAddress, readings: [Reading], now: Date) -> [OutgoingMessage] {
        guard !stopped else { return [] }
        gatt[address] = readings.isEmpty ? nil : readings
        // The same rows; only this device's GATT readings are new.
        let out = planner.update(lastList, changed: [address], gatt: gatt, now: now)
        updateDeadline()
        return out
    }

    func tick(now: Date) -> [OutgoingMessage] {
        guard !stopped else { return [] }
        var out = planner.tick(now: now)
        out += identities?.expire(now: now.timeIntervalSince1970) ?? []
        updateDeadline()
        return out
    }

    /// Every online device goes offline (shutdown).
    func allOffline() -> [OutgoingMessage] {
        stopped = true
        deadline.update { $0 = nil }
        return planner.update(.unavailable(.stopping), now: Date())
    }

    func onlineCount() -> Int { planner.onlineAddresses.count }

    // MARK: Fleet mode

    /// This gateway's own sightings: the rows that changed (every row when
    /// the state does not say which), fresh ones only: identities (any
    /// address that resolves to one) and, in a fleet, the selected devices.
    private func hear(_ list: Loadable<DeviceListPresenter.Rows>, changes: DeviceListPresenter.RowChanges?,
                      _ out: inout [OutgoingMessage]) {
        guard case let .loaded(all) = list else { return }
        func one(_ row: DeviceListPresenter.Row, _ out: inout [OutgoingMessage]) {
            guard !row.stale, let rssi = row.rssi, let seen = row.lastSeen else { return }
            let address = row.id.address
            let at = seen.timeIntervalSince1970
            if address.randomAddressType == .resolvablePrivate, let (name, messages) = identities?.heard(address, rssi: rssi, at: at) {
                out += messages
                if let name {
                    fleet?.heardIdentity(name, rssi: rssi, at: at)
                    return
                }
            }
            guard fleet != nil, watched.contains(address)
                    || planner.options.selection.includes(address, decodable: row.format != nil || gatt[address] != nil) else { return }
            fleet?.heard(address, rssi: rssi, at: at)
        }
        if let changes { for row in changes.rows { one(row, &out) } } else { for row in all { one(row, &out) } }
    }

    func fleetSubscribed(now: Date) { fleet?.subscribed(now: now.timeIntervalSince1970) }

    /// A message on a fleet subscription: the planner adopts or releases
    /// devices as the claims say; returns what to publish, what changed and
    /// why a message was ignored, if it was.
    func fleetReceived(topic: String, payload: [UInt8], now: Date)
        -> ([OutgoingMessage], [FleetCoordinator.Change], String?)
    {
        guard !stopped, let (changes, problem) = fleet?.received(topic: topic, payload: payload) else { return ([], [], nil) }
        var out: [OutgoingMessage] = []
        for change in changes {
            switch change {
            case let .adopt(address, previous): out.append(contentsOf: planner.adopt(address, previousState: previous, now: now))
            case let .release(address): planner.release(address)
            case let .adoptIdentity(name): out += identities?.adopt(name, now: now.timeIntervalSince1970) ?? []
            case let .releaseIdentity(name): identities?.release(name)
            }
        }
        if !changes.isEmpty { updateDeadline() }
        return (out, changes, problem)
    }

    /// Sightings and claims due now.
    func fleetTick(now: Date) -> [OutgoingMessage] {
        guard !stopped else { return [] }
        let planner = self.planner
        return fleet?.tick(now: now.timeIntervalSince1970) { planner.sentStateHash($0) } ?? []
    }

    /// Identities resolved so far, for tests and metrics: name → the address it uses now.
    func identityAddresses() -> [String: BluetoothAddress] { identities?.seen.mapValues(\.address) ?? [:] }

    func fleetOwns(_ address: BluetoothAddress) -> Bool { fleet?.owns(address) ?? true }

    func fleetStatistics() -> FleetCoordinator.Statistics? { fleet?.currentStatistics }

    /// The gateway that speaks for `address` in the fleet (nil: none, or not in a fleet).
    func fleetOwner(of address: BluetoothAddress, now: Date) -> String? { fleet?.owner(of: address, now: now.timeIntervalSince1970) }

    func snapshot() -> [PublishPlanner.Published] { planner.devices.values.sorted { $0.record.id.address < $1.record.id.address } }

    nonisolated func deadlines() -> AsyncStream<Date?> { deadline.states() }
}

/// The gateway's own Home Assistant device: a connectivity sensor on the
/// gateway availability topic; every device names it as `via_device`.
public enum GatewayDiscovery {
    public static func gatewayDevice(topics: GatewayTopics) -> OutgoingMessage {
        let identifier = HomeAssistantDiscovery.gatewayIdentifier(topics)
        let members: [(String, FieldValue)] = [
            ("name", .string("Status")),
            ("unique_id", .string("\(identifier)_status")),
            ("object_id", .string("\(identifier)_status")),
            ("state_topic", .string(topics.gatewayAvailability)),
            ("payload_on", .string(GatewayTopics.online)),
            ("payload_off", .string(GatewayTopics.offline)),
            ("device_class", .string("connectivity")),
            ("entity_category", .string("diagnostic")),
            ("device", .nested([
                ("identifiers", .list([.string(identifier)])),
                ("name", .string("BLE Companion \(topics.gatewayID)")),
                ("manufacturer", .string("BLE Companion")),
                ("model", .string("Bluetooth LE gateway")),
            ])),
        ]
        let topic = topics.discoveryConfig(component: "binary_sensor", nodeID: topics.gatewayID, objectID: "status")
        return OutgoingMessage(topic: topic, payload: SortedJSON.bytes(members), retain: true, qos: 1)
    }
}
