import DBus
import ScenarioFormat

extension BlueZSimulator {
    static func deviceDescription(_ methods: [DBusMethodDescription], _ setters: [String: DBusPropertyDescription.Setter]) -> DBusInterfaceDescription {
        DBusInterfaceDescription(BlueZ.device, methods: methods, properties: [
            DBusPropertyDescription("Address", .string),
            DBusPropertyDescription("AddressType", .string),
            DBusPropertyDescription("Name", .string),
            DBusPropertyDescription("Icon", .string),
            DBusPropertyDescription("Class", .uint32),
            DBusPropertyDescription("Appearance", .uint16),
            DBusPropertyDescription("UUIDs", stringArray),
            DBusPropertyDescription("Paired", .boolean),
            DBusPropertyDescription("Bonded", .boolean),
            DBusPropertyDescription("Connected", .boolean),
            DBusPropertyDescription("Trusted", .boolean, access: .readwrite, setter: setters["Trusted"]),
            DBusPropertyDescription("Blocked", .boolean, access: .readwrite, setter: setters["Blocked"]),
            DBusPropertyDescription("Alias", .string, access: .readwrite, setter: setters["Alias"]),
            DBusPropertyDescription("Adapter", .objectPath),
            DBusPropertyDescription("LegacyPairing", .boolean),
            DBusPropertyDescription("RSSI", .int16),
            DBusPropertyDescription("TxPower", .int16),
            DBusPropertyDescription("ManufacturerData", manufacturerDataType),
            DBusPropertyDescription("ServiceData", serviceDataType),
            DBusPropertyDescription("ServicesResolved", .boolean),
            DBusPropertyDescription("AdvertisingFlags", .array(.byte)),
        ])
    }

    static let batteryDescription = DBusInterfaceDescription(BlueZ.battery, properties: [
        DBusPropertyDescription("Percentage", .byte),
    ])

    func deviceValues(_ d: DeviceState, adapter a: AdapterState) -> [String: DBusValue] {
        var v: [String: DBusValue] = [
            "Address": .string(d.spec.address), "AddressType": .string(d.spec.addressType),
            "Alias": .string(d.displayAlias), "UUIDs": strings(d.allUUIDs),
            "Paired": .boolean(d.paired), "Bonded": .boolean(d.paired), "Connected": .boolean(d.connected),
            "Trusted": .boolean(d.trusted), "Blocked": .boolean(d.blocked), "Adapter": .objectPath(a.path),
            "LegacyPairing": .boolean(d.spec.legacyPairing), "ServicesResolved": .boolean(d.servicesResolved),
            "AdvertisingFlags": .bytes([d.spec.connectable ? 0x06 : 0x04]),
        ]
        if let name = d.name { v["Name"] = .string(name) }
        if let c = d.spec.classOfDevice { v["Class"] = .uint32(c) }
        if let ap = d.spec.appearance {
            v["Appearance"] = .uint16(ap)
            if d.spec.icon == nil, let icon = iconForAppearance(ap) { v["Icon"] = .string(icon) }
        }
        if let icon = d.spec.icon { v["Icon"] = .string(icon) }
        if d.advertising && (a.discovering || monitored(d, by: a)) { v["RSSI"] = .int16(d.rssi) }
        if let tx = d.txPower { v["TxPower"] = .int16(tx) }
        if !d.manufacturerData.isEmpty { v["ManufacturerData"] = manufacturerDataValue(d.manufacturerData) }
        if !d.serviceData.isEmpty { v["ServiceData"] = serviceDataValue(d.serviceData) }
        return v
    }

