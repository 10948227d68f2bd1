import DBus
import Foundation
import Locking
import Testing
@testable import BlueZ
import Vocabulary

/// The mirror's coalescing subscription: advertisements folded per device,
/// every other event kept in order, bounded, ended by its consumer.
@Suite struct ChangeFeedTests {
    let a = DeviceID(path: "/org/bluez/hci0/dev_AA_00_00_00_00_01")!
    let b = DeviceID(path: "/org/bluez/hci0/dev_AA_00_00_00_00_02")!
    let hci0 = AdapterID(path: "/org/bluez/hci0")

    /// A value for data properties (the feed reads the changed names only).
    let data = DBusValue.boolean(true)

    func advert(_ id: DeviceID, rssi: Int16) -> BlueZEvent {
        .deviceChanged(id, PropertyChanges(["RSSI": .int16(rssi), "ManufacturerData": data]))
    }

    @Test func whatCountsAsAnAdvertisement() {
        #expect(BlueZChangeFeed.advertisement(advert(a, rssi: -60)) == a)
        #expect(BlueZChangeFeed.advertisement(.deviceChanged(a, PropertyChanges(["ServiceData": data]))) == a)
        // TxPower alone is no advertisement heard; a connection is not one at all.
        #expect(BlueZChangeFeed.advertisement(.deviceChanged(a, PropertyChanges(["TxPower": .int16(4)]))) == nil)
        #expect(BlueZChangeFeed.advertisement(.deviceChanged(a, PropertyChanges(["RSSI": .int16(-60), "Connected": .boolean(true)]))) == nil)
        // bluetoothd invalidates RSSI when a device goes out of range: the list must hear it in order.
        #expect(BlueZChangeFeed.advertisement(.deviceChanged(a, PropertyChanges(["ManufacturerData": data], invalidated: ["RSSI"]))) == nil)
        #expect(BlueZChangeFeed.advertisement(.availability(true)) == nil)
    }

    @Test func foldsAdvertisementsPerDeviceAndKeepsOtherEventsInOrder() async throws {
        let feed = BlueZChangeFeed(eventCapacity: 16)
        let connected = BlueZEvent.deviceChanged(a, PropertyChanges(["Connected": .boolean(true)]))
        let powered = BlueZEvent.adapterChanged(hci0, PropertyChanges(["Powered": .boolean(false)]))
        #expect(feed.offer([advert(a, rssi: -60), advert(b, rssi: -70), connected]))
        #expect(feed.offer([advert(a, rssi: -61), powered, advert(a, rssi: -62)]))
        let batch = try #require(await feed.next())
        #expect(batch.advertised == [a, b], "each device once, in the order first heard")
        #expect(batch.folded == 2)
        #expect(batch.events == [connected, powered])
        #expect(!batch.lost)
        // Taken: nothing waits now, and the set starts again.
        #expect(feed.poll() == nil)
        #expect(feed.offer([advert(a, rssi: -63)]))
        #expect(feed.poll()?.advertised == [a])
    }

    @Test func aFullEventListSaysLostInsteadOfGrowing() throws {
        let feed = BlueZChangeFeed(eventCapacity: 3)
        let events = (0..<10).map { i in BlueZEvent.deviceChanged(a, PropertyChanges(["Name": .string("n\(i)")])) }
        #expect(feed.offer(events))
        #expect(feed.offer((0..<1000).map { advert(DeviceID(adapter: hci0, address: BluetoothAddress(value: 0xC0_0000_0000 + UInt64($0))), rssi: -50) } + [advert(a, rssi: -50)]))
        let batch = try #require(feed.poll())
        #expect(batch.events == Array(events.prefix(3)))
        #expect(batch.lost)
        #expect(batch.advertised.count == 1001, "advertisements are bounded by the devices, not by the list")
        #expect(feed.poll() == nil)
    }

    @Test func aWaitingConsumerIsWokenAndAFinishedFeedEnds() async throws {
        let feed = BlueZChangeFeed(eventCapacity: 16)
        let got = Task { await feed.next() }
        // Until the consumer waits, the offer is only stored; either way it arrives.
        try await Task.sleep(for: .milliseconds(50))
        #expect(feed.offer([advert(b, rssi: -40)]))
        #expect(await got.value?.advertised == [b])
        let ending = Task { await feed.next() }
        try await Task.sleep(for: .milliseconds(50))
        feed.finish()
        #expect(await ending.value == nil)
        #expect(!feed.offer([advert(a, rssi: -40)]), "the mirror forgets a finished feed")
        #expect(await feed.next() == nil)
    }

