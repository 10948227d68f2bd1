import Foundation
import Testing

/// Every option that becomes a duration refuses huge, negative, infinite and
/// NaN values with a usage error (exit 64) naming the option, instead of
/// trapping (SIGILL, wait status 132) when the number is converted.
@Suite(.timeLimit(.minutes(3))) struct OutsideNumberTests {
    static let hostile = ["1e19", "1e16", "inf", "-inf", "nan", "-5", "0", "315576001"]

    /// The command lines that take a number of seconds (hours for history),
    /// with the value's place marked; none needs a bus: validation runs first.
    static let entryPoints: [(option: String, arguments: @Sendable (String) -> [String])] = [
        ("--duration", { ["scan", "--duration", $0] }),
        ("--duration", { ["notify", "AA:BB:CC:DD:EE:FF", "2a37", "--duration", $0] }),
        ("--duration", { ["record", "--out", "/tmp/never-written.json", "--duration", $0] }),
        ("--duration", { ["capture", "--out", "/tmp/never-written.btsnoop", "--duration", $0] }),
        ("--timeout", { ["connect", "AA:BB:CC:DD:EE:FF", "--timeout", $0] }),
        ("--hours", { ["history", "AA:BB:CC:DD:EE:FF", "--hours", $0] }),
        ("--duration", { ["demo", "--text", "--duration", $0] }),
    ]

    @Test func hostileNumbersAreUsageErrorsNamingTheOption() async throws {
        for entry in Self.entryPoints {
            for value in Self.hostile {
                let arguments = entry.arguments(value)
                let run = try await cli(arguments, timeout: 30)
                #expect(run.status == 64, "\(arguments.joined(separator: " ")): exit \(run.status), \(run.stderr)")
                #expect(run.stderr.contains(entry.option), "\(arguments.joined(separator: " ")): \(run.stderr)")
                #expect(!run.stderr.contains("Missing value"), "a negative number is a value: \(run.stderr)")
            }
        }
    }
}