    func exportDevice(_ d: DeviceState) async throws {
        guard let connection, let a = adapter(d.adapterID), a.registration != nil, d.registration == nil, !d.exporting else { return }
        d.exporting = true
        defer {
            d.exporting = false
            let waiting = d.exportWaiters
            d.exportWaiters = []
            for w in waiting { w.resume() }
        }
        let i = d.index
        let methods = [
            method("Connect") { sim, _ in try await sim.connect(i) },
            method("Disconnect") { sim, _ in try await sim.disconnect(i) },
            method("ConnectProfile", [.init("UUID", .string)]) { sim, call in try await sim.connectProfile(i, try call.argument(0)) },
            method("DisconnectProfile", [.init("UUID", .string)]) { sim, call in try await sim.disconnectProfile(i, try call.argument(0)) },
            method("Pair") { sim, call in try await sim.pair(i, sender: call.sender ?? "") },
            method("CancelPairing") { sim, _ in try await sim.cancelPairing(i) },
        ]
        let setters: [String: DBusPropertyDescription.Setter] = [
            "Trusted": { [weak self] value in
                guard case let .boolean(b) = value else { return }
                await self?.setTrusted(i, b)
            },
            "Blocked": { [weak self] value in
                guard case let .boolean(b) = value else { return }
                await self?.setBlocked(i, b)
            },
            "Alias": { [weak self] value in
                guard case let .string(s) = value else { return }
                await self?.setAlias(i, s)
            },
        ]
        let values = deviceValues(d, adapter: a)
        let reg = try await connection.export(d.path, interfaces: [
            exported(Self.deviceDescription(methods, setters), values: values),
        ])
        // The adapter may have gone while we waited.
        guard a.registration != nil, self.connection === connection else { return }
        d.registration = reg
        d.publishedManufacturerData = d.manufacturerData
        d.publishedServiceData = d.serviceData
        d.publishedRSSI = values["RSSI"] == nil ? nil : d.rssi
        log("device \(d.spec.address) (\(d.displayAlias)) appears")
        // Whoever exported it, a monitor that matches it hears of it.
        notifyMonitors(d, a)
        // The actor was free while the object was exported: if the discovery
        // or the monitor that wanted it ended meanwhile, nothing else will
        // schedule its expiry (monitorsChanged skipped it, unregistered).
        if !d.isKept, d.removalTask == nil, !wanted(d, by: a) { scheduleRemoval(d) }
        if d.paired && !d.spec.gatt.isEmpty && d.connected {
            await exportGATT(d)
        }
    }

    func unexportDevice(_ d: DeviceState) {
        d.removalTask?.cancel()
        d.removalTask = nil
        d.dropRegistrations()
    }

    /// An advertisement of `d` reached a discovering adapter.
    func deviceSeen(_ d: DeviceState, duplicate: Bool) async {
        guard let a = adapter(d.adapterID), a.registration != nil else { return }
        d.removalTask?.cancel()
        d.removalTask = nil
        guard let reg = d.registration else {
            do { try await exportDevice(d) } catch { log("cannot export \(d.spec.address): \(error)") }
            return
        }
        var changes: [String: DBusValue] = ["UUIDs": strings(d.allUUIDs), "Alias": .string(d.displayAlias)]
        // RSSI as bluetoothd announces it (update_found_devices): while any
        // discovering client has a filter, on every advertisement, unchanged
        // values included; otherwise only once it moved by RSSI_THRESHOLD
        // (8 dBm) from the value last announced.
        let filtered = a.sessions.contains { a.filters[$0] != nil }
        var repeatRSSI = false
        if let last = d.publishedRSSI, !filtered, abs(Int(d.rssi) - Int(last)) < 8 {
            // Below the threshold: nothing, and the announced value stays.
        } else {
            changes["RSSI"] = .int16(d.rssi)
            repeatRSSI = filtered && d.publishedRSSI == d.rssi
            d.publishedRSSI = d.rssi
        }
        if let name = d.name { changes["Name"] = .string(name) }
        if let tx = d.txPower { changes["TxPower"] = .int16(tx) }
        if !d.manufacturerData.isEmpty { changes["ManufacturerData"] = manufacturerDataValue(d.manufacturerData) }
        if !d.serviceData.isEmpty { changes["ServiceData"] = serviceDataValue(d.serviceData) }
        reg.setProperties(BlueZ.device, changes)
        // With DuplicateData, every advertisement is reported even when the
        // data did not change (the registry only reports real changes).
        var repeated: [DBusDictEntry] = []
        if repeatRSSI { repeated.append(DBusDictEntry(.string("RSSI"), .variant(.int16(d.rssi)))) }
        if duplicate && duplicatesWanted(a) {
            if !d.manufacturerData.isEmpty && d.publishedManufacturerData == d.manufacturerData {
                repeated.append(DBusDictEntry(.string("ManufacturerData"), .variant(manufacturerDataValue(d.manufacturerData))))
            }
            if !d.serviceData.isEmpty && d.publishedServiceData == d.serviceData {
                repeated.append(DBusDictEntry(.string("ServiceData"), .variant(serviceDataValue(d.serviceData))))
            }
        }
        if !repeated.isEmpty {
            reg.emit(BlueZ.properties, "PropertiesChanged", [
                .string(BlueZ.device), .dictionary(key: .string, value: .variant, repeated), .array(.string, []),
            ])
        }
        d.publishedManufacturerData = d.manufacturerData
        d.publishedServiceData = d.serviceData
    }

