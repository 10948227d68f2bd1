import Foundation
import Locking
import Testing
import BlueZ
import Domain
@testable import Presenters
import Vocabulary

/// A consumer slower than the states it follows (the gateway's planner under
/// a flood) holds at most one waiting state, and that state still carries
/// every change it replaced.
@Suite struct CoalescedStatesTests {
    let hci0 = AdapterID(path: "/org/bluez/hci0")

    func row(_ last: UInt8, rssi: Int16) throws -> DeviceListPresenter.Row {
        DeviceListPresenter.Row(id: DeviceID(adapter: hci0, address: try #require(BluetoothAddress(bytes: [0xC0, 0, 0, 0, 0, last]))),
                                title: "d\(last)", rssi: rssi)
    }

    @Test func aSlowConsumerGetsTheLatestStateAndEveryChangeOnce() async throws {
        let store = StateStore(0)
        let merges = Lock(0)
        var states = store.states(coalescing: { _, newer in newer }, coalesced: { merges.withLock { $0 += 1 } })
            .makeAsyncIterator()
        #expect(await states.next() == 0, "the current state first")
        for v in 1...1_000 { store.update { $0 = v } }
        // Nobody took them: one waits, the latest; 999 were merged into it.
        #expect(await states.next() == 1_000)
        #expect(merges.withLock { $0 } == 999)
        store.update { $0 = 1_001 }
        #expect(await states.next() == 1_001)
    }

    @Test func aWaitingConsumerIsWokenByTheNextStateAndEndsWithTheStore() async throws {
        var store: StateStore<Int>? = StateStore(0)
        let stream = try #require(store).states(coalescing: { _, newer in newer })
        let consumer = Task {
            var seen: [Int] = []
            for await v in stream { seen.append(v) }
            return seen
        }
        try await Task.sleep(for: .milliseconds(50))
        store?.update { $0 = 7 }
        try await Task.sleep(for: .milliseconds(50))
        store = nil   // the store goes: the stream ends
        let seen = await consumer.value
        #expect(seen.first == 0 && seen.last == 7)
    }

    @Test func mergedChangesKeepEachDevicesLatestRowOrItsRemoval() throws {
        let a1 = try row(1, rssi: -50), a2 = try row(1, rssi: -40), b = try row(2, rssi: -60), c = try row(3, rssi: -70)
        typealias Changes = DeviceListPresenter.RowChanges
        let older = Changes(rows: [a1, b], removed: [c.id])
        // A changed again, B removed, C back.
        let newer = Changes(rows: [a2, c], removed: [b.id])
        let merged = try #require(Changes.merged(older, newer))
        #expect(Set(merged.rows.map(\.id)) == [a2.id, c.id])
        #expect(merged.rows.first { $0.id == a2.id }?.rssi == -40)
        #expect(merged.removed == [b.id])
        #expect(Changes.merged(nil, newer) == nil && Changes.merged(older, nil) == nil, "unknown changes stay unknown")
        #expect(Changes.merged(Changes(rows: [b]), Changes(rows: [a1])) == Changes(rows: [b, a1]), "unrelated changes add up")
    }
}
