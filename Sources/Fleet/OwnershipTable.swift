/// Which gateway of a fleet speaks for each device: the pure part of fleet
/// mode (docs/GATEWAY.md, "Fleet"). Every gateway keeps one of these, fed
/// the same sightings and claims from the broker, and so reaches the same
/// answer; no clock of its own (every call is given `now`, seconds since the
/// Unix epoch, the same clock the sightings carry).
///
/// The rule, per device:
/// - The **owner** is the gateway whose claim (retained on the broker) came
///   last, while that gateway is online and its latest sighting of the
///   device is fresh (at most ``Rule/staleAfter`` old).
/// - With no valid owner (none yet, or the owner went offline or stopped
///   hearing the device), the **best** fresh gateway takes it at once: the
///   strongest smoothed RSSI, equal RSSI going to the gateway whose name
///   sorts first.
/// - A valid owner is replaced only by a gateway that has heard the device
///   at least ``Rule/hysteresis`` dB stronger than the owner, in every pair
///   of sightings for ``Rule/dwell`` seconds without a break. RSSI noise of
///   a few dB around equal strength therefore never moves a device.
///
/// Only the gateway that should own a device and does not yet claims it
/// (``decide(_:now:)``): the claim, not this table, makes the change for
/// everyone, and the broker orders claims, so two gateways that claim at
/// once settle on one.
public struct OwnershipTable: Sendable {
    public struct Rule: Sendable, Equatable {
        /// dB by which a challenger must beat the owner.
        public var hysteresis: Double
        /// Seconds the challenger must stay that much better.
        public var dwell: Double
        /// Seconds after which a gateway's sighting no longer counts.
        public var staleAfter: Double

        public init(hysteresis: Double = 6, dwell: Double = 10, staleAfter: Double = 30) {
            self.hysteresis = max(0, hysteresis)
            self.dwell = max(0, dwell)
            self.staleAfter = max(1, staleAfter)
        }
    }

    /// One gateway's latest sighting of one device.
    public struct Heard: Sendable, Equatable {
        public var rssi: Double
        public var at: Double
        public init(rssi: Double, at: Double) {
            self.rssi = rssi
            self.at = at
        }
    }

    /// What a gateway should do about a device now.
    public enum Decision: Sendable, Equatable {
        /// This gateway should own the device and does not: publish a claim.
        case claim
        /// Nothing to do: the owner (maybe this gateway, maybe none) stands.
        case stand(owner: String?)
    }

    struct Device: Sendable {
        var heard: [String: Heard] = [:]
        var claim: String?
        /// The gateway that has beaten the owner by the hysteresis since `since`.
        var challenger: String?
        var since: Double = 0
    }

    public let me: String
    public let rule: Rule
    private var devices: [String: Device] = [:]
    private var offline: Set<String> = []
    /// How many devices at most: when a new one would pass it, the half
    /// heard least recently is forgotten (one sort per `capacity / 2` new
    /// devices, so a flood of new addresses costs O(log n) each).
    public let capacity: Int

    public init(me: String, rule: Rule = Rule(), capacity: Int = 50_000) {
        self.me = me
        self.rule = rule
        self.capacity = max(1, capacity)
    }

    public var deviceCount: Int { devices.count }

    /// A gateway (this one too) heard `device` at `rssi` (smoothed) at `at`.
    /// A sighting older than the one held for that gateway is ignored.
    public mutating func heard(_ device: String, by gateway: String, rssi: Double, at: Double) {
        guard rssi.isFinite, at.isFinite else { return }
        if devices[device] == nil, devices.count >= capacity { forgetOldestHalf() }
        var d = devices[device] ?? Device()
        if let old = d.heard[gateway], old.at > at { return }
        d.heard[gateway] = Heard(rssi: rssi, at: at)
        track(&d, at: at)
        devices[device] = d
    }

    /// The retained claim for `device` says `gateway` (nil: the claim was cleared).
    public mutating func claimed(_ device: String, by gateway: String?) {
        var d = devices[device] ?? Device()
        d.claim = gateway
        if d.challenger == gateway { d.challenger = nil }
        devices[device] = d
    }

