import BLEParsing
import DBus

extension BlueZSimulator {
    static let serviceDescription = DBusInterfaceDescription(BlueZ.gattService, properties: [
        DBusPropertyDescription("UUID", .string),
        DBusPropertyDescription("Primary", .boolean),
        DBusPropertyDescription("Device", .objectPath),
        DBusPropertyDescription("Includes", .array(.objectPath)),
        DBusPropertyDescription("Handle", .uint16),
    ])

    func exportGATT(_ d: DeviceState) async {
        guard !d.gattExported, let connection else { return }
        d.gattExported = true
        let i = d.index
        do {
            for (si, s) in d.services.enumerated() {
                s.registration = try await connection.export(s.path, interfaces: [
                    exported(Self.serviceDescription, values: [
                        "UUID": .string(s.spec.uuid), "Primary": .boolean(s.spec.primary), "Device": .objectPath(d.path),
                        "Includes": .array(.objectPath, []), "Handle": .uint16(UInt16(s.handle)),
                    ]),
                ])
                for (ci, c) in s.characteristics.enumerated() {
                    let canNotify = c.spec.flags.contains("notify") || c.spec.flags.contains("indicate")
                    var properties = [
                        DBusPropertyDescription("UUID", .string),
                        DBusPropertyDescription("Service", .objectPath),
                        DBusPropertyDescription("Value", .array(.byte)),
                        DBusPropertyDescription("Flags", stringArray),
                        DBusPropertyDescription("Handle", .uint16),
                        DBusPropertyDescription("MTU", .uint16),
                    ]
                    var values: [String: DBusValue] = [
                        // bluetoothd's cached value: empty until a read or a notification.
                        "UUID": .string(c.spec.uuid), "Service": .objectPath(s.path), "Value": .bytes([]),
                        "Flags": strings(c.spec.flags), "Handle": .uint16(UInt16(c.handle)), "MTU": .uint16(d.spec.mtu),
                    ]
                    if canNotify {
                        properties.append(DBusPropertyDescription("Notifying", .boolean))
                        values["Notifying"] = .boolean(false)
                    }
                    // Present only when the flags allow acquiring (BlueZ omits them otherwise).
                    let canAcquireWrite = c.spec.flags.contains("write-without-response")
                    let canAcquireNotify = c.spec.flags.contains("notify")
                    if canAcquireWrite {
                        properties.append(DBusPropertyDescription("WriteAcquired", .boolean))
                        values["WriteAcquired"] = .boolean(false)
                    }
                    if canAcquireNotify {
                        properties.append(DBusPropertyDescription("NotifyAcquired", .boolean))
                        values["NotifyAcquired"] = .boolean(false)
                    }
                    let methods = [
                        method("ReadValue", [.init("options", optionsType)], [.init("value", .array(.byte))]) { sim, call in
                            try await sim.readCharacteristic(i, si, ci, try call.argument(0))
                        },
                        method("WriteValue", [.init("value", .array(.byte)), .init("options", optionsType)]) { sim, call in
                            try await sim.writeCharacteristic(i, si, ci, try call.argument(0), try call.argument(1))
                        },
                        method("StartNotify") { sim, call in try await sim.startNotify(i, si, ci, sender: call.sender ?? "") },
                        method("StopNotify") { sim, call in try await sim.stopNotify(i, si, ci, sender: call.sender ?? "") },
                        method("AcquireWrite", [.init("options", optionsType)], [.init("fd", .unixFD), .init("mtu", .uint16)]) { sim, _ in
                            try await sim.acquireWrite(i, si, ci)
                        },
                        method("AcquireNotify", [.init("options", optionsType)], [.init("fd", .unixFD), .init("mtu", .uint16)]) { sim, _ in
                            try await sim.acquireNotify(i, si, ci)
                        },
                    ]
                    c.registration = try await connection.export(c.path, interfaces: [
                        exported(DBusInterfaceDescription(BlueZ.gattCharacteristic, methods: methods, properties: properties), values: values),
                    ])
                    for (di, desc) in c.descriptors.enumerated() {
                        let dmethods = [
                            method("ReadValue", [.init("options", optionsType)], [.init("value", .array(.byte))]) { sim, call in
                                try await sim.readDescriptor(i, si, ci, di, try call.argument(0))
                            },
                            method("WriteValue", [.init("value", .array(.byte)), .init("options", optionsType)]) { sim, call in
                                try await sim.writeDescriptor(i, si, ci, di, try call.argument(0), try call.argument(1))
                            },
                        ]
                        desc.registration = try await connection.export(desc.path, interfaces: [
                            exported(DBusInterfaceDescription(BlueZ.gattDescriptor, methods: dmethods, properties: [
                                DBusPropertyDescription("UUID", .string),
                                DBusPropertyDescription("Characteristic", .objectPath),
                                DBusPropertyDescription("Value", .array(.byte)),
                                DBusPropertyDescription("Flags", stringArray),
                                DBusPropertyDescription("Handle", .uint16),
                            ]), values: [
                                "UUID": .string(desc.spec.uuid), "Characteristic": .objectPath(c.path), "Value": .bytes([]),
                                "Flags": strings(desc.spec.flags), "Handle": .uint16(UInt16(desc.handle)),
                            ]),
                        ])
                    }
                }
            }
        } catch {
            log("cannot export the GATT objects of \(d.spec.address): \(error)")
        }
    }

