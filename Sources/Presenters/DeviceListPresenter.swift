import BLEParsing
import BlueZ
import Domain
import Foundation
import Synchronization

/// The device list: what the scan finds, filtered and sorted the way the
/// user asked, with the scan toggle. Driven by `send(_:)` only.
public final class DeviceListPresenter: Presenter {
    public enum Sort: String, Sendable, Equatable, CaseIterable { case rssi, name, lastSeen }

    public struct Filter: Sendable, Equatable {
        /// Matches name, address or decoded format, case-insensitively.
        public var text: String = ""
        public var minimumRSSI: Int16?
        public var namedOnly = false
        public init(text: String = "", minimumRSSI: Int16? = nil, namedOnly: Bool = false) {
            self.text = text
            self.minimumRSSI = minimumRSSI
            self.namedOnly = namedOnly
        }
    }

    /// One row as every front end shows it.
    public struct Row: Sendable, Equatable, Identifiable {
        public let id: DeviceID
        public var title: String
        public var rssi: Int16?
        public var format: String?
        /// Decoded readings, e.g. "temperature 21.5 °C".
        public var readings: [String]
        public var paired: Bool
        public var connected: Bool
        /// Not heard from for longer than the stale threshold.
        public var stale: Bool
    }

    public enum Scan: Sendable, Equatable {
        case off
        case starting
        case on
        case stopping
        /// The last toggle failed; the text says why.
        case failed(String)
    }

    public struct State: Sendable, Equatable {
        public var devices: Loadable<[Row]> = .loading
        public var scan: Scan = .off
        public var filter = Filter()
        public var sort: Sort = .rssi
        public init() {}
    }

    public enum Action: Sendable, Equatable {
        case scanToggled
        case filterTextChanged(String)
        case minimumRSSIChanged(Int16?)
        case namedOnlyToggled
        case sortChanged(Sort)
        case deviceSelected(DeviceID)
        /// A snapshot arrived from the repository (sent by the presenter itself).
        case repositoryChanged(DeviceListSnapshot)
    }

    private let store = StateStore(State())
    private let repository: any DeviceRepository
    private let navigator: Navigator
    private let now: @Sendable () -> Date
    private let staleAfter: TimeInterval
    private let latest = LatestSnapshot()
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.devices")

    public init(repository: any DeviceRepository, navigator: Navigator, staleAfter: TimeInterval = 120,
                now: @escaping @Sendable () -> Date = { Date() }) {
        self.repository = repository
        self.navigator = navigator
        self.staleAfter = staleAfter
        self.now = now
        runtime.start { [weak self] action in await self?.handle(action) }
        runtime.follow(repository.snapshots()) { .repositoryChanged($0) }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        switch action {
        case .scanToggled:
            let wasOn: Bool
            switch store.state.scan {
            case .on: wasOn = true
            case .starting, .stopping: return
            case .off, .failed: wasOn = false
            }
            store.update { $0.scan = wasOn ? .stopping : .starting }
            do {
                try await repository.setScanning(!wasOn)
                // What was asked for; later snapshots reconcile (e.g. another
                // client stopping discovery).
                store.update { $0.scan = wasOn ? .off : .on }
            } catch {
                store.update { $0.scan = .failed(error.description) }
            }
        case let .filterTextChanged(text):
            update { $0.filter.text = text }
        case let .minimumRSSIChanged(value):
            update { $0.filter.minimumRSSI = value }
        case .namedOnlyToggled:
            update { $0.filter.namedOnly.toggle() }
        case let .sortChanged(sort):
            update { $0.sort = sort }
        case let .deviceSelected(id):
            navigator.push(.deviceDetail(id))
        case let .repositoryChanged(snapshot):
            latest.value = snapshot
            update { s in
                switch s.scan {
                case .starting, .stopping: break
                default: s.scan = snapshot.scanning ? .on : .off
                }
            }
        }
    }

    /// One state change: `change`, then the rows it implies — never an
    /// intermediate state whose filter and rows disagree.
    private func update(_ change: (inout State) -> Void) {
        let snapshot = latest.value
        let time = now()
        let staleAfter = self.staleAfter
        store.update { s in
            change(&s)
            guard let snapshot else { return }
            if let reason = snapshot.availability.reason {
                s.devices = .unavailable(reason)
            } else {
                s.devices = .loaded(DeviceListPresenter.rows(snapshot.devices, filter: s.filter, sort: s.sort, now: time, staleAfter: staleAfter))
            }
        }
    }

    /// Pure: the rows for a list of devices (exposed for front ends' previews).
    public static func rows(_ devices: [DeviceRecord], filter: Filter, sort: Sort, now: Date, staleAfter: TimeInterval) -> [Row] {
        let needle = filter.text.lowercased()
        let kept = devices.filter { d in
            if filter.namedOnly && d.name == nil { return false }
            if let min = filter.minimumRSSI, (d.rssi ?? Int16.min) < min { return false }
            if !needle.isEmpty {
                let hay = [d.name ?? "", d.id.address.description, d.format ?? ""].joined(separator: " ").lowercased()
                if !hay.contains(needle) { return false }
            }
            return true
        }
        let sorted: [DeviceRecord]
        switch sort {
        case .rssi: sorted = kept.sorted { ($0.rssi ?? Int16.min, $1.id.address) > ($1.rssi ?? Int16.min, $0.id.address) }
        case .name: sorted = kept.sorted { (($0.name ?? "~").lowercased(), $0.id.address) < (($1.name ?? "~").lowercased(), $1.id.address) }
        case .lastSeen: sorted = kept.sorted { ($0.lastSeen ?? .distantPast, $1.id.address) > ($1.lastSeen ?? .distantPast, $0.id.address) }
        }
        return sorted.map { d in
            Row(id: d.id, title: d.name ?? d.id.address.description, rssi: d.rssi, format: d.format,
                readings: d.readings.map { r in
                    var text = "\(r.kind.rawValue) \(r.value)"
                    if let u = r.unit, !u.isEmpty { text += " \(u)" }
                    return text
                },
                paired: d.paired, connected: d.connected,
                stale: d.lastSeen.map { now.timeIntervalSince($0) > staleAfter } ?? false)
        }
    }
}

/// The last repository snapshot, touched only by the action queue's task.
private final class LatestSnapshot: @unchecked Sendable {
    var value: DeviceListSnapshot?
}
