import BlueZ
import Domain
import Foundation

/// The event log screen: what happened, filtered the way the user asked,
/// following new events or frozen where the user stopped it. Driven by
/// `send(_:)` only.
public final class EventLogPresenter: Presenter {
    public typealias Severity = LogEvent.Severity

    public struct Filter: Sendable, Equatable {
        /// Entries below this are hidden.
        public var minimumSeverity: Severity
        /// Only entries about this device (nil: all entries).
        public var device: DeviceID?
        /// Matches the message, case-insensitively.
        public var text: String
        public init(minimumSeverity: Severity = .info, device: DeviceID? = nil, text: String = "") {
            self.minimumSeverity = minimumSeverity
            self.device = device
            self.text = text
        }
    }

    /// Whether new entries show up as they come.
    public enum Follow: Sendable, Equatable {
        case following
        /// Entries after `at` (an entry id) are not shown until the user
        /// follows again.
        case frozen(at: UInt64)
    }

    /// One entry as every front end shows it (front ends format the time).
    public struct Row: Sendable, Equatable, Identifiable {
        public let id: UInt64
        public var at: Date
        public var severity: Severity
        public var message: String
        /// The device the entry is about; selecting the row opens it.
        public var device: DeviceID?
        public init(id: UInt64, at: Date, severity: Severity, message: String, device: DeviceID?) {
            self.id = id
            self.at = at
            self.severity = severity
            self.message = message
            self.device = device
        }
    }

    public struct State: Sendable, Equatable {
        /// Oldest first.
        public var entries: Loadable<[Row]> = .loading
        public var filter = Filter()
        public var follow: Follow = .following
        /// Entries the log dropped to stay within its capacity.
        public var dropped = 0
        public init() {}
    }

    public enum Action: Sendable, Equatable {
        case severityFilterChanged(Severity)
        case textFilterChanged(String)
        case deviceFilterChanged(DeviceID?)
        case followToggled
        case clearRequested
        case entrySelected(UInt64)
        case backRequested
        /// The log changed (sent by the presenter itself).
        case logChanged(EventLogSnapshot)
    }

    private let store = StateStore(State())
    private let log: EventLog
    private let navigator: Navigator
    private let latest = LatestLog()
    private let runtime = PresenterRuntime<Action>(label: "blecompanion.presenter.eventlog")

    public init(log: EventLog, navigator: Navigator) {
        self.log = log
        self.navigator = navigator
        runtime.start { [weak self] action in await self?.handle(action) }
        runtime.follow(log.entries()) { .logChanged($0) }
    }

    public var state: State { store.state }
    public func states() -> AsyncStream<State> { store.states() }
    public func send(_ action: Action) { runtime.send(action) }

    private func handle(_ action: Action) async {
        switch action {
        case let .severityFilterChanged(severity):
            update { $0.filter.minimumSeverity = severity }
        case let .textFilterChanged(text):
            update { $0.filter.text = text }
        case let .deviceFilterChanged(device):
            update { $0.filter.device = device }
        case .followToggled:
            // Frozen at the newest entry there is, shown or not.
            let newest = latest.value?.entries.last?.id ?? 0
            update { s in
                switch s.follow {
                case .following: s.follow = .frozen(at: newest)
                case .frozen: s.follow = .following
                }
            }
        case .clearRequested:
            // The log publishes the empty snapshot; it arrives as logChanged.
            log.clear()
        case let .entrySelected(id):
            guard let device = latest.value?.entries.first(where: { $0.id == id })?.device else { return }
            navigator.push(.deviceDetail(device))
        case .backRequested:
            navigator.pop()
        case let .logChanged(snapshot):
            latest.value = snapshot
            update { $0.dropped = snapshot.dropped }
        }
    }

    /// One state change: `change`, then the rows it implies.
    private func update(_ change: (inout State) -> Void) {
        let snapshot = latest.value
        store.update { s in
            change(&s)
            guard let snapshot else { return }
            s.entries = .loaded(EventLogPresenter.rows(snapshot.entries, filter: s.filter, follow: s.follow))
        }
    }

    /// Pure: the rows for a log's entries (exposed for front ends' previews).
    public static func rows(_ entries: [LogEvent], filter: Filter, follow: Follow) -> [Row] {
        let needle = filter.text.lowercased()
        return entries.compactMap { e in
            if case let .frozen(last) = follow, e.id > last { return nil }
            if e.severity < filter.minimumSeverity { return nil }
            if let device = filter.device, e.device != device { return nil }
            if !needle.isEmpty && !e.message.lowercased().contains(needle) { return nil }
            return Row(id: e.id, at: e.at, severity: e.severity, message: e.message, device: e.device)
        }
    }
}

/// The last log snapshot, touched only by the action queue's task.
private final class LatestLog: @unchecked Sendable {
    var value: EventLogSnapshot?
}
