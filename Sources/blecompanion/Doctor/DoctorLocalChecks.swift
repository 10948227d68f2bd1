import BluetoothHCI
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where the local checks get their facts from. `live` is the real host; tests substitute
/// a temporary sysfs tree and canned kernel answers.
struct DoctorHost: Sendable {
    var checkKernelSupport: @Sendable () -> HCIError?
    var listAdapters: @Sendable () -> Result<[HCIAdapter], HCIError>
    var sysfsRoot: String
    var bluetoothdCandidates: [String]
    var runProgram: @Sendable (String, [String]) async -> ProcessOutcome

    static let defaultBluetoothdPaths = [
        "/usr/libexec/bluetooth/bluetoothd", "/usr/lib/bluetooth/bluetoothd", "/usr/sbin/bluetoothd",
    ]

    static let live = DoctorHost(
        checkKernelSupport: {
            do throws(HCIError) { try BluetoothKernel.checkSupport(); return nil } catch { return error }
        },
        listAdapters: {
            do throws(HCIError) { return .success(try BluetoothKernel.adapters()) } catch { return .failure(error) }
        },
        sysfsRoot: "/sys",
        bluetoothdCandidates: defaultBluetoothdPaths,
        runProgram: { path, arguments in await DoctorProcess.run(path, arguments) }
    )
}

/// The host-side checks: kernel, sysfs, adapters, rfkill, bluetoothd. In that order.
func localFindings(host: DoctorHost) async -> [DoctorFinding] {
    var findings: [DoctorFinding] = []
    let kernelError = host.checkKernelSupport()
    findings.append(kernelFinding(kernelError, host: host))
    let kernelUsable = kernelError == nil
    findings.append(sysfsFinding(kernelUsable: kernelUsable, sysfsRoot: host.sysfsRoot))

    let rfkill: Result<RFKillState, RFKillError>
    do { rfkill = .success(try RFKill.read(sysfsRoot: host.sysfsRoot)) } catch { rfkill = .failure(error) }

    findings.append(contentsOf: adapterFindings(kernelError: kernelError, host: host, rfkill: rfkill))
    findings.append(contentsOf: rfkillFindings(kernelUsable: kernelUsable, rfkill: rfkill))
    findings.append(await bluetoothdFinding(host: host))
    return findings
}

// MARK: - kernel

private func kernelFinding(_ error: HCIError?, host: DoctorHost) -> DoctorFinding {
    guard let error else {
        return DoctorFinding(
            id: "kernel", status: .ok,
            summary: "The kernel supports Bluetooth: \(BluetoothKernel.probeCallDescription) succeeded")
    }
    switch error {
    case .kernelUnsupported(let call):
        if BluetoothKernel.coreModulePresent(sysfsRoot: host.sysfsRoot) {
            return DoctorFinding(
                id: "kernel", status: .problem,
                summary: "Bluetooth sockets are unavailable here: socket(AF_BLUETOOTH) failed with EAFNOSUPPORT",
                detail: """
                    \(call).
                    The bluetooth module is loaded (\(host.sysfsRoot)/module/bluetooth exists), so this process is \
                    most likely in a network namespace other than the host's, e.g. a container without host \
                    networking: the kernel offers Bluetooth sockets only in the initial network namespace.
                    """,
                remedy: """
                    Run blecompanion on the host, or give the container the host network namespace \
                    (docker/podman run --network=host).
                    """)
        }
        return DoctorFinding(
            id: "kernel", status: .problem,
            summary: "The kernel has no Bluetooth support: socket(AF_BLUETOOTH) failed with EAFNOSUPPORT",
            detail: """
                \(call).
                The AF_BLUETOOTH protocol family is not registered: the bluetooth module is not loaded \
                (and could not be loaded automatically) or the kernel was built without CONFIG_BT. \
                \(host.sysfsRoot)/module/bluetooth does not exist.
                """,
            remedy: """
                Load the module: sudo modprobe bluetooth (plus the controller driver, e.g. btusb). If modprobe \
                cannot find it, install or boot a kernel built with CONFIG_BT (Ubuntu: \
                linux-modules-extra-$(uname -r)). In a VM or container, Bluetooth has to be provided by the host.
                """)
    case .permissionDenied(let call):
        return DoctorFinding(
            id: "kernel", status: .problem,
            summary: "Not allowed to open a Bluetooth socket: socket(AF_BLUETOOTH) failed with \(call.errnoName)",
            detail: """
                \(call).
                Opening an HCI socket needs no privilege on a normal system, so a sandbox is refusing it \
                (seccomp, AppArmor/SELinux, snap or flatpak confinement).
                """,
            remedy: """
                Run blecompanion outside the sandbox or grant it Bluetooth (snap: connect the bluez interface; \
                flatpak: --allow=bluetooth; containers: host network and a seccomp profile that allows AF_BLUETOOTH).
                """)
    case .systemCall(let call):
        return DoctorFinding(
            id: "kernel", status: .problem,
            summary: "Cannot open a Bluetooth socket: socket(AF_BLUETOOTH) failed with \(call.errnoName)",
            detail: call.description,
            remedy: "Check the kernel log (dmesg | grep -i bluetooth) for errors from the Bluetooth subsystem.")
    case .malformedDeviceList:
        return DoctorFinding(id: "kernel", status: .problem, summary: error.description)
    }
}

