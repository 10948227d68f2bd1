import DBus
import Foundation

/// The D-Bus side of the doctor: is the bus reachable, is `org.bluez` on it
/// (or activatable), which bluetoothd owns it, may this user talk to it,
/// and which adapters it reports.
func busFindings(bus: String) async -> [DoctorFinding] {
    let target = DBusBusAddress(parsing: bus)
    let address: String
    do {
        address = try target.resolve()
    } catch {
        return [DoctorFinding(id: "dbus.bus", status: .problem, summary: "No \(target) address is known",
                              detail: "\(error)", remedy: "Start a D-Bus session or pass --bus ADDRESS.")]
    }
    let label: String
    switch target {
    case .system: label = "system bus"
    case .session: label = "session bus"
    case .address: label = "bus"
    }
    let connection: DBusConnection
    do {
        connection = try await withTimeout(.seconds(5)) { try await DBusConnection.connect(to: .address(address)) }
    } catch {
        let isSystem = target == .system
        return [
            DoctorFinding(
                id: "dbus.bus", status: .problem,
                summary: "The \(label) is not reachable at \(address)",
                detail: "\(error)",
                remedy: isSystem
                    ? "Start the system bus (sudo systemctl start dbus, or install the dbus package); inside a container, mount the host's /run/dbus/system_bus_socket."
                    : "Check the address; for a private test bus, start it first (blecompanion demo does this for you)."),
            DoctorFinding(id: "dbus.bluez", status: .skipped, summary: "org.bluez check skipped: the bus is not reachable"),
        ]
    }
    defer { connection.close() }
    var findings = [DoctorFinding(id: "dbus.bus", status: .ok, summary: "The \(label) is reachable at \(address)",
                                  detail: "Connected as \(connection.uniqueName).")]

    let owner: String?
    do {
        owner = try await withTimeout(.seconds(5)) { try await connection.nameOwner("org.bluez") }
    } catch {
        findings.append(DoctorFinding(id: "dbus.bluez", status: .problem, summary: "Could not ask the bus who owns org.bluez",
                                      detail: "\(error)", remedy: "Check the bus daemon's logs (journalctl -u dbus)."))
        return findings
    }
    guard let owner else {
        let activatable = (try? await withTimeout(.seconds(5)) { try await connection.activatableNames() }) ?? []
        if activatable.contains("org.bluez") {
            findings.append(DoctorFinding(
                id: "dbus.bluez", status: .warning, summary: "bluetoothd is not running, but the bus can start it on demand",
                detail: "org.bluez has no owner; it is listed as activatable.",
                remedy: "sudo systemctl enable --now bluetooth"))
        } else {
            findings.append(DoctorFinding(
                id: "dbus.bluez", status: .problem, summary: "bluetoothd is not running: nobody owns org.bluez on the \(label)",
                detail: "org.bluez has no owner and is not activatable on this bus.",
                remedy: "sudo apt-get install bluez && sudo systemctl enable --now bluetooth (to try without hardware: blecompanion demo)"))
        }
        return findings
    }
    findings.append(DoctorFinding(id: "dbus.bluez", status: .ok, summary: "org.bluez is on the bus (owner \(owner))",
                                  detail: await bluezVersion(connection: connection, owner: owner)))

    do {
        let objects = try await withTimeout(.seconds(10)) { try await connection.managedObjects(destination: "org.bluez") }
        let adapters = objects.filter { $0.value["org.bluez.Adapter1"] != nil }.sorted { $0.key < $1.key }
        findings.append(DoctorFinding(id: "dbus.policy", status: .ok, summary: "This user may talk to org.bluez",
                                      detail: "GetManagedObjects returned \(objects.count) objects."))
        if adapters.isEmpty {
            findings.append(DoctorFinding(
                id: "dbus.adapters", status: .problem, summary: "bluetoothd reports no adapter",
                detail: "No object implements org.bluez.Adapter1.",
                remedy: "Plug in or enable a Bluetooth controller; check the kernel and rfkill findings above."))
        }
        for (path, interfaces) in adapters {
            let props = interfaces["org.bluez.Adapter1"] ?? [:]
            let name = path.lastElement
            let address = props["Address"]?.stringValue ?? "unknown address"
            if props["Powered"] == .boolean(true) {
                findings.append(DoctorFinding(id: "dbus.adapter.\(name)", status: .ok, summary: "\(name) (\(address)) is powered"))
            } else {
                let state = props["PowerState"]?.stringValue.map { " (PowerState \($0))" } ?? ""
                findings.append(DoctorFinding(
                    id: "dbus.adapter.\(name)", status: .problem, summary: "\(name) (\(address)) is not powered\(state)",
                    remedy: state.contains("off-blocked") ? "rfkill unblock bluetooth" : "bluetoothctl power on"))
            }
        }
    } catch let error as DBusError where error.remoteName == DBusErrorName.accessDenied {
        findings.append(DoctorFinding(
            id: "dbus.policy", status: .problem, summary: "The D-Bus policy does not let this user talk to org.bluez",
            detail: "\(error)",
            remedy: "Run as a user in the group allowed by /etc/dbus-1/system.d/bluetooth.conf (usually: sudo usermod -aG bluetooth $USER, then log in again), or install udev/ and the D-Bus policy from this project."))
    } catch {
        findings.append(DoctorFinding(id: "dbus.policy", status: .problem, summary: "org.bluez did not answer GetManagedObjects",
                                      detail: "\(error)", remedy: "Check bluetoothd's logs (journalctl -u bluetooth)."))
    }
    return findings
}

/// The version of the bluetoothd that owns org.bluez, from its executable.
private func bluezVersion(connection: DBusConnection, owner: String) async -> String {
    do {
        let reply = try await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                              interface: "org.freedesktop.DBus", member: "GetConnectionUnixProcessID",
                                              arguments: [.string(owner)], timeout: .seconds(5))
        let pid: UInt32 = try reply.argument(0)
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        let outcome = await DoctorProcess.run(exe, ["--version"])
        if case .exited(0) = outcome.termination, !outcome.output.isEmpty {
            return "Process \(pid) (\(exe)), version \(outcome.output)."
        }
        return "Process \(pid) (\(exe)); its version could not be read."
    } catch {
        return "Its process and version could not be determined (\(error))."
    }
}

struct DoctorTimeout: Error, CustomStringConvertible {
    var description: String { "no answer within the time limit" }
}

/// Runs `body`, giving up after `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw DoctorTimeout() }
        return value
    }
}
