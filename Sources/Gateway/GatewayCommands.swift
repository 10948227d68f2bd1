import BLEParsing
import BlueZ
import DBus
import Domain
import Foundation
import Presenters
import Locking
import Vocabulary

/// A request to the gateway about one device, from MQTT (`…/<addr>/command`)
/// or HTTP (`POST /api/devices/<address>/actions`). JSON:
///
/// ```json
/// {"action": "connect"}
/// {"action": "disconnect"}
/// {"action": "read",   "characteristic": "2a37"}
/// {"action": "write",  "characteristic": "2a39", "value": "01", "without_response": false}
/// {"action": "notify", "characteristic": "2a37", "enable": true}
/// {"action": "command", "name": "unlock", "arguments": {"pin": 1234}}
/// ```
///
/// `command` runs a command of the device's profile (docs/PROFILES.md): its
/// arguments are encoded by the profile's layout and written to its
/// characteristic.
///
/// `characteristic` is a 16-bit or 128-bit UUID, or the characteristic's
/// object path; `id` (any string) is echoed in the reply.
public struct GatewayCommand: Sendable, Equatable {
    public enum Action: String, Sendable, Equatable, CaseIterable {
        case connect, disconnect, read, write, notify, command
        // Firmware and provisioning (docs/FIRMWARE.md, "Gateway"): the work runs
        // in the gateway and its state is published to `<base>/<device>/firmware`.
        case firmwareState = "firmware_state", firmwareUpload = "firmware_upload", firmwareCancel = "firmware_cancel"
        case firmwareTest = "firmware_test", firmwareConfirm = "firmware_confirm", firmwareReset = "firmware_reset"
        case provision

        var isFirmware: Bool {
            switch self {
            case .firmwareState, .firmwareUpload, .firmwareCancel, .firmwareTest, .firmwareConfirm, .firmwareReset, .provision: return true
            default: return false
            }
        }
    }

    public var action: Action
    public var characteristic: String?
    public var value: [UInt8]?
    public var withoutResponse: Bool
    public var enable: Bool
    public var id: String?
    /// `command`: the profile command's name and its arguments as text (numbers as JSON wrote them).
    public var name: String?
    public var arguments: [String: String] = [:]
    /// `firmware_upload`: the image (base64 in JSON), what to mark it for after the upload, and whether to reset.
    public var image: [UInt8]?
    public var mark: String?
    public var reset = false
    /// `firmware_test`/`firmware_confirm`: the image's hash (hex); none: the secondary slot's / the running image.
    public var hash: [UInt8]?
    /// `provision`: the network and its password (never echoed, logged or published).
    public var ssid: String?
    public var password: String?

    public init(action: Action, characteristic: String? = nil, value: [UInt8]? = nil, withoutResponse: Bool = false,
                enable: Bool = true, id: String? = nil) {
        self.action = action
        self.characteristic = characteristic
        self.value = value
        self.withoutResponse = withoutResponse
        self.enable = enable
        self.id = id
    }