    func applyAdvertisement(device i: Int, _ e: AdvertisementEvent) async {
        guard i < devices.count else { return }
        let d = devices[i]
        if let r = e.rssi { d.rssi = r }
        if let t = e.txPower { d.txPower = t }
        if let n = e.name { d.name = n }
        if let m = e.manufacturerData { d.manufacturerData = m }
        if let s = e.serviceData { d.serviceData = s }
        if let u = e.uuids { d.uuids = u }
        if let p = e.present, p != d.advertising {
            d.advertising = p
            log("device \(d.spec.address) \(p ? "starts advertising" : "stops advertising")")
            if !p {
                monitorsLose(d)
                if d.registration != nil && !d.isKept { scheduleRemoval(d) }
                return
            }
        }
        guard d.advertising, !d.blocked, let a = adapter(d.adapterID), wanted(d, by: a) else { return }
        await deviceSeen(d, duplicate: true)
        notifyMonitors(d, a)
    }

    func applyBattery(device i: Int, _ percentage: UInt8) {
        guard i < devices.count else { return }
        let d = devices[i]
        d.battery = percentage
        if d.hasBattery { d.registration?.setProperty(BlueZ.battery, "Percentage", .byte(percentage)) }
    }

    func scheduleRemoval(_ d: DeviceState) {
        d.removalTask?.cancel()
        let i = d.index
        let wait = duration(scenario.settings.temporaryDeviceTimeout)
        d.removalTask = Task { [weak self] in
            do { try await Task.sleep(for: wait) } catch { return }
            await self?.removeIfTemporary(i)
        }
    }

    func removeIfTemporary(_ i: Int) {
        let d = devices[i]
        d.removalTask = nil
        guard d.registration != nil, !d.isKept else { return }
        if let a = adapter(d.adapterID), d.advertising, wanted(d, by: a) { return }
        log("device \(d.spec.address) removed (temporary, not seen for \(scenario.settings.temporaryDeviceTimeout) s)")
        unexportDevice(d)
    }

    // MARK: Device properties

    func setTrusted(_ i: Int, _ on: Bool) {
        let d = devices[i]
        d.trusted = on
        if !on, d.registration != nil, !d.isKept, let a = adapter(d.adapterID), !a.discovering, !monitored(d, by: a) { scheduleRemoval(d) }
    }

    func setBlocked(_ i: Int, _ on: Bool) {
        let d = devices[i]
        d.blocked = on
        if on && d.connected { linkLost(d) }
    }

    func setAlias(_ i: Int, _ alias: String) {
        let d = devices[i]
        d.alias = alias.isEmpty ? nil : alias
        if alias.isEmpty {
            let shown = d.displayAlias
            Task { [weak self] in
                try? await Task.sleep(for: .milliseconds(20))
                await self?.restoreDeviceAlias(i, shown)
            }
        }
    }

