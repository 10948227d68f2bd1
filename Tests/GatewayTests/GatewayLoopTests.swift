import Foundation
import Locking
import Logging
import ServiceLifecycle
import Testing
@testable import Gateway

/// The gateway's loops in a service group, as `GatewayRuntime.run()` runs
/// them: a lifelong loop that ends on its own stops the group with its name;
/// a task's end and a graceful shutdown do not count as failures.
@Suite struct GatewayLoopTests {
    private let logger = Logger(label: "test")

    /// A loop that runs until cancelled (what a `for await` over a live source does).
    private static func forever() async {
        while !Task.isCancelled { try? await Task.sleep(for: .seconds(60)) }
    }

    @Test func aLifelongLoopThatEndsStopsTheGroupNamingIt() async throws {
        let stoppedAlongside = Lock(false)
        let loops = [
            GatewayLoop("publish") { await Self.forever(); stoppedAlongside.withLock { $0 = true } },
            GatewayLoop("scan keeper") { /* its source finished */ },
        ]
        let group = ServiceGroup(configuration: .init(services: loops.map(\.configuration), logger: logger))
        let error = await #expect(throws: GatewayLoopEnded.self) { try await group.run() }
        #expect(error?.loop == "scan keeper")
        #expect(error?.description == "the gateway's scan keeper loop ended on its own")
        #expect(stoppedAlongside.withLock { $0 }, "the other loops are stopped before run() returns")
    }

    @Test func aTaskMayEndAndAGracefulShutdownIsNoFailure() async throws {
        let (registered, register) = AsyncStream<Void>.makeStream()
        let endedBy = Lock<String?>(nil)
        let loops = [
            GatewayLoop("publish") {
                await Self.forever()
                endedBy.withLock { $0 = Task.isShuttingDownGracefully ? "graceful shutdown" : "cancellation" }
            },
            GatewayLoop("pairing agent", .task) { register.yield() },
        ]
        let group = ServiceGroup(configuration: .init(services: loops.map(\.configuration), logger: logger))
        let running = Task { try await group.run() }
        for await _ in registered { break }
        // Had the task's end stopped the group, the lifelong loop would have
        // been cancelled before this shutdown.
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(endedBy.withLock { $0 } == "graceful shutdown")
    }
}