// MARK: - sysfs

private func sysfsFinding(kernelUsable: Bool, sysfsRoot: String) -> DoctorFinding {
    let path = sysfsRoot + "/class/bluetooth"
    switch BluetoothSysfs.classEntries(sysfsRoot: sysfsRoot) {
    case nil:
        if !kernelUsable {
            return DoctorFinding(
                id: "sysfs", status: .skipped,
                summary: "\(path) does not exist",
                detail: "Expected without kernel Bluetooth support (see the kernel finding); nothing else to fix here.")
        }
        return DoctorFinding(
            id: "sysfs", status: .warning,
            summary: "\(path) does not exist although Bluetooth sockets work",
            detail: "sysfs is probably not mounted (common in minimal containers); tools that read it will see no adapters.",
            remedy: "Mount sysfs: sudo mount -t sysfs sysfs /sys")
    case .failure(let error)?:
        return DoctorFinding(
            id: "sysfs", status: .warning, summary: "\(path) exists but cannot be listed", detail: error.description)
    case .success(let entries)?:
        let list = entries.isEmpty ? "no devices" : entries.joined(separator: ", ")
        return DoctorFinding(id: "sysfs", status: .ok, summary: "\(path) exists (\(list))")
    }
}

// MARK: - adapters

private func adapterFindings(kernelError: HCIError?, host: DoctorHost,
                             rfkill: Result<RFKillState, RFKillError>) -> [DoctorFinding] {
    if kernelError != nil {
        return [DoctorFinding(
            id: "adapters", status: .skipped,
            summary: "Adapter check skipped: it needs kernel Bluetooth support",
            detail: "Adapters are listed through a Bluetooth socket, which the kernel finding shows cannot be opened.")]
    }
    let adapters: [HCIAdapter]
    switch host.listAdapters() {
    case .failure(let error):
        return [DoctorFinding(
            id: "adapters", status: .problem, summary: "Cannot list Bluetooth adapters",
            detail: error.description,
            remedy: "Check the kernel log (dmesg | grep -i bluetooth).")]
    case .success(let list):
        adapters = list
    }
    if adapters.isEmpty {
        return [DoctorFinding(
            id: "adapters", status: .problem, summary: "No Bluetooth adapter found",
            detail: "The kernel supports Bluetooth but no controller is registered (HCIGETDEVLIST returned no devices).",
            remedy: """
                Connect a Bluetooth adapter or load its driver (USB: sudo modprobe btusb); look for driver or \
                firmware errors with dmesg | grep -i bluetooth. In a VM, pass the adapter through to the guest.
                """)]
    }
    let blockedNames: Set<String>
    if case .success(let state) = rfkill {
        blockedNames = Set(state.bluetoothSwitches.filter(\.isBlocked).map(\.name))
    } else {
        blockedNames = []
    }
    return adapters.map { adapter in adapterFinding(adapter, rfkillBlocked: blockedNames.contains(adapter.name)) }
}

private func adapterFinding(_ adapter: HCIAdapter, rfkillBlocked: Bool) -> DoctorFinding {
    var facts = ["\(adapter.bus) bus", "\(adapter.controllerType) controller"]
    if let version = adapter.version { facts.append(version.summary) }
    let flagText = adapter.flags.names.isEmpty ? "none" : adapter.flags.names.joined(separator: " ")
    var detailLines = [
        facts.joined(separator: ", "),
        "Flags: \(flagText) (0x\(String(adapter.flags.rawValue, radix: 16))); ACL MTU \(adapter.aclMTU):\(adapter.aclPackets), SCO MTU \(adapter.scoMTU):\(adapter.scoPackets)",
    ]
    if let versionError = adapter.versionError { detailLines.append("Version not read: \(versionError)") }
    let label = "\(adapter.name) (\(adapter.address))"
    if adapter.isUp {
        return DoctorFinding(
            id: "adapter.\(adapter.name)", status: .ok, summary: "\(label) is up",
            detail: detailLines.joined(separator: "\n"))
    }
    let remedy = rfkillBlocked
        ? "Remove the rfkill block first (see the rfkill finding), then: bluetoothctl power on"
        : "bluetoothctl power on (with bluetoothd running), or: sudo hciconfig \(adapter.name) up"
    return DoctorFinding(
        id: "adapter.\(adapter.name)", status: .problem, summary: "\(label) is down",
        detail: (detailLines + (rfkillBlocked ? ["rfkill blocks this adapter."] : [])).joined(separator: "\n"),
        remedy: remedy)
}

