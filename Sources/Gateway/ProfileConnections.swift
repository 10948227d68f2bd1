import BLEParsing
import BlueZ
import Domain
import Foundation
import Vocabulary

/// The GATT side of device profiles (docs/PROFILES.md): a device whose
/// profile reads characteristics is connected as its `connection` says —
/// kept connected and subscribed (`keep`), or connected for each scheduled
/// read and let go (`on_demand`) — through the connection manager (its slots
/// and backoff). What the characteristics decode to is published with the
/// device's state, as a watched device's readings are.
extension GatewayRuntime {
    /// Devices followed for their profiles at once; more are named in the log and wait.
    static let maximumProfileConnections = 32
    /// How long an on-demand read waits for the connection.
    static let onDemandConnectTimeout: Duration = .seconds(30)

    /// Follows the device list: starts a device's profile work when a
    /// profile with GATT fields first describes it, restarts it when the
    /// profile changes (a reload), stops it when none does any more. Looks
    /// at the devices that changed only (O(changes) per snapshot).
    func profileConnectionsLoop() async {
        var running: [DeviceID: (profile: DeviceProfile, task: Task<Void, Never>)] = [:]
        var refused: Set<DeviceID> = []
        var seen: UInt64?
        defer {
            for (id, r) in running {
                r.task.cancel()
                if options.watched[id.address] == nil { manager.unwatch(id) }
            }
        }
        for await snapshot in devices.snapshots() {
            let set = profiles.profiles
            let changed = snapshot.changes(since: seen)
            seen = snapshot.version
            // No profile and nothing followed: no device wants anything (the
            // usual gateway; this runs for every list snapshot).
            if set.isEmpty && running.isEmpty { continue }
            let ids: [DeviceID] = changed.map(Array.init) ?? snapshot.devices.map(\.id) + running.keys.filter { snapshot.record($0) == nil }
            for id in ids {
                let wanted = snapshot.record(id)?.profile.flatMap { set.profile(named: $0) }.flatMap { $0.gatt.isEmpty ? nil : $0 }
                if let r = running[id], r.profile != wanted {
                    r.task.cancel()
                    running[id] = nil
                    if options.watched[id.address] == nil { manager.unwatch(id) }
                }
                guard let profile = wanted, running[id] == nil else { continue }
                // In a fleet the owner connects (as for watched devices).
                if loop.inFleet, await !loop.fleetOwns(id.address) { continue }
                guard running.count < Self.maximumProfileConnections else {
                    if refused.insert(id).inserted {
                        logger.warning("profile \(profile.name): \(id.address) not connected: \(Self.maximumProfileConnections) profile devices are followed already")
                    }
                    continue
                }
                refused.remove(id)
                logger.info("profile \(profile.name): following \(id.address) (\(profile.connection == .keep ? "kept connected" : "connected on demand"))")
                running[id] = (profile, Task { [weak self] in await self?.followProfile(id, profile) })
            }
            if refused.count > 4 * Self.maximumProfileConnections { refused.removeAll() }
        }
    }