    func restoreDeviceAlias(_ i: Int, _ shown: String) {
        devices[i].registration?.setProperty(BlueZ.device, "Alias", .string(shown))
    }

    // MARK: Connection

    /// Whether a method call on `d`'s object finds the device. The object
    /// takes calls as soon as its InterfacesAdded went out, and a client may
    /// call it at once (bluetoothd accepts that); the simulator, an actor,
    /// records the registration only when the export's await returns, so a
    /// call that came in between waits for it here instead of being told
    /// the device does not exist (seen under load in CI: Connect right
    /// after the device appeared).
    func exported(_ d: DeviceState) async -> Bool {
        if d.registration == nil, d.exporting {
            await withCheckedContinuation { d.exportWaiters.append($0) }
        }
        return d.registration != nil
    }

    func connect(_ i: Int) async throws -> [DBusValue] {
        let d = devices[i]
        _ = try requirePowered(d.adapterID)
        guard await exported(d) else { throw bluezError("DoesNotExist", "Does Not Exist") }
        if d.blocked { throw bluezError("Failed", "Blocked") }
        // An LE device bluetoothd holds connected: success at once, services
        // resolved or not (dev_connect()); after a kill that opens no ATT.
        if d.connected { return [] }
        if d.connecting { throw bluezError("InProgress", "In Progress") }
        d.connecting = true
        d.removalTask?.cancel()
        let generation = d.connectionGeneration
        do {
            try await sleep(scenario.settings.connectDelay)
        } catch {
            d.connecting = false
            throw bluezError("Failed", "Operation canceled")
        }
        d.connecting = false
        guard d.registration != nil else { throw bluezError("Failed", "Disconnected") }
        // A Disconnect while pending cancels it (device_request_disconnect()).
        guard generation == d.connectionGeneration else { throw bluezError("Failed", "br-connection-canceled") }
        if d.connectFailuresLeft > 0 {
            d.connectFailuresLeft -= 1
            log("device \(d.spec.address): connect fails (\(d.spec.faults.connectError.name))")
            afterLinkDown(d)
            throw d.spec.faults.connectError.dbusError
        }
        guard d.advertising, d.spec.connectable, !d.booting else {
            afterLinkDown(d)
            throw bluezError("Failed", "le-connection-abort-by-local")
        }
        d.connected = true
        d.connectionGeneration += 1
        let current = d.connectionGeneration
        d.registration?.setProperty(BlueZ.device, "Connected", .boolean(true))
        log("device \(d.spec.address) connected")
        if let after = d.spec.faults.disconnectAfter {
            d.disconnectTask = Task { [weak self] in
                do { try await Task.sleep(for: self?.duration(after) ?? .zero) } catch { return }
                await self?.remoteDisconnect(i, generation: current)
            }
        }
        // bluetoothd replies at ATT link-up (att_connect_cb in device.c): the
        // GATT objects, ServicesResolved and Battery1 come after the reply.
        if d.spec.faults.servicesUnresolved {
            log("device \(d.spec.address): connected; its services are never resolved (fault)")
            return []
        }
        Task { [weak self] in
            try? await self?.sleep(self?.scenario.settings.serviceResolveDelay ?? 0)
            await self?.servicesResolved(i, generation: current)
        }
        return []
    }

    private func servicesResolved(_ i: Int, generation: Int) async {
        let d = devices[i]
        guard d.registration != nil, d.connected, d.connectionGeneration == generation else { return }
        await exportGATT(d)
        d.servicesResolved = true
        improvConnected(d)
        d.registration?.setProperties(BlueZ.device, ["ServicesResolved": .boolean(true), "UUIDs": strings(d.allUUIDs)])
        if let pct = d.battery, !d.hasBattery, let reg = d.registration {
            reg.addInterfaces([DBusExportedInterface(Self.batteryDescription, values: ["Percentage": .byte(pct)])])
            d.hasBattery = true
        }
    }

