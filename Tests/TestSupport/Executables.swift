import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct ExecutableNotFound: Error, CustomStringConvertible {
    public let name: String
    public let tried: [String]
    public var description: String { "\(name) executable not found; looked in: \(tried.joined(separator: ", "))" }
}

/// A product of this package, e.g. `blecompanion`: `BLECOMPANION_BIN` when set
/// (for that one), else next to the running test binary (the build products
/// directory), else in the package's `.build*/{debug,release}` directories.
public func builtExecutable(_ name: String, filePath: String = #filePath) throws -> String {
    var tried: [String] = []
    func candidate(_ path: String) -> String? {
        tried.append(path)
        return access(path, X_OK) == 0 ? path : nil
    }
    if name == "blecompanion", let override = ProcessInfo.processInfo.environment["BLECOMPANION_BIN"], let found = candidate(override) {
        return found
    }
    // The test binary (…/debug/<Package>PackageTests.xctest) lives in the products directory;
    // walk up a few levels so bundle layouts (…/X.xctest/Contents/MacOS/X) work too.
    var starts: [URL] = [Bundle.main.bundleURL, Bundle.main.executableURL].compactMap { $0 }
    if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        starts.insert(URL(fileURLWithPath: exe), at: 0)
    }
    for start in starts {
        var directory = start.deletingLastPathComponent()
        for _ in 0..<4 {
            if let found = candidate(directory.appendingPathComponent(name).path) { return found }
            directory = directory.deletingLastPathComponent()
        }
    }
    // Package root from this file: Tests/TestSupport/<file>.
    let root = packageRoot(filePath: filePath)
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
    for entry in entries.sorted() where entry.hasPrefix(".build") {
        for config in ["debug", "release"] {
            if let found = candidate(root.appendingPathComponent("\(entry)/\(config)/\(name)").path) { return found }
        }
    }
    throw ExecutableNotFound(name: name, tried: tried)
}

/// The package root, from a file two levels below it (`Tests/<Target>/<file>`).
public func packageRoot(filePath: String = #filePath) -> URL {
    URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}
