import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif

@main
struct BLECompanionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blecompanion",
        abstract: "Pair with and monitor Bluetooth LE devices through BlueZ over D-Bus.",
        subcommands: [
            ScanCommand.self, DevicesCommand.self, InfoCommand.self, ConnectCommand.self, DisconnectCommand.self,
            PairCommand.self, UnpairCommand.self, TrustCommand.self, UntrustCommand.self,
            ReadCommand.self, WriteCommand.self, NotifyCommand.self, SettingsCommand.self, HistoryCommand.self,
            DoctorCommand.self, DecodeCommand.self, DemoCommand.self, DashboardCommand.self, SimulateCommand.self, RecordCommand.self,
            GatewayCLICommand.self, ImportBtsnoopCommand.self, CaptureCommand.self,
        ]
    )

    /// The usual entry point, after unblocking the signals the program acts
    /// on: a process inherits its parent's signal mask, and a parent thread
    /// that blocked them (Dispatch and Swift concurrency worker threads block
    /// nearly all) would leave the dashboard deaf to Ctrl+Z and SIGTERM and the
    /// gateway unable to shut down gracefully.
    static func main() async {
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT, SIGWINCH, SIGQUIT] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}
