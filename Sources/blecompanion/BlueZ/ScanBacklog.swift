import BlueZ
import Locking

/// What `scan` has still to print, kept per device: when standard output is
/// slower than the advertisements (a pipe into a slow reader, a paused
/// terminal), a device's later changes replace its earlier one, so memory
/// is bounded by the devices around, every device's latest state and every
/// "lost" is still printed, and the replacements are counted (`scan` says
/// how many when it ends). A fast reader sees every change, in order.
///
/// Fed from the mirror's event filter (``note(_:)``: quick, on the thread
/// that applies bluetoothd's signals); drained by the printing task
/// (``wakes``, then ``pop()`` until nil).
final class ScanBacklog: Sendable {
    enum Item: Sendable, Equatable {
        /// Print the device's current state (it appeared or changed).
        case seen(DeviceID)
        /// Print "lost" (if it was reported), then, when `andSeenAgain`,
        /// its current state: it went and came back before we printed.
        case lost(DeviceID, andSeenAgain: Bool)
        /// An adapter or bluetoothd event, printed in its place.
        case notice(BlueZEvent)
    }

    /// Notices (adapter removed, bluetoothd away…) kept at most: they are
    /// rare; a flapping daemon does not grow the backlog without bound.
    static let maxNotices = 64

    private struct State {
        var order: [Key] = []
        var head = 0
        /// Each pending device's item and when it started waiting.
        var devices: [DeviceID: (item: Item, since: ContinuousClock.Instant)] = [:]
        var notices = 0
        var merged: UInt64 = 0
        var droppedNotices: UInt64 = 0
    }

    private enum Key {
        case device(DeviceID)
        case notice(BlueZEvent)
    }

    private let state = Lock(State())
    private let wake: AsyncStream<Void>.Continuation
    /// Yields when there is something to pop; the consumer's loop ends when its task is cancelled.
    let wakes: AsyncStream<Void>
    /// Which device properties are worth a line.
    static let reportedProperties = DeviceProperty.names([.rssi, .manufacturerData, .serviceData, .name, .alias])
    let adapter: AdapterID

    init(adapter: AdapterID) {
        self.adapter = adapter
        (wakes, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Changes replaced by a later one of the same device that had been
    /// waiting longer than ``behind``: what a slow output cost. Signals of
    /// one device close together (InterfacesAdded and PropertiesChanged
    /// often come in the same instant) make one line by design and are not
    /// counted.
    var merged: UInt64 { state.withLock { $0.merged } }

    /// Adapter and bluetoothd notices beyond ``maxNotices`` waiting, not printed.
    var droppedNotices: UInt64 { state.withLock { $0.droppedNotices } }

    /// How long a change may wait for its line before the printer counts as behind.
    static let behind = Duration.milliseconds(100)

    /// Takes in one mirror event; always false (nothing is buffered in the
    /// mirror's stream: this is its `where` filter).
    @discardableResult
    func note(_ event: BlueZEvent) -> Bool {
        let change: (DeviceID, lost: Bool)?
        switch event {
        case let .interfacesAdded(path, names) where names.contains(BlueZInterface.device):
            change = DeviceID(path: path).map { ($0, false) }
        case let .deviceChanged(id, changed):
            guard changed.values.keys.contains(where: Self.reportedProperties.contains) else { return false }
            change = (id, false)
        case let .interfacesRemoved(path, names) where names.contains(BlueZInterface.device):
            change = DeviceID(path: path).map { ($0, true) }
        case let .interfacesRemoved(path, names) where names.contains(BlueZInterface.adapter) && path == adapter.path,
             let .interfacesAdded(path, names) where names.contains(BlueZInterface.adapter) && path == adapter.path:
            change = nil
            guard enqueueNotice(event) else { return false }
        case .availability:
            change = nil
            guard enqueueNotice(event) else { return false }
        default:
            return false
        }
        if let (id, lost) = change {
            guard id.adapter == adapter else { return false }
            let now = ContinuousClock.now
            state.withLock { s in
                guard let pending = s.devices[id] else {
                    s.devices[id] = (lost ? .lost(id, andSeenAgain: false) : .seen(id), now)
                    s.order.append(.device(id))
                    return
                }
                if now - pending.since > Self.behind { s.merged &+= 1 }
                switch (pending.item, lost) {
                case (.seen, true): s.devices[id] = (.lost(id, andSeenAgain: false), pending.since)
                case (.lost, false): s.devices[id] = (.lost(id, andSeenAgain: true), pending.since)
                case (.lost, true): s.devices[id] = (.lost(id, andSeenAgain: false), pending.since)
                default: break
                }
            }
        }
        wake.yield()
        return false
    }

    private func enqueueNotice(_ event: BlueZEvent) -> Bool {
        state.withLock { s in
            guard s.notices < Self.maxNotices else {
                s.droppedNotices &+= 1
                return false
            }
            s.notices += 1
            s.order.append(.notice(event))
            return true
        }
    }

    /// The next thing to print, oldest first; nil when there is none yet.
    func pop() -> Item? {
        state.withLock { s in
            while s.head < s.order.count {
                let key = s.order[s.head]
                s.head += 1
                if s.head > 1024, s.head * 2 > s.order.count {
                    s.order.removeFirst(s.head)
                    s.head = 0
                }
                switch key {
                case let .notice(event):
                    s.notices -= 1
                    return .notice(event)
                case let .device(id):
                    if let pending = s.devices.removeValue(forKey: id) { return pending.item }
                }
            }
            return nil
        }
    }
}
