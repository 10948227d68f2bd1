/// An ordered, random-access list stored as short arrays ("chunks") of at
/// most ``maximumChunk`` elements, for the lists the incremental pipeline
/// keeps per device (the repository's records, the device list's sorted
/// records and rows).
///
/// Two costs an `Array` has and this does not:
/// - **Change after sharing.** A snapshot shares its list with the repository
///   that keeps changing it. Changing one element of a shared `Array` copies
///   every element (with a retain of each reference inside); here it copies
///   the chunk table (one reference per chunk) and the one chunk.
/// - **Insert or remove in the middle.** An `Array` moves every element after
///   the place; here only those of one chunk move.
///
/// So at 10,000 devices one change costs about what it costs at 100. Reads
/// find the chunk by binary search over the chunks' first indices:
/// O(log(count / maximumChunk)), iteration walks the chunks.
///
/// Why not a package: swift-collections (1.6) has no stable ordered
/// persistent sequence (its sorted collections are behind an "Unstable"
/// trait and its rope is an underscored module), and `TreeDictionary` is
/// unordered.
public struct ChunkedArray<Element> {
    /// Never empty chunks, each at most `maximumChunk` long.
    @usableFromInline var chunks: [[Element]]
    /// `starts[c]`: the index of chunk c's first element.
    @usableFromInline var starts: [Int]
    @usableFromInline var storedCount: Int
    public var count: Int { storedCount }

    /// 32: a consumer holds the last published list while the producer
    /// changes the next, so the first change to each chunk after a
    /// publication copies it (with a retain of every reference in it). The
    /// dashboard publishes 30 times a second; at 1 000 devices and 128 per
    /// chunk, ten changes an interval touched nearly every chunk, and
    /// copying the device list's rows was 5 % of its CPU (perf, 2026-11-28).
    /// Smaller chunks cost a longer chunk table (`starts` is updated per
    /// insert: ~600 entries at 10 000 devices) and a few more allocations.
    public static var maximumChunk: Int { 32 }

    public init() {
        chunks = []
        starts = []
        storedCount = 0
    }

    public init<S: Sequence>(_ elements: S) where S.Element == Element {
        self.init()
        var chunk: [Element] = []
        chunk.reserveCapacity(Self.maximumChunk / 2)
        for e in elements {
            chunk.append(e)
            if chunk.count == Self.maximumChunk / 2 { appendChunk(chunk); chunk.removeAll(keepingCapacity: true) }
        }
        if !chunk.isEmpty { appendChunk(chunk) }
    }

    @usableFromInline mutating func appendChunk(_ chunk: [Element]) {
        starts.append(storedCount)
        chunks.append(chunk)
        storedCount += chunk.count
    }

