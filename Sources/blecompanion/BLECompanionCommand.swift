import ArgumentParser

@main
struct BLECompanionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blecompanion",
        abstract: "Pair with and monitor Bluetooth LE devices through BlueZ over D-Bus.",
        subcommands: [DoctorCommand.self, DecodeCommand.self, DemoCommand.self, SimulateCommand.self]
    )
}
