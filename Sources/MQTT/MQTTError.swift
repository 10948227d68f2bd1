/// Everything that can go wrong in the MQTT layer. Each case names the
/// broker (`host:port`) it happened with.
public enum MQTTError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The configuration cannot be used (checked before any I/O).
    case invalidConfiguration(endpoint: String, reason: String)
    /// No connection to the broker (TCP or TLS level), or it closed before CONNACK.
    case connectionFailed(endpoint: String, reason: String)
    /// The broker answered CONNACK with a refusal (e.g. bad credentials).
    case refused(endpoint: String, reason: String)
    /// The broker did not answer in time.
    case timedOut(endpoint: String, operation: String)
    /// libmosquitto rejected a publish, subscribe or option.
    case operationFailed(endpoint: String, operation: String, reason: String)
    /// The broker's SUBACK refused the filter.
    case subscriptionRejected(endpoint: String, filter: String)
    /// The connection dropped while waiting for the broker's answer.
    case connectionLost(endpoint: String, operation: String)
    /// ``MQTTClient/disconnect()`` was called.
    case closed(endpoint: String)
    /// The waiting task was cancelled.
    case cancelled(endpoint: String, operation: String)

    public var description: String {
        switch self {
        case let .invalidConfiguration(e, r): return "MQTT \(e): invalid configuration: \(r)"
        case let .connectionFailed(e, r): return "MQTT \(e): cannot connect: \(r)"
        case let .refused(e, r): return "MQTT \(e): broker refused the connection: \(r)"
        case let .timedOut(e, o): return "MQTT \(e): no answer from the broker to \(o) in time"
        case let .operationFailed(e, o, r): return "MQTT \(e): \(o) failed: \(r)"
        case let .subscriptionRejected(e, f): return "MQTT \(e): broker rejected the subscription to \(f)"
        case let .connectionLost(e, o): return "MQTT \(e): connection lost while waiting for \(o)"
        case let .closed(e): return "MQTT \(e): client is disconnected"
        case let .cancelled(e, o): return "MQTT \(e): \(o) cancelled"
        }
    }
}
