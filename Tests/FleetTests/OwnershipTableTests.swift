import Testing
import TestSupport
@testable import Fleet

/// Uniform noise in -amplitude...amplitude dB from the tests' seeded generator: the same every run.
struct Noise {
    var generator: SeededGenerator
    init(state: UInt64) { generator = SeededGenerator(seed: state) }
    mutating func next() -> UInt64 { generator.next() }
    mutating func dB(_ amplitude: Double) -> Double { (Double(next() % 10_001) / 10_000 * 2 - 1) * amplitude }
}

@Suite("Fleet ownership rule")
struct OwnershipTableTests {
    let dev = "e45f01aa1001"

    @Test("with no owner the strongest gateway claims, and only it")
    func firstClaim() {
        var tables = ["a", "b", "c"].map { OwnershipTable(me: $0) }
        for k in tables.indices {
            tables[k].heard(dev, by: "a", rssi: -70, at: 100)
            tables[k].heard(dev, by: "b", rssi: -60, at: 100)
            tables[k].heard(dev, by: "c", rssi: -80, at: 100)
        }
        #expect(tables.map { $0.decide(dev, now: 101) } == [.stand(owner: nil), .claim, .stand(owner: nil)])
        for k in tables.indices { tables[k].claimed(dev, by: "b") }
        #expect(tables[1].owns(dev, now: 101))
        #expect(tables.map { $0.decide(dev, now: 101) } == Array(repeating: .stand(owner: "b"), count: 3))
    }

    @Test("equal RSSI goes to the gateway whose name sorts first, on every gateway")
    func ties() {
        for me in ["kitchen", "hall", "attic"] {
            var t = OwnershipTable(me: me)
            for g in ["kitchen", "hall", "attic"] { t.heard(dev, by: g, rssi: -65, at: 10) }
            #expect(t.decide(dev, now: 10) == (me == "attic" ? .claim : .stand(owner: nil)))
        }
    }

    @Test("±5 dB of noise around equal strength never moves the device (10 minutes, 1 sighting/s each)")
    func noFlapping() {
        var noise = Noise(state: 42)
        var b = OwnershipTable(me: "b")
        b.claimed(dev, by: "a")
        var claims = 0
        for s in 0..<600 {
            let t = Double(s)
            b.heard(dev, by: "a", rssi: -70 + noise.dB(5), at: t)
            b.heard(dev, by: "b", rssi: -70 + noise.dB(5), at: t + 0.5)
            if b.decide(dev, now: t + 0.6) == .claim { claims += 1 }
        }
        #expect(claims == 0)
        #expect(b.owner(of: dev, now: 600) == "a")
    }

    @Test("a gateway 10 dB better takes over after the dwell, not before")
    func handover() {
        let rule = OwnershipTable.Rule(hysteresis: 6, dwell: 10, staleAfter: 30)
        var b = OwnershipTable(me: "b", rule: rule)
        b.claimed(dev, by: "a")
        var firstClaim: Double?
        for s in 0..<40 {
            let t = Double(s)
            // The device moves towards b at t = 10.
            b.heard(dev, by: "a", rssi: t < 10 ? -60 : -75, at: t)
            b.heard(dev, by: "b", rssi: t < 10 ? -75 : -60, at: t)
            if firstClaim == nil, b.decide(dev, now: t) == .claim { firstClaim = t }
        }
        #expect(firstClaim == 20)
    }

    @Test("one sighting below the margin restarts the dwell")
    func brokenStreak() {
        var b = OwnershipTable(me: "b", rule: .init(hysteresis: 6, dwell: 10, staleAfter: 30))
        b.claimed(dev, by: "a")
        var firstClaim: Double?
        for s in 0..<40 {
            let t = Double(s)
            b.heard(dev, by: "a", rssi: -75, at: t)
            b.heard(dev, by: "b", rssi: s == 5 ? -72 : -60, at: t)  // one weak sighting at 5
            if firstClaim == nil, b.decide(dev, now: t) == .claim { firstClaim = t }
        }
        #expect(firstClaim == 16)  // streak from 0 broken at 5, again from 6
    }