    /// A gateway's status topic said online or offline (its MQTT will, or a clean stop).
    public mutating func gateway(_ gateway: String, online: Bool) {
        if online { offline.remove(gateway) } else { offline.insert(gateway) }
    }

    public func isOnline(_ gateway: String) -> Bool { !offline.contains(gateway) }

    /// The gateway whose claim stands for `device` (nil: none, or it lapsed).
    public func owner(of device: String, now: Double) -> String? {
        guard let d = devices[device], let c = d.claim, valid(c, d, now: now) else { return nil }
        return c
    }

    /// Whether this gateway speaks for `device` now.
    public func owns(_ device: String, now: Double) -> Bool { owner(of: device, now: now) == me }

    /// The latest sightings of `device`, per gateway.
    public func sightings(of device: String) -> [String: Heard] { devices[device]?.heard ?? [:] }

    /// What this gateway should do about `device` now.
    public func decide(_ device: String, now: Double) -> Decision {
        guard let d = devices[device] else { return .stand(owner: nil) }
        let owner = d.claim.flatMap { valid($0, d, now: now) ? $0 : nil }
        guard let owner else {
            let best = best(d, now: now)
            return best == me ? .claim : .stand(owner: nil)
        }
        if owner != me, d.challenger == me, now - d.since >= rule.dwell, fresh(me, d, now: now) { return .claim }
        return .stand(owner: owner)
    }

    /// The devices this gateway should claim now (a sweep: staleness and
    /// dwell are matters of time, not of new messages). O(devices).
    public func claimsDue(now: Double) -> [String] {
        devices.keys.filter { decide($0, now: now) == .claim }.sorted()
    }

    /// Devices whose claim is held by a gateway that went offline and that no
    /// gateway hears any more (no fresh sighting from an online one): nobody
    /// will claim them, so their status would stay as the dead owner left it.
    /// O(devices).
    public func orphans(now: Double) -> [String] {
        devices.compactMap { id, d in
            guard let c = d.claim, offline.contains(c), best(d, now: now) == nil else { return nil }
            return id
        }.sorted()
    }

    /// Drops the devices no gateway has heard since `horizon` (their claims
    /// lapsed long ago): what keeps the table to the devices around.
    public mutating func forget(heardBefore horizon: Double) {
        devices = devices.filter { _, d in d.heard.values.contains { $0.at >= horizon } }
    }

    // MARK: - Rule

    private func fresh(_ gateway: String, _ d: Device, now: Double) -> Bool {
        guard !offline.contains(gateway), let h = d.heard[gateway] else { return false }
        return now - h.at <= rule.staleAfter
    }

    private func valid(_ owner: String, _ d: Device, now: Double) -> Bool { fresh(owner, d, now: now) }

    /// The strongest fresh gateway; ties to the name that sorts first.
    private func best(_ d: Device, now: Double) -> String? {
        var best: (String, Double)?
        for (g, h) in d.heard where fresh(g, d, now: now) {
            if let b = best, h.rssi < b.1 || (h.rssi == b.1 && g > b.0) { continue }
            best = (g, h.rssi)
        }
        return best?.0
    }

    /// Keeps the challenger current after a sighting at `at`: the gateway
    /// beating the owner by the hysteresis, and since when without a break.
    private func track(_ d: inout Device, at: Double) {
        guard let owner = d.claim, let o = d.heard[owner] else {
            d.challenger = nil
            return
        }
        var leader: (String, Double)?
        for (g, h) in d.heard where g != owner && !offline.contains(g) && at - h.at <= rule.staleAfter {
            guard h.rssi >= o.rssi + rule.hysteresis else { continue }
            if let l = leader, h.rssi < l.1 || (h.rssi == l.1 && g > l.0) { continue }
            leader = (g, h.rssi)
        }
        guard let leader else {
            d.challenger = nil
            return
        }
        if d.challenger != leader.0 {
            d.challenger = leader.0
            d.since = at
        }
    }

    private mutating func forgetOldestHalf() {
        let byAge = devices.map { ($0.key, latest($0.value)) }.sorted { $0.1 < $1.1 }
        for (key, _) in byAge.prefix(max(1, capacity / 2)) { devices[key] = nil }
    }

    private func latest(_ d: Device) -> Double { d.heard.values.map(\.at).max() ?? 0 }
}
