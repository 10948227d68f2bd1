import DBus

extension BlueZSimulator {
    static let agentCapabilities = ["DisplayOnly", "DisplayYesNo", "KeyboardOnly", "NoInputNoOutput", "KeyboardDisplay", ""]

    nonisolated func agentManagerInterface() -> DBusExportedInterface {
        DBusExportedInterface(DBusInterfaceDescription(BlueZ.agentManager, methods: [
            method("RegisterAgent", [.init("agent", .objectPath), .init("capability", .string)]) { sim, call in
                try await sim.registerAgent(sender: call.sender ?? "", try call.argument(0), try call.argument(1))
            },
            method("UnregisterAgent", [.init("agent", .objectPath)]) { sim, call in
                try await sim.unregisterAgent(sender: call.sender ?? "", try call.argument(0))
            },
            method("RequestDefaultAgent", [.init("agent", .objectPath)]) { sim, call in
                try await sim.requestDefaultAgent(sender: call.sender ?? "", try call.argument(0))
            },
        ]))
    }

    func registerAgent(sender: String, _ path: ObjectPath, _ capability: String) throws -> [DBusValue] {
        guard Self.agentCapabilities.contains(capability) else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        guard !agents.contains(where: { $0.sender == sender }) else { throw bluezError("AlreadyExists", "Already Exists") }
        agents.append(AgentRecord(sender: sender, path: path, capability: capability.isEmpty ? "KeyboardDisplay" : capability))
        watchClient(sender)
        log("agent \(path) registered by \(sender) (\(capability.isEmpty ? "KeyboardDisplay" : capability))")
        return []
    }

    func unregisterAgent(sender: String, _ path: ObjectPath) throws -> [DBusValue] {
        guard agents.contains(where: { $0.sender == sender && $0.path == path }) else { throw bluezError("DoesNotExist", "Does Not Exist") }
        agents.removeAll { $0.sender == sender && $0.path == path }
        defaultAgents.removeAll { $0 == sender }
        return []
    }

    func requestDefaultAgent(sender: String, _ path: ObjectPath) throws -> [DBusValue] {
        guard agents.contains(where: { $0.sender == sender && $0.path == path }) else { throw bluezError("DoesNotExist", "Does Not Exist") }
        defaultAgents.removeAll { $0 == sender }
        defaultAgents.insert(sender, at: 0)
        return []
    }

    /// The caller's own agent, else the default agent (BlueZ's rule).
    func agent(for sender: String) -> AgentRecord? {
        if let own = agents.first(where: { $0.sender == sender }) { return own }
        for s in defaultAgents { if let a = agents.first(where: { $0.sender == s }) { return a } }
        return nil
    }

    // MARK: Pairing

    func pair(_ i: Int, sender: String) async throws -> [DBusValue] {
        let d = devices[i]
        _ = try requirePowered(d.adapterID)
        if d.paired { throw bluezError("AlreadyExists", "Already Exists") }
        if d.pairing != nil { throw bluezError("InProgress", "In Progress") }
        let op = PairingOperation()
        d.pairing = op
        defer { if d.pairing === op { d.pairing = nil } }
        if !d.connected {
            _ = try await connect(i)
        }
        if op.cancelled { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
        let spec = d.spec.pairing
        let interactive = spec.method != .none && spec.method != .justWorks
        if interactive {
            guard let agent = agent(for: sender), agent.capability != "NoInputNoOutput" else {
                log("pairing \(d.spec.address): no agent can answer \(spec.method.rawValue)")
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
            op.agent = agent
            let device = DBusValue.objectPath(d.path)
            let member: String
            var arguments: [DBusValue] = [device]
            switch spec.method {
            case .requestConfirmation: member = "RequestConfirmation"; arguments.append(.uint32(spec.passkey))
            case .requestPasskey: member = "RequestPasskey"
            case .displayPasskey: member = "DisplayPasskey"; arguments += [.uint32(spec.passkey), .uint16(0)]
            case .requestPinCode: member = "RequestPinCode"
            case .displayPinCode: member = "DisplayPinCode"; arguments.append(.string(spec.pinCode))
            case .none, .justWorks: member = ""
            }
            log("pairing \(d.spec.address): asking agent \(agent.path) (\(member))")
            let reply: DBusMessage
            do {
                reply = try await callAgent(op, agent, member, arguments)
            } catch let e as DBusError {
                switch e.remoteName {
                case "org.bluez.Error.Rejected"?: throw bluezError("AuthenticationRejected", "Authentication Rejected")
                case "org.bluez.Error.Canceled"?: throw bluezError("AuthenticationCanceled", "Authentication Canceled")
                default:
                    if case .timedOut = e { throw bluezError("AuthenticationTimeout", "Authentication Timeout") }
                    throw bluezError("AuthenticationFailed", "Authentication Failed")
                }
            } catch {
                throw bluezError("AuthenticationCanceled", "Authentication Canceled")
            }
            switch spec.method {
            case .requestPasskey:
                guard let answer = try? reply.argument(0, as: UInt32.self), answer == spec.passkey else {
                    throw bluezError("AuthenticationFailed", "Authentication Failed")
                }
            case .requestPinCode:
                guard let answer = try? reply.argument(0, as: String.self), answer == spec.pinCode else {
                    throw bluezError("AuthenticationFailed", "Authentication Failed")
                }
            default: break
            }
        }
        let wait = spec.delay > 0 ? duration(spec.delay) : nil
        let remote = Task { if let wait { try await Task.sleep(for: wait) } }
        op.remoteStep = remote
        // CancelPairing may have come while the agent's answer was on its way back.
        if op.cancelled { remote.cancel() }
        do { try await remote.value } catch { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
        if op.cancelled { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
        if !spec.accept { throw bluezError("AuthenticationRejected", "Authentication Rejected") }
        if let e = d.spec.faults.pairError { throw e.dbusError }
        guard d.registration != nil else { throw bluezError("Failed", "Disconnected") }
        d.paired = true
        d.registration?.setProperties(BlueZ.device, ["Paired": .boolean(true), "Bonded": .boolean(true)])
        d.removalTask?.cancel()
        d.removalTask = nil
        log("device \(d.spec.address) paired")
        return []
    }

    /// Calls the agent; CancelPairing cancels the call (and tells the agent).
    func callAgent(_ op: PairingOperation, _ agent: AgentRecord, _ member: String, _ arguments: [DBusValue]) async throws -> DBusMessage {
        guard let connection else { throw bluezError("Failed", "Not on the bus") }
        let task = Task {
            try await connection.call(destination: agent.sender, path: agent.path, interface: BlueZ.agent, member: member,
                                      arguments: arguments, timeout: .seconds(60))
        }
        op.agentCall = task
        return try await task.value
    }

    func cancelPairing(_ i: Int) throws -> [DBusValue] {
        let d = devices[i]
        guard let op = d.pairing else { throw bluezError("DoesNotExist", "Does Not Exist") }
        op.cancelled = true
        op.agentCall?.cancel()
        op.remoteStep?.cancel()
        if let agent = op.agent, let connection {
            let message = DBusMessage(kind: .methodCall, flags: [.noReplyExpected], path: agent.path, interface: BlueZ.agent,
                                      member: "Cancel", destination: agent.sender)
            try? connection.send(message)
        }
        return []
    }
}
