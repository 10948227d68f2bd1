internal import CDBus
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What libdbus asks of the loop that drives it: the file descriptors it
/// wants watched (its "watches") and the timers it wants fired (its
/// "timeouts"), kept in the loop's epoll set and deadline list.
///
/// Owned by ``ConnectionCore`` and touched on its I/O thread only (libdbus
/// calls the functions at the end of this file from inside
/// `dbus_connection_*` calls made on that thread). A class, not a value:
/// handling one watch may make libdbus add or remove others re-entrantly.
final class LibDBusWatches {
    private let epollFD: Int32
    private var watches: [Int32: [OpaquePointer]] = [:]
    private var registeredEvents: [Int32: UInt32] = [:]
    private var timeouts: [OpaquePointer: UInt64] = [:]
    /// The socket our own receiver reads once libdbus has handed a bus
    /// connection over (-1 before): libdbus keeps only writing on it.
    var ownSocket: Int32 = -1

    init(epollFD: Int32) { self.epollFD = epollFD }

    // MARK: Watches

    func add(watch: OpaquePointer) -> Bool {
        let fd = dbus_watch_get_unix_fd(watch)
        watches[fd, default: []].append(watch)
        updateEpoll(fd: fd)
        return true
    }

    func remove(watch: OpaquePointer) {
        let fd = dbus_watch_get_unix_fd(watch)
        watches[fd]?.removeAll { $0 == watch }
        if watches[fd]?.isEmpty == true { watches[fd] = nil }
        updateEpoll(fd: fd)
    }

    func toggled(watch: OpaquePointer) {
        updateEpoll(fd: dbus_watch_get_unix_fd(watch))
    }

    /// Brings the epoll registration of `fd` in line with the enabled
    /// watches on it.
    func updateEpoll(fd: Int32) {
        var wanted: UInt32 = 0
        let ours = fd == ownSocket
        for w in watches[fd] ?? [] where dbus_watch_get_enabled(w) != 0 {
            let flags = dbus_watch_get_flags(w)
            if flags & UInt32(DBUS_WATCH_READABLE.rawValue) != 0 && !ours { wanted |= EPOLLIN.rawValue }
            if flags & UInt32(DBUS_WATCH_WRITABLE.rawValue) != 0 { wanted |= EPOLLOUT.rawValue }
        }
        // Our receiver reads whenever there is input; it keeps no queue of
        // its own (every complete message is dispatched as soon as it is read).
        if ours { wanted |= EPOLLIN.rawValue }
        let existing = registeredEvents[fd]
        var event = epoll_event()
        event.events = wanted
        event.data.fd = fd
        if watches[fd] == nil {
            if existing != nil {
                epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, &event)
                registeredEvents[fd] = nil
            }
            return
        }
        if existing == nil {
            epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event)
        } else if existing != wanted {
            epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
        }
        registeredEvents[fd] = wanted
    }

    /// Hands what epoll reported for `fd` to the watches that want it. On
    /// our own socket only writability goes to libdbus (the caller has
    /// already read).
    func handle(fd: Int32, epollEvents: UInt32) {
        guard let list = watches[fd] else { return }
        if fd == ownSocket {
            guard epollEvents & EPOLLOUT.rawValue != 0 else { return }
            for watch in list where watches[fd]?.contains(watch) == true && dbus_watch_get_enabled(watch) != 0 {
                if dbus_watch_get_flags(watch) & UInt32(DBUS_WATCH_WRITABLE.rawValue) != 0 {
                    _ = dbus_watch_handle(watch, UInt32(DBUS_WATCH_WRITABLE.rawValue))
                }
            }
            return
        }
        var flags: UInt32 = 0
        if epollEvents & EPOLLIN.rawValue != 0 { flags |= UInt32(DBUS_WATCH_READABLE.rawValue) }
        if epollEvents & EPOLLOUT.rawValue != 0 { flags |= UInt32(DBUS_WATCH_WRITABLE.rawValue) }
        if epollEvents & EPOLLERR.rawValue != 0 { flags |= UInt32(DBUS_WATCH_ERROR.rawValue) }
        if epollEvents & EPOLLHUP.rawValue != 0 { flags |= UInt32(DBUS_WATCH_HANGUP.rawValue) }
        for watch in list {
            // A previous handle() may have removed this watch.
            guard watches[fd]?.contains(watch) == true, dbus_watch_get_enabled(watch) != 0 else { continue }
            let interest = dbus_watch_get_flags(watch)
                | UInt32(DBUS_WATCH_ERROR.rawValue) | UInt32(DBUS_WATCH_HANGUP.rawValue)
            let relevant = flags & interest
            if relevant != 0 { _ = dbus_watch_handle(watch, relevant) }
        }
    }

    // MARK: Timeouts

    func add(timeout t: OpaquePointer) -> Bool {
        if dbus_timeout_get_enabled(t) != 0 {
            timeouts[t] = monotonicNanoseconds() + UInt64(max(0, dbus_timeout_get_interval(t))) * 1_000_000
        } else {
            timeouts[t] = UInt64.max
        }
        return true
    }

    func remove(timeout t: OpaquePointer) { timeouts[t] = nil }

    func toggled(timeout t: OpaquePointer) { _ = add(timeout: t) }

    /// The earliest timeout libdbus wants fired (monotonic ns; `UInt64.max`
    /// for none).
    var earliest: UInt64 {
        var earliest = UInt64.max
        for (_, d) in timeouts where d < earliest { earliest = d }
        return earliest
    }

    /// Fires every timeout due at `now` and arms it again for its interval.
    func fireDue(now: UInt64) {
        var due: [OpaquePointer] = []
        for (t, deadline) in timeouts where deadline <= now { due.append(t) }
        for t in due where timeouts[t] != nil {
            timeouts[t] = monotonicNanoseconds() + UInt64(max(0, dbus_timeout_get_interval(t))) * 1_000_000
            _ = dbus_timeout_handle(t)
        }
    }
}

// MARK: C callbacks

typealias DBusError_C = CDBus.DBusError

/// The functions libdbus calls back; their user data is the
/// ``ConnectionCore`` (unretained: the core outlives its connection).
enum LibDBusCallbacks {
    static func core(_ data: UnsafeMutableRawPointer?) -> ConnectionCore? {
        guard let data else { return nil }
        return Unmanaged<ConnectionCore>.fromOpaque(data).takeUnretainedValue()
    }

    static let watchAdd: DBusAddWatchFunction = { watch, data in
        guard let watch, let c = core(data) else { return 0 }
        return c.libdbus.add(watch: watch) ? 1 : 0
    }
    static let watchRemove: DBusRemoveWatchFunction = { watch, data in
        guard let watch, let c = core(data) else { return }
        c.libdbus.remove(watch: watch)
    }
    static let watchToggled: DBusWatchToggledFunction = { watch, data in
        guard let watch, let c = core(data) else { return }
        c.libdbus.toggled(watch: watch)
    }
    static let timeoutAdd: DBusAddTimeoutFunction = { t, data in
        guard let t, let c = core(data) else { return 0 }
        return c.libdbus.add(timeout: t) ? 1 : 0
    }
    static let timeoutRemove: DBusRemoveTimeoutFunction = { t, data in
        guard let t, let c = core(data) else { return }
        c.libdbus.remove(timeout: t)
    }
    static let timeoutToggled: DBusTimeoutToggledFunction = { t, data in
        guard let t, let c = core(data) else { return }
        c.libdbus.toggled(timeout: t)
    }
    static let filter: DBusHandleMessageFunction = { _, msg, data in
        guard let msg, let c = core(data) else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        return c.handle(msg) ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
    }
}