    /// The chunk holding index `i` (0 ≤ i < count) and the offset in it.
    @inlinable func locate(_ i: Int) -> (chunk: Int, offset: Int) {
        var low = 0, high = starts.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if starts[mid] <= i { low = mid } else { high = mid - 1 }
        }
        return (low, i - starts[low])
    }

    /// Inserts `element` before index `i` (0 ≤ i ≤ count). Inlinable, as
    /// `remove(at:)`: unspecialized, the chunk's own insert and removal ran
    /// through generic witnesses (the list presenter's row moves).
    @inlinable public mutating func insert(_ element: Element, at i: Int) {
        precondition(i >= 0 && i <= count, "ChunkedArray.insert: index \(i) out of 0...\(count)")
        if chunks.isEmpty {
            appendChunk([element])
            return
        }
        // At the end of the chunk before when i is a chunk boundary (appends stay cheap).
        var (c, o) = i == count ? (chunks.count - 1, chunks[chunks.count - 1].count) : locate(i)
        if o == 0, c > 0, chunks[c - 1].count < Self.maximumChunk {
            c -= 1
            o = chunks[c].count
        }
        chunks[c].insert(element, at: o)
        storedCount += 1
        for k in (c + 1)..<starts.count { starts[k] += 1 }
        if chunks[c].count > Self.maximumChunk {
            let half = chunks[c].count / 2
            let tail = Array(chunks[c][half...])
            chunks[c].removeSubrange(half...)
            chunks.insert(tail, at: c + 1)
            starts.insert(starts[c] + half, at: c + 1)
        }
    }

    /// Removes and returns the element at `i` (0 ≤ i < count).
    @inlinable @discardableResult
    public mutating func remove(at i: Int) -> Element {
        precondition(i >= 0 && i < count, "ChunkedArray.remove: index \(i) out of 0..<\(count)")
        let (c, o) = locate(i)
        let element = chunks[c].remove(at: o)
        storedCount -= 1
        for k in (c + 1)..<starts.count { starts[k] -= 1 }
        if chunks[c].isEmpty {
            chunks.remove(at: c)
            starts.remove(at: c)
        } else if c + 1 < chunks.count, chunks[c].count + chunks[c + 1].count <= Self.maximumChunk / 2 {
            // Two small neighbours become one: the chunk count stays about count / chunk size.
            chunks[c].append(contentsOf: chunks[c + 1])
            chunks.remove(at: c + 1)
            starts.remove(at: c + 1)
        }
        return element
    }

    @inlinable public mutating func append(_ element: Element) { insert(element, at: count) }

    /// The index of the first element for which `belongsInSecondPartition`
    /// is true (`count` if none), in a list where every such element comes
    /// after every other: a binary search over the chunks' last elements,
    /// then one within the chunk found. A binary search through the
    /// subscript finds the chunk again for every probe (and reads the
    /// element once per field compared): the list presenter's sorted-place
    /// search was 4.6 % of the dashboard's CPU at 1 000 devices that way.
    @inlinable public func partitioningIndex(where belongsInSecondPartition: (Element) -> Bool) -> Int {
        var low = 0, high = chunks.count
        while low < high {
            let mid = (low + high) / 2
            let chunk = chunks[mid]   // never empty
            if belongsInSecondPartition(chunk[chunk.count - 1]) { high = mid } else { low = mid + 1 }
        }
        guard low < chunks.count else { return storedCount }
        let chunk = chunks[low]
        var first = 0, last = chunk.count
        while first < last {
            let mid = (first + last) / 2
            if belongsInSecondPartition(chunk[mid]) { last = mid } else { first = mid + 1 }
        }
        return starts[low] + first
    }
}

extension ChunkedArray: RandomAccessCollection, MutableCollection {
    public typealias Index = Int
    public typealias Indices = Range<Int>
    public var startIndex: Int { 0 }
    public var endIndex: Int { count }
    public var indices: Range<Int> { 0..<count }
    public var isEmpty: Bool { count == 0 }
    public func index(after i: Int) -> Int { i + 1 }
    public func index(before i: Int) -> Int { i - 1 }

    /// Read and modified in place (`_read`/`_modify`): a binary search over
    /// a list of records compares them where they are, with no copy (and so
    /// no retain and release of every member) per probe. Inlinable, so it
    /// is specialized where it is used: an unspecialized generic coroutine
    /// allocates its frame on every access.
    @inlinable public subscript(position: Int) -> Element {
        _read {
            precondition(position >= 0 && position < count, "ChunkedArray: index \(position) out of 0..<\(count)")
            let (c, o) = locate(position)
            yield chunks[c][o]
        }
        _modify {
            precondition(position >= 0 && position < count, "ChunkedArray: index \(position) out of 0..<\(count)")
            let (c, o) = locate(position)
            yield &chunks[c][o]
        }
    }

    public struct Iterator: IteratorProtocol {
        fileprivate let chunks: [[Element]]
        fileprivate var chunk = 0
        fileprivate var offset = 0
        public mutating func next() -> Element? {
            while chunk < chunks.count {
                if offset < chunks[chunk].count {
                    defer { offset += 1 }
                    return chunks[chunk][offset]
                }
                chunk += 1
                offset = 0
            }
            return nil
        }
    }

    public func makeIterator() -> Iterator { Iterator(chunks: chunks) }
}

extension ChunkedArray: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: Element...) { self.init(elements) }
}

extension ChunkedArray: Equatable where Element: Equatable {
    public static func == (a: ChunkedArray, b: ChunkedArray) -> Bool {
        a.count == b.count && a.elementsEqual(b)
    }
}

extension ChunkedArray: Sendable where Element: Sendable {}

extension ChunkedArray: CustomStringConvertible {
    public var description: String { Array(self).description }
}