    /// One device's profile work until cancelled.
    func followProfile(_ id: DeviceID, _ profile: DeviceProfile) async {
        let uuids = profile.gatt.map(\.characteristic.string)
        let notify = profile.gatt.filter { $0.access == .notify }.map(\.characteristic.string)
        let polled = profile.gatt.compactMap { f -> (DeviceProfile.GATTField, Int)? in
            if case let .poll(seconds) = f.access { return (f, seconds) }
            return nil
        }
        let onConnect = profile.gatt.filter { $0.access == .onConnect }
        // A device the configuration watches (devices.watch) stays as that keeps it:
        // connected, and let go by nothing here; its profile's fields are read while it is.
        let watchedByConfiguration = options.watched[id.address] != nil
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [weak self] in await self?.followGATT(id, uuids: uuids) }
            switch profile.connection {
            case .keep:
                if !watchedByConfiguration { manager.watch(id, notify: notify) }
                group.addTask { [weak self] in await self?.keepProfileDevice(id, profile, onConnect: onConnect, polled: polled) }
            case .onDemand where watchedByConfiguration:
                group.addTask { [weak self] in await self?.keepProfileDevice(id, profile, onConnect: onConnect, polled: polled) }
            case .onDemand:
                group.addTask { [weak self] in await self?.pollOnDemand(id, profile, fields: onConnect + polled.map(\.0), polled: polled) }
            }
            await group.next()
            group.cancelAll()
        }
        if !watchedByConfiguration { manager.unwatch(id) }
    }

    /// `keep`: after each connection, the on-connect fields are read once; the
    /// polled ones every so often while connected.
    private func keepProfileDevice(_ id: DeviceID, _ profile: DeviceProfile, onConnect: [DeviceProfile.GATTField],
                                   polled: [(DeviceProfile.GATTField, Int)]) async {
        var lastRead: [BluetoothUUID: ContinuousClock.Instant] = [:]
        var wasConnected = false
        let clock = ContinuousClock()
        while !Task.isCancelled {
            let connected = await servicesResolved(id, within: .seconds(3600))
            if connected, !wasConnected {
                for f in onConnect { await readProfileField(id, profile, f) }
                // A notified value is not known until the device next notifies:
                // read the current one when the characteristic can be read.
                for f in profile.gatt where f.access == .notify { await readProfileField(id, profile, f, ifReadable: true) }
            }
            wasConnected = connected
            guard connected else { continue }
            var next: Duration = .seconds(3600)
            for (f, seconds) in polled {
                let due = lastRead[f.characteristic].map { $0 + .seconds(seconds) } ?? clock.now
                if due <= clock.now {
                    await readProfileField(id, profile, f)
                    lastRead[f.characteristic] = clock.now
                    next = min(next, .seconds(seconds))
                } else {
                    next = min(next, clock.now.duration(to: due))
                }
            }
            // Wake for the next read, or sooner when the connection drops.
            _ = await connectionChanges(id, within: next, from: true)
        }
    }

    /// `on_demand`: connect, read what is due, disconnect; again at the shortest interval.
    private func pollOnDemand(_ id: DeviceID, _ profile: DeviceProfile, fields: [DeviceProfile.GATTField],
                              polled: [(DeviceProfile.GATTField, Int)]) async {
        let interval = polled.map(\.1).min() ?? 3600
        while !Task.isCancelled {
            manager.watch(id)
            if await servicesResolved(id, within: Self.onDemandConnectTimeout) {
                for f in fields { await readProfileField(id, profile, f) }
            } else {
                logger.warning("profile \(profile.name): \(id.address) did not connect within \(Self.onDemandConnectTimeout); reading again in \(interval) s")
            }
            manager.unwatch(id)
            do throws(DomainError) { try await control.disconnect(id) } catch {
                logger.debug("profile \(profile.name): disconnecting \(id.address): \(error.description)")
            }
            do { try await Task.sleep(for: .seconds(interval)) } catch { return }
        }
    }

    /// Reads one profile characteristic (its value reaches the state through ``followGATT(_:uuids:)``).
    private func readProfileField(_ id: DeviceID, _ profile: DeviceProfile, _ field: DeviceProfile.GATTField, ifReadable: Bool = false) async {
        guard let target = client.mirror.snapshot().characteristic(field.characteristic, inService: field.service, on: id) else {
            logger.warning("profile \(profile.name): \(id.address) has no characteristic \(field.characteristic.string) in service \(field.service.string)")
            return
        }
        if ifReadable, !target.canRead { return }
        do throws(DomainError) { _ = try await control.read(target.id) } catch {
            metrics.countDBusError()
            logger.warning("profile \(profile.name): reading \(field.characteristic.string) of \(id.address): \(error.description)")
        }
    }

    /// Whether the device is connected with its services resolved, waiting at most `limit` for it.
    private func servicesResolved(_ id: DeviceID, within limit: Duration) async -> Bool {
        await connectionChanges(id, within: limit, from: false)
    }

    /// Waits until the device's connected-and-resolved state is not `from`
    /// (or `limit` passes); returns the state then.
    private func connectionChanges(_ id: DeviceID, within limit: Duration, from: Bool) async -> Bool {
        func state() -> Bool {
            let d = client.mirror.snapshot().devices[id]
            return d?.connected == true && d?.servicesResolved == true
        }
        if state() != from { return state() }
        try? await client.mirror.wait(for: "a connection change of \(id.address)", timeout: limit) { snapshot in
            let d = snapshot.devices[id]
            return (d?.connected == true && d?.servicesResolved == true) != from
        }
        return state()
    }
}