    func unexportGATT(_ d: DeviceState) {
        // Children first, as BlueZ announces them.
        for s in d.services {
            for c in s.characteristics {
                for desc in c.descriptors { desc.registration = nil }
                c.registration = nil
            }
            s.registration = nil
        }
        d.gattExported = false
    }

    // MARK: Operations

    struct GattOptions {
        var offset = 0
        var type: String?
    }

    func gattOptions(_ options: [String: DBusValue]) throws -> GattOptions {
        var o = GattOptions()
        for (key, value) in options {
            switch (key, value) {
            case let ("offset", .uint16(v)): o.offset = Int(v)
            case let ("type", .string(t)):
                guard ["request", "command", "reliable"].contains(t) else { throw bluezError("InvalidArguments", "Invalid type \(t)") }
                o.type = t
            case ("offset", _), ("type", _):
                throw bluezError("InvalidArguments", "Invalid arguments in method call")
            default:
                break // mtu, device, link, prepare-authorize: accepted and ignored
            }
        }
        return o
    }

    func liveCharacteristic(_ i: Int, _ si: Int, _ ci: Int) throws -> (DeviceState, CharacteristicState) {
        guard i < devices.count else { throw bluezError("DoesNotExist", "Does Not Exist") }
        let d = devices[i]
        guard si < d.services.count, ci < d.services[si].characteristics.count else { throw bluezError("DoesNotExist", "Does Not Exist") }
        // A cached object of a disconnected device (gatt-client.c: no bt_gatt_client).
        guard d.connected else { throw bluezError("Failed", "Not connected") }
        return (d, d.services[si].characteristics[ci])
    }

    func readCharacteristic(_ i: Int, _ si: Int, _ ci: Int, _ options: [String: DBusValue]) throws -> [DBusValue] {
        let (_, c) = try liveCharacteristic(i, si, ci)
        let o = try gattOptions(options)
        // bluetoothd checks no flags: the request goes to the device, and a
        // strict device answers ATT Read Not Permitted (→ NotPermitted).
        let readable = c.spec.flags.contains { $0.hasSuffix("read") && $0 != "reliable-write" }
        guard readable else { throw bluezError("NotPermitted", "Read not permitted") }
        if let e = c.spec.readError { throw e.dbusError }
        // ATT Invalid Offset, as gatt-client.c maps it.
        guard o.offset <= c.value.count else { throw bluezError("InvalidArguments", "Invalid offset") }
        c.registration?.setProperty(BlueZ.gattCharacteristic, "Value", .bytes(c.value))
        return [.bytes(Array(c.value[o.offset...]))]
    }

    func writeCharacteristic(_ i: Int, _ si: Int, _ ci: Int, _ value: [UInt8], _ options: [String: DBusValue]) throws -> [DBusValue] {
        let (d, c) = try liveCharacteristic(i, si, ci)
        let o = try gattOptions(options)
        let flags = c.spec.flags
        let secureWrite = flags.contains { ["encrypt-write", "encrypt-authenticated-write", "secure-write"].contains($0) }
        let writable = flags.contains("write") || secureWrite || flags.contains("reliable-write")
        if c.writeSocket != nil { throw bluezError("NotPermitted", "Write not permitted (acquired)") }
        switch o.type {
        case "command"?:
            // Sent as an ATT Write Command whatever the flags; the device
            // does not answer one, so a refused command is silently lost.
            guard flags.contains("write-without-response") || writable else { return [] }
        case "request"?, "reliable"?:
            // A strict device refuses the request: ATT Write Not Permitted.
            guard writable else { throw bluezError("NotPermitted", "Write not permitted") }
        default:
            // No type: bluetoothd picks from the flags, and has none to pick.
            guard writable || flags.contains("write-without-response") else {
                throw bluezError("NotSupported", "Operation is not supported")
            }
        }
        guard o.offset <= c.value.count else { throw bluezError("InvalidArguments", "Invalid offset") }
        guard value.count <= 512 else { throw bluezError("InvalidValueLength", "Invalid Value Length") }
        try applyWrite(d, c, value, offset: o.offset)
        return []
    }

