import ArgumentParser
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Explain why Bluetooth does or does not work on this host.",
        discussion: """
            Checks, in order: kernel Bluetooth support (an AF_BLUETOOTH socket), /sys/class/bluetooth, \
            the adapters and whether they are up, rfkill blocks, the installed bluetoothd and its version, \
            then D-Bus: whether the bus is reachable, whether org.bluez is running or activatable, and \
            whether this user may talk to it.

            Each finding is ok, warning, problem or skipped (not meaningful because of an earlier problem). \
            Problems are listed first, each with what to do about it.

            EXIT STATUS
              0  no problem found (warnings may exist)
              1  at least one problem: Bluetooth will not work until it is fixed
              64 invalid command line
            """
    )

    @Flag(help: "Print one JSON object: {\"ok\": bool, \"findings\": [{\"id\", \"status\", \"summary\", \"detail\", \"remedy\"}]}.")
    var json = false

    @Option(help: ArgumentHelp(
        "D-Bus bus to check: system, session, or a bus address such as unix:path=/run/dbus/system_bus_socket.",
        valueName: "system|session|ADDRESS"))
    var bus: String = "system"

    func validate() throws {
        if bus.isEmpty { throw ValidationError("--bus needs a value: system, session or a D-Bus address") }
    }

    func run() async throws {
        var findings = await localFindings(host: .live)
        findings.append(contentsOf: await busFindings(bus: bus))
        let report = DoctorReport(findings: findings)

        if json {
            print(try report.json())
        } else {
            let colour = TextStyle.shouldColour(isTTY: isatty(STDOUT_FILENO) == 1,
                                                environment: ProcessInfo.processInfo.environment)
            print(report.text(colour: colour))
        }
        if !report.ok { throw ExitCode(1) }
    }
}
