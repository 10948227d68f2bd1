import BLEParsing
import ScenarioFormat
import Vocabulary

/// The Improv Wi-Fi server a simulated device runs (scenario key `improv`):
/// state, error and RPC result as notifying characteristics, the RPC
/// command characteristic written with frames. Pure: a frame in, what to
/// notify out; the simulator times and delivers it.
///
/// - Wi-Fi settings while authorized: "provisioning", then after
///   `connectTime` either "provisioned" and an RPC result with the URL (the
///   SSID and password match one of `networks`), or error "unable to
///   connect" and "authorized" again.
/// - Wi-Fi settings while authorization is required: error "not authorized".
/// - Identify: counted (a real device blinks); no result.
/// - A broken frame: error "invalid RPC packet"; an unknown command: "unknown RPC command".
struct ImprovServerState {
    var state: Improv.State
    var networks: [String: String]
    var url: String?
    var identified = 0

    init(_ spec: ImprovSpec) {
        state = Improv.State(rawValue: spec.state) ?? .authorized
        networks = spec.networks
        url = spec.url
    }

    /// What the device does with a written frame: notifications now, and an
    /// outcome after the connection time (Wi-Fi settings only).
    enum Reply: Equatable {
        case error(Improv.ErrorCode)
        case provisioning(ssid: [UInt8], password: [UInt8])
        case identify
    }

    mutating func written(_ frame: [UInt8]) -> Reply {
        let rpc: Improv.RPC
        do { rpc = try Improv.RPC.parse(frame) } catch { return .error(.invalidRPC) }
        switch Improv.Command(rawValue: rpc.command) {
        case .wifiSettings?:
            guard rpc.strings.count == 2 else { return .error(.invalidRPC) }
            guard state == .authorized else { return .error(.notAuthorized) }
            state = .provisioning
            return .provisioning(ssid: rpc.strings[0], password: rpc.strings[1])
        case .identify?:
            identified += 1
            return .identify
        default:
            return .error(.unknownCommand)
        }
    }

    /// After the connection time: joined (the result frame to notify) or not (nil).
    mutating func joined(ssid: [UInt8], password: [UInt8]) -> [UInt8]? {
        let name = String(decoding: ssid, as: UTF8.self)
        guard let wanted = networks[name], Array(wanted.utf8) == password else {
            state = .authorized
            return nil
        }
        state = .provisioned
        return Improv.RPC(command: Improv.Command.wifiSettings.rawValue, strings: url.map { [Array($0.utf8)] } ?? []).bytes ?? []
    }
}

extension BlueZSimulator {
    static let improvCommand = Improv.rpcCommand.string

    func improvWrite(_ d: DeviceState, _ value: [UInt8]) {
        guard var server = d.improv else { return }
        let reply = server.written(value)
        d.improv = server
        // Never the password: only the SSID is logged.
        switch reply {
        case let .error(code):
            log("device \(d.spec.address): Improv error \(code.name)")
            notifyImprov(d, Improv.errorState, [code.rawValue])
        case .identify:
            log("device \(d.spec.address): Improv identify")
            notifyImprov(d, Improv.errorState, [0])
        case let .provisioning(ssid, password):
            log("device \(d.spec.address): Improv provisioning to \"\(String(decoding: ssid, as: UTF8.self))\"")
            notifyImprov(d, Improv.errorState, [0])
            notifyImprov(d, Improv.currentState, [Improv.State.provisioning.rawValue])
            let i = d.index
            let wait = duration(d.spec.improv?.connectTime ?? 0.5)
            Task { [weak self] in
                try? await Task.sleep(for: wait)
                await self?.improvJoined(i, ssid: ssid, password: password)
            }
        }
    }

    func improvJoined(_ i: Int, ssid: [UInt8], password: [UInt8]) async {
        let d = devices[i]
        guard var server = d.improv else { return }
        let result = server.joined(ssid: ssid, password: password)
        d.improv = server
        if let result {
            log("device \(d.spec.address): Improv provisioned")
            notifyImprov(d, Improv.currentState, [Improv.State.provisioned.rawValue])
            notifyImprov(d, Improv.rpcResult, result)
        } else {
            log("device \(d.spec.address): Improv cannot join the network")
            notifyImprov(d, Improv.errorState, [Improv.ErrorCode.unableToConnect.rawValue])
            notifyImprov(d, Improv.currentState, [Improv.State.authorized.rawValue])
        }
        advertiseImprov(d)
    }

    /// The button press of a device that wants authorization, `authorizeAfter` seconds into a connection.
    func improvConnected(_ d: DeviceState) {
        guard let after = d.spec.improv?.authorizeAfter, d.improv?.state == .authorizationRequired else { return }
        let i = d.index, generation = d.connectionGeneration, wait = duration(after)
        Task { [weak self] in
            try? await Task.sleep(for: wait)
            await self?.improvAuthorized(i, generation: generation)
        }
    }

    func improvAuthorized(_ i: Int, generation: Int) {
        let d = devices[i]
        guard d.connected, d.connectionGeneration == generation, d.improv?.state == .authorizationRequired else { return }
        d.improv?.state = .authorized
        log("device \(d.spec.address): Improv authorized (button pressed)")
        notifyImprov(d, Improv.currentState, [Improv.State.authorized.rawValue])
        advertiseImprov(d)
    }

    /// Sets a characteristic's value and notifies it, after what was queued before (in order).
    func notifyImprov(_ d: DeviceState, _ uuid: BluetoothUUID, _ value: [UInt8]) {
        guard let c = d.characteristic(uuid: uuid.string) else { return }
        c.value = value
        let previous = d.outbox
        let i = d.index, path = c.path, generation = d.connectionGeneration
        d.outbox = Task { [weak self] in
            await previous?.value
            await self?.deliver(device: i, path: path, value, generation: generation)
        }
    }

    func advertiseImprov(_ d: DeviceState) {
        guard let server = d.improv else { return }
        var data = d.serviceData
        data[Improv.serviceDataUUID.string] = Improv.ServiceData(state: server.state, capabilities: Improv.Capabilities(rawValue: d.spec.improv?.capabilities ?? 1)).bytes
        let i = d.index
        Task { [weak self] in await self?.applyAdvertisement(device: i, AdvertisementEvent(at: 0, serviceData: data)) }
    }
}