/// Time sync (docs/PROFILES.md, "Time sync"): each configured device's clock
/// is set once it is first heard and then every `devices.timesync_interval`
/// (a day by default); a failed sync is tried again after ten minutes. The
/// drift before and after is logged and exported (`/metrics`).
extension GatewayRuntime {
    static let timeSyncRetry: Duration = .seconds(600)

    func timeSyncLoop(_ address: BluetoothAddress) async {
        while !Task.isCancelled {
            let id = DeviceID(adapter: adapterID, address: address)
            if client.mirror.snapshot().devices[id] == nil {
                try? await client.mirror.wait(for: "\(address) to be heard", timeout: options.timeSyncInterval) { $0.devices[id] != nil }
                continue
            }
            var next = options.timeSyncInterval
            if loop.inFleet, await !loop.fleetOwns(address) {
                // Its owner sets it; look again later (ownership moves).
                next = min(next, Self.timeSyncRetry)
            } else if await !syncClock(id) {
                next = min(next, Self.timeSyncRetry)
            }
            do { try await Task.sleep(for: next) } catch { return }
        }
    }

    /// One sync; connects for it (and lets go afterwards) unless something else keeps the device connected.
    func syncClock(_ id: DeviceID) async -> Bool {
        let kept = manager.current[id] != nil
        let wasConnected = client.mirror.snapshot().devices[id]?.connected == true
        if !kept { manager.watch(id) }
        defer {
            if !kept {
                manager.unwatch(id)
                if !wasConnected {
                    let control = self.control
                    Task { try? await control.disconnect(id) }
                }
            }
        }
        do {
            try await client.mirror.wait(for: "\(id.address) connected", timeout: Self.onDemandConnectTimeout) { snapshot in
                let d = snapshot.devices[id]
                return d?.connected == true && d?.servicesResolved == true
            }
        } catch {
            metrics.recordTimeSync(id.address, drift: nil, ok: false)
            logger.warning("time sync of \(id.address): not connected within \(Self.onDemandConnectTimeout); trying again in \(Self.timeSyncRetry)")
            return false
        }
        do throws(DomainError) {
            let outcome = try await ClockSync.run(client: client, device: id)
            metrics.recordTimeSync(id.address, drift: outcome.driftBefore, ok: true)
            func drift(_ d: Double?) -> String { d.map { String(format: "%+.1f s", $0) } ?? "unknown" }
            logger.info("time sync of \(id.address) (\(outcome.clock.label)): drift before \(drift(outcome.driftBefore)), after \(drift(outcome.driftAfter))",
                        metadata: ["drift_before": "\(outcome.driftBefore.map { "\($0)" } ?? "unknown")",
                                   "drift_after": "\(outcome.driftAfter.map { "\($0)" } ?? "unknown")"])
            return true
        } catch {
            metrics.recordTimeSync(id.address, drift: nil, ok: false)
            logger.warning("time sync of \(id.address) failed: \(error.description); trying again in \(Self.timeSyncRetry)")
            return false
        }
    }
}
