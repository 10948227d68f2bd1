import DBus
import Locking

/// What an agent can do for pairing (AgentManager1.RegisterAgent).
public enum AgentCapability: String, Sendable, CaseIterable {
    case displayOnly = "DisplayOnly"
    case displayYesNo = "DisplayYesNo"
    case keyboardOnly = "KeyboardOnly"
    case noInputNoOutput = "NoInputNoOutput"
    case keyboardDisplay = "KeyboardDisplay"
}

/// A question or notice from bluetoothd to the agent (org.bluez.Agent1).
public enum AgentRequest: Sendable, Equatable {
    /// Enter the PIN code of a legacy (BR/EDR) device.
    case pinCode(DeviceID)
    /// Show this PIN code; the user types it on the device.
    case displayPinCode(DeviceID, String)
    /// Enter the 6-digit passkey the device shows.
    case passkey(DeviceID)
    /// Show this passkey; `entered` digits were typed on the device so far.
    case displayPasskey(DeviceID, passkey: UInt32, entered: UInt16)
    /// Confirm that the device shows the same passkey.
    case confirmation(DeviceID, passkey: UInt32)
    /// Allow an incoming pairing without a passkey (Just Works).
    case authorization(DeviceID)
    /// Allow the device to use a service.
    case authorizeService(DeviceID, uuid: String)
    /// bluetoothd gave up on the current request (timeout or cancel).
    case cancel
    /// bluetoothd unregistered this agent.
    case release
}

/// The agent's answer.
public enum AgentResponse: Sendable, Equatable {
    case pinCode(String)
    case passkey(UInt32)
    /// Yes (confirmation, authorisation) or "done" for display requests.
    case accept
    /// org.bluez.Error.Rejected.
    case reject
    /// org.bluez.Error.Canceled.
    case cancel
}

public typealias AgentHandler = @Sendable (AgentRequest) async -> AgentResponse

/// A pairing agent exported on the client's connection and registered with
/// bluetoothd. The registration is this object: ``unregister()`` or
/// releasing it unregisters. When bluetoothd restarts, the agent is
/// registered again (and made default again if it was).
public final class BlueZAgent: Sendable {
    public let path: ObjectPath
    public let capability: AgentCapability
    public let isDefault: Bool
    private let client: BlueZClient
    private let registration: DBusObjectRegistration
    private let watcher: Lock<Task<Void, Never>?> = Lock(nil)
    private let active = Lock(true)

    private init(client: BlueZClient, path: ObjectPath, capability: AgentCapability, isDefault: Bool, registration: DBusObjectRegistration) {
        self.client = client
        self.path = path
        self.capability = capability
        self.isDefault = isDefault
        self.registration = registration
    }

    /// Exports the agent at `path` and registers it with `capability`.
    public static func register(
        client: BlueZClient, path: ObjectPath = "/com/blecompanion/agent", capability: AgentCapability = .keyboardDisplay,
        makeDefault: Bool = true, onRegisteredAgain: (@Sendable (BlueZError?) -> Void)? = nil, handler: @escaping AgentHandler
    ) async throws(BlueZError) -> BlueZAgent {
        let registration: DBusObjectRegistration
        do {
            registration = try await client.connection.export(path, interfaces: [DBusExportedInterface(agentInterface(handler))])
        } catch {
            throw .from(error)
        }
        let agent = BlueZAgent(client: client, path: path, capability: capability, isDefault: makeDefault, registration: registration)
        do throws(BlueZError) {
            try await agent.registerWithBlueZ()
        } catch {
            registration.unexport()
            throw error
        }
        let events = client.mirror.events(bufferCapacity: 64, where: BlueZEvent.isAvailabilityOrAddition)
        // The bluetoothd (name owner) the agent is registered with: the
        // availability event and the manager's InterfacesAdded can both
        // arrive after the mirror already shows the manager, and one
        // bluetoothd must get one registration.
        let registeredWith = Lock<String?>(client.mirror.serviceOwner)
        let task = Task { [weak agent] in
            // A restarted bluetoothd takes its name before it exports
            // AgentManager1: register once the manager object is there.
            for await event in events {
                switch event {
                case .availability(false):
                    registeredWith.withLock { $0 = nil }
                    continue
                case .availability(true):
                    break
                case let .interfacesAdded(path, names) where path == BlueZInterface.managerPath && names.contains(BlueZInterface.agentManager):
                    break
                default:
                    continue
                }
                guard let agent, agent.active.withLock({ $0 }) else { return }
                guard client.mirror.snapshot().objects[BlueZInterface.managerPath]?[BlueZInterface.agentManager] != nil else { continue }
                let owner = client.mirror.serviceOwner
                guard owner == nil || registeredWith.withLock({ $0 }) != owner else { continue }
                do throws(BlueZError) {
                    try await agent.registerWithBlueZ()
                    registeredWith.withLock { $0 = owner }
                    onRegisteredAgain?(nil)
                } catch {
                    // Tried again at the manager's next appearance; the caller may log it.
                    onRegisteredAgain?(error)
                }
            }
        }
        agent.watcher.withLock { $0 = task }
        return agent
    }

