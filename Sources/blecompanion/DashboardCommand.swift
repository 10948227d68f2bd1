import ArgumentParser
import BlueZ
import Dashboard
import DBus
import Domain
import Foundation
import TerminalUI
import Vocabulary

/// `blecompanion dashboard`: the full-screen terminal dashboard.
struct DashboardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard",
        abstract: "Open the full-screen dashboard: scan, pair, read and watch devices.",
        discussion: "Keys: ? lists them on every screen. Needs a terminal; for pipes use `blecompanion scan --json`.")

    @Option(help: "Which bus bluetoothd is on: system (default), session, or a D-Bus address.")
    var bus: String = "system"
    @Option(help: "The adapter to use, e.g. hci0 (default: the settings' choice, else the first one).")
    var adapter: String?
    @OptionGroup var state: StateOptions

    func validate() throws {
        if let adapter { try checkAdapterName(adapter) }
        try checkBusName(bus)
    }

    func run() async throws {
        try await runReporting {
            // Before the terminal: an unusable state directory is said on the
            // plain screen, without a flash of the dashboard.
            let directory = try state.writableDirectory()
            state.loadProfiles()
            let terminal = try openTerminal()
            let services = try await DashboardServices.start(bus: DBusBusAddress(parsing: bus), adapter: adapter, stateDirectory: directory)
            if await services.run(terminal: terminal) == .connectionLost {
                // The terminal is restored by now: the reason goes under the shell prompt.
                printError("Error: lost the connection to the D-Bus bus (the bus daemon stopped or restarted); "
                           + "start the dashboard again once it is back. See `blecompanion doctor`.")
                throw ExitCode(69)
            }
        }
    }
}

/// The terminal, or why there is none.
func openTerminal() throws -> TerminalSession {
    do {
        return try TerminalSession.open()
    } catch {
        throw CLIError("the dashboard needs a terminal (\(error)); for pipes and scripts use `blecompanion scan --json`")
    }
}

/// Every repository and service the dashboard runs on, wired to one
/// bluetoothd connection, the settings and the readings database.
struct DashboardServices {
    let screen: DashboardScreen
    /// Its connection going away ends the dashboard (``run(terminal:)``).
    let client: BlueZClient
    /// Kept alive for the dashboard's lifetime.
    let parts: [any Sendable]

    static func start(bus: DBusBusAddress, adapter: String?, stateDirectory: URL) async throws -> DashboardServices {
        let client: BlueZClient
        do { client = try await BlueZClient.connect(to: bus) } catch {
            throw CLIError("cannot reach bluetoothd's bus: \(error.description). See `blecompanion doctor`.")
        }
        let settings: SettingsStore
        let database: ReadingStore
        do {
            settings = try SettingsStore(directory: stateDirectory)
            database = try ReadingStore(path: stateDirectory.appendingPathComponent("readings.sqlite").path)
        } catch {
            throw CLIError(error.description)
        }
        let adapterName = adapter ?? settings.current.adapter
        let adapterID = (try? client.adapter(adapterName).id) ?? (try? AdapterID(name: adapterName ?? "hci0")) ?? AdapterID(path: "/org/bluez/hci0")
        let domain = DomainServices.open(client: client, store: database, configuration: .init(
            adapter: adapterName, bindkeys: { settings.current.bindkeys[$0] }, profiles: cliProfiles))
        let adapters = domain.adapters, devices = domain.devices, control = domain.control
        let manager = domain.manager, recorder = domain.recorder
        let watches = WatchService(settings: settings, manager: manager, adapter: adapterID)
        let pairing = BlueZPairingService(client: client)
        let log = EventLog(names: EventLog.deviceNames(in: client.mirror))
        // A ping every 5 s, 3 s to answer: a stopped or hung bluetoothd
        // shows in the header within 8 s (it keeps its bus name, so nothing
        // else would say so).
        let liveness = BluetoothdLiveness(client: client, interval: .seconds(5), timeout: .seconds(3))
        let feeds = [log.feed(from: client.mirror), log.feed(from: manager), log.feed(from: pairing), log.feed(from: recorder),
                     log.feed(from: liveness)]
        if !client.mirror.snapshot().available { log.append(.bluetoothdVanished) }
        let environment = DashboardEnvironment(devices: devices, control: control, history: database, watchList: watches,
                                               pairing: pairing, adapters: adapters, log: log, firmware: BlueZFirmwareService(client: client))
        let screen = DashboardScreen(environment: environment)
        return DashboardServices(screen: screen, client: client, parts: [client, settings, database, adapters, devices, control, manager, watches,
                                                         pairing, recorder, log, liveness] + feeds)
    }

    enum Ending { case quit, connectionLost }

    /// Runs the dashboard until the user quits, a terminating signal comes,
    /// or the bus connection is lost (the bus daemon stopped or restarted:
    /// the same exit status 69 as the gateway's, EX_UNAVAILABLE). Before,
    /// the dashboard stayed open saying "bluetoothd is not running" and
    /// promising a list that could never come back on a dead connection.
    func run(terminal: TerminalSession) async -> Ending {
        let mode = Renderer.detectColorMode(environment: ProcessInfo.processInfo.environment, isTTY: true)
        let connection = client.connection
        let post = screen.poster
        let lost = Task { () -> Bool in
            await connection.disconnected()
            if Task.isCancelled { return false }
            post(.connectionLost)
            return true
        }
        await DashboardApp.run(screen, terminal: terminal, colorMode: mode)
        lost.cancel()
        let ending: Ending = await lost.value ? .connectionLost : .quit
        // The devices' latest readings the store holds back (written once a
        // minute while heard) go to the file before the process ends.
        for case let store as ReadingStore in parts { try? store.flushPendingRows() }
        withExtendedLifetime(parts) {}
        return ending
    }
}
