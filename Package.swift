// swift-tools-version:6.1
// BLE Companion: BlueZ over D-Bus for Linux. See docs/ARCHITECTURE.md for the
// layer rules this manifest enforces (who may import whom).
import PackageDescription

#if canImport(Glibc)
import Glibc
#endif

/// This directory, for paths the linker reads (it runs elsewhere).
let packageRoot = String(#filePath.dropLast("/Package.swift".count))

/// Whether this system's glibc applies packed relative relocations (DT_RELR,
/// glibc 2.36: Debian 12, Ubuntu 24.04); older ones (Ubuntu 22.04's 2.35)
/// refuse such a binary, so it is linked the old way there.
let glibcHasRELR: Bool = {
    #if canImport(Glibc)
    var buffer = [CChar](repeating: 0, count: 64)   // "glibc 2.36"
    guard confstr(Int32(_CS_GNU_LIBC_VERSION), &buffer, buffer.count) > 0 else { return false }
    let version = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let parts = version.split(separator: " ").last?.split(separator: ".").compactMap { Int($0) } ?? []
    guard parts.count >= 2 else { return false }
    return parts[0] > 2 || (parts[0] == 2 && parts[1] >= 36)
    #else
    return false
    #endif
}()

let package = Package(
    name: "BLECompanion",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "blecompanion", targets: ["blecompanion"]),
        .library(name: "Vocabulary", targets: ["Vocabulary"]),
        .library(name: "DBus", targets: ["DBus"]),
        .library(name: "BLEParsing", targets: ["BLEParsing"]),
        .library(name: "BlueZ", targets: ["BlueZ"]),
        .library(name: "BlueZSimulator", targets: ["BlueZSimulator"]),
        .library(name: "MQTT", targets: ["MQTT"]),
        // The layers above, as products only so that the allocation benchmarks
        // (Benchmarks/, a package of their own) can reach them.
        .library(name: "Domain", targets: ["Domain"]),
        .library(name: "Presenters", targets: ["Presenters"]),
        .library(name: "TerminalUI", targets: ["TerminalUI"]),
        .library(name: "Dashboard", targets: ["Dashboard"]),
        .library(name: "Gateway", targets: ["Gateway"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // Gateway only: YAML configuration with line numbers, and graceful service lifecycle.
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // MARK: C shims (not API; imported implementation-only)
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CBluetooth",
            pkgConfig: "bluez",
            providers: [.apt(["libbluetooth-dev"])]
        ),
        .systemLibrary(
            name: "CLibCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(name: "CPosix"),
        .systemLibrary(
            name: "CMosquitto",
            pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"])]
        ),

        // MARK: Layer 0: transports and pure parsing
        // Numbers from outside (options, configuration, HTTP queries) checked before they become
        // intervals, durations or dates: one place, documented bounds, no trap. Foundation-free.
        .target(name: "Bounds"),
        // The Bluetooth words every layer shares: address, UUID, hex. One reader and one writer
        // of each, so the CLI, configuration, scenarios, MQTT and HTTP accept the same spellings.
        // No dependencies, no Foundation.
        .target(name: "Vocabulary"),
        // The lock every target uses (a value behind a pthread mutex, which ThreadSanitizer sees;
        // Synchronization's Mutex it does not, on Linux). No dependencies.
        .target(name: "Locking"),
        // Detached POSIX threads for the loops that block in epoll/poll (D-Bus I/O, terminal
        // input, HTTP connections): one way to start one, named.
        .target(name: "Threads", dependencies: ["CPosix"]),
        .target(name: "DBus", dependencies: ["CDBus", "CPosix", "Locking", "Threads", .product(name: "HeapModule", package: "swift-collections"),
                                            .product(name: "DequeModule", package: "swift-collections")]),
        .target(name: "BluetoothHCI", dependencies: ["CBluetooth"]),
        // MQTT client for the headless gateway: libmosquitto, imported internally.
        .target(name: "MQTT", dependencies: ["CMosquitto", "CPosix", "Locking", "Threads"]),
        // A small HTTP/1.1 server on POSIX sockets (local API of the gateway): no NIO, builds in seconds.
        .target(name: "HTTPServer", dependencies: ["Vocabulary", "CPosix", "Locking", "Threads"]),
        // systemd notify protocol and JSON-lines logging: process plumbing, no BLE.
        .target(name: "ServiceSupport", dependencies: ["Locking", .product(name: "Logging", package: "swift-log")]),
        // The gateway's configuration file (YAML): model, parsing, validation with key + line.
        // Device profile files too (docs/PROFILES.md): the same reader, into the parsing module's model.
        .target(name: "GatewayConfig", dependencies: ["Bounds", "Vocabulary", "BLEParsing", .product(name: "Yams", package: "Yams")]),
        .target(
            name: "BLEParsing",
            dependencies: ["Vocabulary", "CLibCrypto"],
            linkerSettings: [.linkedLibrary("m")]
        ),

        // The scenario format (docs/SCENARIOS.md): model, reader (errors with line and column) and
        // writer, shared by the simulator that plays it, `record` and `import-btsnoop` that write it.
        // No D-Bus, no Foundation.
        .target(name: "ScenarioFormat", dependencies: ["Vocabulary"]),

        // Capture import: a btsnoop timeline (BLEParsing) as simulator scenario JSON. Writes the
        // scenario format as text and does not import the simulator; its tests load the output through it.
        .target(name: "CaptureImport", dependencies: ["Vocabulary", "BLEParsing"]),

        // MARK: Layer 1: BlueZ client, and the simulator that stands in for bluetoothd
        // The simulator deliberately does not import the client: tests of one
        // against the other must not share a mistake.
        .target(name: "BlueZ", dependencies: ["Vocabulary", "DBus", "Locking"]),
        .target(name: "BlueZSimulator", dependencies: ["Vocabulary", "ScenarioFormat", "DBus", "BLEParsing"]),
        // Capture and replay: records bluetoothd's tree and signals into a scenario
        // (the simulator's file format) and redacts it. Above both the client and the simulator,
        // which still do not import each other.
        .target(name: "Capture", dependencies: ["Vocabulary", "BlueZ", "BlueZSimulator", "ScenarioFormat", "BLEParsing", "DBus", "Locking"]),

        // MARK: Layer 2: domain (repositories own the data) and presenters (State + Action + send)
        // Presenters may import the domain and parsing modules only — never a
        // terminal or gateway module: both front ends run on the same presenters.
        .target(name: "Domain", dependencies: [
            "Vocabulary", "BlueZ", "BLEParsing", "Locking", .product(name: "Logging", package: "swift-log"), .product(name: "GRDB", package: "GRDB.swift"),
            // The C API under GRDB, for the outbox's insert (values bound without GRDB's boxing).
            .product(name: "GRDBSQLite", package: "GRDB.swift"),
        ]),
        // Fleet mode's rule and messages (which gateway speaks for a device), pure: no MQTT, no clock.
        .target(name: "Fleet", dependencies: ["Vocabulary"]),
        .target(name: "Presenters", dependencies: ["Vocabulary", "Domain", "BlueZ", "BLEParsing", "Bounds", "Locking", .product(name: "Logging", package: "swift-log")]),

        // MARK: Layer 3: front ends (Screen owns a presenter; Content is pure State -> output)
        // TerminalUI knows terminals only (cells, diffing, raw mode, keys): no presenter, no BlueZ.
        .target(name: "TerminalUI", dependencies: ["Locking", "Threads"]),
        .target(name: "Dashboard", dependencies: ["Vocabulary", "TerminalUI", "Presenters", "Domain", "BlueZ", "BLEParsing"]),
        // Headless gateway: the same repositories and presenters as the dashboard, with MQTT and
        // HTTP as its front ends. No terminal module.
        .target(name: "Gateway", dependencies: [
            "Vocabulary", "Domain", "Presenters", "BLEParsing", "BlueZ", "MQTT", "HTTPServer", "ServiceSupport", "GatewayConfig", "Bounds", "Locking",
            "Fleet", "CPosix",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),

        // MARK: Executables
        .executableTarget(
            name: "blecompanion",
            dependencies: [
                "Vocabulary", "DBus", "BluetoothHCI", "BLEParsing", "BlueZ", "BlueZSimulator", "ScenarioFormat", "Capture", "Domain", "Presenters", "Dashboard", "TerminalUI",
                "Gateway", "GatewayConfig", "ServiceSupport", "CaptureImport", "Bounds", "Locking", "CPosix",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            linkerSettings: [
                // The Swift driver links executables with --export-dynamic:
                // every public symbol of every module (~22 000) went into the
                // dynamic symbol table, which the dynamic linker searches for
                // each symbol the C libraries bind, so most of its 1.7 MB
                // stayed resident. Nothing looks our symbols up at run time
                // (the runtime finds metadata, conformances and tests through
                // their sections); a backtrace names functions from .symtab
                // (the unstripped build's). docs/PERFORMANCE.md: -1.5 MiB RSS.
                .unsafeFlags(["-Xlinker", "--no-export-dynamic"]),
                // Release builds on Linux link with lld, for two things gold
                // does not do. Relative relocations packed (DT_RELR, glibc
                // ≥ 2.36): the 2.4 MB of .rela.dyn that the dynamic linker
                // read at every start, and that stayed resident, become 40 kB.
                // Functions laid out by deploy/blecompanion.order (the ones a
                // gateway runs, scripts/update-link-order writes it): the
                // kernel maps up to 64 kB of code around each page a fault
                // touches, so code run spread over the whole .text kept
                // ~17 MB of it resident. Our modules are compiled with
                // -function-sections (below) so that lld moves single
                // functions. docs/PERFORMANCE.md, tenth pass.
                .unsafeFlags([
                    "-use-ld=lld",
                    "-Xlinker", "--symbol-ordering-file=\(packageRoot)/deploy/blecompanion.order",
                    "-Xlinker", "--no-warn-symbol-ordering",
                ] + (glibcHasRELR ? ["-Xlinker", "-z", "-Xlinker", "pack-relative-relocs"] : []),
                .when(platforms: [.linux], configuration: .release)),
            ]
        ),
        .executableTarget(name: "bench", dependencies: [
            "Vocabulary", "DBus", "BLEParsing", "BlueZ", "BlueZSimulator", "ScenarioFormat", "Domain", "Presenters", "Dashboard", "TerminalUI", "Gateway", "MQTT", "Locking",
            "CPosix",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "parsing-fuzz", dependencies: ["Vocabulary", "BLEParsing"], path: "Sources/ParsingFuzz"),
        // Fuzz harnesses for every other reader of outside bytes (scripts/fuzz-all).
        .executableTarget(name: "fuzz", dependencies: [
            "Vocabulary", "DBus", "BLEParsing", "BlueZ", "BlueZSimulator", "ScenarioFormat", "CaptureImport", "Gateway", "GatewayConfig",
            "HTTPServer", "Fleet",
        ], path: "Sources/Fuzz"),
        // Test support: writes readings until killed (crash-consistency test).
        .executableTarget(name: "readings-writer", dependencies: ["Vocabulary", "Domain", "BlueZ", "BLEParsing"], path: "Sources/ReadingsWriter"),

        // MARK: Tests
        .testTarget(name: "VocabularyTests", dependencies: ["Vocabulary"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus"]),
        .testTarget(name: "BLEParsingTests", dependencies: ["Vocabulary", "BLEParsing", "TestSupport"]),
        .testTarget(name: "CaptureImportTests", dependencies: ["Vocabulary", "CaptureImport", "BLEParsing", "BlueZSimulator", "ScenarioFormat", "DBus", "TestSupport"]),
        .testTarget(name: "BluetoothHCITests", dependencies: ["BluetoothHCI"]),
        // Shared by test targets only: a private mosquitto, child processes, blocking work off the pool.
        // replayReadings runs a fixture through the simulator, client, repository and presenter.
        .target(name: "TestSupport", dependencies: ["Vocabulary", "BlueZSimulator", "ScenarioFormat", "BlueZ", "BLEParsing", "DBus", "Domain", "Presenters", "CPosix", "Locking"],
                path: "Tests/TestSupport"),
        .testTarget(name: "MQTTTests", dependencies: [
            "Vocabulary", "MQTT", "Gateway", "Domain", "BlueZ", "BLEParsing", "BlueZSimulator", "ScenarioFormat", "DBus", "TestSupport", "blecompanion", "Locking",
            .product(name: "GRDB", package: "GRDB.swift"),
        ]),
        .testTarget(name: "GatewayTests", dependencies: ["Vocabulary", "Gateway", "Fleet", "Domain", "Presenters", "BLEParsing", "BlueZ", "Locking", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"), .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "FleetTests", dependencies: ["Fleet", "TestSupport"]),
        .testTarget(name: "GatewayConfigTests", dependencies: ["GatewayConfig", "Vocabulary", "BLEParsing", "TestSupport"]),
        .testTarget(name: "BoundsTests", dependencies: ["Bounds"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "Locking"]),
        .testTarget(name: "ServiceSupportTests", dependencies: ["ServiceSupport", "Locking", .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "BlueZTests", dependencies: ["Vocabulary", "BlueZ", "BlueZSimulator", "ScenarioFormat", "DBus", "TestSupport", "Locking"]),
        .testTarget(name: "BlueZSimulatorTests", dependencies: ["Vocabulary", "BlueZSimulator", "ScenarioFormat", "DBus", "Locking", "BLEParsing", "TestSupport"]),
        .testTarget(name: "PresenterTests", dependencies: [
            "Vocabulary", "Presenters", "Domain", "BlueZ", "BLEParsing", "BlueZSimulator", "ScenarioFormat", "DBus", "readings-writer", "TestSupport", "Locking",
            .product(name: "GRDB", package: "GRDB.swift"),
        ]),
        .testTarget(name: "CLITests", dependencies: ["Vocabulary", "blecompanion", "DBus", "TestSupport", "Locking", "BlueZSimulator", "ScenarioFormat"]),
        .testTarget(name: "CaptureTests", dependencies: [
            "Vocabulary", "Capture", "BlueZSimulator", "ScenarioFormat", "BlueZ", "BLEParsing", "DBus", "Domain", "Presenters", "TestSupport", "Locking",
        ]),
        .testTarget(name: "TerminalUITests", dependencies: ["TerminalUI"]),
        .testTarget(name: "DashboardTests", dependencies: ["Vocabulary", "Dashboard", "TerminalUI", "Presenters", "Domain", "BlueZ", "BLEParsing", "DBus", "Locking", "TestSupport"], exclude: ["Snapshots"]),
    ]
)

// Each function in a section of its own in release builds, so that the
// linker can lay out the ones that run together (blecompanion's
// --symbol-ordering-file above). Dependencies keep one section per file.
for target in package.targets where [.regular, .executable, .test].contains(target.type) {
    target.swiftSettings = (target.swiftSettings ?? []) + [
        .unsafeFlags(["-Xfrontend", "-function-sections", "-cross-module-optimization"], .when(platforms: [.linux], configuration: .release)),
    ]
}
