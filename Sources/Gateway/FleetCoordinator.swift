import Fleet
import Foundation
import Vocabulary

/// Fleet mode's bookkeeping on one gateway (docs/GATEWAY.md, "Fleet"):
/// what this gateway hears (smoothed RSSI per device), what the others say
/// they hear, the claims on the broker, and so which devices it publishes.
/// Pure: messages in, messages out, `now` given. The ``PublishingLoop``
/// actor owns one, beside the planner it tells to adopt or release devices.
struct FleetCoordinator: Sendable {
    struct Options: Sendable, Equatable {
        var rule: OwnershipTable.Rule
        /// Seconds between two sighting batches.
        var interval: Double
        /// Seconds after start before this gateway claims anything: the
        /// retained claims reach it first (a restarted gateway must not take
        /// devices another gateway holds because it has not heard of the claim yet).
        var settle: Double

        init(rule: OwnershipTable.Rule = .init(), interval: Double = 2, settle: Double? = nil) {
            self.rule = rule
            self.interval = max(0.2, interval)
            self.settle = settle ?? max(3, 2 * self.interval)
        }
    }

    let me: String
    let room: String
    let topics: GatewayTopics
    let options: Options
    private(set) var table: OwnershipTable
    /// This gateway's smoothed RSSI per device, and when it last heard each.
    private var smoothed: [String: (rssi: Double, at: Double)] = [:]
    /// Devices heard since the last batch.
    private var dirty: Set<String> = []
    /// When each device was last in one of this gateway's batches.
    private var lastSent: [String: Double] = [:]
    /// The state hash each device's owner last reported.
    private var ownerState: [String: String] = [:]
    /// Claims this gateway sent and has not seen come back yet, and when.
    private var claimSent: [String: Double] = [:]
    /// Devices whose claim (as the broker last said) is this gateway's.
    private(set) var owned: Set<String> = []
    private var readyAt: Double?
    /// The other gateways whose status said `online` last.
    private var online: Set<String> = []
    /// What this gateway sent and received (and refused: sighting batches and
    /// claims that could not be read), for the metrics.
    private(set) var statistics = Statistics()

    struct Statistics: Sendable, Equatable {
        var batchesSent: UInt64 = 0
        var batchesReceived: UInt64 = 0
        var claimsSent: UInt64 = 0
        var refused: UInt64 = 0
        var owned = 0
    }
    private var forgotAt = 0.0

    /// Weight of a new RSSI sample in the smoothed value (an exponential moving average).
    static let smoothing = 0.3

    init(me: String, room: String, topics: GatewayTopics, options: Options) {
        self.me = me
        self.room = room
        self.topics = topics
        self.options = options
        table = OwnershipTable(me: me, rule: options.rule)
    }

    /// The broker subscriptions are in place: claims are made from `now + settle`.
    mutating func subscribed(now: Double) {
        if readyAt == nil { readyAt = now + options.settle }
    }

    // MARK: - What this gateway hears

    /// This gateway heard `address` at `rssi` at `at`.
    mutating func heard(_ address: BluetoothAddress, rssi: Int16, at: Double) {
        heard(id: GatewayTopics.addressID(address), rssi: rssi, at: at)
    }

    /// This gateway heard identity `name` (one of its addresses) at `rssi` at `at`.
    mutating func heardIdentity(_ name: String, rssi: Int16, at: Double) {
        heard(id: IdentityTracker.deviceID(name), rssi: rssi, at: at)
    }

    private mutating func heard(id: String, rssi: Int16, at: Double) {
        let value = Double(rssi)
        let s = smoothed[id].map { $0.rssi + Self.smoothing * (value - $0.rssi) } ?? value
        smoothed[id] = (s, at)
        table.heard(id, by: me, rssi: s, at: at)
        dirty.insert(id)
        // A flood of new addresses: the table forgets its oldest half at its
        // capacity; what this gateway keeps beside it follows (amortised O(1)).
        if smoothed.count > table.capacity + table.capacity / 2 {
            smoothed = smoothed.filter { !table.sightings(of: $0.key).isEmpty }
            lastSent = lastSent.filter { smoothed[$0.key] != nil }
            dirty = dirty.filter { smoothed[$0] != nil }
        }
    }

    // MARK: - What the broker says

    /// What the planner must do after a message from the broker.
    enum Change: Sendable, Equatable {
        case adopt(BluetoothAddress, previousState: String?)
        case release(BluetoothAddress)
        case adoptIdentity(String)
        case releaseIdentity(String)
    }

