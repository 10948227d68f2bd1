import BlueZ
import Bounds
import DBus
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import BLEParsing
import Fleet
import GatewayConfig
import Logging
import MQTT
import ServiceLifecycle
import ServiceSupport
import Vocabulary

extension GatewayOptions {
    /// The options a validated configuration file describes. `stateDirectory`
    /// is used when the file names none. Cannot fail: GatewayConfig read every
    /// address, UUID and key already (through the shared vocabulary), and
    /// reported a bad one with its key and line.
    public init(configuration c: GatewayConfiguration, stateDirectory fallback: URL) {
        let topics = GatewayTopics(gatewayID: c.gatewayID, base: c.mqtt?.baseTopic ?? "blecompanion",
                                   discoveryPrefix: c.mqtt?.discoveryPrefix ?? "homeassistant", fleet: c.fleet?.name)
        let selection: DeviceSelection
        switch c.selection {
        case .decodable: selection = .decodable
        case let .allow(list): selection = .allow(Set(list))
        case let .deny(list): selection = .deny(Set(list))
        }
        var watched: [BluetoothAddress: [String]] = [:]
        for w in c.watched { watched[w.address] = w.subscribe }
        var filter = DiscoveryFilter(uuids: c.filter.uuids, rssi: c.filter.rssi,
                                     transport: c.filter.transport.flatMap(DiscoveryFilter.Transport.init(rawValue:)))
        filter.duplicateData = c.filter.duplicateData
        filter.pattern = c.filter.pattern.flatMap { $0.isEmpty ? nil : $0 }
        var mqtt: MQTTConfiguration?
        if let m = c.mqtt {
            mqtt = MQTTConfiguration(
                host: m.host, port: m.port, clientID: m.clientID ?? "blecompanion-\(topics.gatewayID)", username: m.username,
                password: m.password, protocolVersion: m.protocolVersion == .v5 ? .v5 : .v311, keepAlive: m.keepAlive,
                tls: m.tls.map { MQTTConfiguration.TLS(caFile: $0.caFile, certificateFile: $0.certificateFile, keyFile: $0.keyFile,
                                                       insecure: $0.insecure) })
        }
        self.init(topics: topics,
                  stateDirectory: c.stateDirectory.map { URL(fileURLWithPath: $0) } ?? fallback,
                  selection: selection,
                  policy: PublishPolicy(minInterval: c.publish.minInterval, heartbeat: c.publish.heartbeat),
                  discovery: c.mqtt?.discovery ?? false,
                  expireAfter: c.expireAfter,
                  adapter: c.adapter,
                  activeScan: c.scanMode == .active,
                  filter: filter,
                  bindkeys: c.bindkeys,
                  watched: watched,
                  mqtt: mqtt,
                  queueCapacity: c.mqtt?.queueCapacity ?? 100_000,
                  http: c.http.map { HTTPOptions(host: $0.host, port: $0.port, token: $0.token) },
                  batch: Bounds.duration(seconds: c.publish.batch))
        profilePaths = c.profiles + (c.defaultProfileDirectory.map { [$0] } ?? [])
        optionalProfilePaths = Set(c.defaultProfileDirectory.map { [$0] } ?? [])
        timeSync = c.timeSync
        timeSyncInterval = Bounds.duration(seconds: c.timeSyncInterval)
        bluetoothdPingInterval = c.pingInterval > 0 ? Bounds.duration(seconds: c.pingInterval) : nil
        identities = c.identities.sorted { $0.key < $1.key }.compactMap { name, key in
            IdentityResolvingKey(bytes: key).map { IdentityResolver.Identity(name: name, key: $0) }
        }
        fleet = c.fleet.map {
            FleetOptions(room: $0.room ?? c.gatewayID,
                         rule: .init(hysteresis: $0.hysteresis, dwell: $0.dwell, staleAfter: $0.staleAfter),
                         sightingInterval: $0.sightingInterval)
        }
    }
}

/// The gateway as a swift-service-lifecycle service: runs until a graceful
/// shutdown (SIGTERM/SIGINT through the service group), tells systemd
/// READY/STOPPING and pets its watchdog, then stops the runtime gracefully.
public struct GatewayService: Service {
    let runtime: GatewayRuntime
    let notifier: SystemdNotifier
    /// For the process that owns the gateway: how long after a shutdown began
    /// the process ends itself if shutdown is still not done (nil: never).
    let exitDeadline: Duration?

    public init(runtime: GatewayRuntime, notifier: SystemdNotifier, exitDeadline: Duration? = nil) {
        self.runtime = runtime
        self.notifier = notifier
        self.exitDeadline = exitDeadline
    }

