import ArgumentParser
import CPosix
import DBus
import Domain
import Foundation
import Gateway
import GatewayConfig
import Logging
import ServiceSupport

/// `blecompanion gateway --config FILE`: headless, publishing to MQTT and
/// serving the local HTTP API until SIGTERM/SIGINT.
struct GatewayCLICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway",
        abstract: "Run headless: publish readings to MQTT (Home Assistant discovery) and serve a local HTTP API.",
        discussion: """
            The configuration file is YAML; every key is in docs/GATEWAY-CONFIG.md and an example in \
            fixtures/gateway/demo.yaml. Logs go to stderr, as JSON lines when stderr is not a terminal.

            Exit codes: \(GatewayExitCode.allCases.map { "\($0.rawValue) \($0.meaning)" }.joined(separator: "; ")).
            """)

    @Option(help: "The configuration file (YAML).")
    var config: String
    @Flag(help: "Validate the configuration file and exit: 0 when valid, 78 with every problem (key and line) when not.")
    var checkConfig = false
    @Option(help: "Override bluez.bus: system, session, or a D-Bus address like unix:path=/tmp/bus.")
    var bus: String?
    @Option(help: "Override gateway.state_dir (default: the configuration's, else $XDG_STATE_HOME/blecompanion).")
    var stateDir: String?
    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"
    @Option(help: "Log format: auto (JSON lines unless stderr is a terminal), json, text.")
    var logFormat: String = "auto"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(logLevel)\"")
        }
        guard ["auto", "json", "text"].contains(logFormat) else {
            throw ValidationError("--log-format must be auto, json or text, got \"\(logFormat)\"")
        }
        if let bus { try checkBusName(bus) }
    }

    func run() async throws {
        // SIGHUP reloads the profiles once the gateway runs; until then it is
        // ignored, not the default action that would end the process.
        signal(SIGHUP, SIG_IGN)
        let configuration: GatewayConfiguration
        do { configuration = try GatewayConfiguration.load(path: config) } catch {
            printError("Error: invalid gateway configuration:\n\(error.description)")
            throw ExitCode(GatewayExitCode.config.rawValue)
        }
        if checkConfig {
            // The profiles too: each file left out is named with its line and key.
            let options = GatewayOptions(configuration: configuration, stateDirectory: URL(fileURLWithPath: "/nonexistent"))
            let profiles = ProfileFiles.loadAll(options.profilePaths, optional: options.optionalProfilePaths)
            guard profiles.errors.isEmpty else {
                printError("Error: invalid device profiles:\n\(profiles.errors.map(\.description).joined(separator: "\n"))")
                throw ExitCode(GatewayExitCode.config.rawValue)
            }
            print("\(config): valid (gateway \(configuration.gatewayID), MQTT \(configuration.mqtt.map { "\($0.host):\($0.port)" } ?? "off"), HTTP \(configuration.http.map { "\($0.host):\($0.port)" } ?? "off"), \(profiles.profiles.profiles.count) device profile(s))")
            return
        }
        // Before the gateway's threads start allocating (docs/PERFORMANCE.md, "Memory").
        csystem_tune_malloc_for_service()
        let level = Logger.Level(rawValue: logLevel) ?? .info
        _ = LoggingBootstrap.bootstrap(level: level, json: logFormat == "auto" ? nil : logFormat == "json")
        let logger = Logger(label: "blecompanion.gateway")

        var options: GatewayOptions
        do {
            let fallback = try SettingsStore.defaultDirectory(override: stateDir)
            options = GatewayOptions(configuration: configuration, stateDirectory: fallback)
            if let stateDir { options.stateDirectory = URL(fileURLWithPath: stateDir) }
            if let directory = configuration.bondedIdentities {
                let (bonded, problems) = BondedIdentities.read(directory: directory)
                for problem in problems { logger.warning("bonded identities: \(problem)") }
                let configured = Set(options.identities.map(\.key))
                options.identities += bonded.filter { !configured.contains($0.key) }
                logger.info("bonded identities: \(bonded.count) read from \(directory)")
            }
        } catch {
            logger.critical("\(error)")
            throw ExitCode(GatewayExitCode.ioError.rawValue)
        }
        let busAddress: DBusBusAddress
        switch bus.map({ DBusBusAddress(parsing: $0) }) {
        case let override?: busAddress = override
        case nil:
            switch configuration.bus {
            case .system: busAddress = .system
            case .session: busAddress = .session
            case let .address(a): busAddress = .address(a)
            }
        }

        let runtime: GatewayRuntime
        do {
            runtime = try await GatewayRuntime.start(bus: busAddress, options: options, logger: logger)
        } catch {
            logger.critical("cannot start the gateway: \(error.description)")
            switch error {
            case .busUnavailable, .http: throw ExitCode(GatewayExitCode.unavailable.rawValue)
            case .storage: throw ExitCode(GatewayExitCode.ioError.rawValue)
            }
        }
        do {
            try await GatewayService.runUntilSignalled(runtime, logger: logger)
        } catch is GatewayBusLost {
            // Already stopped and logged by the service; systemd restarts it.
            throw ExitCode(GatewayExitCode.unavailable.rawValue)
        } catch let error as GatewayStartError {
            logger.critical("cannot start the gateway: \(error.description)")
            await runtime.shutdown()
            throw ExitCode(GatewayExitCode.unavailable.rawValue)
        } catch {
            logger.critical("gateway failed: \(error)")
            await runtime.shutdown()
            throw ExitCode(GatewayExitCode.internalError.rawValue)
        }
    }
}
