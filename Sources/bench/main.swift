// The benchmark driver. Each subcommand measures one thing and prints
// machine-readable results; scripts/bench-* run them next to their
// baselines in the same run and print the ratios.
#if canImport(Glibc)
import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
let usage = """
usage: bench dbus-receive --address ADDRESS --count N
       bench dbus-decode [ITERATIONS]
       bench dbus-idle [SECONDS]
       bench parsing [--json] [--iterations N]
       bench bluez-sim --address ADDRESS --devices D [--first F --of M]
       bench bluez-ingest --address ADDRESS --devices D [--count N]
       bench terminal-diff [--json] [--color-mode MODE] [--min-time S]
       bench dashboard [--devices N] [--width W] [--height H] [--rounds R] [--idle SECONDS]
       bench gateway --address ADDRESS --devices D --broker-port P --state-dir DIR
       bench mqtt-publish --broker-port P --count N
"""

switch arguments.first {
case "dbus-receive":
    exit(await DBusReceiveBench.run(Array(arguments.dropFirst())))
case "dbus-idle":
    exit(await DBusIdleBench.run(Array(arguments.dropFirst())))
case "dbus-decode":
    exit(DBusDecodeBench.run(Array(arguments.dropFirst())))
case "bluez-sim":
    exit(await BlueZIngestBench.runSimulator(Array(arguments.dropFirst())))
case "bluez-ingest":
    exit(await BlueZIngestBench.runIngest(Array(arguments.dropFirst())))
case "dashboard":
    exit(await DashboardBench.run(Array(arguments.dropFirst())))
case "gateway":
    exit(await GatewayBench.runGateway(Array(arguments.dropFirst())))
case "mqtt-publish":
    exit(await GatewayBench.runPublishBaseline(Array(arguments.dropFirst())))
case "parsing":
    exit(ParsingBench.run(Array(arguments.dropFirst())))
case "terminal-diff":
    exit(TerminalDiffBench.run(Array(arguments.dropFirst())))
default:
    writeError(usage)
    exit(64)
}

/// Writes to standard error without touching the C `stderr` global.
func writeError(_ text: String) {
    var bytes = Array(text.utf8)
    if bytes.last != UInt8(ascii: "\n") { bytes.append(UInt8(ascii: "\n")) }
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

/// Prints a line to standard output and flushes it at once.
func printFlushed(_ text: String) {
    let bytes = Array((text + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}