    /// The device control's hold while nobody watches: events at once,
    /// advertisements with the first change offered after the hold (no
    /// timer), or at once when the hold is released.
    @Test func aHoldKeepsAdvertisementsButNotEvents() async throws {
        let feed = BlueZChangeFeed(eventCapacity: 16)
        /// Until the consumer just started waits in the feed (each one
        /// below is held, so none can have its batch before that).
        func consumerWaiting() async throws {
            while !feed.consumerWaits { try await Task.sleep(for: .milliseconds(5)) }
        }
        let later = ContinuousClock.now + .seconds(3600)
        #expect(feed.offer([advert(a, rssi: -60)]))
        // Pending advertisements within the hold: the consumer waits.
        let first = Task { await feed.next(advertisementsFrom: later) }
        try await consumerWaiting()
        #expect(feed.offer([advert(b, rssi: -61)]))
        #expect(feed.consumerWaits, "an advertisement within the hold wakes no one")
        // A connection is not held: it comes with what was folded meanwhile.
        let connected = BlueZEvent.deviceChanged(a, PropertyChanges(["Connected": .boolean(true)]))
        #expect(feed.offer([connected]))
        let batch = try #require(await first.value)
        #expect(batch.events == [connected])
        #expect(batch.advertised == [a, b])

        // A hold that is over: the next change offered brings what waited.
        let end = ContinuousClock.now + .milliseconds(100)
        let second = Task { await feed.next(advertisementsFrom: end) }
        try await consumerWaiting()
        try await Task.sleep(until: end + .milliseconds(20), clock: .continuous)
        #expect(feed.consumerWaits, "no timer: nothing came, nobody is woken")
        #expect(feed.offer([advert(b, rssi: -63)]))
        #expect(await second.value?.advertised == [b])

        // Released (a detail view subscribed): at once, and the next wait holds nothing.
        #expect(feed.offer([advert(a, rssi: -64)]))
        let third = Task { await feed.next(advertisementsFrom: later) }
        try await consumerWaiting()
        feed.release()
        #expect(await third.value?.advertised == [a])
        feed.release()   // nobody waits: the next wait's hold is dropped
        #expect(feed.offer([advert(b, rssi: -65)]))
        #expect(await feed.next(advertisementsFrom: later)?.advertised == [b])
    }

    /// The deadline the mirror's connection thread keeps for a hold, in
    /// place of a timer: reported only while a consumer waits with a hold
    /// that has something to hand over at its end (held advertisements, or
    /// `wakeAtEnd`), announced when the consumer starts waiting, and no
    /// more once it passed and was handled (else that thread would spin).
    /// The feed's clock is moved by hand: nothing here depends on how fast
    /// the machine is.
    @Test func aHoldsDeadlineIsReportedOnlyWhileSomethingWaitsForIt() async throws {
        let start = ContinuousClock.now
        let clock = Lock(start)
        let announced = Lock(0)
        let feed = BlueZChangeFeed(eventCapacity: 16, now: { clock.withLock { $0 } }) { announced.withLock { $0 += 1 } }
        func consumerWaiting() async throws {
            while !feed.consumerWaits { try await Task.sleep(for: .milliseconds(5)) }
        }
        func advance(to instant: ContinuousClock.Instant) { clock.withLock { $0 = instant } }
        #expect(feed.holdDeadline == nil, "nobody waits")

        // A hold with nothing held and no wish to hear at its end: no deadline.
        let quiet = Task { await feed.next(advertisementsFrom: start + .seconds(1)) }
        try await consumerWaiting()
        #expect(feed.holdDeadline == nil)
        #expect(announced.withLock { $0 } == 0)
        advance(to: start + .seconds(2))
        feed.holdEnded()
        #expect(feed.consumerWaits, "nothing to hand over: it keeps waiting")
        // An advertisement after the hold ended goes at once.
        #expect(feed.offer([advert(a, rssi: -50)]))
        #expect(await quiet.value?.advertised == [a])

        // Held advertisements: the deadline is the hold's end; before it, nothing happens.
        #expect(feed.offer([advert(b, rssi: -51)]))
        let end = start + .seconds(3)
        let held = Task { await feed.next(advertisementsFrom: end) }
        try await consumerWaiting()
        #expect(feed.holdDeadline == end)
        #expect(announced.withLock { $0 } == 1, "the connection thread is told when the consumer starts waiting")
        feed.holdEnded()
        #expect(feed.consumerWaits, "too early")
        advance(to: end)
        feed.holdEnded()
        #expect(await held.value?.advertised == [b], "handed over at the deadline, no further change needed")
        #expect(feed.holdDeadline == nil)

        // wakeAtEnd: an empty batch at the deadline.
        let due = start + .seconds(4)
        let empty = Task { await feed.next(advertisementsFrom: due, wakeAtEnd: true) }
        try await consumerWaiting()
        #expect(feed.holdDeadline == due)
        #expect(announced.withLock { $0 } == 2)
        advance(to: due + .milliseconds(1))
        feed.holdEnded()
        let batch = try #require(await empty.value)
        #expect(batch.isEmpty)
        #expect(feed.holdDeadline == nil, "reported no more once handed over")

        // atTheLatest: a change after `from` ends the hold at once; with none,
        // the deadline is the later instant (the repository's, during a flood).
        let from = start + .seconds(5), latest = start + .seconds(6)
        let flood = Task { await feed.next(advertisementsFrom: from, wakeAtEnd: true, atTheLatest: latest) }
        try await consumerWaiting()
        #expect(feed.holdDeadline == latest)
        advance(to: from)
        feed.holdEnded()
        #expect(feed.consumerWaits, "nothing came and the latest is not here yet")
        #expect(feed.offer([advert(a, rssi: -52)]))
        #expect(await flood.value?.advertised == [a], "the first change after `from` ends it")
        let stopped = Task { await feed.next(advertisementsFrom: from, wakeAtEnd: true, atTheLatest: latest) }
        try await consumerWaiting()
        advance(to: latest)
        feed.holdEnded()
        #expect(await stopped.value?.isEmpty == true, "nothing more came: at the latest")
    }

    @Test func cancellingTheConsumerEndsTheFeed() async throws {
        let feed = BlueZChangeFeed(eventCapacity: 16)
        let waiting = Task { await feed.next() }
        try await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        #expect(await waiting.value == nil)
        #expect(!feed.offer([advert(a, rssi: -40)]))
    }
}