    public func run() async throws {
        try await runtime.startHTTP()
        runtime.run()
        _ = notifier.ready(status: "publishing as \(runtime.options.topics.gatewayID)")
        let watchdog = Task { [notifier] in await notifier.runWatchdog() }
        // Suspends until the group starts a graceful shutdown (or is
        // cancelled), or the bus connection is lost: a bus daemon that
        // restarts does not bring our connection back (a new one has a new
        // name and no match rules), so the gateway stops and says why, and
        // the service manager starts it again (EX_UNAVAILABLE, 69: the
        // unit's Restart=on-failure), instead of answering 503 for ever.
        // A loop of the gateway that ended on its own (a bug) stops it too,
        // with EX_SOFTWARE (70): restarted, rather than up and publishing nothing.
        let runtime = self.runtime
        enum Ending { case requested, busLost, loopEnded(String) }
        let ending = await withTaskGroup(of: Ending?.self) { group -> Ending in
            group.addTask { try? await gracefulShutdown(); return .requested }
            group.addTask { await runtime.busDisconnected(); return Task.isCancelled ? nil : .busLost }
            group.addTask { await runtime.loopEnded().map(Ending.loopEnded) }
            var first: Ending?
            while first == nil, let next = await group.next() { first = next }
            group.cancelAll()
            return first ?? .requested
        }
        let status: String
        switch ending {
        case .requested: status = "flushing the outbound queue"
        case .busLost:
            runtime.logger.critical("lost the D-Bus connection (the bus daemon stopped or restarted); stopping with exit status 69 so that the service manager starts the gateway again")
            status = "D-Bus connection lost"
        case let .loopEnded(loop): status = "the \(loop) loop ended"
        }
        _ = notifier.stopping(status: status)
        if let deadline = exitDeadline { ShutdownDeadline.arm(after: deadline, logger: runtime.logger) }
        await runtime.shutdown()
        watchdog.cancel()
        switch ending {
        case .requested: return
        case .busLost: throw GatewayBusLost()
        case let .loopEnded(loop): throw GatewayLoopEnded(loop: loop)
        }
    }

    /// Runs the gateway until SIGTERM or SIGINT; the process exits at the
    /// latest 7.5 s after the signal (see ``ShutdownDeadline``). SIGHUP
    /// reloads the device profiles (`systemctl reload`, as mosquitto and
    /// nginx take it); a gateway whose terminal goes away runs on, as under
    /// nohup (its log lines to the terminal are lost, not its work).
    public static func runUntilSignalled(_ runtime: GatewayRuntime, logger: Logger) async throws {
        let service = GatewayService(runtime: runtime, notifier: SystemdNotifier(logger: logger),
                                     exitDeadline: GatewayRuntime.shutdownLimit + .milliseconds(1500))
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: service)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        // The service group hears the signal through the cooperative pool,
        // which a flood of advertisements keeps busy: 1.5 to 2.5 s from
        // SIGTERM to the shutdown's first line, measured under
        // GatewayOverloadTests' flood. A signal source on a queue of its
        // own stops the intake at once, which frees the pool, and asks the
        // group to stop too: a signal that arrives before the group's own
        // sources exist would otherwise reach only this one and be lost
        // (a gateway that ran on after SIGINT, seen in GatewayLivenessTests).
        //
        // Not `signal(SIG_IGN)` first, on Linux: libdispatch installs its own
        // handler there when the manager thread registers the source, a
        // moment after `resume()`, and a signal ignored in between was
        // discarded by the kernel — a gateway sent SIGTERM in that moment
        // ran on until killed (GatewayLivenessTests, once in CI). Until the
        // source is registered the signal keeps its default action and ends
        // the process, as before this function. (Darwin's kqueue source
        // needs the signal ignored, as swift-service-lifecycle does there.)
        let queue = DispatchQueue(label: "blecompanion.stop-intake")
        var sources = [SIGTERM, SIGINT].map { number -> any DispatchSourceSignal in
            #if canImport(Darwin)
            signal(number, SIG_IGN)
            #endif
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler {
                runtime.stopIngesting()
                Task { await group.triggerGracefulShutdown() }
            }
            source.resume()
            return source
        }
        signal(SIGHUP, SIG_IGN)
        let hangUp = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "blecompanion.reload"))
        hangUp.setEventHandler {
            logger.info("SIGHUP: reloading the device profiles")
            runtime.reloadProfiles()
        }
        hangUp.resume()
        sources.append(hangUp)
        defer { for s in sources { s.cancel() } }
        try await group.run()
    }
}

/// The gateway stopped because its D-Bus connection was lost (the process
/// exits with EX_UNAVAILABLE, 69, so that systemd restarts it).
public struct GatewayBusLost: Error, CustomStringConvertible {
    public var description: String { "the D-Bus connection was lost" }
}

/// The last line of defence for a stopping process: every step of
/// ``GatewayRuntime/shutdown()`` is bounded, so this never fires unless a
/// step is stuck in a way no time limit reaches (a thread blocked in a C
/// library). Then the process ends itself with EX_SOFTWARE (70) and says so,
/// rather than hang until systemd's SIGKILL. Everything the gateway accepted
/// is already in SQLite (each write is its own transaction), so nothing is
/// lost. A thread of its own: the cooperative pool may be the stuck part.
enum ShutdownDeadline {
    static func arm(after limit: Duration, logger: Logger) {
        let (seconds, attoseconds) = limit.components
        let interval = Double(seconds) + Double(attoseconds) / 1e18
        let thread = Thread {
            Thread.sleep(forTimeInterval: interval)
            logger.critical("shutdown did not finish within \(limit); exiting now (the outbox is kept)")
            fflush(nil)  // every stream: the log handler's lines are out before the exit
            _exit(70)
        }
        thread.name = "shutdown-deadline"
        thread.start()
    }
}
