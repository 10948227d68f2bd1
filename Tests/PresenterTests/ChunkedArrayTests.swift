import Domain
import Testing
import TestSupport

/// The chunked list against `Array` as the model: every sequence of inserts,
/// removals and writes leaves both with the same elements, and a copy taken
/// before a change keeps what it had.
struct ChunkedArrayTests {
    @Test(arguments: [1 as UInt64, 2, 3, 42])
    func randomEditsMatchAnArray(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var model: [Int] = []
        var list = ChunkedArray<Int>()
        var copies: [(ChunkedArray<Int>, [Int])] = []
        for step in 0..<6_000 {
            // Grows for the first half (past many chunk splits), then shrinks (merges).
            let grow = step < 3_000 ? 3 : 1
            switch Int.random(in: 0..<(grow + 2), using: &rng) {
            case 0..<grow:
                let at = Int.random(in: 0...model.count, using: &rng)
                model.insert(step, at: at)
                list.insert(step, at: at)
            case grow:
                guard !model.isEmpty else { continue }
                let at = Int.random(in: 0..<model.count, using: &rng)
                #expect(list.remove(at: at) == model.remove(at: at))
            default:
                guard !model.isEmpty else { continue }
                let at = Int.random(in: 0..<model.count, using: &rng)
                model[at] = -step
                list[at] = -step
            }
            if step % 500 == 0 { copies.append((list, model)) }
        }
        #expect(list.count == model.count)
        #expect(Array(list) == model)
        #expect(list.indices.map { list[$0] } == model)
        for (copy, expected) in copies { #expect(Array(copy) == expected) }
    }

    @Test func aCopyKeepsItsElementsWhenTheOriginalChanges() {
        let original = ChunkedArray(0..<1_000)
        var changed = original
        changed[500] = -1
        changed.remove(at: 0)
        changed.insert(7, at: 999)
        #expect(Array(original) == Array(0..<1_000))
        #expect(changed[499] == -1 && changed.count == 1_000 && changed[999] == 7)
    }

    @Test func appendsAndLiteralsAndEquality() {
        var a: ChunkedArray<String> = []
        for i in 0..<300 { a.append("\(i)") }
        #expect(a == ChunkedArray((0..<300).map { "\($0)" }))
        #expect(a != ChunkedArray((0..<299).map { "\($0)" }))
        let b: ChunkedArray = ["x", "y"]
        #expect(Array(b) == ["x", "y"] && b.first == "x" && b.last == "y")
        #expect(ChunkedArray<Int>().isEmpty && ChunkedArray<Int>().first == nil)
    }

    @Test func removingEverythingLeavesAnEmptyList() {
        var list = ChunkedArray(0..<500)
        while !list.isEmpty { list.remove(at: list.count / 2) }
        #expect(list.isEmpty && Array(list) == [])
        list.insert(1, at: 0)
        #expect(Array(list) == [1])
    }
}
