import BluetoothHCI
import Foundation
import Testing
@testable import blecompanion
#if canImport(Glibc)
import Glibc
#endif

/// The doctor's decisions on hosts this machine is not: faked kernel answers, temporary
/// sysfs trees, fake bluetoothd programs.
@Suite struct DoctorEngineTests {
    final class Scratch {
        let root: String
        init() throws {
            root = FileManager.default.temporaryDirectory.path + "/doctor-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        }
        func write(_ relative: String, _ text: String, executable: Bool = false) throws {
            let path = root + "/" + relative
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            guard executable else {
                try Data(text.utf8).write(to: URL(fileURLWithPath: path))
                return
            }
            // Close-on-exec: a process another test forks meanwhile must not
            // inherit a write handle, or exec of this script fails with ETXTBSY.
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
            guard fd >= 0 else { throw CocoaError(.fileWriteUnknown) }
            let bytes = Array(text.utf8)
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            close(fd)
            guard written == bytes.count else { throw CocoaError(.fileWriteUnknown) }
        }
        func mkdir(_ relative: String) throws {
            try FileManager.default.createDirectory(atPath: root + "/" + relative, withIntermediateDirectories: true)
        }
        func rfkill(_ id: String, name: String, soft: Int, hard: Int) throws {
            try write("sys/class/rfkill/\(id)/type", "bluetooth\n")
            try write("sys/class/rfkill/\(id)/name", "\(name)\n")
            try write("sys/class/rfkill/\(id)/soft", "\(soft)\n")
            try write("sys/class/rfkill/\(id)/hard", "\(hard)\n")
        }
        deinit { try? FileManager.default.removeItem(atPath: root) }
    }

    static func adapter(_ index: UInt16, up: Bool) -> HCIAdapter {
        HCIAdapter(index: index, name: "hci\(index)", address: "00:1A:7D:DA:71:1\(index)",
                   flags: up ? [.up, .running] : [], bus: HCIBusType(rawValue: 1), controllerType: .primary,
                   aclMTU: 1021, aclPackets: 8, scoMTU: 64, scoPackets: 1,
                   version: up ? HCIVersionInfo(hciVersion: 9, hciRevision: 1, lmpVersion: 9, lmpSubversion: 1,
                                               manufacturer: 2) : nil,
                   versionError: nil)
    }

    static func host(scratch: Scratch, kernel: HCIError?, adapters: [HCIAdapter],
                     bluetoothd: [String]? = nil) -> DoctorHost {
        DoctorHost(
            checkKernelSupport: { kernel },
            listAdapters: { kernel.map { .failure($0) } ?? .success(adapters) },
            sysfsRoot: scratch.root + "/sys",
            bluetoothdCandidates: bluetoothd ?? [scratch.root + "/bin/bluetoothd"],
            runProgram: { path, arguments in await DoctorProcess.run(path, arguments, timeout: .seconds(20)) })
    }

    static func finding(_ id: String, in findings: [DoctorFinding]) throws -> DoctorFinding {
        try #require(findings.first { $0.id == id }, "no finding \(id) in \(findings.map(\.id))")
    }

