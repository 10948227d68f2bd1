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

    /// The search over chunks then within one finds what a linear scan
    /// finds, for every threshold (before the first, between any two, past
    /// the last), on lists whose chunks are of uneven sizes after random
    /// inserts and removals, and on lists of 0, 1 and one full chunk.
    @Test(arguments: [5 as UInt64, 6, 7])
    func partitioningIndexFindsTheFirstElementInTheSecondPartition(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        var lists: [ChunkedArray<Int>] = [[], [10], ChunkedArray((0..<ChunkedArray<Int>.maximumChunk).map { $0 * 2 })]
        // Sorted with duplicates: inserted each at its place, some removed.
        var list = ChunkedArray<Int>()
        for step in 0..<1_500 {
            if step % 4 == 3, !list.isEmpty {
                list.remove(at: Int.random(in: 0..<list.count, using: &rng))
            } else {
                let value = Int.random(in: 0..<400, using: &rng)
                list.insert(value, at: Array(list).firstIndex { $0 >= value } ?? list.count)
            }
            if step % 300 == 299 { lists.append(list) }
        }
        for l in lists {
            let model = Array(l)
            #expect(model == model.sorted())
            for threshold in -1...401 {
                let expected = model.firstIndex { $0 >= threshold } ?? model.count
                #expect(l.partitioningIndex { $0 >= threshold } == expected, "threshold \(threshold), \(l.count) elements")
            }
        }
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
