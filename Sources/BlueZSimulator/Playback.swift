import DBus
import ScenarioFormat

/// One event of the whole scenario's schedule (`--speed max`, `--loop`).
struct PlaybackEvent: Sendable {
    enum Action: Sendable {
        case bluetoothdVanishes
        case bluetoothdReturns
        case adapterRemoved(String)
        case adapterAdded(String)
        case advertisement(device: Int, AdvertisementEvent)
        case battery(device: Int, UInt8)
    }
    var at: Double
    var action: Action
}

extension Scenario {
    /// How long one pass of the scenario lasts: `duration` if given, else
    /// the latest event or `repeatEvery` of any timeline.
    public var span: Double {
        var end = duration ?? 0
        func consider<E>(_ t: Timeline<E>?) {
            guard let t else { return }
            if let last = t.events.last { end = max(end, last.at) }
            if duration == nil, let r = t.repeatEvery { end = max(end, r) }
        }
        for o in outages { end = max(end, o.returnAt ?? o.at) }
        for a in adapters { for o in a.outages { end = max(end, o.returnAt ?? o.at) } }
        for d in devices {
            consider(d.advertising)
            consider(d.batteryTimeline)
        }
        return end
    }
}

extension BlueZSimulator {
    /// Every timeline event of one pass, in time order; events at the same
    /// time keep file order (outages, adapters, then devices). Repeating
    /// timelines are unrolled up to the span.
    func playbackSchedule() -> (events: [PlaybackEvent], span: Double) {
        let span = scenario.span
        var list: [(PlaybackEvent, Int)] = []
        func add(_ at: Double, _ action: PlaybackEvent.Action) { list.append((PlaybackEvent(at: at, action: action), list.count)) }
        func unroll<E: TimedEvent>(_ t: Timeline<E>, _ make: (E) -> PlaybackEvent.Action) {
            var base = 0.0
            var first = true
            while first || base < span {
                for e in t.events {
                    let at = base + e.at
                    if !first && at >= span { break }
                    add(at, make(e))
                }
                guard let r = t.repeatEvery, r > 0 else { return }
                base += r
                first = false
            }
        }
        for o in scenario.outages {
            add(o.at, .bluetoothdVanishes)
            if let r = o.returnAt { add(r, .bluetoothdReturns) }
        }
        for a in adapters {
            for o in a.spec.outages {
                add(o.at, .adapterRemoved(a.spec.id))
                if let r = o.returnAt { add(r, .adapterAdded(a.spec.id)) }
            }
        }
        for (i, d) in devices.enumerated() {
            if let t = d.spec.advertising { unroll(t) { .advertisement(device: i, $0) } }
            if let t = d.spec.batteryTimeline { unroll(t) { .battery(device: i, $0.value.first ?? 0) } }
        }
        list.sort { ($0.0.at, $0.1) < ($1.0.at, $1.1) }
        return (list.map(\.0), span)
    }

    /// Plays the whole schedule on one task: timed (scaled by `speed`) or
    /// as fast as the discovering clients consume; over and over with `loop`.
    func startPlayback() {
        let (events, span) = playbackSchedule()
        let loop = options.loop && span > 0
        let fast = options.asFastAsConsumed
        let speed = options.speed
        let gate = discoveryGate.stream
        let origin = startInstant
        if loop { log("looping every \(span) s of scenario time") }
        timelineTasks.append(Task { [weak self] in
            var waiting = gate.makeAsyncIterator()
            /// Max speed: wait while bluetoothd is on the bus and nobody discovers.
            func awaitClient() async -> Bool {
                while let sim = self, await sim.needsDiscoveryClient() {
                    guard await waiting.next() != nil, !Task.isCancelled else { return false }
                }
                return self != nil && !Task.isCancelled
            }
            if fast {
                guard await awaitClient() else { return }
                await self?.flowControl()
            }
            var base = origin
            var pass = 0
            while !Task.isCancelled {
                for event in events {
                    if fast {
                        guard await awaitClient() else { return }
                    } else {
                        do { try await Task.sleep(until: base + .seconds(event.at / speed), clock: .continuous) } catch { return }
                    }
                    guard let sim = self else { return }
                    await sim.play(event.action)
                    if fast { await sim.flowControl() }
                }
                pass += 1
                self?.passes.continuation.yield(pass)
                guard loop else { return }
                base = base + .seconds(span / speed)
                if fast {
                    // The next pass starts at scenario time 0 again.
                    base = .now
                }
            }
        })
    }

    /// Returns once the whole-scenario playback (``SimulatorOptions/asFastAsConsumed``
    /// or ``SimulatorOptions/loop``) has played every event at least once.
    /// Only one caller may wait.
    public func waitUntilPlayedOnce() async {
        for await _ in passes.stream { return }
    }

    func needsDiscoveryClient() -> Bool {
        isOnBus && running && adapters.allSatisfy { $0.sessions.isEmpty }
    }

    func play(_ action: PlaybackEvent.Action) async {
        switch action {
        case .bluetoothdVanishes: bluetoothdVanishes()
        case .bluetoothdReturns: await bluetoothdReturns()
        case let .adapterRemoved(id): adapterRemoved(id)
        case let .adapterAdded(id): await adapterAdded(id)
        case let .advertisement(i, e): await applyAdvertisement(device: i, e)
        case let .battery(i, pct): applyBattery(device: i, pct)
        }
    }

    /// Waits until every discovering client has read what was sent so far
    /// (a Peer.Ping round trip each: replies come after the signals before
    /// them), then for `afterEvent`.
    func flowControl() async {
        if let connection {
            let clients = Set(adapters.flatMap(\.sessions)).sorted()
            for client in clients {
                _ = try? await connection.call(destination: client, path: .root, interface: "org.freedesktop.DBus.Peer",
                                               member: "Ping", timeout: .seconds(10))
            }
        }
        await options.afterEvent?()
    }
}
