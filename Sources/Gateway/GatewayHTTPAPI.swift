import Bounds
import BLEParsing
import BlueZ
import Domain
import Foundation
import HTTPServer
import Presenters
import Vocabulary

/// The gateway's local HTTP API (JSON unless noted):
///
/// | Method and path | What |
/// |---|---|
/// | `GET /healthz` | `{"status":"ok"|"degraded",…}`; 503 while bluetoothd is unavailable or does not answer its pings (`"bluetoothd": "not answering"`), or a store cannot be written (`storage` says which). Never needs the token. |
/// | `GET /metrics` | Prometheus text format (see ``GatewayMetrics``) |
/// | `GET /api/devices` | every device in the list, with `published` and `online` |
/// | `GET /api/devices/{address}` | one device: the list's data plus bluetoothd's details and GATT tree |
/// | `GET /api/devices/{address}/history?kind=&label=&from=&to=` | stored readings in a time range (ISO 8601 or Unix seconds; default the last 24 h) |
/// | `POST /api/devices/{address}/actions` | a ``GatewayCommand`` as the body; the reply as for MQTT (200, 400 malformed, 502 the device or bluetoothd failed) |
/// | `GET /api/events` | server-sent events: `state` (the device's state JSON), `availability` and `firmware` (firmware work's state) |
/// | `POST /api/devices/{address}/firmware?mark=test\|confirm&reset=true` | the body is an MCUboot image: uploaded by the gateway (202; progress as `firmware` events and on `<base>/<device>/firmware`) |
/// | `GET /api/devices/{address}/firmware` | the firmware work's state (404 when there was none) |
/// | `DELETE /api/devices/{address}/firmware` | cancels an upload (the running image stays; a new upload resumes) |
///
/// With a token configured every path but `/healthz` needs
/// `Authorization: Bearer <token>`; off loopback a token is mandatory (the
/// configuration refuses to start without one).
struct GatewayHTTPAPI: Sendable {
    let runtime: GatewayRuntime
    let token: String?

    var handler: HTTPServer.Handler {
        var router = Router()
        router.get("/healthz") { _ in health() }
        router.get("/metrics") { _ in metrics() }
        router.get("/api/devices") { _ in await deviceList() }
        router.get("/api/devices/:address") { request in await device(request) }
        router.get("/api/devices/:address/history") { request in history(request) }
        router.post("/api/devices/:address/actions") { request in await action(request) }
        router.get("/api/events") { _ in await events() }
        router.post("/api/devices/:address/firmware") { request in await firmwareUpload(request) }
        router.get("/api/devices/:address/firmware") { request in firmwareState(request) }
        router.delete("/api/devices/:address/firmware") { request in await firmwareCancel(request) }
        router.post("/api/reload") { _ in reload() }
        let routed = router.handler
        let token = self.token
        return { request in
            if let token, request.path != "/healthz", !BearerAuth.check(request, token: token) {
                return BearerAuth.unauthorized()
            }
            return await routed(request)
        }
    }

    // MARK: - Endpoints

    /// `/healthz` on the connection's thread (see ``HTTPServer/ImmediateHandler``):
    /// it reads counters under locks and never waits for the cooperative
    /// pool, which an advertisement flood may keep busy.
    var immediate: HTTPServer.ImmediateHandler {
        { request in
            guard request.path == "/healthz", request.method == "GET" || request.method == "HEAD" else { return nil }
            return health()
        }
    }

    func health() -> HTTPResponse {
        runtime.refreshMetrics()
        let m = runtime.metrics.current
        let storage = m.storageFailures.sorted { $0.key < $1.key }.map { "\($0.key.rawValue): \($0.value)" }.joined(separator: "; ")
        let ok = m.bluetoothdAvailable && m.bluetoothdAnswering && storage.isEmpty
        let body = SortedJSON.bytes([
            ("status", .string(ok ? "ok" : "degraded")),
            ("bluetoothd", .string(!m.bluetoothdAvailable ? "unavailable" : m.bluetoothdAnswering ? "available" : "not answering")),
            ("storage", .string(storage.isEmpty ? "ok" : storage)),
            ("mqtt", runtime.options.mqtt == nil ? .string("off") : .string(m.mqttConnected ? "connected" : "disconnected")),
            ("queue_depth", .int(m.queueDepth)),
            ("devices_online", .int(m.devicesOnline)),
        ])
        return .json(status: ok ? .ok : .serviceUnavailable, body)
    }

