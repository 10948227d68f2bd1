import BLEParsing
import BlueZ
import Vocabulary

/// Improv Wi-Fi provisioning over bluetoothd (improv-wifi.com/ble): reads
/// the device's state and capabilities, waits for authorization (a button
/// on the device) when it asks for it, sends the Wi-Fi settings and waits
/// for "provisioned" and the URL the device answers, or its error. The
/// password goes into the frame written to the device and nowhere else:
/// no message, log or error here contains it.
public enum ImprovProvisioning {
    public struct Outcome: Sendable, Equatable {
        /// The device's answer (usually its web page); nil when it gives none.
        public var url: String?
        /// The states the device went through, in order.
        public var states: [Improv.State]

        public init(url: String?, states: [Improv.State]) {
            self.url = url
            self.states = states
        }
    }

    /// What the device is and can do, read once connected.
    public struct Info: Sendable, Equatable {
        public var state: Improv.State
        public var capabilities: Improv.Capabilities
    }

    enum Event: Sendable {
        case state(Improv.State), error(Improv.ErrorCode), result(Improv.RPC), gone, timeout(Int)
    }

    struct Characteristics {
        var state, error, command, result, capabilities: GATTCharacteristic
    }

    static func characteristics(_ client: BlueZClient, _ device: DeviceID) throws(DomainError) -> Characteristics {
        let snap = client.mirror.snapshot()
        func find(_ uuid: BluetoothUUID) -> GATTCharacteristic? { snap.characteristic(uuid, inService: Improv.service, on: device) }
        guard let s = find(Improv.currentState), let e = find(Improv.errorState), let c = find(Improv.rpcCommand),
              let r = find(Improv.rpcResult), let cap = find(Improv.capabilities) else {
            throw DomainError("\(device.address) has no Improv service (\(Improv.service.string)): it does not take Wi-Fi credentials over Bluetooth")
        }
        return Characteristics(state: s, error: e, command: c, result: r, capabilities: cap)
    }

    /// The device's state and capabilities (connected, services resolved).
    public static func info(client: BlueZClient, device: DeviceID) async throws(DomainError) -> Info {
        let chars = try characteristics(client, device)
        return try await read(client, chars)
    }

    static func read(_ client: BlueZClient, _ chars: Characteristics) async throws(DomainError) -> Info {
        do {
            let state = try await client.readValue(chars.state.id)
            let caps = try await client.readValue(chars.capabilities.id)
            guard state.count == 1, let s = Improv.State(rawValue: state[0]) else {
                throw DomainError("the device's Improv state is \(Hex.string(state)), not one of 1…4")
            }
            return Info(state: s, capabilities: Improv.Capabilities(rawValue: caps.first ?? 0))
        } catch let e as DomainError {
            throw e
        } catch {
            throw DomainError("reading the Improv state failed: \(error)", cause: error)
        }
    }

    /// Asks the device to show itself (blink, beep): the Identify RPC.
    public static func identify(client: BlueZClient, device: DeviceID) async throws(DomainError) {
        let chars = try characteristics(client, device)
        let info = try await read(client, chars)
        guard info.capabilities.contains(.identify) else { throw DomainError("the device cannot identify itself (its Improv capabilities say so)") }
        do { try await client.writeValue(chars.command.id, Improv.RPC(command: Improv.Command.identify.rawValue).bytes ?? [], type: .request) } catch {
            throw DomainError("sending Identify failed: \(error.description)", cause: error)
        }
    }