    /// Stores a written value and runs the scenario's write rules.
    func applyWrite(_ d: DeviceState, _ c: CharacteristicState, _ value: [UInt8], offset: Int) throws {
        let i = d.index
        if d.smp != nil, c.spec.uuid == Self.smpCharacteristic {
            smpWrite(d, c, value)
            return
        }
        if d.improv != nil, c.spec.uuid == Self.improvCommand {
            improvWrite(d, value)
            return
        }
        let rule = c.spec.onWrite.first { $0.match == nil || $0.match == value }
        if let e = rule?.error { throw e.dbusError }
        if rule?.store ?? true { c.value = Array(c.value.prefix(offset)) + value }
        for action in rule?.actions ?? [] {
            let target = action.characteristic.flatMap { d.characteristic(uuid: $0) } ?? c
            let generation = d.connectionGeneration
            let payload = action.value
            let targetPath = target.path
            let wait = duration(action.after)
            Task { [weak self] in
                do { try await Task.sleep(for: wait) } catch { return }
                await self?.deliver(device: i, path: targetPath, payload, generation: generation)
            }
        }
    }

    // MARK: Acquired sockets

    func acquireWrite(_ i: Int, _ si: Int, _ ci: Int) throws -> [DBusValue] {
        let (d, c) = try liveCharacteristic(i, si, ci)
        guard c.spec.flags.contains("write-without-response") else { throw bluezError("NotSupported", "Operation is not supported") }
        guard c.writeSocket == nil else { throw bluezError("NotPermitted", "Write already acquired") }
        let generation = d.connectionGeneration
        let path = c.path
        guard let (socket, clientFD) = AcquiredSocket.make(onMessage: { [weak self] bytes in
            Task { await self?.socketWrite(device: i, path: path, bytes, generation: generation) }
        }, onClose: { [weak self] in
            Task { await self?.writeReleased(device: i, path: path) }
        }) else { throw bluezError("Failed", "socketpair failed") }
        c.writeSocket = socket
        c.registration?.setProperty(BlueZ.gattCharacteristic, "WriteAcquired", .boolean(true))
        return [.unixFD(UnixFileDescriptor(owning: clientFD)), .uint16(d.spec.mtu)]
    }

    func socketWrite(device i: Int, path: ObjectPath, _ bytes: [UInt8], generation: Int) {
        let d = devices[i]
        guard d.connected, d.connectionGeneration == generation, let c = characteristic(d, path) else { return }
        try? applyWrite(d, c, bytes, offset: 0)
    }

    func writeReleased(device i: Int, path: ObjectPath) {
        guard let c = characteristic(devices[i], path), c.writeSocket != nil else { return }
        c.writeSocket = nil
        c.registration?.setProperty(BlueZ.gattCharacteristic, "WriteAcquired", .boolean(false))
    }

    func acquireNotify(_ i: Int, _ si: Int, _ ci: Int) throws -> [DBusValue] {
        let (d, c) = try liveCharacteristic(i, si, ci)
        guard c.spec.flags.contains("notify") else { throw bluezError("NotSupported", "Operation is not supported") }
        guard c.notifySocket == nil, c.notifyClients.isEmpty else { throw bluezError("NotPermitted", "Notify already enabled") }
        let path = c.path
        guard let (socket, clientFD) = AcquiredSocket.make(onMessage: { _ in }, onClose: { [weak self] in
            Task { await self?.notifyReleased(device: i, path: path) }
        }) else { throw bluezError("Failed", "socketpair failed") }
        c.notifySocket = socket
        c.registration?.setProperties(BlueZ.gattCharacteristic, ["NotifyAcquired": .boolean(true), "Notifying": .boolean(true)])
        startNotificationTimeline(d, c)
        return [.unixFD(UnixFileDescriptor(owning: clientFD)), .uint16(d.spec.mtu)]
    }

    func notifyReleased(device i: Int, path: ObjectPath) {
        let d = devices[i]
        guard let c = characteristic(d, path), c.notifySocket != nil else { return }
        stopNotifying(d, c)
    }

    func characteristic(_ d: DeviceState, _ path: ObjectPath) -> CharacteristicState? {
        for s in d.services { for c in s.characteristics where c.path == path { return c } }
        return nil
    }

