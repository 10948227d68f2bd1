import BLEParsing
import Domain
import Locking
import Testing

/// A link that takes a while per write, as ATT write commands do, and keeps
/// what went out; the device never answers.
private final class SlowLink: SMPTransport {
    let fragmentSize = 20
    let fragments: AsyncStream<[UInt8]>
    private let input: AsyncStream<[UInt8]>.Continuation
    private let sent = Lock<[[UInt8]]>([])
    private let firstWrite: AsyncStream<Void>.Continuation
    let wroteOnce: AsyncStream<Void>

    init() {
        (fragments, input) = AsyncStream.makeStream(of: [UInt8].self)
        (wroteOnce, firstWrite) = AsyncStream.makeStream(of: Void.self)
    }

    func send(_ fragment: [UInt8]) async throws(DomainError) {
        sent.withLock { $0.append(fragment) }
        firstWrite.yield()
        try? await Task.sleep(for: .milliseconds(20))
    }

    func close() async { input.finish() }

    var written: [[UInt8]] { sent.withLock { $0 } }
}

@Suite struct SMPSessionCloseTests {
    /// The device reassembles fragments per connection: half a request left
    /// there takes the next session's fragments as its rest. Closing mid-request
    /// therefore finishes the request it began and sends none it had not.
    @Test func closingFinishesTheRequestItBeganAndSendsNoOther() async throws {
        let link = SlowLink()
        let session = SMPSession(transport: link, timeout: .seconds(10), retries: 0)
        await session.start()
        let begun = CBOR.object([("off", .int(0)), ("data", .bytes([UInt8](repeating: 0xA5, count: 200)))])
        let queued = CBOR.object([("off", .int(200)), ("data", .bytes([UInt8](repeating: 0x5A, count: 100)))])
        let first = Task { try await session.exchange(.write, .imageUpload, begun, timeout: .seconds(10)) }
        var writes = link.wroteOnce.makeAsyncIterator()
        _ = await writes.next()
        let second = Task { try await session.exchange(.write, .imageUpload, queued, timeout: .seconds(10)) }
        await Task.yield()
        await session.close()

        let written = link.written
        var device = SMP.Reassembler()
        var messages: [SMP.Message] = []
        for fragment in written { messages += try device.append(fragment) }
        #expect(written.count > 1, "the request takes several writes: \(written.count)")
        #expect(device.waiting == 0, "half a request was left on the link: \(device.waiting) bytes")
        #expect(messages.count == 1)
        #expect(messages.first?.body == begun)
        await #expect(throws: (any Error).self) { try await first.value }
        await #expect(throws: (any Error).self) { try await second.value }
        // Nothing more goes out after close returned.
        try await Task.sleep(for: .milliseconds(100))
        #expect(link.written.count == written.count)
    }
}
