import DBus
import Foundation
import Testing

/// The doctor's D-Bus checks against real buses: an unreachable address and
/// a private dbus-daemon without bluetoothd.
@Suite(.timeLimit(.minutes(1))) struct DoctorBusTests {
    struct Report: Decodable {
        struct Finding: Decodable {
            var id: String
            var status: String
            var summary: String
            var remedy: String?
        }
        var ok: Bool
        var findings: [Finding]
    }

    @Test func privateBusWithoutBluezIsDiagnosed() async throws {
        let bus = try PrivateBus.start()
        defer { bus.stop() }
        let run = try await DoctorCLI.run(["doctor", "--json", "--bus", bus.address])
        #expect(run.status == 1)
        let report = try JSONDecoder().decode(Report.self, from: Data(run.stdout.utf8))
        #expect(!report.ok)
        let busFinding = report.findings.first { $0.id == "dbus.bus" }
        #expect(busFinding?.status == "ok")
        let bluez = report.findings.first { $0.id == "dbus.bluez" }
        #expect(bluez?.status == "problem")
        #expect(bluez?.summary == "bluetoothd is not running: nobody owns org.bluez on the bus")
        #expect(bluez?.remedy?.contains("systemctl enable --now bluetooth") == true)
    }

    @Test func unreachableBusIsAProblemNotAHang() async throws {
        let run = try await DoctorCLI.run(["doctor", "--json", "--bus", "unix:path=/nonexistent/blecompanion-test-socket"], timeout: 30)
        #expect(run.status == 1)
        let report = try JSONDecoder().decode(Report.self, from: Data(run.stdout.utf8))
        let busFinding = report.findings.first { $0.id == "dbus.bus" }
        #expect(busFinding?.status == "problem")
        #expect(busFinding?.summary == "The bus is not reachable at unix:path=/nonexistent/blecompanion-test-socket")
        #expect(report.findings.first { $0.id == "dbus.bluez" }?.status == "skipped")
    }
}