    func remoteDisconnect(_ i: Int, generation: Int) {
        let d = devices[i]
        guard d.connected, d.connectionGeneration == generation else { return }
        log("device \(d.spec.address) drops the connection")
        linkLost(d)
    }

    func disconnect(_ i: Int) async throws -> [DBusValue] {
        let d = devices[i]
        if d.connecting {
            // Cancels the pending Connect, which fails; the device stays disconnected.
            d.connectionGeneration += 1
            return []
        }
        // Not connected: bluetoothd answers with an empty reply, no error.
        guard d.connected else { return [] }
        // device_request_disconnect(): Battery1 goes at once; the link after
        // the disconnect timer (DISCONNECT_TIMER, 2 s); then
        // ServicesResolved=false, the reply, and Connected=false after it.
        let generation = d.connectionGeneration
        removeBattery(d)
        let timer: Task<Void, Never>
        if let pending = d.disconnectTimer {
            timer = pending
        } else {
            let wait = duration(scenario.settings.disconnectDelay)
            timer = Task { try? await Task.sleep(for: wait) }
            d.disconnectTimer = timer
        }
        await timer.value
        if d.disconnectTimer == timer { d.disconnectTimer = nil }
        guard d.connected, d.connectionGeneration == generation else { return [] }
        if d.servicesResolved {
            d.servicesResolved = false
            d.registration?.setProperty(BlueZ.device, "ServicesResolved", .boolean(false))
        }
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(5))
            await self?.linkLost(i, generation: generation)
        }
        return []
    }

    func linkLost(_ i: Int, generation: Int) {
        let d = devices[i]
        guard d.connected, d.connectionGeneration == generation else { return }
        linkLost(d)
    }

    func removeBattery(_ d: DeviceState) {
        guard d.hasBattery else { return }
        d.registration?.removeInterfaces([BlueZ.battery])
        d.hasBattery = false
    }

    func connectProfile(_ i: Int, _ uuid: String) async throws -> [DBusValue] {
        guard let u = normalizeUUID(uuid) else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        let d = devices[i]
        guard d.allUUIDs.contains(u) || d.spec.gatt.contains(where: { $0.uuid == u }) else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        return try await connect(i)
    }

    func disconnectProfile(_ i: Int, _ uuid: String) throws -> [DBusValue] {
        guard normalizeUUID(uuid) != nil else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        let d = devices[i]
        guard d.connected else { throw bluezError("NotConnected", "Not Connected") }
        return []
    }

    /// The link went down (either side): properties, notifications, timers.
    func linkLost(_ d: DeviceState) {
        d.disconnectTask?.cancel()
        d.disconnectTask = nil
        d.smpInbox.reset()
        d.connectionGeneration += 1
        for s in d.services {
            for c in s.characteristics {
                if c.notifying {
                    c.notifyClients = []
                    stopNotifying(d, c)
                }
                if let w = c.writeSocket {
                    w.close()
                    c.writeSocket = nil
                    c.registration?.setProperty(BlueZ.gattCharacteristic, "WriteAcquired", .boolean(false))
                }
            }
        }
        removeBattery(d)
        let wasResolved = d.servicesResolved
        d.servicesResolved = false
        d.connected = false
        d.linkKept = false
        if wasResolved { d.registration?.setProperty(BlueZ.device, "ServicesResolved", .boolean(false)) }
        // The GATT objects and the UUIDs they added stay: bluetoothd keeps
        // its attribute cache ([GATT] Cache=always) until the device goes.
        d.registration?.setProperty(BlueZ.device, "Connected", .boolean(false))
        log("device \(d.spec.address) disconnected")
        afterLinkDown(d)
    }

    func afterLinkDown(_ d: DeviceState) {
        guard d.registration != nil, !d.isKept, let a = adapter(d.adapterID) else { return }
        if !(a.discovering && d.advertising && wanted(d, by: a)) { scheduleRemoval(d) }
    }
}
