import BlueZ
import BlueZSimulator
import DBus
import Locking
import ScenarioFormat

/// Records what bluetoothd (or the simulator) says on the bus: the object
/// tree, then every InterfacesAdded/Removed and PropertiesChanged from
/// `org.bluez` and every change of its owner, stamped on arrival with a
/// monotonic clock. ``stop()`` turns it into a ``Scenario``.
///
/// No gap: the signal rules are in place before GetManagedObjects, and
/// signals the reply already contains (a lower serial from the same sender)
/// are dropped, as the mirror does. Signals are stamped on the connection's
/// I/O thread, in arrival order, and folded by one task.
///
/// The recorder only listens. With `scan`, it also keeps a discovery session
/// (transport LE) on its adapter, as `blecompanion scan` does; without, it
/// records what other clients' discovery makes bluetoothd report.
public final class Recorder: Sendable {
    public struct Options: Sendable {
        public var filter: RecordingFilter
        /// Start discovery (on `filter.adapter`, else the first adapter).
        public var scan: Bool
        public var name: String
        public var temporaryDeviceTimeout: Double

        public init(filter: RecordingFilter = RecordingFilter(), scan: Bool = false, name: String = "recording",
                    temporaryDeviceTimeout: Double = 30) {
            self.filter = filter
            self.scan = scan
            self.name = name
            self.temporaryDeviceTimeout = temporaryDeviceTimeout
        }
    }

    enum Item: Sendable {
        case signal(DBusMessage, at: Double)
        case owner(String?, at: Double)
        /// The owner when the recording started (after the rules were in place).
        case initialOwner(String?)
        case end
    }

    public let connection: DBusConnection
    let options: Options
    let origin: ContinuousClock.Instant
    private let input: AsyncStream<Item>.Continuation
    private let events = Lock<[RecordedEvent]>([])
    private let registrations = Lock<[DBusSignalHandlerRegistration]>([])
    private let folder = Lock<Task<Void, Never>?>(nil)
    private let scanning = Lock<(client: BlueZClient?, session: DiscoverySession?)>((nil, nil))
    private let stoppedAt = Lock<Double?>(nil)

    private init(connection: DBusConnection, options: Options, input: AsyncStream<Item>.Continuation) {
        self.connection = connection
        self.options = options
        self.origin = .now
        self.input = input
    }

    /// Seconds since the recording started.
    public var elapsed: Double { seconds(ContinuousClock.now - origin) }

    /// Starts recording on `connection` (which the recorder then uses; the
    /// caller keeps it open until ``stop()`` returned).
    public static func start(connection: DBusConnection, options: Options = Options()) async throws -> Recorder {
        let (stream, continuation) = AsyncStream<Item>.makeStream(bufferingPolicy: .unbounded)
        let recorder = Recorder(connection: connection, options: options, input: continuation)
        let origin = recorder.origin
        let service = BlueZInterface.service
        let rules = [
            DBusMatchRule(sender: service, interface: BlueZInterface.objectManager, path: .root),
            DBusMatchRule(sender: service, interface: BlueZInterface.properties, member: "PropertiesChanged",
                          pathNamespace: BlueZInterface.managerPath),
        ]
        var regs: [DBusSignalHandlerRegistration] = []
        for rule in rules {
            regs.append(try await connection.addSignalHandler(matching: rule) { m in
                continuation.yield(.signal(m, at: seconds(ContinuousClock.now - origin)))
            })
        }
        // On the same thread and in the same order as bluetoothd's signals.
        let owners = DBusMatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                                   arguments: [0: service])
        regs.append(try await connection.addSignalHandler(matching: owners) { m in
            guard m.body.count == 3, case let .string(new) = m.body[2] else { return }
            continuation.yield(.owner(new.isEmpty ? nil : new, at: seconds(ContinuousClock.now - origin)))
        })
        recorder.registrations.withLock { $0 = regs }
        let owner = try await connection.nameOwner(service)
        continuation.yield(.initialOwner(owner))
        let task = Task { [connection] in
            var folding = Folding(connection: connection)
            for await item in stream {
                if case .end = item { break }
                if let event = await folding.fold(item) { recorder.events.withLock { $0.append(event) } }
            }
        }
        recorder.folder.withLock { $0 = task }
        if options.scan {
            do {
                try await recorder.startScanning()
            } catch {
                _ = await recorder.stop()
                throw error
            }
        }
        return recorder
    }

    private func startScanning() async throws {
        let client = BlueZClient(mirror: try await BlueZMirror.start(connection: connection))
        let adapter = try client.adapter(options.filter.adapter)
        let session = try await client.discover(adapter: adapter.id, filter: DiscoveryFilter(transport: .le))
        scanning.withLock { $0 = (client, session) }
    }

    /// The events folded so far (a copy).
    public var recordedEvents: [RecordedEvent] { events.withLock { $0 } }

    /// Stops listening (and discovering), folds what is still queued and
    /// returns the scenario. Later calls return the same recording.
    public func stop() async -> Scenario {
        let end = stoppedAt.withLock { t -> Double in
            if t == nil { t = elapsed }
            return t ?? 0
        }
        let session = scanning.withLock { s -> DiscoverySession? in
            defer { s = (nil, nil) }
            return s.session
        }
        await session?.stop()
        let regs = registrations.withLock { r -> [DBusSignalHandlerRegistration] in
            defer { r = [] }
            return r
        }
        for r in regs { r.remove() }
        input.yield(.end)
        input.finish()
        if let task = folder.withLock({ $0 }) { await task.value }
        return scenario(until: end)
    }

    /// The scenario of what was recorded up to `until` seconds.
    public func scenario(until: Double? = nil) -> Scenario {
        let list = recordedEvents
        let end = until ?? elapsed
        let builder = ScenarioBuilder(filter: options.filter, name: options.name, temporaryDeviceTimeout: options.temporaryDeviceTimeout)
        return builder.build(list.filter { $0.at <= end }, duration: end)
    }
}