    @Test("the owner going offline hands the device to the best remaining gateway at once")
    func failoverByWill() {
        var c = OwnershipTable(me: "c")
        c.claimed(dev, by: "a")
        c.heard(dev, by: "a", rssi: -50, at: 100)
        c.heard(dev, by: "b", rssi: -80, at: 100)
        c.heard(dev, by: "c", rssi: -70, at: 100)
        #expect(c.decide(dev, now: 101) == .stand(owner: "a"))
        c.gateway("a", online: false)
        #expect(c.owner(of: dev, now: 101) == nil)
        #expect(c.decide(dev, now: 101) == .claim)
        // It returns: a is online again, but c's claim stands until a is clearly better for the dwell.
        c.claimed(dev, by: "c")
        c.gateway("a", online: true)
        c.heard(dev, by: "a", rssi: -50, at: 102)
        #expect(c.owner(of: dev, now: 102) == "c")
    }

    @Test("an owner whose sightings stop loses the device after staleAfter")
    func failoverByStaleness() {
        var b = OwnershipTable(me: "b", rule: .init(staleAfter: 30))
        b.claimed(dev, by: "a")
        b.heard(dev, by: "a", rssi: -50, at: 0)
        for s in 0...40 { b.heard(dev, by: "b", rssi: -80, at: Double(s)) }
        #expect(b.decide(dev, now: 30) == .stand(owner: "a"))
        #expect(b.decide(dev, now: 30.5) == .claim)
        #expect(b.claimsDue(now: 30.5) == [dev])
    }

    @Test("gateways that see the same sightings in different orders agree: exactly one claims")
    func agreement() {
        var noise = Noise(state: 7)
        var events: [(String, Double, Double)] = []
        for s in 0..<120 {
            for g in ["a", "b", "c"] {
                let base = g == "a" ? -62.0 : g == "b" ? -66.0 : -71.0
                events.append((g, base + noise.dB(3), Double(s) + Double(noise.next() % 100) / 100))
            }
        }
        let gateways = ["a", "b", "c"]
        var tables = gateways.map { OwnershipTable(me: $0) }
        for (k, g) in gateways.enumerated() {
            // Each gateway receives the others' batches in its own order (per sender order kept).
            var order = events
            if k == 1 { order = events.filter { $0.0 != "a" } + events.filter { $0.0 == "a" } }
            if k == 2 { order = events.filter { $0.0 == "c" } + events.filter { $0.0 != "c" } }
            for (gw, rssi, at) in order { tables[k].heard(dev, by: gw, rssi: rssi, at: at) }
            #expect(tables[k].me == g)
        }
        let now = 120.5
        let claimants = gateways.indices.filter { tables[$0].decide(dev, now: now) == .claim }
        #expect(claimants.count == 1)
        #expect(claimants.map { gateways[$0] } == ["a"])
    }

    @Test("the table stays within its capacity under a flood of new devices")
    func bounded() {
        var t = OwnershipTable(me: "a", capacity: 1_000)
        for i in 0..<10_000 {
            t.heard(String(format: "%012x", i), by: "a", rssi: -70, at: Double(i))
            #expect(t.deviceCount <= 1_000)
        }
        #expect(t.sightings(of: String(format: "%012x", 9_999))["a"]?.rssi == -70)
        t.forget(heardBefore: 9_990)
        #expect(t.deviceCount == 10)
    }

    @Test("an older sighting from the same gateway does not replace a newer one")
    func ordering() {
        var t = OwnershipTable(me: "a")
        t.heard(dev, by: "b", rssi: -50, at: 10)
        t.heard(dev, by: "b", rssi: -90, at: 9)
        #expect(t.sightings(of: dev)["b"] == .init(rssi: -50, at: 10))
    }
}