    /// Sends `ssid` and `password` and waits for the outcome. `authorization`:
    /// how long to wait for the device's button when it asks for it;
    /// `timeout`: how long joining the network may take.
    public static func provision(client: BlueZClient, device: DeviceID, ssid: [UInt8], password: [UInt8],
                                 authorization: Duration = .seconds(60), timeout: Duration = .seconds(30),
                                 onState: @escaping @Sendable (Improv.State) -> Void = { _ in }) async throws(DomainError) -> Outcome {
        guard (1...32).contains(ssid.count) else { throw DomainError("an SSID has 1 to 32 bytes; this one has \(ssid.count)") }
        guard password.count <= 255 else { throw DomainError("the password is longer than Improv can carry (255 bytes)") }
        guard let frame = Improv.RPC.wifiSettings(ssid: ssid, password: password).bytes else {
            throw DomainError("the SSID and password do not fit one Improv frame (255 bytes together)")
        }
        let chars = try characteristics(client, device)
        let paths = (state: chars.state.id.path, error: chars.error.id.path, result: chars.result.id.path)
        let events = client.mirror.events(bufferCapacity: 256) { event in
            switch event {
            case let .propertiesChanged(p, _, _, _): return p == paths.state || p == paths.error || p == paths.result
            case let .deviceChanged(d, _): return d == device
            case .availability, .resynchronized: return true
            default: return false
            }
        }
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingOldest(256))
        let pump = Task {
            for await event in events {
                if let (path, value) = event.characteristicValue {
                    if path == paths.state, value.count == 1, let s = Improv.State(rawValue: value[0]) { continuation.yield(.state(s)) }
                    if path == paths.error, value.count == 1 { continuation.yield(.error(Improv.ErrorCode(rawValue: value[0]) ?? .unknown)) }
                    if path == paths.result, let rpc = try? Improv.RPC.parse(value) { continuation.yield(.result(rpc)) }
                } else if case let .deviceChanged(_, changed) = event, changed[.connected] == .boolean(false) {
                    continuation.yield(.gone)
                } else if case .availability(false) = event {
                    continuation.yield(.gone)
                }
            }
        }
        var timer: Task<Void, Never>?
        var phase = 0
        func arm(_ d: Duration) {
            timer?.cancel()
            phase += 1
            let p = phase
            timer = Task {
                do { try await Task.sleep(for: d) } catch { return }
                continuation.yield(.timeout(p))
            }
        }
        var subscribed: [GATTCharacteristic] = []
        defer {
            timer?.cancel()
            pump.cancel()
            continuation.finish()
        }
        func stopNotifications() async {
            for c in subscribed { try? await client.stopNotify(c.id) }
        }
        do {
            for c in [chars.state, chars.error, chars.result] {
                try await client.startNotify(c.id)
                subscribed.append(c)
            }
        } catch {
            await stopNotifications()
            throw DomainError("cannot start Improv notifications: \(error.description)", cause: error)
        }
        var states: [Improv.State] = []
        // A read shows up as a change too: only real changes count.
        func note(_ s: Improv.State) {
            guard s != states.last else { return }
            states.append(s)
            onState(s)
        }
        do throws(DomainError) {
            let info = try await read(client, chars)
            note(info.state)
            // As Home Assistant's client: a device provisioning or provisioned takes no credentials.
            if info.state == .provisioned || info.state == .provisioning {
                throw DomainError("the device is \(info.state.name) already; it takes new credentials once it is back in its provisioning mode")
            }
            if info.state == .authorizationRequired {
                arm(authorization)
                loop: for await event in stream {
                    switch event {
                    case let .state(s):
                        note(s)
                        if s == .authorized { break loop }
                    case .timeout(phase):
                        throw DomainError("the device still wants authorization after \(SMPSession.seconds(authorization)) s: press its button "
                                          + "(or what it documents) and try again")
                    case .gone: throw DomainError("the device disconnected while waiting for authorization")
                    default: break
                    }
                }
            }
            do { try await client.writeValue(chars.command.id, frame, type: .request) } catch {
                throw DomainError("sending the Wi-Fi settings failed: \(error.description)", cause: error)
            }
            arm(timeout)
            var provisioned = false
            var url: String?
            var answered = false
            loop: for await event in stream {
                switch event {
                case let .state(s):
                    note(s)
                    if s == .provisioned { provisioned = true }
                    if provisioned && answered { break loop }
                case let .result(rpc) where rpc.command == Improv.Command.wifiSettings.rawValue:
                    url = rpc.strings.first.map { String(decoding: $0, as: UTF8.self) }
                    answered = true
                    if provisioned { break loop }
                case let .error(code) where code != .none:
                    throw DomainError("the device could not be provisioned: \(code.name)"
                                      + (code == .unableToConnect ? " (wrong password, or the network is out of its reach)" : ""))
                case .timeout(phase):
                    if provisioned { break loop }
                    throw DomainError("the device did not join the network within \(SMPSession.seconds(timeout)) s")
                case .gone:
                    // Some devices restart onto the network once provisioned.
                    if provisioned { break loop }
                    throw DomainError("the device disconnected before it said it was provisioned")
                default: break
                }
            }
            await stopNotifications()
            return Outcome(url: url, states: states)
        } catch {
            await stopNotifications()
            throw error
        }
    }
}