    /// Parses a command; the error says which member is wrong and why.
    public static func parse(_ bytes: [UInt8]) throws(GatewayCommandError) -> GatewayCommand {
        let object: Any
        do { object = try JSONSerialization.jsonObject(with: Data(bytes)) } catch {
            throw GatewayCommandError(id: nil, "the command is not JSON: \(Self.reason(error))")
        }
        guard let dict = object as? [String: Any] else {
            throw GatewayCommandError(id: nil, "the command must be a JSON object like {\"action\": \"read\", \"characteristic\": \"2a37\"}")
        }
        var id: String?
        if let raw = dict["id"] {
            if let s = raw as? String { id = s } else if let n = raw as? NSNumber { id = n.stringValue } else {
                throw GatewayCommandError(id: nil, "\"id\" must be a string or a number")
            }
        }
        let known: Set<String> = ["action", "characteristic", "value", "without_response", "enable", "id", "name", "arguments",
                                  "image", "mark", "reset", "hash", "ssid", "password"]
        if let unknown = dict.keys.sorted().first(where: { !known.contains($0) }) {
            throw GatewayCommandError(id: id, "unknown member \"\(unknown)\" (known: \(known.sorted().joined(separator: ", ")))")
        }
        guard let actionText = dict["action"] as? String else {
            throw GatewayCommandError(id: id, "\"action\" is missing or not a string (one of \(Action.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        guard let action = Action(rawValue: actionText) else {
            throw GatewayCommandError(id: id, "unknown action \"\(actionText)\" (one of \(Action.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        var command = GatewayCommand(action: action, id: id)
        if let raw = dict["characteristic"] {
            let expected = "\"characteristic\" must be a UUID (\"2a37\", \"0x2A37\" or 128-bit) or a characteristic's object path"
            guard let s = raw as? String, !s.isEmpty else { throw GatewayCommandError(id: id, expected) }
            if s.hasPrefix("/") {
                // A bad path is the request's fault (400), not the device's (502).
                guard (try? ObjectPath(s)) != nil else { throw GatewayCommandError(id: id, "\(expected); \"\(s)\" is not a D-Bus object path") }
                command.characteristic = s
            } else {
                guard (try? BluetoothUUID(parsing: s)) != nil else { throw GatewayCommandError(id: id, "\(expected), got \"\(s)\"") }
                command.characteristic = s   // as given (replies quote it); `find` compares canonical forms
            }
        }
        if let raw = dict["value"] {
            guard let s = raw as? String else { throw GatewayCommandError(id: id, "\"value\" must be hex bytes like \"0a1b\"") }
            do { command.value = try Hex.bytes(s) } catch { throw GatewayCommandError(id: id, "\"value\": \(error.description)") }
        }
        if let raw = dict["without_response"] {
            guard let b = raw as? Bool, isJSONBool(raw) else { throw GatewayCommandError(id: id, "\"without_response\" must be true or false") }
            command.withoutResponse = b
        }
        if let raw = dict["enable"] {
            guard let b = raw as? Bool, isJSONBool(raw) else { throw GatewayCommandError(id: id, "\"enable\" must be true or false") }
            command.enable = b
        }
        if let raw = dict["name"] {
            guard let name = raw as? String, !name.isEmpty else { throw GatewayCommandError(id: id, "\"name\" must be a command's name") }
            command.name = name
        }
        if let raw = dict["arguments"] {
            guard let object = raw as? [String: Any] else {
                throw GatewayCommandError(id: id, "\"arguments\" must be an object like {\"pin\": 1234}")
            }
            for (key, value) in object {
                func text(_ v: Any) -> String? {
                    if isJSONBool(v), let b = v as? Bool { return b ? "1" : "0" }
                    if let n = v as? NSNumber { return n.stringValue }
                    return v as? String
                }
                if let list = value as? [Any] {
                    let items = list.compactMap(text)
                    guard items.count == list.count else { throw GatewayCommandError(id: id, "\"arguments.\(key)\" must hold numbers or strings") }
                    command.arguments[key] = items.joined(separator: ",")
                } else if let t = text(value) {
                    command.arguments[key] = t
                } else {
                    throw GatewayCommandError(id: id, "\"arguments.\(key)\" must be a number, a string, true/false or a list of them")
                }
            }
        }
        if let raw = dict["image"] {
            guard let text = raw as? String, let data = Data(base64Encoded: text) else {
                throw GatewayCommandError(id: id, "\"image\" must be the image file in base64")
            }
            command.image = [UInt8](data)
        }
        if let raw = dict["mark"] {
            guard let m = raw as? String, ["none", "test", "confirm"].contains(m) else {
                throw GatewayCommandError(id: id, "\"mark\" must be \"none\", \"test\" or \"confirm\"")
            }
            command.mark = m
        }
        if let raw = dict["reset"] {
            guard let b = raw as? Bool, isJSONBool(raw) else { throw GatewayCommandError(id: id, "\"reset\" must be true or false") }
            command.reset = b
        }
        if let raw = dict["hash"] {
            guard let text = raw as? String, let bytes = try? Hex.bytes(text), bytes.count == 32 else {
                throw GatewayCommandError(id: id, "\"hash\" must be an image hash: 64 hex digits")
            }
            command.hash = bytes
        }
        if let raw = dict["ssid"] {
            guard let ssid = raw as? String, (1...32).contains(ssid.utf8.count) else {
                throw GatewayCommandError(id: id, "\"ssid\" must be a network name of 1 to 32 bytes")
            }
            command.ssid = ssid
        }
        if let raw = dict["password"] {
            // The reason only, never the value.
            guard let password = raw as? String, password.utf8.count <= 64 else {
                throw GatewayCommandError(id: id, "\"password\" must be a string of at most 64 bytes")
            }
            command.password = password
        }
        switch action {
        case .firmwareUpload:
            if command.image == nil { throw GatewayCommandError(id: id, "\"firmware_upload\" needs \"image\" (the file in base64)") }
        case .provision:
            if command.ssid == nil { throw GatewayCommandError(id: id, "\"provision\" needs \"ssid\" (and \"password\" unless the network is open)") }
        case .firmwareState, .firmwareCancel, .firmwareTest, .firmwareConfirm, .firmwareReset: break
        case .read, .write, .notify:
            if command.characteristic == nil { throw GatewayCommandError(id: id, "\"\(action.rawValue)\" needs \"characteristic\"") }
        case .command:
            if command.name == nil { throw GatewayCommandError(id: id, "\"command\" needs \"name\" (a command of the device's profile)") }
        case .connect, .disconnect: break
        }
        if action == .write && command.value == nil { throw GatewayCommandError(id: id, "\"write\" needs \"value\" (hex)") }
        return command
    }

    private static func reason(_ error: Error) -> String {
        (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String ?? "invalid JSON"
    }
}

/// JSONSerialization gives NSNumber for both numbers and booleans; only a
/// real JSON `true`/`false` counts as a boolean.
private func isJSONBool(_ value: Any) -> Bool {
    guard let n = value as? NSNumber else { return false }
    return String(cString: n.objCType) == "c"
}

extension GatewayCommand: CustomStringConvertible, CustomDebugStringConvertible {
    /// What a log may show: the action and its targets, never the password or the image's bytes.
    public var description: String {
        var parts = ["action: \(action.rawValue)"]
        if let characteristic { parts.append("characteristic: \(characteristic)") }
        if let name { parts.append("name: \(name)") }
        if let image { parts.append("image: \(image.count) bytes") }
        if let ssid { parts.append("ssid: \(ssid)") }
        if password != nil { parts.append("password: (hidden)") }
        if let id { parts.append("id: \(id)") }
        return "GatewayCommand(" + parts.joined(separator: ", ") + ")"
    }
    public var debugDescription: String { description }
}

public struct GatewayCommandError: Error, Sendable, Equatable, CustomStringConvertible {
    public var id: String?
    public var description: String
    public init(id: String?, _ description: String) {
        self.id = id
        self.description = description
    }
}

/// The answer to a command: `{"action":…,"id":…,"ok":true,"value":"48","readings":{…}}`
/// or `{"action":…,"error":"…","id":…,"ok":false}`.
public struct GatewayCommandReply: Sendable, Equatable {
    public var id: String?
    public var action: String?
    public var address: BluetoothAddress
    public var error: String?
    public var value: [UInt8]?
    public var readings: [Reading]

    public init(id: String?, action: String?, address: BluetoothAddress, error: String? = nil, value: [UInt8]? = nil,
                readings: [Reading] = []) {
        self.id = id
        self.action = action
        self.address = address
        self.error = error
        self.value = value
        self.readings = readings
    }

    public var ok: Bool { error == nil }
    /// Refused because too many commands were running (try again later).
    public var busy = false

    public var json: [UInt8] {
        var members: [(String, FieldValue)] = [
            ("address", .string(address.description)),
            ("action", action.map { .string($0) } ?? .null),
            ("id", id.map { .string($0) } ?? .null),
            ("ok", .bool(ok)),
        ]
        if let error { members.append(("error", .string(error))) }
        if let value { members.append(("value", .string(hexString(bytes: value)))) }
        if !readings.isEmpty {
            var values: [(String, FieldValue)] = []
            for (key, reading) in ReadingKey.published(readings) {
                switch reading.value {
                case let .number(v): values.append((key, .number(v)))
                case let .bool(b): values.append((key, .bool(b)))
                case let .text(t): values.append((key, .string(t)))
                }
            }
            members.append(("readings", .nested(values)))
        }
        return SortedJSON.bytes(members)
    }
}

/// Carries out commands through the same presenter the dashboard's detail
/// screen uses: each command is a ``DeviceDetailPresenter`` action, and its
/// result is read from the presenter's state (the command or attribute
/// operation going from running to finished). One command per device at a
/// time; others for the same device wait their turn.
public final class CommandExecutor: Sendable {
    private let control: any DeviceControl
    private let adapter: @Sendable () -> AdapterID
    private let timeout: Duration
    private let turns = DeviceTurns()
    private let navigator = Navigator()
    /// At most this many commands run or wait for their device at once;
    /// more are refused at once with a "busy" reply (MQTT and HTTP both).
    public let concurrency: Int
    /// Presenters of devices no command uses now, kept for a next command
    /// (their details are loaded), at most this many; the least recently
    /// used goes first. Before, one was kept for every address ever named.
    public static let idlePresenters = 16
    private let table = Lock(Table())
    private struct Table {
        var inFlight = 0
        var tick: UInt64 = 0
        var presenters: [DeviceID: Entry] = [:]
    }
    private struct Entry {
        let presenter: DeviceDetailPresenter
        var users: Int
        var lastUsed: UInt64
    }

    /// `adapter`: the adapter device ids are formed on (asked at each command:
    /// bluetoothd may come back with another).
    public init(control: any DeviceControl, adapter: @escaping @Sendable () -> AdapterID, timeout: Duration = .seconds(60),
                concurrency: Int = 32) {
        self.control = control
        self.adapter = adapter
        self.timeout = timeout
        self.concurrency = max(1, concurrency)
    }

    /// Commands running or waiting for their device now, and the device
    /// presenters kept (tests and metrics: both stay bounded).
    public var load: (inFlight: Int, presenters: Int) { table.withLock { ($0.inFlight, $0.presenters.count) } }

    public func execute(_ command: GatewayCommand, on address: BluetoothAddress) async -> GatewayCommandReply {
        var reply = GatewayCommandReply(id: command.id, action: command.action.rawValue, address: address)
        let admitted = table.withLock { t -> Bool in
            guard t.inFlight < concurrency else { return false }
            t.inFlight += 1
            return true
        }
        guard admitted else {
            reply.error = "busy: \(concurrency) commands are already running or waiting; try again later"
            reply.busy = true
            return reply
        }
        defer { table.withLock { $0.inFlight -= 1 } }
        let id = DeviceID(adapter: adapter(), address: address)
        await turns.acquire(id)
        let presenter = checkOut(id)
        defer {
            checkIn(id)
            Task { await turns.release(id) }
        }
        let outcome = await withTimeLimit(timeout) { await Self.run(command, presenter: presenter) }
            ?? .failure(Task.isCancelled ? "cancelled" : "timed out after \(timeout)")
        switch outcome {
        case let .failure(text): reply.error = text
        case let .success(value, readings):
            reply.value = value
            reply.readings = readings
        }
        return reply
    }

    enum Outcome: Sendable {
        case success([UInt8]?, [Reading])
        case failure(String)
    }

    /// The device's presenter, kept while a command uses it.
    private func checkOut(_ id: DeviceID) -> DeviceDetailPresenter {
        table.withLock { t in
            t.tick &+= 1
            if var e = t.presenters[id] {
                e.users += 1
                e.lastUsed = t.tick
                t.presenters[id] = e
                return e.presenter
            }
            let p = DeviceDetailPresenter(device: id, control: control, history: nil, watchList: nil, navigator: navigator)
            t.presenters[id] = Entry(presenter: p, users: 1, lastUsed: t.tick)
            return p
        }
    }

    /// A command is done with the presenter; beyond ``idlePresenters``
    /// unused ones the least recently used is released.
    private func checkIn(_ id: DeviceID) {
        let released: DeviceDetailPresenter? = table.withLock { t in
            guard var e = t.presenters[id] else { return nil }
            e.users -= 1
            t.presenters[id] = e
            let idle = t.presenters.filter { $0.value.users == 0 }
            guard idle.count > Self.idlePresenters, let oldest = idle.min(by: { $0.value.lastUsed < $1.value.lastUsed }) else { return nil }
            return t.presenters.removeValue(forKey: oldest.key)?.presenter
        }
        _ = released   // released outside the lock (its deinit cancels its tasks)
    }

    private static func run(_ command: GatewayCommand, presenter: DeviceDetailPresenter) async -> Outcome {
        let states = presenter.states()
        switch command.action {
        case .command:
            // Resolved into a write by the runtime (GatewayRuntime.execute), which knows the profiles.
            return .failure("no profile command \(command.name ?? "") for this device")
        case .firmwareState, .firmwareUpload, .firmwareCancel, .firmwareTest, .firmwareConfirm, .firmwareReset, .provision:
            // The runtime's FirmwareJobs run these (GatewayRuntime.runFirmware).
            return .failure("\(command.action.rawValue) is not a GATT command")
        case .connect, .disconnect:
            let kind: DeviceDetailPresenter.Command = command.action == .connect ? .connect : .disconnect
            var iterator = states.makeAsyncIterator()
            // The current state first: wait for the details to load.
            guard let first = await iterator.next() else { return .failure("cancelled") }
            if case let .running(other) = first.command { return .failure("busy: \(other) is running") }
            if let problem = unusable(first) { return .failure(problem) }
            presenter.send(command.action == .connect ? .connectRequested : .disconnectRequested)
            var started = false
            while let s = await iterator.next() {
                switch s.command {
                case .running(kind): started = true
                case let .failed(k, message) where k == kind && started: return .failure(message)
                case .idle where started: return .success(nil, [])
                default: continue
                }
            }
            return .failure("cancelled")
        case .read, .write, .notify:
            var iterator = states.makeAsyncIterator()
            var current: DeviceDetailPresenter.State?
            // Wait until the device and its services are known.
            while let s = await iterator.next() {
                if let problem = unusable(s) { return .failure(problem) }
                if case .loaded = s.services { current = s; break }
                if case let .unavailable(why) = s.services { return .failure("\(why) (send {\"action\":\"connect\"} first)") }
                if case let .failed(reason) = s.services { return .failure(reason) }
            }
            guard let state = current, let target = command.characteristic else { return .failure("cancelled") }
            guard let node = find(target, in: state.services.value ?? []) else {
                return .failure("no characteristic \(target) on this device")
            }
            let action: DeviceDetailPresenter.Action
            switch command.action {
            case .read:
                guard node.canRead else { return .failure("characteristic \(node.uuid) cannot be read (flags: \(node.flags.joined(separator: ",")))") }
                action = .readRequested(node.id)
            case .write:
                guard node.canWrite || node.canWriteWithoutResponse else {
                    return .failure("characteristic \(node.uuid) cannot be written (flags: \(node.flags.joined(separator: ",")))")
                }
                action = .writeRequested(node.id, hex: hexString(bytes: command.value ?? []), withoutResponse: command.withoutResponse)
            default:
                guard node.canNotify else { return .failure("characteristic \(node.uuid) does not notify (flags: \(node.flags.joined(separator: ",")))") }
                if node.notifying == command.enable { return .success(nil, []) }
                action = .notifyToggled(node.id)
            }
            presenter.send(action)
            var started = false
            while let s = await iterator.next() {
                switch s.operations[node.id] {
                case .failed(let message)?: if started { return .failure(message) }
                case nil:
                    if started {
                        let fresh = find(node.id.path.rawValue, in: s.services.value ?? [])
                        if command.action == .read {
                            var readings: [Reading] = []
                            if case let .readings(r)? = fresh?.decoded { readings = r }
                            return .success(fresh?.value, readings)
                        }
                        return .success(nil, [])
                    }
                case .some: started = true
                }
            }
            return .failure("cancelled")
        }
    }

    /// Why nothing can be done with the device, if so.
    private static func unusable(_ s: DeviceDetailPresenter.State) -> String? {
        switch s.device {
        case .unavailable, .failed: return s.device.problem
        case .loading, .loaded: return nil
        }
    }

    /// The characteristic with this object path, full UUID or 16-bit UUID.
    static func find(_ target: String, in services: [GATTServiceNode]) -> GATTCharacteristicNode? {
        let wanted = (try? BluetoothUUID(parsing: target))?.string ?? BlueZSnapshot.normalizeUUID(target)
        for service in services {
            for c in service.characteristics {
                if c.id.path.rawValue == target || BlueZSnapshot.normalizeUUID(c.uuid) == wanted { return c }
            }
        }
        return nil
    }
}

/// One command per device at a time, in arrival order.
private actor DeviceTurns {
    private var busy: Set<DeviceID> = []
    private var waiting: [DeviceID: [CheckedContinuation<Void, Never>]] = [:]

    func acquire(_ id: DeviceID) async {
        if !busy.contains(id) {
            busy.insert(id)
            return
        }
        await withCheckedContinuation { waiting[id, default: []].append($0) }
    }

    func release(_ id: DeviceID) {
        if var queue = waiting[id], !queue.isEmpty {
            let next = queue.removeFirst()
            waiting[id] = queue.isEmpty ? nil : queue
            next.resume()   // the turn passes on; `busy` stays set
        } else {
            busy.remove(id)
        }
    }
}
