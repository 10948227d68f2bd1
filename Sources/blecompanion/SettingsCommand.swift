import Bounds
import ArgumentParser
import BLEParsing
import BlueZ
import Domain
import Foundation
import GatewayConfig
import Vocabulary

/// Where settings, bindkeys and the readings database live.
struct StateOptions: ParsableArguments {
    @Option(help: "The state directory with settings, bindkeys and readings (default: $XDG_STATE_HOME/blecompanion, else ~/.local/state/blecompanion).")
    var stateDir: String?

    @Option(name: .customLong("profiles"),
            help: "A device profile file or directory (repeatable; docs/PROFILES.md). Default: the state directory's profiles/, if any.")
    var profilePaths: [String] = []

    /// Puts the profiles in force for this process (``cliProfiles``): the
    /// given files, else the state directory's `profiles/`. A file with
    /// problems is named on standard error and left out; the rest apply.
    func loadProfiles() {
        var paths = profilePaths
        var optional: Set<String> = []
        if paths.isEmpty, let dir = try? directory() {
            let path = dir.appendingPathComponent("profiles").path
            paths = [path]
            optional = [path]
        }
        let loaded = ProfileFiles.loadAll(paths, optional: optional)
        for error in loaded.errors { printError("Warning: profile left out: \(error.description)") }
        cliProfiles.replace(with: loaded.profiles)
    }

    func directory() throws -> URL {
        do { return try SettingsStore.defaultDirectory(override: stateDir) } catch { throw CLIError("\(error)") }
    }

    /// The settings store, creating the directory (0700) if needed.
    func settings() throws -> SettingsStore {
        do { return try SettingsStore(directory: try directory()) } catch { throw CLIError("\(error)") }
    }

    /// The readings database (created on first use).
    func database() throws -> ReadingStore {
        let dir = try writableDirectory()
        do { return try ReadingStore(path: dir.appendingPathComponent("readings.sqlite").path) } catch { throw CLIError("\(error)") }
    }

    /// The state directory, created (0700) if missing, for a command that
    /// writes to it. Refused with the reason when it cannot be written: a
    /// file in its place, or a read-only file system (where SQLite would
    /// only say "unable to open database file", or open a database left
    /// with its -shm file read-only and store nothing).
    func writableDirectory() throws -> URL {
        let dir = try directory()
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: dir.path, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw CLIError("the state directory \(dir.path) is a file, not a directory; choose another with --state-dir")
        }
        do {
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CLIError("cannot create the state directory \(dir.path): \(error.localizedDescription)")
        }
        if access(dir.path, W_OK) != 0 {
            throw CLIError("the state directory \(dir.path) is not writable: \(String(cString: strerror(errno)))")
        }
        return dir
    }

    /// Bindkeys for decoding encrypted advertisements; none when there is no
    /// state directory yet (reading commands never create one).
    func bindkeys() throws -> [BluetoothAddress: [UInt8]] {
        let dir = try directory()
        guard FileManager.default.fileExists(atPath: dir.path) else {
            if stateDir != nil { throw CLIError("--state-dir \(dir.path) does not exist") }
            return [:]
        }
        do { return try SettingsStore(directory: dir).current.bindkeys } catch { throw CLIError("\(error)") }
    }
}

func parseAddress(_ text: String) throws -> BluetoothAddress {
    do { return try BluetoothAddress(text) } catch { throw ValidationError("\"\(text)\" is not a Bluetooth address (expected AA:BB:CC:DD:EE:FF)") }
}

/// `--bus`: `system`, `session` or a D-Bus address (usage error otherwise).
func checkBusName(_ bus: String) throws {
    if bus != "system" && bus != "session" && !bus.contains(":") {
        throw ValidationError("--bus must be system, session or a D-Bus address like unix:path=/tmp/bus, got \"\(bus)\"")
    }
}