    /// A value the device sends: stored, and announced if notifying.
    func deliver(device i: Int, path: ObjectPath, _ value: [UInt8], generation: Int) async {
        let d = devices[i]
        guard d.connected, d.connectionGeneration == generation else { return }
        for s in d.services {
            for c in s.characteristics where c.path == path {
                c.value = value
                if let socket = c.notifySocket {
                    // Acquired notifications go to the socket; Value stays as it is.
                    socket.send(Array(value.prefix(Int(d.spec.mtu) - 3)))
                } else if c.notifying {
                    await publish(c, value)
                }
            }
        }
    }

    /// Sets Value and emits PropertiesChanged even when the bytes repeat
    /// (each notification is a change for BlueZ clients).
    func publish(_ c: CharacteristicState, _ value: [UInt8]) async {
        guard let reg = c.registration else { return }
        if await reg.property(BlueZ.gattCharacteristic, "Value") == .bytes(value) {
            reg.emit(BlueZ.properties, "PropertiesChanged", [
                .string(BlueZ.gattCharacteristic),
                .dictionary(key: .string, value: .variant, [DBusDictEntry(.string("Value"), .variant(.bytes(value)))]),
                .array(.string, []),
            ])
        } else {
            reg.setProperty(BlueZ.gattCharacteristic, "Value", .bytes(value))
        }
    }

    func startNotify(_ i: Int, _ si: Int, _ ci: Int, sender: String) async throws -> [DBusValue] {
        let (d, c) = try liveCharacteristic(i, si, ci)
        guard c.spec.flags.contains("notify") || c.spec.flags.contains("indicate") else {
            throw bluezError("NotSupported", "Operation is not supported")
        }
        guard c.notifySocket == nil else { throw bluezError("NotPermitted", "Notify acquired") }
        // The same client again: bluetoothd succeeds (InProgress only while
        // its first request is still pending there, which is never here).
        if c.notifyClients.contains(sender) { return [] }
        let first = c.notifyClients.isEmpty
        c.notifyClients.insert(sender)
        watchClient(sender)
        guard first else { return [] }
        // The first subscription writes the device's CCCD and replies when the
        // device answered: a write request and its response, at least one
        // connection interval (bluetoothd's LE default is 30–50 ms). A second
        // StartNotify meanwhile succeeds at once. bluetoothd does not signal
        // the CCCD's Value.
        try? await sleep(0.03)
        guard c.notifyClients.contains(sender), c.registration != nil, d.connected else {
            throw bluezError("Failed", "Disconnected")
        }
        c.registration?.setProperty(BlueZ.gattCharacteristic, "Notifying", .boolean(true))
        if let ccc = c.descriptors.first(where: { $0.spec.uuid == normalizeUUID("2902") }) {
            ccc.value = c.spec.flags.contains("notify") ? [0x01, 0x00] : [0x02, 0x00]
        }
        startNotificationTimeline(d, c)
        return []
    }

    func startNotificationTimeline(_ d: DeviceState, _ c: CharacteristicState) {
        guard let timeline = c.spec.notifications, !timeline.events.isEmpty else { return }
        let i = d.index
        let path = c.path
        let generation = d.connectionGeneration
        c.notifyTask?.cancel()
        c.notifyTask = runTimeline(timeline, from: .now) { sim, event in
            await sim.deliver(device: i, path: path, event.value, generation: generation)
        }
    }

    func stopNotify(_ i: Int, _ si: Int, _ ci: Int, sender: String) throws -> [DBusValue] {
        let (d, c) = try liveCharacteristic(i, si, ci)
        guard c.notifyClients.remove(sender) != nil else { throw bluezError("Failed", "No notify session started") }
        if c.notifyClients.isEmpty { stopNotifying(d, c) }
        return []
    }

    func stopNotifying(_ d: DeviceState, _ c: CharacteristicState) {
        c.notifyTask?.cancel()
        c.notifyTask = nil
        if let socket = c.notifySocket {
            socket.close()
            c.notifySocket = nil
            c.registration?.setProperty(BlueZ.gattCharacteristic, "NotifyAcquired", .boolean(false))
        }
        c.registration?.setProperty(BlueZ.gattCharacteristic, "Notifying", .boolean(false))
        // The device's CCCD changes; bluetoothd does not signal its cached Value.
        if let ccc = c.descriptors.first(where: { $0.spec.uuid == normalizeUUID("2902") }) { ccc.value = [0, 0] }
    }

    func liveDescriptor(_ i: Int, _ si: Int, _ ci: Int, _ di: Int) throws -> DescriptorState {
        let (_, c) = try liveCharacteristic(i, si, ci)
        guard di < c.descriptors.count else { throw bluezError("DoesNotExist", "Does Not Exist") }
        return c.descriptors[di]
    }

