import DBus

extension BlueZSimulator {
    static func adapterDescription(_ handlers: [DBusMethodDescription], _ setters: [String: DBusPropertyDescription.Setter]) -> DBusInterfaceDescription {
        DBusInterfaceDescription(BlueZ.adapter, methods: handlers, properties: [
            DBusPropertyDescription("Address", .string),
            DBusPropertyDescription("AddressType", .string),
            DBusPropertyDescription("Name", .string),
            DBusPropertyDescription("Alias", .string, access: .readwrite, setter: setters["Alias"]),
            DBusPropertyDescription("Class", .uint32),
            DBusPropertyDescription("Connectable", .boolean, access: .readwrite, setter: setters["Connectable"]),
            DBusPropertyDescription("Powered", .boolean, access: .readwrite, setter: setters["Powered"]),
            DBusPropertyDescription("PowerState", .string),
            DBusPropertyDescription("Discoverable", .boolean, access: .readwrite, setter: setters["Discoverable"]),
            DBusPropertyDescription("DiscoverableTimeout", .uint32, access: .readwrite),
            DBusPropertyDescription("Pairable", .boolean, access: .readwrite),
            DBusPropertyDescription("PairableTimeout", .uint32, access: .readwrite),
            DBusPropertyDescription("Discovering", .boolean),
            DBusPropertyDescription("UUIDs", stringArray),
            DBusPropertyDescription("Modalias", .string),
            DBusPropertyDescription("Roles", stringArray),
            DBusPropertyDescription("Manufacturer", .uint16),
            DBusPropertyDescription("Version", .byte),
        ])
    }

    /// A method whose handler runs on the simulator (weakly held).
    nonisolated func method(_ name: String, _ inputs: [DBusArgument] = [], _ outputs: [DBusArgument] = [],
                            _ body: @escaping @Sendable (BlueZSimulator, DBusMethodCall) async throws -> [DBusValue]) -> DBusMethodDescription {
        DBusMethodDescription(name, inputs: inputs, outputs: outputs) { [weak self] call in
            guard let self else { throw bluezError("Failed", "bluetoothd is shutting down") }
            return try await body(self, call)
        }
    }

    func exportAdapter(_ a: AdapterState) async throws {
        guard let connection else { return }
        let id = a.spec.id
        let methods = [
            method("StartDiscovery") { sim, call in try await sim.startDiscovery(id, sender: call.sender ?? "") },
            method("SetDiscoveryFilter", [.init("properties", optionsType)]) { sim, call in
                try await sim.setDiscoveryFilter(id, sender: call.sender ?? "", try call.argument(0))
            },
            method("StopDiscovery") { sim, call in try await sim.stopDiscovery(id, sender: call.sender ?? "") },
            method("RemoveDevice", [.init("device", .objectPath)]) { sim, call in try await sim.removeDevice(id, try call.argument(0)) },
            method("GetDiscoveryFilters", [], [.init("filters", stringArray)]) { _, _ in
                [strings(["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"])]
            },
        ]
        let setters: [String: DBusPropertyDescription.Setter] = [
            "Powered": { [weak self] value in
                guard case let .boolean(on) = value else { return }
                await self?.setPowered(id, on)
            },
            "Discoverable": { [weak self] value in
                guard let self, case let .boolean(on) = value else { return }
                if on {
                    guard await self.isPowered(id) else { throw bluezError("NotReady", "Resource Not Ready") }
                }
                await self.discoverableChanged(id, on)
            },
            "Connectable": { [weak self] value in
                guard let self, case .boolean(false) = value else { return }
                await self.clearDiscoverable(id)
            },
            "Alias": { [weak self] value in
                // An empty alias means "use the system name" (set just after
                // the registry has stored the empty string).
                guard let self, case .string("") = value else { return }
                Task { [weak self] in
                    try? await Task.sleep(for: .milliseconds(20))
                    await self?.restoreAdapterAlias(id)
                }
            },
        ]
        let spec = a.spec
        let values: [String: DBusValue] = [
            "Address": .string(spec.address), "AddressType": .string(spec.addressType), "Name": .string(spec.name),
            "Alias": .string(spec.alias ?? spec.name), "Class": .uint32(spec.classOfDevice), "Connectable": .boolean(a.powered),
            "Powered": .boolean(a.powered), "PowerState": .string(a.powered ? "on" : "off"),
            "Discoverable": .boolean(spec.discoverable && a.powered), "DiscoverableTimeout": .uint32(spec.discoverableTimeout),
            "Pairable": .boolean(spec.pairable), "PairableTimeout": .uint32(spec.pairableTimeout),
            "Discovering": .boolean(false), "UUIDs": strings(spec.uuids), "Roles": strings(spec.roles),
            "Manufacturer": .uint16(spec.manufacturer), "Version": .byte(spec.version),
        ].merging(spec.modalias.map { ["Modalias": .string($0)] } ?? [:]) { $1 }
        // The advertisement monitor manager is one of bluetoothd's experimental interfaces.
        a.registration = try await connection.export(a.path, interfaces: [
            exported(Self.adapterDescription(methods, setters), values: values),
        ] + (scenario.experimental ? [monitorManagerInterface(id)] : []))
        // Devices bluetoothd remembers (paired or trusted) are there at once.
        for d in devices where d.adapterID == id && (d.paired || d.trusted) {
            try await exportDevice(d)
        }
    }

