import Logging
import ServiceLifecycle

/// One of the gateway's loops (the publisher, the scan keeper, the MQTT
/// link…) as a swift-service-lifecycle service. ``GatewayRuntime/run()``
/// runs them in one `ServiceGroup`, which starts them, stops them on a
/// graceful shutdown and notices when one ends that should not have: a
/// gateway whose publish loop has died would otherwise answer `/healthz`
/// and publish nothing.
struct GatewayLoop: Service, CustomStringConvertible {
    enum Kind: Sendable {
        /// Runs for the gateway's whole life; ending on its own is a fault.
        case lifelong
        /// Does a job and ends (registering the pairing agent; a check that
        /// is configured off).
        case task
    }

    let name: String
    let kind: Kind
    let body: @Sendable () async -> Void

    init(_ name: String, _ kind: Kind = .lifelong, _ body: @escaping @Sendable () async -> Void) {
        self.name = name
        self.kind = kind
        self.body = body
    }

    var description: String { name }

    func run() async throws {
        await cancelWhenGracefulShutdown(body)
        if kind == .task || Task.isCancelled || Task.isShuttingDownGracefully { return }
        throw GatewayLoopEnded(loop: name)
    }

    /// How the group treats this loop's end: a task's is nobody's business;
    /// a lifelong loop that throws stops the others gracefully, and the
    /// group's `run()` then throws its error.
    var configuration: ServiceGroupConfiguration.ServiceConfiguration {
        .init(service: self, successTerminationBehavior: kind == .task ? .ignore : .gracefullyShutdownGroup,
              failureTerminationBehavior: .gracefullyShutdownGroup, serviceName: name)
    }
}

/// A lifelong loop of the gateway ended on its own (its source finished):
/// a bug. The gateway stops and exits with EX_SOFTWARE (70), so that the
/// service manager starts it again.
public struct GatewayLoopEnded: Error, CustomStringConvertible {
    public let loop: String
    public var description: String { "the gateway's \(loop) loop ended on its own" }
}