/// Folds the queue in order: owner changes trigger an enumeration, and
/// signals that the enumeration already contains are dropped.
private struct Folding {
    let connection: DBusConnection
    var owner: String?
    var started = false
    /// (sender, serial) of the last GetManagedObjects reply.
    var enumerated: (String?, UInt32)?

    init(connection: DBusConnection) { self.connection = connection }

    mutating func fold(_ item: Recorder.Item) async -> RecordedEvent? {
        switch item {
        case .end:
            return nil
        case let .initialOwner(name):
            guard !started else { return nil }
            started = true
            guard let name else { return RecordedEvent(at: 0, .serviceLost) }
            return await enumerate(name, at: 0)
        case let .owner(name, at):
            if !started {
                // A change before the initial owner was known: that answer decides.
                return nil
            }
            if name == owner { return nil }
            guard let name else {
                owner = nil
                enumerated = nil
                return RecordedEvent(at: at, .serviceLost)
            }
            return await enumerate(name, at: at)
        case let .signal(m, at):
            guard let owner, m.sender == owner, let path = m.path else { return nil }
            if let (sender, serial) = enumerated, sender == m.sender, m.serial <= serial { return nil }
            switch (m.interface, m.member) {
            case (BlueZInterface.objectManager, "InterfacesAdded"):
                guard m.body.count == 2, case let .objectPath(object) = m.body[0],
                      let interfaces = try? m.body[1].decode(as: [String: [String: DBusValue]].self) else { return nil }
                return RecordedEvent(at: at, .interfacesAdded(object, unwrapped(interfaces)))
            case (BlueZInterface.objectManager, "InterfacesRemoved"):
                guard m.body.count == 2, case let .objectPath(object) = m.body[0],
                      let names = try? m.body[1].decode(as: [String].self) else { return nil }
                return RecordedEvent(at: at, .interfacesRemoved(object, names))
            case (BlueZInterface.properties, "PropertiesChanged"):
                guard m.body.count == 3, case let .string(interface) = m.body[0],
                      let changed = try? m.body[1].decode(as: [String: DBusValue].self),
                      let invalidated = try? m.body[2].decode(as: [String].self) else { return nil }
                return RecordedEvent(at: at, .propertiesChanged(path, interface: interface, changed: changed.mapValues(\.unwrapped),
                                                                invalidated: invalidated))
            default:
                return nil
            }
        }
    }

    /// GetManagedObjects from the new owner, retried while its ObjectManager
    /// is not attached yet (bluetoothd takes its name first).
    mutating func enumerate(_ name: String, at: Double) async -> RecordedEvent? {
        owner = name
        var delay = Duration.milliseconds(25)
        for attempt in 0..<9 {
            do {
                let reply = try await connection.call(destination: BlueZInterface.service, path: .root,
                                                      interface: BlueZInterface.objectManager, member: "GetManagedObjects")
                guard let body = reply.body.first,
                      let managed = try? body.decode(as: [ObjectPath: [String: [String: DBusValue]]].self) else { return nil }
                enumerated = (reply.sender, reply.serial)
                return RecordedEvent(at: at, .tree(managed.mapValues(unwrapped)))
            } catch {
                if attempt == 8 { break }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(1))
            }
        }
        return nil
    }
}

private func unwrapped(_ interfaces: [String: [String: DBusValue]]) -> [String: [String: DBusValue]] {
    interfaces.mapValues { $0.mapValues(\.unwrapped) }
}

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
}
