// swift-tools-version:6.1
// Allocation counts per advertisement (issue 16), with ordo-one/benchmark's
// malloc counters: a package of its own so that building or deploying
// BLE Companion never builds the benchmark tool. Run from this directory:
//
//     swift package benchmark thresholds check      # what .ci/run does (scripts/check-allocations)
//     swift package --allow-writing-to-package-directory benchmark thresholds update   # new baselines
import Foundation
import PackageDescription

// The parent package's identity is its directory's name (it differs between
// clones), so it is read from where this manifest is.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
let companion = root.lastPathComponent

let package = Package(
    name: "BLECompanionBenchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: root.path),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "Allocations",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "Vocabulary", package: companion),
                .product(name: "DBus", package: companion),
                .product(name: "BlueZ", package: companion),
                .product(name: "BLEParsing", package: companion),
                .product(name: "Domain", package: companion),
                .product(name: "Presenters", package: companion),
                .product(name: "Gateway", package: companion),
                .product(name: "Dashboard", package: companion),
                .product(name: "TerminalUI", package: companion),
            ],
            path: "Allocations",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