    func metrics() -> HTTPResponse {
        runtime.refreshMetrics()
        var response = HTTPResponse.text(runtime.metrics.render())
        response.headers.remove("Content-Type")
        response.headers.add("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        return response
    }

    func deviceList() async -> HTTPResponse {
        let state = runtime.list.state
        let published = await runtime.loop.snapshot()
        let online = Set(published.filter(\.online).map(\.record.id.address))
        let known = Set(published.map(\.record.id.address))
        switch state.devices {
        case let .loaded(rows):
            let items: [FieldValue] = rows.map { row in
                .nested(Self.rowMembers(row) + [("published", .bool(known.contains(row.id.address))),
                                                ("online", .bool(online.contains(row.id.address)))])
            }
            return .json(SortedJSON.bytes([("devices", .list(items))]))
        case .loading:
            return .json(SortedJSON.bytes([("devices", .list([]))]))
        case .unavailable, .failed:
            return .problem(status: .serviceUnavailable, state.devices.problem ?? "")
        }
    }

    func device(_ request: HTTPRequest) async -> HTTPResponse {
        guard let address = Self.address(request.pathParameters["address"]) else { return Self.badAddress(request) }
        guard let row = runtime.list.state.devices.value?.first(where: { $0.id.address == address }) else {
            return .problem(status: .notFound, "no device \(address) in the list (not heard since the gateway started)")
        }
        var members = Self.rowMembers(row)
        let published = await runtime.loop.snapshot().first { $0.record.id.address == address }
        members.append(("published", .bool(published != nil)))
        members.append(("online", .bool(published?.online == true)))
        var details = runtime.control.details(of: row.id).makeAsyncIterator()
        if let snapshot = await details.next(), let d = snapshot.device {
            members.append(("paired", .bool(d.paired)))
            members.append(("trusted", .bool(d.trusted)))
            members.append(("connected", .bool(d.connected)))
            members.append(("services_resolved", .bool(d.servicesResolved)))
            members.append(("battery", d.battery.map { .int(Int($0)) } ?? .null))
            members.append(("uuids", .list(d.uuids.map { .string($0) })))
            members.append(("services", .list(snapshot.services.map { service in
                .nested([
                    ("uuid", .string(service.uuid)),
                    ("name", service.name.map { .string($0) } ?? .null),
                    ("characteristics", .list(service.characteristics.map { c in
                        .nested([
                            ("uuid", .string(c.uuid)),
                            ("name", c.name.map { .string($0) } ?? .null),
                            ("flags", .list(c.flags.map { .string($0) })),
                            ("notifying", .bool(c.notifying)),
                            ("value", c.value.map { .string(hexString(bytes: $0)) } ?? .null),
                        ])
                    })),
                ])
            })))
        }
        return .json(SortedJSON.bytes(members))
    }

    func history(_ request: HTTPRequest) -> HTTPResponse {
        guard let address = Self.address(request.pathParameters["address"]) else { return Self.badAddress(request) }
        let now = Date()
        let from: Date
        let to: Date
        do throws(QueryError) {
            from = try Self.date(request.query["from"], name: "from") ?? now.addingTimeInterval(-86_400)
            to = try Self.date(request.query["to"], name: "to") ?? now
        } catch {
            return .problem(status: .badRequest, error.message)
        }
        guard from <= to else { return .problem(status: .badRequest, "\"from\" (\(ISO8601UTC.string(from))) is after \"to\" (\(ISO8601UTC.string(to)))") }
        var kind: ReadingKind?
        if let text = request.query["kind"] {
            guard let k = ReadingKind(rawValue: text) else {
                return .problem(status: .badRequest, "unknown reading kind \"\(text)\" (e.g. temperature, humidity, battery)")
            }
            kind = k
        }
        let label = request.query["label"]
        let id = DeviceID(adapter: runtime.adapterID, address: address)
        let series: [ReadingSeries]
        do throws(DomainError) { series = try runtime.store.series(of: id, since: from) } catch {
            return .problem(status: .internalServerError, error.description)
        }
        let selected = series.filter { s in (kind == nil || s.kind == kind) && (label == nil || s.label == label) }
        let items: [FieldValue] = selected.map { s in
            .nested([
                ("kind", .string(s.kind.rawValue)),
                ("label", .string(s.label)),
                ("points", .list(s.points.filter { $0.at <= to }.map { p in
                    .nested([("at", .string(ISO8601UTC.string(p.at))), ("value", .number(p.value)), ("samples", .int(p.samples))])
                })),
            ])
        }
        return .json(SortedJSON.bytes([
            ("address", .string(address.description)),
            ("from", .string(ISO8601UTC.string(from))),
            ("to", .string(ISO8601UTC.string(to))),
            ("series", .list(items)),
        ]))
    }

    /// Reads the device profiles again (as SIGHUP does): 200 with the
    /// profiles in force, or 422 naming each file left out (the valid ones
    /// are in force all the same).
    func reload() -> HTTPResponse {
        let result = runtime.reloadProfiles()
        let body = SortedJSON.bytes([
            ("profiles", .list(result.loaded.map { .string($0) })),
            ("errors", .list(result.errors.map { .string($0) })),
        ])
        return .json(status: result.errors.isEmpty ? .ok : .unprocessableContent, body)
    }

    func action(_ request: HTTPRequest) async -> HTTPResponse {
        guard let address = Self.address(request.pathParameters["address"]) else { return Self.badAddress(request) }
        let command: GatewayCommand
        do throws(GatewayCommandError) { command = try GatewayCommand.parse(request.body) } catch {
            runtime.metrics.countCommand("invalid", ok: false)
            return .json(status: .badRequest, GatewayCommandReply(id: error.id, action: nil, address: address, error: error.description).json)
        }
        if runtime.loop.inFleet, await !runtime.loop.fleetOwns(address) {
            // Only a device's owner connects to it (docs/GATEWAY.md, "Fleet"):
            // the command goes to the owner through the broker, and its reply back.
            guard let owner = await runtime.loop.fleetOwner(of: address, now: Date()) else {
                let text = "no gateway of this fleet hears \(address) now"
                return .json(status: HTTPStatus(409), GatewayCommandReply(id: command.id, action: command.action.rawValue, address: address, error: text).json)
            }
            switch await runtime.forward(request.body, id: command.id, to: address) {
            case let .answered(reply, ok):
                return .json(status: ok ? .ok : HTTPStatus(502), reply)
            case .noBroker:
                let text = "gateway \(owner) speaks for \(address) in this fleet and this gateway is not connected to the broker to pass the command on"
                return .json(status: .serviceUnavailable, GatewayCommandReply(id: command.id, action: command.action.rawValue, address: address, error: text).json)
            case .timedOut:
                let text = "gateway \(owner) speaks for \(address) in this fleet and did not answer within \(GatewayRuntime.forwardTimeout)"
                return .json(status: HTTPStatus(504), GatewayCommandReply(id: command.id, action: command.action.rawValue, address: address, error: text).json)
            }
        }
        let reply = await runtime.execute(command, on: address)
        return .json(status: reply.ok ? .ok : reply.busy ? .serviceUnavailable : HTTPStatus(502), reply.json)
    }

    /// The image in the body, uploaded by this gateway (the device's owner in a fleet).
    func firmwareUpload(_ request: HTTPRequest) async -> HTTPResponse {
        guard let address = Self.address(request.pathParameters["address"]) else { return Self.badAddress(request) }
        let mark = request.query["mark"] ?? "none"
        guard ["none", "test", "confirm"].contains(mark) else { return .problem(status: .badRequest, "mark must be none, test or confirm, got \"\(mark)\"") }
        let reset: Bool
        switch request.query["reset"] ?? "false" {
        case "true", "1": reset = true
        case "false", "0": reset = false
        case let other: return .problem(status: .badRequest, "reset must be true or false, got \"\(other)\"")
        }
        if runtime.loop.inFleet, await !runtime.loop.fleetOwns(address) {
            return .problem(status: HTTPStatus(409), "another gateway of this fleet speaks for \(address); upload through it")
        }
        var command = GatewayCommand(action: .firmwareUpload)
        command.image = request.body
        command.mark = mark
        command.reset = reset
        if let problem = FirmwarePresenter.summary(name: "the body", bytes: request.body).1 {
            return .problem(status: .unprocessableContent, problem)
        }
        let reply = await runtime.execute(command, on: address)
        guard reply.ok else { return .json(status: reply.busy ? .serviceUnavailable : HTTPStatus(409), reply.json) }
        return .json(status: HTTPStatus(202), firmwareJSON(address) ?? reply.json)
    }

    func firmwareState(_ request: HTTPRequest) -> HTTPResponse {
        guard let address = Self.address(request.pathParameters["address"]) else { return Self.badAddress(request) }
        guard let body = firmwareJSON(address) else { return .problem(status: .notFound, "no firmware work for \(address) since the gateway started") }
        return .json(status: .ok, body)
    }

    func firmwareCancel(_ request: HTTPRequest) async -> HTTPResponse {
        guard let address = Self.address(request.pathParameters["address"]) else { return Self.badAddress(request) }
        let reply = await runtime.execute(GatewayCommand(action: .firmwareCancel), on: address)
        guard reply.ok else { return .json(status: .notFound, reply.json) }
        return .json(status: .ok, firmwareJSON(address) ?? reply.json)
    }

    func firmwareJSON(_ address: BluetoothAddress) -> [UInt8]? {
        runtime.firmware.existing(address).map { FirmwareJobs.json($0.state) }
    }

    func events() async -> HTTPResponse {
        let source = runtime.published.events()
        let current = await runtime.loop.snapshot()
        let topics = runtime.options.topics
        let (stream, continuation) = AsyncStream<[UInt8]>.makeStream(bufferingPolicy: .bufferingNewest(256))
        // What is online now, then every change; a comment every 15 s keeps proxies from closing the stream.
        for device in current where device.online {
            continuation.yield(ServerSentEvents.event(name: "state", data: String(decoding: StatePayload.json(for: device.record, at: Date()), as: UTF8.self)))
        }
        let forward = Task {
            for await message in source {
                if let event = Self.event(for: message, topics: topics) { continuation.yield(event) }
            }
            continuation.finish()
        }
        let keepAlive = Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: .seconds(15)) } catch { return }
                continuation.yield(ServerSentEvents.keepAlive)
            }
        }
        continuation.onTermination = { _ in
            forward.cancel()
            keepAlive.cancel()
        }
        return ServerSentEvents.response(stream)
    }

    // MARK: - Helpers

    /// A published message as an event: states as `state`, device availability as `availability`.
    static func event(for message: OutgoingMessage, topics: GatewayTopics) -> [UInt8]? {
        guard let levels = topics.deviceLevels(of: message.topic), let address = GatewayTopics.address(fromID: levels.id) else { return nil }
        switch levels.leaf {
        case "state":
            return ServerSentEvents.event(name: "state", data: message.text)
        case "firmware":
            return ServerSentEvents.event(name: "firmware", data: message.text)
        case "status":
            let body = SortedJSON.bytes([("address", .string(address.description)), ("online", .bool(message.text == GatewayTopics.online))])
            return ServerSentEvents.event(name: "availability", data: String(decoding: body, as: UTF8.self))
        default:
            return nil
        }
    }

    static func rowMembers(_ row: DeviceListPresenter.Row) -> [(String, FieldValue)] {
        var readings: [(String, FieldValue)] = []
        for (key, reading) in ReadingKey.published(row.readings) {
            switch reading.value {
            case let .number(v): readings.append((key, .number(v)))
            case let .bool(b): readings.append((key, .bool(b)))
            case let .text(t): readings.append((key, .string(t)))
            }
        }
        return [
            ("address", .string(row.id.address.description)),
            ("name", row.title == row.id.address.description ? .null : .string(row.title)),
            ("format", row.format.map { .string($0) } ?? .null),
            ("rssi", row.rssi.map { .int(Int($0)) } ?? .null),
            ("last_seen", row.lastSeen.map { .string(ISO8601UTC.string($0)) } ?? .null),
            ("stale", .bool(row.stale)),
            ("readings", .nested(readings)),
        ]
    }

    /// `AA:BB:CC:DD:EE:FF` (or `-`, `_` between the pairs), any case, or
    /// `aabbccddeeff`: what `BluetoothAddress` reads everywhere.
    static func address(_ text: String?) -> BluetoothAddress? {
        text.flatMap { try? BluetoothAddress($0) }
    }

    static func badAddress(_ request: HTTPRequest) -> HTTPResponse {
        .problem(status: .badRequest, "\"\(request.pathParameters["address"] ?? "")\" is not a Bluetooth address (AA:BB:CC:DD:EE:FF or aabbccddeeff)")
    }

    struct QueryError: Error { let message: String }

    /// ISO 8601 (`2026-11-23T02:00:00Z`) or Unix seconds.
    static func date(_ text: String?, name: String) throws(QueryError) -> Date? {
        guard let text, !text.isEmpty else { return nil }
        let seconds: Double
        if let number = Double(text) {
            seconds = number
        } else {
            // Foundation's ISO 8601 parse strategies: whole seconds, or with
            // a fraction (`…T02:00:00.250Z`); an offset other than Z is read too.
            let parsed = (try? Date(text, strategy: Date.ISO8601FormatStyle()))
                ?? (try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
            guard let parsed else {
                throw QueryError(message: "\"\(name)\" must be an ISO 8601 time like 2026-11-23T02:00:00Z or Unix seconds, got \"\(text)\"")
            }
            seconds = parsed.timeIntervalSince1970
        }
        switch Bounds.unixTime(seconds) {
        case .success(let checked): return Date(timeIntervalSince1970: checked)
        case .failure(let problem): throw QueryError(message: "\"\(name)\": \(problem.description)")
        }
    }
}

extension GatewayRuntime {
    /// Starts the HTTP API when configured. Throws when the address cannot be bound.
    public func startHTTP() async throws(GatewayStartError) {
        guard let http = options.http else { return }
        guard http.token != nil || BearerAuth.isLoopback(host: http.host) else {
            throw .http("the HTTP API on \(http.host):\(http.port) is reachable from other hosts: a bearer token is required (http.token or http.token_file)")
        }
        let api = GatewayHTTPAPI(runtime: self, token: http.token)
        do {
            // Health and metrics stay answerable when every ordinary connection
            // is taken (slow clients, event-stream subscribers): reserved slots.
            var configuration = HTTPServer.Configuration()
            configuration.reservedPaths = ["/healthz", "/metrics"]
            configuration.jsonErrors = true   // every answer of the API is JSON, as docs/GATEWAY.md says
            let server = try HTTPServer.start(host: http.host, port: http.port, configuration: configuration,
                                              immediate: api.immediate, handler: api.handler)
            setHTTPServer(server)
            logger.info("HTTP API on \(server.address)")
        } catch {
            throw .http(error.description)
        }
    }

    /// The port the HTTP API listens on (nil: not running).
    public var httpPort: Int? { httpServer?.boundPort }
}
