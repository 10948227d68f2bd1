import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Runs the real `blecompanion doctor` on this machine and checks it against what the
/// kernel says when asked directly.
@Suite struct DoctorTests {
    static let noBluetoothSummary = "The kernel has no Bluetooth support: socket(AF_BLUETOOTH) failed with EAFNOSUPPORT"

    private var moduleLoaded: Bool {
        var info = stat()
        return stat("/sys/module/bluetooth", &info) == 0
    }

    @Test func humanReportDiagnosesTheKernel() async throws {
        let run = try await DoctorCLI.run(["doctor"])
        let kernel = DoctorCLI.kernelBluetoothErrno()
        #expect(!run.stdout.contains("\u{1B}["), "no colour when stdout is a pipe")
        #expect(run.stdout.contains("[kernel]"))
        #expect(run.stdout.contains("[bluetoothd]"))
        #expect(run.stdout.contains("[dbus"))
        switch kernel {
        case nil:
            #expect(run.stdout.contains("✓ OK      [kernel] The kernel supports Bluetooth"))
            #expect(run.status == 0 || run.status == 1)
            #expect((run.status == 1) == run.stdout.contains("PROBLEM"))
        case EAFNOSUPPORT? where !moduleLoaded:
            #expect(run.status == 1)
            #expect(run.stdout.contains("✗ PROBLEM [kernel] " + Self.noBluetoothSummary))
            #expect(run.stdout.contains("Fix: Load the module: sudo modprobe bluetooth"))
            // Consequences are explained, not reported as separate failures.
            #expect(run.stdout.contains("- SKIPPED [adapters]"))
            #expect(run.stdout.contains("- SKIPPED [sysfs]") || run.stdout.contains("[sysfs] /sys/class/bluetooth exists"))
            #expect(!run.stdout.contains("PROBLEM [adapters]"))
            // The summary counts what was listed (the D-Bus checks may add
            // their own problems, e.g. no system bus in a container).
            let listed = run.stdout.components(separatedBy: "✗ PROBLEM").count - 1
            #expect(listed >= 1)
            #expect(run.stdout.contains("Result: \(listed) problem\(listed == 1 ? "" : "s"),"))
        default:
            #expect(run.status == 1)
            #expect(run.stdout.contains("PROBLEM [kernel]"))
        }
        if run.status == 1 {
            // Problems come first.
            let problem = try #require(run.stdout.range(of: "PROBLEM"))
            if let firstOK = run.stdout.range(of: "✓ OK") {
                #expect(problem.lowerBound < firstOK.lowerBound)
            }
        }
    }

    @Test func jsonReportParsesAndMatchesTheKernel() async throws {
        let run = try await DoctorCLI.run(["doctor", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8))
        let top = try #require(object as? [String: Any])
        let ok = try #require(top["ok"] as? Bool)
        let findings = try #require(top["findings"] as? [[String: Any]])
        #expect(!findings.isEmpty)
        for finding in findings {
            #expect(Set(finding.keys) == ["id", "status", "summary", "detail", "remedy"])
            let status = try #require(finding["status"] as? String)
            #expect(["ok", "warning", "problem", "skipped"].contains(status))
            if status == "problem" { #expect(finding["remedy"] is String, "problem \(finding["id"] ?? "") has no remedy") }
        }
        let hasProblem = findings.contains { $0["status"] as? String == "problem" }
        #expect(ok == !hasProblem)
        #expect(run.status == (ok ? 0 : 1))
        #expect(findings.map { $0["id"] as? String }.first == "kernel")
        #expect(findings.contains { $0["id"] as? String == "bluetoothd" })

        let kernel = try #require(findings.first { $0["id"] as? String == "kernel" })
        switch DoctorCLI.kernelBluetoothErrno() {
        case nil:
            #expect(kernel["status"] as? String == "ok")
        case EAFNOSUPPORT? where !moduleLoaded:
            #expect(run.status == 1)
            #expect(!ok)
            #expect(kernel["status"] as? String == "problem")
            #expect(kernel["summary"] as? String == Self.noBluetoothSummary)
            #expect((kernel["detail"] as? String)?.contains("socket(AF_BLUETOOTH, SOCK_RAW|SOCK_CLOEXEC, BTPROTO_HCI)") == true)
            let adapters = try #require(findings.first { $0["id"] as? String == "adapters" })
            #expect(adapters["status"] as? String == "skipped")
            let rfkill = findings.filter { ($0["id"] as? String)?.hasPrefix("rfkill") == true }
            #expect(!rfkill.contains { $0["status"] as? String == "problem" })
        default:
            #expect(kernel["status"] as? String == "problem")
        }
    }

    @Test func emptyBusIsAUsageError() async throws {
        let run = try await DoctorCLI.run(["doctor", "--bus", ""])
        #expect(run.status == 64)
        #expect(run.stderr.contains("--bus"))
    }

    @Test func helpDocumentsExitStatus() async throws {
        let run = try await DoctorCLI.run(["doctor", "--help"])
        #expect(run.status == 0)
        #expect(run.stdout.contains("EXIT STATUS"))
        #expect(run.stdout.contains("1  at least one problem"))
        #expect(run.stdout.contains("--json"))
        #expect(run.stdout.contains("--bus"))
    }
}
