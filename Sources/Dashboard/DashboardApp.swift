import Foundation
import TerminalUI

/// The dashboard's loop: one task applies every event (keys, presenter
/// states, ticks) to the screen, draws the content and writes only what
/// changed. It sleeps while nothing happens: no timers run unless something
/// on screen moves (see `DashboardScreen.nextTickInterval`).
public enum DashboardApp {
    /// The time between two frames: 30 frames per second.
    public static let frameInterval: Duration = .milliseconds(33)
    /// How much sooner than `frameInterval` after the last frame an event is
    /// still drawn at once. The device repository publishes at most once per
    /// frame interval (`DomainServices.Configuration.publishInterval`), so in
    /// a flood its states arrive about one interval apart, each a little
    /// early or late; drawn at once, they need no timer (a timer per frame —
    /// a task, a sleep, a wake-up of Dispatch's timer thread and one of the
    /// pool — was a fifth of the dashboard's wake-ups at 300 changes/s).
    /// At most ~34 frames per second.
    static let frameSlack: Duration = .milliseconds(4)

    /// Runs until the user quits or a terminating signal arrives. The
    /// terminal is restored before returning (and by the session itself on
    /// signals).
    public static func run(_ screen: DashboardScreen, terminal: TerminalSession, colorMode: ColorMode) async {
        var renderer = Renderer(colorMode: colorMode)
        let rowCache = DeviceRowCache()
        let post = screen.poster
        let input = terminal.events()
        let reader = Task {
            for await event in input { post(.terminal(event)) }
        }
        defer {
            reader.cancel()
            terminal.restore()
        }
        var size = terminal.size
        let clock = ContinuousClock()
        var lastDraw = clock.now
        /// A `.frame` event is on its way (events since the last draw wait for it).
        var frameScheduled = false
        var frameTimer: Task<Void, Never>?
        defer { frameTimer?.cancel() }
        func draw() {
            if screen.layout.width != size.width || screen.layout.height != size.height {
                screen.layout = DashboardLayout(width: size.width, height: size.height)
            }
            let buffer = DashboardContent.render(screen.view, layout: screen.layout, rowCache: rowCache)
            let bytes = renderer.frame(buffer)
            if !bytes.isEmpty { terminal.write(bytes) }
            lastDraw = clock.now
            screen.needsDraw = false
        }
        draw()
        screen.scheduleTick()
        for await event in screen.changes {
            switch event {
            case let .terminal(.resize(width, height)):
                size = (width, height)
                renderer.invalidate()
            case .terminal(.resumed):
                size = terminal.size
                renderer.invalidate()
            case .tick:
                screen.tickFired()
            case .frame:
                frameScheduled = false
            default:
                break
            }
            screen.apply(event)
            if screen.quitRequested { return }
            if screen.suspendRequested {
                screen.suspendRequested = false
                // Returns once continued; `.resumed` then redraws everything.
                terminal.suspend()
                continue
            }
            // A list state that moved only rows off screen: no frame at all.
            guard screen.needsDraw else {
                screen.scheduleTick()
                continue
            }
            // At most one frame per interval: an event right after a frame is
            // drawn with whatever else arrives until the interval ends (a
            // flood of list states costs one frame per interval); a key after
            // a quiet spell, or a state about one interval after the last
            // frame, is drawn at once.
            if clock.now - lastDraw >= Self.frameInterval - Self.frameSlack {
                draw()
            } else if !frameScheduled {
                frameScheduled = true
                let due = lastDraw + Self.frameInterval
                frameTimer = Task {
                    try? await Task.sleep(until: due, clock: .continuous)
                    post(.frame)
                }
            }
            screen.scheduleTick()
        }
    }
}