/// A number of seconds from the command line: finite, more than zero and at
/// most `Bounds.maximumInterval` (10 years); otherwise a usage error (exit 64)
/// naming the option. Options that take it parse unconditionally, so "-5"
/// reaches this check instead of being read as an unknown flag.
func checkSeconds(_ value: Double?, _ option: String) throws {
    guard let value else { return }
    if case let .failure(problem) = Bounds.interval(value, minimum: 0, exclusive: true) {
        throw ValidationError("\(option): \(problem.description)")
    }
}

func checkAdapterName(_ name: String) throws {
    do { _ = try AdapterID(name: name) } catch { throw ValidationError(error.description) }
}

struct SettingsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settings", abstract: "Show or change watched devices, bindkeys and the adapter.",
        subcommands: [Show.self, Watch.self, Unwatch.self, Bindkey.self, UseAdapter.self], defaultSubcommand: Show.self)

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Print the settings (bindkeys are not shown, only which devices have one).")
        @OptionGroup var state: StateOptions
        @Flag(help: "Print JSON.") var json = false
        func run() async throws {
            try await runReporting {
                let store = try state.settings()
                let s = store.current
                if json {
                    var o: [String: Any] = ["state_dir": store.directory.path, "watched": s.watched.map(\.description),
                                            "bindkeys_for": s.bindkeys.keys.sorted().map(\.description)]
                    if let a = s.adapter { o["adapter"] = a }
                    out(jsonLine(o))
                } else {
                    out("State directory: \(store.directory.path)")
                    out("Adapter: \(s.adapter ?? "(the first one)")")
                    out("Watched: \(s.watched.isEmpty ? "(none)" : s.watched.map(\.description).joined(separator: ", "))")
                    out("Bindkeys for: \(s.bindkeys.isEmpty ? "(none)" : s.bindkeys.keys.sorted().map(\.description).joined(separator: ", "))")
                }
            }
        }
    }

    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "watch", abstract: "Keep a device connected and record its readings.")
        @OptionGroup var state: StateOptions
        @Argument(help: "The device address.") var address: String
        func validate() throws { _ = try parseAddress(address) }
        func run() async throws {
            try await runReporting {
                let a = try parseAddress(address)
                do {
                    try state.settings().update { s in if !s.watched.contains(a) { s.watched.append(a) } }
                } catch let e as DomainError { throw CLIError(e.description) }
                out("Watching \(a).")
            }
        }
    }

    struct Unwatch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "unwatch", abstract: "Stop watching a device.")
        @OptionGroup var state: StateOptions
        @Argument(help: "The device address.") var address: String
        func validate() throws { _ = try parseAddress(address) }
        func run() async throws {
            try await runReporting {
                let a = try parseAddress(address)
                let store = try state.settings()
                guard store.current.watched.contains(a) else { throw CLIError("\(a) is not watched") }
                do { try store.update { $0.watched.removeAll { $0 == a } } } catch { throw CLIError("\(error)") }
                out("No longer watching \(a).")
            }
        }
    }

    struct Bindkey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "bindkey", abstract: "Set (or --remove) a device's bindkey for encrypted BTHome / Xiaomi advertisements.")
        @OptionGroup var state: StateOptions
        @Argument(help: "The device address.") var address: String
        @Argument(help: "The key: 32 hex digits (16 bytes).") var key: String?
        @Flag(help: "Remove the device's key.") var remove = false
        func validate() throws {
            _ = try parseAddress(address)
            if remove && key != nil { throw ValidationError("give a key or --remove, not both") }
            if !remove {
                guard let key else { throw ValidationError("missing the key (32 hex digits), or --remove") }
                _ = try Bindkey.parse(key)
            }
        }
        static func parse(_ text: String) throws -> [UInt8] {
            let bytes: [UInt8]
            do { bytes = try parseHex(text, context: "bindkey") } catch { throw ValidationError(error.description) }
            guard bytes.count == 16 else { throw ValidationError("a bindkey is 16 bytes (32 hex digits), got \(bytes.count) bytes") }
            return bytes
        }
        func run() async throws {
            try await runReporting {
                let a = try parseAddress(address)
                let store = try state.settings()
                if remove {
                    guard store.current.bindkeys[a] != nil else { throw CLIError("\(a) has no bindkey") }
                    do { try store.update { $0.bindkeys[a] = nil } } catch { throw CLIError("\(error)") }
                    out("Removed the bindkey of \(a).")
                } else {
                    let bytes = try Bindkey.parse(key ?? "")
                    do { try store.update { $0.bindkeys[a] = bytes } } catch { throw CLIError("\(error)") }
                    out("Stored the bindkey of \(a) in \(store.directory.appendingPathComponent("bindkeys.json").path) (mode 0600).")
                }
            }
        }
    }

    struct UseAdapter: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "adapter", abstract: "Choose the adapter (or --clear to use the first one).")
        @OptionGroup var state: StateOptions
        @Argument(help: "The adapter, e.g. hci1.") var name: String?
        @Flag(help: "Use the first adapter again.") var clear = false
        func validate() throws {
            if clear == (name != nil) { throw ValidationError("give an adapter name (e.g. hci0) or --clear") }
            if let name { try checkAdapterName(name) }
        }
        func run() async throws {
            try await runReporting {
                let store = try state.settings()
                do { try store.update { $0.adapter = clear ? nil : name } } catch { throw CLIError("\(error)") }
                out(clear ? "Using the first adapter." : "Using \(name ?? "").")
            }
        }
    }
}

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "history", abstract: "Print a device's recorded readings from the database.")
    @OptionGroup var state: StateOptions
    @Argument(help: "The device address.") var address: String
    @Option(help: "The adapter the device is on.") var adapter: String = "hci0"
    @Option(help: "Only this reading kind, e.g. temperature.") var kind: String?
    @Option(parsing: .unconditional, help: "How far back, in hours (at most 10 years).") var hours: Double = 24
    @Flag(help: "Print JSON Lines.") var json = false

    func validate() throws {
        _ = try parseAddress(address)
        try checkAdapterName(adapter)
        if let kind, ReadingKind(rawValue: kind) == nil {
            throw ValidationError("unknown reading kind \"\(kind)\" (e.g. temperature, humidity, battery)")
        }
        guard hours.isFinite, hours > 0 else { throw ValidationError("--hours must be a positive number of hours, got \(hours)") }
        try checkSeconds(hours * 3600, "--hours (as seconds)")
    }

    func run() async throws {
        try await runReporting {
            let id = DeviceID(adapter: try AdapterID(name: adapter), address: try parseAddress(address))
            let store = try state.database()
            let series: [ReadingSeries]
            do { series = try store.series(of: id, since: Date().addingTimeInterval(-hours * 3600)) } catch { throw CLIError("\(error)") }
            let wanted = series.filter { kind == nil || $0.kind.rawValue == kind }
            if wanted.isEmpty {
                throw CLIError("no readings of \(id.address)\(kind.map { " (\($0))" } ?? "") in the last \(hours) hours in \(try state.directory().path)/readings.sqlite")
            }
            let iso = Date.ISO8601FormatStyle(timeZone: .gmt)
            for s in wanted {
                for p in s.points {
                    if json {
                        var o: [String: Any] = ["kind": s.kind.rawValue, "at": p.at.formatted(iso), "value": p.value, "samples": p.samples]
                        if !s.label.isEmpty { o["label"] = s.label }
                        out(jsonLine(o))
                    } else {
                        out("\(p.at.formatted(iso))  \(s.kind.rawValue)\(s.label.isEmpty ? "" : "[\(s.label)]")  \(p.value)\(p.samples > 1 ? "  (mean of \(p.samples))" : "")")
                    }
                }
            }
        }
    }
}

/// The device profiles this process decodes with (the CLI's commands and the
/// dashboard), loaded by ``StateOptions/loadProfiles()``.
let cliProfiles = ProfileSource()