    @Test func healthyHostHasNoProblems() async throws {
        let scratch = try Scratch()
        try scratch.mkdir("sys/class/bluetooth/hci0")
        try scratch.rfkill("rfkill0", name: "hci0", soft: 0, hard: 0)
        try scratch.write("bin/bluetoothd", "#!/bin/sh\necho 5.77\n", executable: true)
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: [Self.adapter(0, up: true)]))
        #expect(findings.map(\.id) == ["kernel", "sysfs", "adapter.hci0", "rfkill.rfkill0", "bluetoothd"])
        #expect(findings.allSatisfy { $0.status == .ok }, "\(findings)")
        #expect(try Self.finding("bluetoothd", in: findings).summary == "bluetoothd 5.77 is installed")
        #expect(try Self.finding("adapter.hci0", in: findings).detail?.contains("Bluetooth 5.0") == true)
        #expect(DoctorReport(findings: findings).ok)
    }

    @Test func softBlockedDownAdapterAndMissingDaemon() async throws {
        let scratch = try Scratch()
        try scratch.mkdir("sys/class/bluetooth/hci0")
        try scratch.rfkill("rfkill1", name: "hci0", soft: 1, hard: 0)
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: [Self.adapter(0, up: false)]))
        let adapter = try Self.finding("adapter.hci0", in: findings)
        #expect(adapter.status == .problem)
        #expect(adapter.summary == "hci0 (00:1A:7D:DA:71:10) is down")
        #expect(adapter.remedy?.contains("rfkill") == true)
        let rfkill = try Self.finding("rfkill.rfkill1", in: findings)
        #expect(rfkill.status == .problem)
        #expect(rfkill.remedy?.contains("rfkill unblock bluetooth") == true)
        let daemon = try Self.finding("bluetoothd", in: findings)
        #expect(daemon.status == .problem)
        #expect(daemon.remedy?.contains("apt-get install bluez") == true)
        #expect(daemon.remedy?.contains("systemctl enable --now bluetooth") == true)
        #expect(!DoctorReport(findings: findings).ok)
    }

    @Test func hardBlockSaysSoftwareCannotClearIt() async throws {
        let scratch = try Scratch()
        try scratch.rfkill("rfkill0", name: "hci0", soft: 0, hard: 1)
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: [Self.adapter(0, up: false)]))
        let rfkill = try Self.finding("rfkill.rfkill0", in: findings)
        #expect(rfkill.status == .problem)
        #expect(rfkill.summary.contains("hard-blocked"))
        #expect(rfkill.remedy?.contains("BIOS") == true)
        #expect(rfkill.remedy?.contains("rfkill unblock") == false)
    }

    @Test func downAdapterWithoutBlockSuggestsPowerOn() async throws {
        let scratch = try Scratch()
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: [Self.adapter(1, up: false)]))
        let adapter = try Self.finding("adapter.hci1", in: findings)
        #expect(adapter.remedy?.contains("bluetoothctl power on") == true)
        #expect(adapter.remedy?.contains("hciconfig hci1 up") == true)
        // No sysfs at all while sockets work: a warning about mounting sysfs.
        #expect(try Self.finding("sysfs", in: findings).status == .warning)
    }

    @Test func noAdapterIsAProblem() async throws {
        let scratch = try Scratch()
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: []))
        let adapters = try Self.finding("adapters", in: findings)
        #expect(adapters.status == .problem)
        #expect(adapters.remedy?.contains("btusb") == true)
    }

    @Test func noKernelSupportSkipsDependentChecks() async throws {
        let scratch = try Scratch()
        let error = HCIError.kernelUnsupported(SystemCallError(call: BluetoothKernel.probeCallDescription, code: EAFNOSUPPORT))
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: error, adapters: []))
        let kernel = try Self.finding("kernel", in: findings)
        #expect(kernel.status == .problem)
        #expect(kernel.summary == "The kernel has no Bluetooth support: socket(AF_BLUETOOTH) failed with EAFNOSUPPORT")
        #expect(kernel.remedy?.contains("modprobe bluetooth") == true)
        #expect(try Self.finding("adapters", in: findings).status == .skipped)
        #expect(try Self.finding("rfkill", in: findings).status == .skipped)
        #expect(try Self.finding("sysfs", in: findings).status == .skipped)
        #expect(findings.filter { $0.status == .problem }.map(\.id) == ["kernel", "bluetoothd"])
    }

    @Test func loadedModuleButEAFNOSUPPORTMeansNetworkNamespace() async throws {
        let scratch = try Scratch()
        try scratch.mkdir("sys/module/bluetooth")
        let error = HCIError.kernelUnsupported(SystemCallError(call: BluetoothKernel.probeCallDescription, code: EAFNOSUPPORT))
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: error, adapters: []))
        let kernel = try Self.finding("kernel", in: findings)
        #expect(kernel.status == .problem)
        #expect(kernel.detail?.contains("network namespace") == true)
        #expect(kernel.remedy?.contains("--network=host") == true)
    }

    @Test func permissionDeniedPointsAtTheSandbox() async throws {
        let scratch = try Scratch()
        let error = HCIError.permissionDenied(SystemCallError(call: BluetoothKernel.probeCallDescription, code: EPERM))
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: error, adapters: []))
        let kernel = try Self.finding("kernel", in: findings)
        #expect(kernel.summary.hasSuffix("failed with EPERM"))
        #expect(kernel.detail?.contains("sandbox") == true)
    }

    @Test func malformedRFKillIsAWarningNamingTheFile() async throws {
        let scratch = try Scratch()
        try scratch.write("sys/class/rfkill/rfkill0/type", "bluetooth\n")
        try scratch.write("sys/class/rfkill/rfkill0/name", "hci0\n")
        try scratch.write("sys/class/rfkill/rfkill0/soft", "2\n")
        try scratch.write("sys/class/rfkill/rfkill0/hard", "0\n")
        let findings = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: [Self.adapter(0, up: true)]))
        let rfkill = try Self.finding("rfkill", in: findings)
        #expect(rfkill.status == .warning)
        #expect(rfkill.detail?.contains("rfkill0/soft") == true)
    }

    @Test func failingOrHangingBluetoothdIsAWarning() async throws {
        let scratch = try Scratch()
        try scratch.write("bin/bluetoothd", "#!/bin/sh\necho broken >&2\nexit 3\n", executable: true)
        let failing = await localFindings(host: Self.host(scratch: scratch, kernel: nil, adapters: []))
        let daemon = try Self.finding("bluetoothd", in: failing)
        #expect(daemon.status == .warning)
        #expect(daemon.detail?.contains("status 3") == true)
        #expect(daemon.detail?.contains("broken") == true)

        let start = ContinuousClock.now
        let outcome = await DoctorProcess.run("/bin/sh", ["-c", "exec sleep 30"], timeout: .milliseconds(300))
        #expect(outcome.termination == .timedOut)
        // Well before the child's 30 s: the timeout ended it. (Not tighter:
        // on a loaded 2-core machine the start and the 20 ms checks took
        // 13.5 s in a CI full-suite run.)
        #expect(ContinuousClock.now - start < .seconds(25))
    }

    @Test func aProgramStillOpenForWritingIsRunOnceItIsFree() async throws {
        let scratch = try Scratch()
        let path = scratch.root + "/busy.sh"
        // Held open for writing (as during a package upgrade): exec fails
        // with ETXTBSY until it is closed.
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
        try #require(fd >= 0)
        let script = Array("#!/bin/sh\necho 5.66\n".utf8)
        #expect(script.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == script.count)
        let closer = Task {
            try? await Task.sleep(for: .milliseconds(300))
            close(fd)
        }
        let outcome = await DoctorProcess.run(path, [], timeout: .seconds(20))
        await closer.value
        #expect(outcome == ProcessOutcome(termination: .exited(0), output: "5.66"))
    }

    @Test func reportOrderingAndJSONShape() throws {
        let report = DoctorReport(findings: [
            DoctorFinding(id: "a", status: .ok, summary: "fine"),
            DoctorFinding(id: "b", status: .warning, summary: "hmm", remedy: "look"),
            DoctorFinding(id: "c", status: .problem, summary: "broken", detail: "why\nmore", remedy: "fix it"),
            DoctorFinding(id: "d", status: .skipped, summary: "n/a"),
        ])
        #expect(!report.ok)
        let text = report.text(colour: false)
        let order = ["[c]", "[b]", "[d]", "[a]"].compactMap { text.range(of: $0)?.lowerBound }
        #expect(order.count == 4 && order == order.sorted())
        #expect(text.contains("✗ PROBLEM [c] broken\n      why\n      more\n      Fix: fix it"))
        #expect(text.contains("Result: 1 problem, 1 warning, 1 skipped, 1 ok."))
        #expect(!text.contains("\u{1B}["))
        #expect(report.text(colour: true).contains("\u{1B}[1;31m✗ PROBLEM\u{1B}[0m"))

        let object = try JSONSerialization.jsonObject(with: Data(try report.json().utf8)) as? [String: Any]
        #expect(object?["ok"] as? Bool == false)
        let findings = object?["findings"] as? [[String: Any]]
        #expect(findings?.map { $0["id"] as? String } == ["a", "b", "c", "d"])  // JSON keeps check order
        #expect(findings?.first?["detail"] is NSNull)
    }

    @Test func colourPolicy() {
        #expect(TextStyle.shouldColour(isTTY: true, environment: [:]))
        #expect(!TextStyle.shouldColour(isTTY: false, environment: [:]))
        #expect(!TextStyle.shouldColour(isTTY: true, environment: ["NO_COLOR": "1"]))
        #expect(!TextStyle.shouldColour(isTTY: true, environment: ["TERM": "dumb"]))
    }
}