    /// A message on one of the fleet's subscriptions. Returns what changes
    /// for this gateway's devices; a message that cannot be read is counted
    /// and `problem` says why.
    mutating func received(topic: String, payload: [UInt8]) -> (changes: [Change], problem: String?) {
        let sightings = topics.fleetSightings("")
        let owner = topics.fleetOwner("")
        if topic.hasPrefix(sightings) {
            let batch: SightingBatch
            do { batch = try SightingBatch.parse(payload) } catch {
                statistics.refused &+= 1
                return ([], "\(topic): \(error.description)")
            }
            guard batch.gateway != me else { return ([], nil) }
            statistics.batchesReceived &+= 1
            for (id, entry) in batch.devices {
                table.heard(id, by: batch.gateway, rssi: Double(entry.rssi), at: batch.at)
                if let state = entry.state { ownerState[id] = state }
            }
            return ([], nil)
        }
        if topic.hasPrefix(owner) {
            let id = String(topic.dropFirst(owner.count))
            guard FleetIDs.isDeviceID(id) else {
                statistics.refused &+= 1
                return ([], "\(topic): not a device id")
            }
            let claim: OwnerClaim?
            do { claim = try OwnerClaim.parse(payload) } catch {
                statistics.refused &+= 1
                return ([], "\(topic): \(error.description)")
            }
            table.claimed(id, by: claim?.gateway)
            claimSent[id] = nil
            let identity = id.hasPrefix("id_") ? String(id.dropFirst(3)) : nil
            let address = GatewayTopics.address(fromID: id)
            guard identity != nil || address != nil else { return ([], nil) }
            if claim?.gateway == me {
                guard owned.insert(id).inserted else { return ([], nil) }
                if let identity { return ([.adoptIdentity(identity)], nil) }
                return (address.map { [.adopt($0, previousState: ownerState[id])] } ?? [], nil)
            }
            guard owned.remove(id) != nil else { return ([], nil) }
            if let identity { return ([.releaseIdentity(identity)], nil) }
            return (address.map { [.release($0)] } ?? [], nil)
        }
        // <base>/<gateway>/status
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        if topic.hasPrefix(topics.base + "/"), levels.count == topics.base.split(separator: "/").count + 2, levels.last == "status" {
            let gateway = String(levels[levels.count - 2])
            guard gateway != me else { return ([], nil) }
            let text = String(decoding: payload, as: UTF8.self)
            if text == GatewayTopics.online || text == GatewayTopics.offline {
                table.gateway(gateway, online: text == GatewayTopics.online)
                if text == GatewayTopics.online { online.insert(gateway) } else { online.remove(gateway) }
            }
        }
        return ([], nil)
    }

    // MARK: - What this gateway says

    /// The messages due at `now`: this gateway's sightings (devices heard
    /// since the last batch, and the others it still hears every
    /// `refresh` seconds so their silence means something), and its claims.
    /// `stateHash` gives the hash of the state last published for an owned device.
    mutating func tick(now: Double, stateHash: (BluetoothAddress) -> String?) -> [OutgoingMessage] {
        var out: [OutgoingMessage] = []
        let refresh = max(options.interval, options.rule.staleAfter / 3)
        var due = dirty
        for (id, s) in smoothed where now - s.at <= options.rule.staleAfter && now - (lastSent[id] ?? 0) >= refresh {
            due.insert(id)
        }
        dirty.removeAll(keepingCapacity: true)
        var entries: [String: SightingBatch.Entry] = [:]
        for id in due.sorted() {
            guard let s = smoothed[id] else { continue }
            var entry = SightingBatch.Entry(rssi: Int(max(-127, min(20, s.rssi)).rounded()))
            if owned.contains(id), let address = GatewayTopics.address(fromID: id) { entry.state = stateHash(address) }
            entries[id] = entry
            lastSent[id] = now
            if entries.count == SightingBatch.maximumDevices {
                out.append(batch(entries, now: now))
                entries.removeAll(keepingCapacity: true)
            }
        }
        if !entries.isEmpty { out.append(batch(entries, now: now)) }
        if let readyAt, now >= readyAt {
            // A dead owner's devices that nobody hears: the online gateway whose id
            // sorts first says they are offline and clears the claim.
            if online.allSatisfy({ me < $0 }) {
                for id in table.orphans(now: now) {
                    let status = "\(topics.deviceScope)/\(id)/status"
                    out.append(OutgoingMessage(topic: status, payload: Array(GatewayTopics.offline.utf8), retain: true, qos: 1))
                    out.append(OutgoingMessage(topic: topics.fleetOwner(id), payload: [], retain: true, qos: 1))
                    table.claimed(id, by: nil)
                }
            }
            for id in table.claimsDue(now: now) where now - (claimSent[id] ?? -.infinity) >= 5 {
                claimSent[id] = now
                statistics.claimsSent &+= 1
                out.append(OutgoingMessage(topic: topics.fleetOwner(id), payload: OwnerClaim(gateway: me, at: now).json, retain: true, qos: 1))
            }
        }
        forget(now: now)
        return out
    }

    var currentStatistics: Statistics {
        var s = statistics
        s.owned = owned.count
        return s
    }

    /// Whether this gateway may act for `address` (commands): it owns it.
    func owns(_ address: BluetoothAddress) -> Bool { owned.contains(GatewayTopics.addressID(address)) }

    /// The gateway whose claim on `address` stands (nil: none).
    func owner(of address: BluetoothAddress, now: Double) -> String? { table.owner(of: GatewayTopics.addressID(address), now: now) }

    private mutating func batch(_ entries: [String: SightingBatch.Entry], now: Double) -> OutgoingMessage {
        statistics.batchesSent &+= 1
        let batch = SightingBatch(gateway: me, room: room, at: now, devices: entries)
        return OutgoingMessage(topic: topics.fleetSightings(me), payload: batch.json, retain: false, qos: 0)
    }

    /// Keeps every table to the devices heard within ten stale periods.
    private mutating func forget(now: Double) {
        guard now - forgotAt >= options.rule.staleAfter else { return }
        forgotAt = now
        let horizon = now - 10 * options.rule.staleAfter
        table.forget(heardBefore: horizon)
        smoothed = smoothed.filter { $0.value.at >= horizon }
        lastSent = lastSent.filter { $0.value >= horizon }
        ownerState = ownerState.filter { !table.sightings(of: $0.key).isEmpty }
        claimSent = claimSent.filter { now - $0.value < 60 }
    }
}