// MARK: - rfkill

private func rfkillFindings(kernelUsable: Bool, rfkill: Result<RFKillState, RFKillError>) -> [DoctorFinding] {
    let state: RFKillState
    switch rfkill {
    case .failure(let error):
        return [DoctorFinding(id: "rfkill", status: .warning, summary: "Cannot read rfkill state",
                              detail: error.description,
                              remedy: "Inspect it with: rfkill list bluetooth")]
    case .success(let value):
        state = value
    }
    if state.bluetoothSwitches.isEmpty {
        if !kernelUsable {
            return [DoctorFinding(
                id: "rfkill", status: .skipped,
                summary: "rfkill check skipped: no Bluetooth rfkill switch exists without kernel Bluetooth support",
                detail: state.classDirectoryExists
                    ? "/sys/class/rfkill has no entry of type bluetooth."
                    : "/sys/class/rfkill does not exist.")]
        }
        return [DoctorFinding(
            id: "rfkill", status: .ok, summary: "No rfkill switch blocks Bluetooth",
            detail: state.classDirectoryExists
                ? "/sys/class/rfkill has no entry of type bluetooth."
                : "The kernel has no rfkill support (/sys/class/rfkill does not exist).")]
    }
    return state.bluetoothSwitches.map { item in
        let label = "\(item.id) (\(item.name))"
        if item.hardBlocked {
            return DoctorFinding(
                id: "rfkill.\(item.id)", status: .problem,
                summary: "Bluetooth is hard-blocked by rfkill: \(label)" + (item.softBlocked ? ", also soft-blocked" : ""),
                detail: "A hardware switch, key or the firmware disables the radio; software cannot clear a hard block.",
                remedy: "Turn on the wireless switch or Fn key, or enable Bluetooth in the BIOS/UEFI setup"
                    + (item.softBlocked ? "; then run: rfkill unblock bluetooth" : "") + ".")
        }
        if item.softBlocked {
            return DoctorFinding(
                id: "rfkill.\(item.id)", status: .problem,
                summary: "Bluetooth is soft-blocked by rfkill: \(label)",
                detail: "Blocked by software (rfkill block, airplane mode or the desktop's Bluetooth switch).",
                remedy: "rfkill unblock bluetooth (and turn off airplane mode in the desktop settings)")
        }
        return DoctorFinding(id: "rfkill.\(item.id)", status: .ok, summary: "rfkill does not block \(label)")
    }
}

// MARK: - bluetoothd

private func bluetoothdFinding(host: DoctorHost) async -> DoctorFinding {
    let installRemedy = "Install BlueZ and start it: sudo apt-get install bluez && sudo systemctl enable --now bluetooth"
    guard let path = host.bluetoothdCandidates.first(where: { access($0, X_OK) == 0 }) else {
        return DoctorFinding(
            id: "bluetoothd", status: .problem, summary: "bluetoothd (BlueZ) is not installed",
            detail: "Looked for an executable at: " + host.bluetoothdCandidates.joined(separator: ", "),
            remedy: installRemedy)
    }
    let outcome = await host.runProgram(path, ["--version"])
    let firstLine = outcome.output.split(separator: "\n").first.map(String.init) ?? ""
    switch outcome.termination {
    case .exited(0) where !firstLine.isEmpty:
        return DoctorFinding(
            id: "bluetoothd", status: .ok, summary: "bluetoothd \(firstLine) is installed", detail: path)
    case .exited(let status):
        return DoctorFinding(
            id: "bluetoothd", status: .warning,
            summary: "bluetoothd at \(path) did not report a version",
            detail: "\(path) --version exited with status \(status)" + (outcome.output.isEmpty ? "" : ": \(outcome.output)"),
            remedy: "Reinstall BlueZ: sudo apt-get install --reinstall bluez")
    case .signalled(let signal):
        return DoctorFinding(
            id: "bluetoothd", status: .warning, summary: "bluetoothd at \(path) crashed when asked for its version",
            detail: "\(path) --version was killed by signal \(signal)",
            remedy: "Reinstall BlueZ: sudo apt-get install --reinstall bluez")
    case .timedOut:
        return DoctorFinding(
            id: "bluetoothd", status: .warning, summary: "bluetoothd at \(path) did not answer --version within 5 s",
            detail: "The process was stopped.", remedy: "Reinstall BlueZ: sudo apt-get install --reinstall bluez")
    case .failedToStart(let reason):
        return DoctorFinding(
            id: "bluetoothd", status: .warning, summary: "bluetoothd at \(path) could not be started",
            detail: reason, remedy: installRemedy)
    }
}
