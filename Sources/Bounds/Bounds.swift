// Numbers from outside the process (command-line options, the gateway's
// configuration file, HTTP query parameters) become intervals, durations and
// dates here and nowhere else. Swift traps when a Double that is too large,
// infinite or NaN is converted to an integer (Int64(1e20), Duration.seconds
// of one, a Date formatted through Int64), so every such number is checked
// against documented bounds before anything converts it, and the caller gets
// a sentence naming the problem instead of SIGILL. Foundation-free on
// purpose: the configuration reader and the presenters use it too.

/// The documented limits (docs/GATEWAY-CONFIG.md, docs/GATEWAY.md, the CLI help).
public enum Bounds {
    /// The longest interval accepted anywhere: 10 years (of 365.25 days), in seconds.
    public static let maximumInterval: Double = 315_576_000

    /// The earliest and latest time accepted: the Unix epoch and 9999-12-31T23:59:59Z
    /// (the last second a four-digit ISO 8601 year can write).
    public static let unixTimes: ClosedRange<Double> = 0...253_402_300_799

    /// A number of seconds for an interval (a timeout, a duration, an expiry):
    /// finite, not above ``maximumInterval``, and at least `minimum` (more than
    /// it when `exclusive`).
    public static func interval(_ seconds: Double, minimum: Double = 0, exclusive: Bool = false) -> Result<Double, BoundsError> {
        let expected = "expected a number of seconds \(exclusive ? ">" : "≥") \(text(minimum))"
        guard seconds.isFinite, exclusive ? seconds > minimum : seconds >= minimum else {
            return .failure(BoundsError(expected: expected, value: seconds))
        }
        guard seconds <= maximumInterval else {
            return .failure(BoundsError(expected: "\(expected) and at most \(text(maximumInterval)) (10 years)", value: seconds))
        }
        return .success(seconds)
    }

    /// A point in time as Unix seconds, within ``unixTimes``.
    public static func unixTime(_ seconds: Double) -> Result<Double, BoundsError> {
        guard seconds.isFinite, unixTimes.contains(seconds) else {
            return .failure(BoundsError(expected: "expected a time between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z "
                                            + "(Unix seconds 0 to \(text(unixTimes.upperBound)))", value: seconds))
        }
        return .success(seconds)
    }

    /// A duration for a timer computed inside the process (a deadline minus
    /// now): never traps. NaN and negative values give zero; values past
    /// ``maximumInterval`` give that.
    public static func duration(seconds: Double) -> Duration {
        guard seconds > 0 else { return .zero }  // also NaN
        let clamped = min(seconds, maximumInterval)
        return .nanoseconds(Int64((clamped * 1e9).rounded(.up)))
    }

    /// Whole Unix seconds for a time computed inside the process: clamped to ``unixTimes``, never traps.
    public static func wholeUnixSeconds(_ seconds: Double) -> Int64 {
        guard seconds > unixTimes.lowerBound else { return 0 }  // also NaN
        return Int64(min(seconds, unixTimes.upperBound).rounded(.down))
    }

    /// A number as a person wrote it: integers without ".0", others as Swift prints them.
    public static func text(_ value: Double) -> String {
        if value.isFinite, value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}

/// Why a number from outside was refused: what was expected, and the value.
/// Callers that know how the user wrote the number (a YAML scalar, a query
/// parameter) say `expected` with their own spelling of it; the caller adds
/// where it came from (option, key and line, parameter name).
public struct BoundsError: Error, Equatable, Sendable, CustomStringConvertible {
    /// "expected a number of seconds > 0 and at most 315576000 (10 years)".
    public let expected: String
    public let value: Double

    public init(expected: String, value: Double) {
        self.expected = expected
        self.value = value
    }

    public var description: String { "\(expected), got \(Bounds.text(value))" }
}
