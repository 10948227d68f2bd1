import ArgumentParser

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
}