    func isPowered(_ id: String) -> Bool { adapter(id)?.powered ?? false }

    /// With a non-zero DiscoverableTimeout, Discoverable goes back to false
    /// when it expires (as in BlueZ).
    func discoverableChanged(_ id: String, _ on: Bool) async {
        guard let a = adapter(id) else { return }
        a.discoverableTimer?.cancel()
        a.discoverableTimer = nil
        guard on, let reg = a.registration, case let .uint32(timeout)? = await reg.property(BlueZ.adapter, "DiscoverableTimeout"),
              timeout > 0 else { return }
        let wait = duration(Double(timeout))
        a.discoverableTimer = Task { [weak self] in
            do { try await Task.sleep(for: wait) } catch { return }
            await self?.clearDiscoverable(id)
        }
    }

    func clearDiscoverable(_ id: String) {
        adapter(id)?.registration?.setProperty(BlueZ.adapter, "Discoverable", .boolean(false))
    }

    func restoreAdapterAlias(_ id: String) async {
        guard let a = adapter(id), let reg = a.registration else { return }
        if case .string("")? = await reg.property(BlueZ.adapter, "Alias") {
            reg.setProperty(BlueZ.adapter, "Alias", .string(a.spec.name))
        }
    }

    func setPowered(_ id: String, _ on: Bool) {
        guard let a = adapter(id), a.powered != on else { return }
        a.powered = on
        log("adapter \(id) powered \(on ? "on" : "off")")
        a.registration?.setProperties(BlueZ.adapter, ["Powered": .boolean(on), "PowerState": .string(on ? "on" : "off"), "Connectable": .boolean(on)])
        if !on {
            a.discoverableTimer?.cancel()
            a.discoverableTimer = nil
            a.registration?.setProperty(BlueZ.adapter, "Discoverable", .boolean(false))
            for d in devices where d.adapterID == id && d.connected { linkLost(d) }
            monitorsPoweredOff(a)
            a.sessions = []
            if a.discovering { discoveryStopped(a) }
        } else {
            // Registered monitors outlive a power cycle; passive scanning resumes.
            Task { [weak self] in await self?.monitorScan(adapterID: id) }
        }
    }

    func requirePowered(_ id: String) throws -> AdapterState {
        guard let a = adapter(id), a.present, a.registration != nil else { throw bluezError("NotReady", "Resource Not Ready") }
        guard a.powered else { throw bluezError("NotReady", "Resource Not Ready") }
        return a
    }

    // MARK: Discovery

