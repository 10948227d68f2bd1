internal import CMosquitto
internal import CPosix
import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import Threads

/// The client's network thread: our own, driving libmosquitto through its
/// external-loop functions (`mosquitto_loop_read`, `_write`, `_misc`)
/// instead of `mosquitto_loop_start`.
///
/// Why not libmosquitto's thread. In its threaded mode every
/// `mosquitto_publish` writes one byte to an internal socket pair to wake
/// that thread, and the thread reads one byte per `select()`: a batch of n
/// publishes cost n wake-ups or `select()` rounds and 2n extra system calls
/// (at 200 changes a second that was most of the thread's time:
/// docs/PERFORMANCE.md, fifteenth pass). Here the client is in libmosquitto's
/// "threaded, external loop" mode (`mosquitto_threaded_set`): a publish only
/// queues its packet, and whoever queued a batch calls ``wake()`` once; this
/// thread then writes everything queued.
///
/// What the thread does, as libmosquitto's own did: waits in `poll()` on the
/// socket (and on an eventfd for ``wake()``); reads what arrived (the
/// callbacks run here); writes what is queued; sends PINGREQ and notices a
/// broker that stopped answering (`mosquitto_loop_misc`, at least every
/// quarter keep-alive, so a PINGREQ is never later than 1.25 keep-alives
/// after the last packet out: the broker's limit is 1.5); and after the
/// connection is lost, reconnects with a delay doubling from the minimum to
/// the maximum (reset by a successful reconnect), until ``stop()``.
/// `mosquitto_reconnect` blocks (name lookup, TCP, TLS), as it did in
/// libmosquitto's thread.
final class NetworkThread: Sendable {
    private let handle: MosquittoHandle
    private let core: ClientCore
    private let wakeFD: Int32
    private let stopping = Atomic<Bool>(false)
    private let ended = DispatchSemaphore(value: 0)
    /// The longest `poll()` while connected, in ms (-1: no keep-alive, no timeout).
    private let pollTimeout: Int32
    private let reconnectDelay: ClosedRange<Int>

    /// Starts the thread. `reconnectDelay` in seconds (validated by the configuration).
    init(handle: MosquittoHandle, core: ClientCore, keepAlive: Int, reconnectDelay: ClosedRange<Int>) throws(MQTTError) {
        let fd = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
        guard fd >= 0 else {
            throw .connectionFailed(endpoint: core.endpoint, reason: "cannot start the network thread: eventfd: \(cText(strerror(errno), orCode: errno))")
        }
        self.handle = handle
        self.core = core
        wakeFD = fd
        pollTimeout = keepAlive > 0 ? Int32(clamping: keepAlive * 250) : -1
        self.reconnectDelay = reconnectDelay
        do {
            try DetachedThread.start(name: "mqtt-io") { [self] in run() }
        } catch {
            close(fd)
            throw .connectionFailed(endpoint: core.endpoint, reason: "cannot start the network thread: \(error)")
        }
    }

    deinit { close(wakeFD) }

    /// Makes the thread look at libmosquitto's queue now (after packets were queued).
    func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Stops the thread once it wrote what is queued (a DISCONNECT queued
    /// before goes out, as far as the socket takes it without waiting) and
    /// returns when it has ended. Blocks: call it off the cooperative pool.
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wake()
        ended.wait()
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    private func run() {
        let mosq = handle.raw
        var failedReconnects = 0
        var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0), pollfd(fd: -1, events: 0, revents: 0)]
        while !isStopping {
            let socket = mosquitto_socket(mosq)
            if socket < 0 {
                // Not connected. After `disconnect()` there is nothing to do
                // but wait for `stop()`; else wait the back-off delay (only
                // `stop()` ends it early) and try again.
                if core.isClosed {
                    waitForWake(timeout: -1)
                    continue
                }
                sleepUnlessStopped(milliseconds: delayMilliseconds(failedReconnects))
                if isStopping || core.isClosed { continue }
                failedReconnects = mosquitto_reconnect(mosq) == mosqOK ? 0 : min(failedReconnects + 1, 30)
                continue
            }
            fds[0].revents = 0
            fds[1] = pollfd(fd: socket, events: Int16(POLLIN) | (mosquitto_want_write(mosq) ? Int16(POLLOUT) : 0), revents: 0)
            let ready = poll(&fds, 2, pollTimeout)
            if ready < 0 && errno != EINTR { waitForWake(timeout: 100) }
            if fds[0].revents != 0 { drainWakes() }
            // Each of these closes the socket and calls on_disconnect when
            // the connection is lost; the next round then reconnects.
            if fds[1].revents & Int16(POLLIN | POLLERR | POLLHUP | POLLNVAL) != 0, mosquitto_loop_read(mosq, 1) != mosqOK { continue }
            if mosquitto_loop_misc(mosq) != mosqOK { continue }
            if mosquitto_want_write(mosq) {
                // libmosquitto writes each queued packet with a write() of
                // its own: corked, a batch of PUBLISHes leaves in as few TCP
                // segments as it fits in, when uncorked (each segment costs
                // the TCP stack, on loopback the broker's receive too).
                setCork(socket, true)
                // A failed write closed the socket (the number may already
                // be another file's): nothing to uncork then.
                guard mosquitto_loop_write(mosq, 1) == mosqOK else { continue }
                setCork(socket, false)
            }
        }
        // What was queued last (DISCONNECT) goes out before the caller destroys the handle.
        if mosquitto_socket(mosq) >= 0, mosquitto_want_write(mosq) { _ = mosquitto_loop_write(mosq, 1) }
        ended.signal()
    }

    /// The wait before reconnect attempt `failed + 1`: the minimum doubled
    /// per failed attempt, at most the maximum.
    private func delayMilliseconds(_ failed: Int) -> Int {
        let (doubled, overflow) = reconnectDelay.lowerBound.multipliedReportingOverflow(by: 1 << min(failed, 16))
        let seconds = overflow ? reconnectDelay.upperBound : min(reconnectDelay.upperBound, doubled)
        return min(seconds, 86_400) * 1000
    }

    /// Waits `milliseconds`; wake-ups (publishes queued meanwhile) do not
    /// shorten it, ``stop()`` does.
    private func sleepUnlessStopped(milliseconds: Int) {
        let end = ContinuousClock.now + .milliseconds(milliseconds)
        while !isStopping {
            let left = ContinuousClock.now.duration(to: end)
            guard left > .zero else { return }
            let (seconds, attoseconds) = left.components
            waitForWake(timeout: Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1))
        }
    }

    /// TCP_CORK on or off (off sends what it held at once). A socket that
    /// is not TCP refuses it, and nothing changes.
    private func setCork(_ socket: Int32, _ on: Bool) {
        var value: Int32 = on ? 1 : 0
        _ = setsockopt(socket, Int32(IPPROTO_TCP), TCP_CORK, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    private func waitForWake(timeout: Int32) {
        var fd = pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)
        if poll(&fd, 1, timeout) > 0 { drainWakes() }
    }

    private func drainWakes() {
        var count: UInt64 = 0
        _ = read(wakeFD, &count, 8)
    }
}