    /// Unregisters from bluetoothd and stops answering.
    public func unregister() async {
        guard active.withLock({ was in defer { was = false }; return was }) else { return }
        watcher.withLock { $0?.cancel() }
        _ = try? await client.call(BlueZInterface.managerPath, BlueZInterface.agentManager, "UnregisterAgent", [.objectPath(path)])
        registration.unexport()
    }

    deinit {
        watcher.withLock { $0?.cancel() }
        if active.withLock({ $0 }) {
            let client = self.client, path = self.path
            Task { _ = try? await client.call(BlueZInterface.managerPath, BlueZInterface.agentManager, "UnregisterAgent", [.objectPath(path)]) }
        }
        registration.unexport()
    }

    private func registerWithBlueZ() async throws(BlueZError) {
        _ = try await client.call(BlueZInterface.managerPath, BlueZInterface.agentManager, "RegisterAgent",
                                  [.objectPath(path), .string(capability.rawValue)])
        if isDefault {
            _ = try await client.call(BlueZInterface.managerPath, BlueZInterface.agentManager, "RequestDefaultAgent", [.objectPath(path)])
        }
    }

    private static func agentInterface(_ handler: @escaping AgentHandler) -> DBusInterfaceDescription {
        @Sendable func device(_ call: DBusMethodCall) throws -> DeviceID {
            let p: ObjectPath = try call.argument(0)
            guard let id = DeviceID(path: p) else {
                throw DBusError.remote(name: BlueZError.Name.rejected.rawValue, message: "\(p) is not a device path")
            }
            return id
        }
        @Sendable func answer(_ request: AgentRequest) async throws -> AgentResponse {
            let response = await handler(request)
            switch response {
            case .reject: throw DBusError.remote(name: BlueZError.Name.rejected.rawValue, message: "Rejected by user")
            case .cancel: throw DBusError.remote(name: BlueZError.Name.canceled.rawValue, message: "Canceled by user")
            default: return response
            }
        }
        @Sendable func expectAccept(_ request: AgentRequest) async throws -> [DBusValue] {
            let r = try await answer(request)
            guard r == .accept else {
                throw DBusError.remote(name: BlueZError.Name.rejected.rawValue, message: "agent answered \(r) to \(request)")
            }
            return []
        }
        let dev = DBusArgument("device", .objectPath)
        return DBusInterfaceDescription(BlueZInterface.agent, methods: [
            DBusMethodDescription("Release") { _ in _ = await handler(.release); return [] },
            DBusMethodDescription("RequestPinCode", inputs: [dev], outputs: [.init("pincode", .string)]) { call in
                let r = try await answer(.pinCode(try device(call)))
                guard case let .pinCode(pin) = r, (1...16).contains(pin.utf8.count) else {
                    throw DBusError.remote(name: BlueZError.Name.rejected.rawValue, message: "a PIN code is 1 to 16 characters")
                }
                return [.string(pin)]
            },
            DBusMethodDescription("DisplayPinCode", inputs: [dev, .init("pincode", .string)]) { call in
                try await expectAccept(.displayPinCode(try device(call), try call.argument(1)))
            },
            DBusMethodDescription("RequestPasskey", inputs: [dev], outputs: [.init("passkey", .uint32)]) { call in
                let r = try await answer(.passkey(try device(call)))
                guard case let .passkey(key) = r, key <= 999_999 else {
                    throw DBusError.remote(name: BlueZError.Name.rejected.rawValue, message: "a passkey is 0 to 999999")
                }
                return [.uint32(key)]
            },
            DBusMethodDescription("DisplayPasskey", inputs: [dev, .init("passkey", .uint32), .init("entered", .uint16)]) { call in
                _ = await handler(.displayPasskey(try device(call), passkey: try call.argument(1), entered: try call.argument(2)))
                return []
            },
            DBusMethodDescription("RequestConfirmation", inputs: [dev, .init("passkey", .uint32)]) { call in
                try await expectAccept(.confirmation(try device(call), passkey: try call.argument(1)))
            },
            DBusMethodDescription("RequestAuthorization", inputs: [dev]) { call in
                try await expectAccept(.authorization(try device(call)))
            },
            DBusMethodDescription("AuthorizeService", inputs: [dev, .init("uuid", .string)]) { call in
                try await expectAccept(.authorizeService(try device(call), uuid: try call.argument(1)))
            },
            DBusMethodDescription("Cancel") { _ in _ = await handler(.cancel); return [] },
        ])
    }
}
