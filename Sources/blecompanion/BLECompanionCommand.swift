import ArgumentParser

@main
struct BLECompanionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blecompanion",
        abstract: "Pair with and monitor Bluetooth LE devices through BlueZ over D-Bus.",
        version: BLECompanionVersion.current,
        subcommands: [
            ScanCommand.self, DevicesCommand.self, InfoCommand.self, ConnectCommand.self, DisconnectCommand.self,
            PairCommand.self, UnpairCommand.self, TrustCommand.self, UntrustCommand.self,
            ReadCommand.self, WriteCommand.self, NotifyCommand.self, SettingsCommand.self, HistoryCommand.self,
            DoctorCommand.self, DecodeCommand.self, DemoCommand.self, DashboardCommand.self, SimulateCommand.self, RecordCommand.self,
            GatewayCLICommand.self, ImportBtsnoopCommand.self, CaptureCommand.self, ProfileCommand.self, DeviceCommandCommand.self, TimeSyncCommand.self, FirmwareCommand.self, ProvisionCommand.self,
        ]
    )
}

/// The release number: `blecompanion --version` prints it, and
/// scripts/package-deb names the package after it. Raised with each release
/// (semantic versioning: the CLI, the configuration file, MQTT topics and
/// payloads and the HTTP API are the public surface).
enum BLECompanionVersion {
    static let current = "0.9.0"
}