    func readDescriptor(_ i: Int, _ si: Int, _ ci: Int, _ di: Int, _ options: [String: DBusValue]) throws -> [DBusValue] {
        let desc = try liveDescriptor(i, si, ci, di)
        let o = try gattOptions(options)
        guard desc.spec.flags.contains(where: { $0.hasSuffix("read") }) else { throw bluezError("NotPermitted", "Read not permitted") }
        guard o.offset <= desc.value.count else { throw bluezError("InvalidArguments", "Invalid offset") }
        desc.registration?.setProperty(BlueZ.gattDescriptor, "Value", .bytes(desc.value))
        return [.bytes(Array(desc.value[o.offset...]))]
    }

    func writeDescriptor(_ i: Int, _ si: Int, _ ci: Int, _ di: Int, _ value: [UInt8], _ options: [String: DBusValue]) throws -> [DBusValue] {
        let desc = try liveDescriptor(i, si, ci, di)
        let o = try gattOptions(options)
        // BlueZ manages the Client Characteristic Configuration itself
        // (StartNotify/StopNotify); clients may not write it.
        if desc.spec.uuid == normalizeUUID("2902") { throw bluezError("NotPermitted", "Write not permitted") }
        guard desc.spec.flags.contains(where: { $0.hasSuffix("write") }) else { throw bluezError("NotPermitted", "Write not permitted") }
        guard o.offset <= desc.value.count else { throw bluezError("InvalidArguments", "Invalid offset") }
        desc.value = Array(desc.value.prefix(o.offset)) + value
        return []
    }
}

// MARK: SMP (mcumgr) server

extension BlueZSimulator {
    static let smpCharacteristic = SMP.characteristic.string

    /// A write to the SMP characteristic: a request, or a piece of one. Each
    /// whole request is answered by notifications of at most MTU − 3 bytes.
    func smpWrite(_ d: DeviceState, _ c: CharacteristicState, _ value: [UInt8]) {
        guard var server = d.smp else { return }
        let requests: [SMP.Message]
        do { requests = try d.smpInbox.append(value) } catch {
            // Zephyr's SMP reassembly drops what it cannot take; the client times out.
            log("device \(d.spec.address): SMP request dropped: \(error.description)")
            return
        }
        for request in requests {
            guard !request.header.op.isResponse else { continue }
            let response = server.respond(to: request)
            if server.disconnectRequested {
                // The link drops before the device answers (fault disconnectAfterBytes).
                server.disconnectRequested = false
                d.smp = server
                log("device \(d.spec.address): drops the link mid-upload (fault)")
                let generation = d.connectionGeneration
                let i = d.index
                Task { [weak self] in await self?.remoteDisconnect(i, generation: generation) }
                return
            }
            send(response.bytes, to: c, of: d)
            if server.resetRequested {
                d.smp = server
                reboot(d)
                return
            }
        }
        d.smp = server
    }

    /// Queues `bytes` as notifications cut to the ATT payload (MTU − 3), in order.
    func send(_ bytes: [UInt8], to c: CharacteristicState, of d: DeviceState) {
        let size = max(20, Int(d.spec.mtu) - 3)
        let chunks = stride(from: 0, to: bytes.count, by: size).map { Array(bytes[$0..<min($0 + size, bytes.count)]) }
        let previous = d.outbox
        let i = d.index, path = c.path, generation = d.connectionGeneration
        d.outbox = Task { [weak self] in
            await previous?.value
            for chunk in chunks { await self?.deliver(device: i, path: path, chunk, generation: generation) }
        }
    }

    /// os_mgmt reset: the answer goes out, the link drops, MCUboot swaps (or
    /// reverts) and the device is back after its boot time.
    func reboot(_ d: DeviceState) {
        let i = d.index, generation = d.connectionGeneration
        let outbox = d.outbox
        let boot = duration(d.spec.smp?.bootTime ?? 0.5)
        d.booting = true
        Task { [weak self] in
            await outbox?.value
            try? await Task.sleep(for: .milliseconds(20))
            await self?.bootDevice(i, generation: generation, after: boot)
        }
    }

    func bootDevice(_ i: Int, generation: Int, after boot: Duration) async {
        let d = devices[i]
        if d.connected, d.connectionGeneration == generation {
            log("device \(d.spec.address) resets")
            linkLost(d)
        }
        d.smp?.boot()
        try? await Task.sleep(for: boot)
        d.booting = false
        log("device \(d.spec.address) booted \(d.smp?.slots.first??.version ?? "?")")
    }
}