    func startDiscovery(_ id: String, sender: String) async throws -> [DBusValue] {
        let a = try requirePowered(id)
        guard !a.sessions.contains(sender) else { throw bluezError("InProgress", "Operation already in progress") }
        a.sessions.insert(sender)
        watchClient(sender)
        // bluetoothd replies first (the mgmt command is still running);
        // Discovering and the first reports follow the reply.
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(5))
            await self?.discoveryBegan(id, sender: sender)
        }
        return []
    }

    private func discoveryBegan(_ id: String, sender: String) async {
        guard let a = adapter(id), a.present, a.powered, a.sessions.contains(sender) else { return }
        if !a.discovering {
            a.discovering = true
            a.registration?.setProperty(BlueZ.adapter, "Discovering", .boolean(true))
            log("discovery started on \(a.spec.id)")
        }
        await scan(a)
        discoveryGate.continuation.yield()
    }

    func stopDiscovery(_ id: String, sender: String) async throws -> [DBusValue] {
        let a = try requirePowered(id)
        guard a.sessions.remove(sender) != nil else { throw bluezError("Failed", "No discovery started") }
        // As StartDiscovery: the reply first, then Discovering=false.
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(5))
            await self?.discoveryEnded(id)
        }
        return []
    }

    private func discoveryEnded(_ id: String) async {
        guard let a = adapter(id), a.present, a.discovering else { return }
        if a.sessions.isEmpty { discoveryStopped(a) } else { await scan(a) }
    }

    func discoveryStopped(_ a: AdapterState) {
        a.discovering = false
        a.registration?.setProperty(BlueZ.adapter, "Discovering", .boolean(false))
        log("discovery stopped on \(a.spec.id)")
        // As bluetoothd does when discovery ends: RSSI and TxPower describe
        // the last advertisement seen and are invalidated with it.
        // Devices an advertisement monitor still reports keep both.
        for d in devices where d.adapterID == a.spec.id && d.registration != nil && !monitored(d, by: a) {
            d.registration?.removeProperties(BlueZ.device, ["RSSI", "TxPower"])
            d.publishedRSSI = nil
        }
        for d in devices where d.adapterID == a.spec.id && d.registration != nil && !d.isKept && !(d.advertising && monitored(d, by: a)) {
            scheduleRemoval(d)
        }
    }

    func setDiscoveryFilter(_ id: String, sender: String, _ dict: [String: DBusValue]) async throws -> [DBusValue] {
        let a = try requirePowered(id)
        var f = DiscoveryFilter()
        func bad(_ text: String) -> DBusError { bluezError("InvalidArguments", text) }
        for (key, value) in dict {
            switch (key, value) {
            case let ("UUIDs", .array(.string, items)):
                f.uuids = try items.map { item in
                    guard case let .string(s) = item, let u = normalizeUUID(s) else { throw bad("Invalid UUID \(item)") }
                    return u
                }
            case let ("RSSI", .int16(v)): f.rssi = v
            case let ("Pathloss", .uint16(v)): f.pathloss = v
            case let ("Transport", .string(t)):
                guard ["auto", "bredr", "le"].contains(t) else { throw bad("Invalid Transport \(t)") }
                f.transport = t
            case let ("DuplicateData", .boolean(b)): f.duplicateData = b
            case let ("Discoverable", .boolean(b)): f.discoverable = b
            case let ("Pattern", .string(p)): f.pattern = p
            default:
                throw bad("Invalid argument \(key) (\(value.type.signature))")
            }
        }
        if f.rssi != nil && f.pathloss != nil { throw bad("RSSI and Pathloss cannot be used together") }
        if dict.isEmpty { a.filters[sender] = nil } else { a.filters[sender] = f }
        watchClient(sender)
        if a.discovering { await scan(a) }
        return []
    }

    func matches(_ d: DeviceState, _ f: DiscoveryFilter?) -> Bool {
        guard let f else { return true }
        if f.transport == "bredr" { return false }
        if let r = f.rssi, d.rssi < r { return false }
        if let p = f.pathloss {
            guard let tx = d.txPower else { return false }
            if Int(tx) - Int(d.rssi) > Int(p) { return false }
        }
        // Only the advertised service-UUID lists, never service-data UUIDs
        // (bluetoothd's is_filter_match() in src/adapter.c).
        if !f.uuids.isEmpty, Set(d.uuids).isDisjoint(with: f.uuids) { return false }
        if let pattern = f.pattern, !pattern.isEmpty {
            let byAddress = d.spec.address.hasPrefix(pattern.uppercased())
            let byName = d.name?.hasPrefix(pattern) ?? false
            if !byAddress && !byName { return false }
        }
        return true
    }

    /// Whether any discovery session of the adapter, or an active
    /// advertisement monitor (passive scanning), wants this device.
    func wanted(_ d: DeviceState, by a: AdapterState) -> Bool {
        (a.discovering && a.sessions.contains { matches(d, a.filters[$0]) }) || monitored(d, by: a)
    }

    func duplicatesWanted(_ a: AdapterState) -> Bool {
        a.sessions.contains { a.filters[$0]?.duplicateData == true }
    }

    /// Reports every advertising device the sessions want.
    func scan(_ a: AdapterState) async {
        for d in devices where d.adapterID == a.spec.id && d.advertising && !d.blocked && wanted(d, by: a) {
            await deviceSeen(d, duplicate: false)
        }
    }

    func removeDevice(_ id: String, _ path: ObjectPath) throws -> [DBusValue] {
        let a = try requirePowered(id)
        guard let d = devices.first(where: { $0.path == path && $0.adapterID == a.spec.id }), d.registration != nil else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        if d.connected { linkLost(d) }
        d.pairing?.cancelled = true
        d.pairing = nil
        d.paired = false
        d.trusted = false
        d.alias = d.spec.alias
        unexportDevice(d)
        log("device \(d.spec.address) removed")
        return []
    }
}
