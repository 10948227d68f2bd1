import BlueZ
import Foundation
import Locking
#if canImport(Glibc)
import Glibc
import Vocabulary
#endif

/// What the user chose: devices to keep connected and record, bindkeys for
/// encrypted advertisement formats, the adapter to use.
public struct Settings: Sendable, Equatable, Codable {
    /// Addresses of watched devices (kept connected / recorded).
    public var watched: [BluetoothAddress] = []
    /// The adapter to use (nil: the first one).
    public var adapter: String?
    /// Bindkeys per device address (16 bytes); stored apart, mode 0600.
    public var bindkeys: [BluetoothAddress: [UInt8]] = [:]

    public init(watched: [BluetoothAddress] = [], adapter: String? = nil, bindkeys: [BluetoothAddress: [UInt8]] = [:]) {
        self.watched = watched
        self.adapter = adapter
        self.bindkeys = bindkeys
    }

    enum CodingKeys: String, CodingKey { case watched, adapter }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        watched = try c.decodeIfPresent([BluetoothAddress].self, forKey: .watched) ?? []
        adapter = try c.decodeIfPresent(String.self, forKey: .adapter)
    }
}

/// Settings in the XDG state directory (`$XDG_STATE_HOME/blecompanion`, else
/// `~/.local/state/blecompanion`; `--state-dir` overrides): `settings.json`,
/// and `bindkeys.json` readable by the owner only (0600). Files are replaced
/// atomically; every change is published.
public final class SettingsStore: Sendable {
    public let directory: URL
    private let store: StateStore<Settings>
    private let writeLock = Lock(())

    /// The directory to use: `override`, else XDG_STATE_HOME, else HOME.
    public static func defaultDirectory(override: String? = nil,
                                        environment: [String: String] = ProcessInfo.processInfo.environment) throws(DomainError) -> URL {
        if let override, !override.isEmpty { return URL(fileURLWithPath: override, isDirectory: true) }
        if let xdg = environment["XDG_STATE_HOME"], xdg.hasPrefix("/") {
            return URL(fileURLWithPath: xdg, isDirectory: true).appendingPathComponent("blecompanion", isDirectory: true)
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else {
            throw DomainError("no state directory: set HOME or XDG_STATE_HOME, or pass --state-dir")
        }
        return URL(fileURLWithPath: home, isDirectory: true).appendingPathComponent(".local/state/blecompanion", isDirectory: true)
    }

    /// Loads (or starts empty) from `directory`, creating it (0700) if needed.
    public init(directory: URL) throws(DomainError) {
        self.directory = directory
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw DomainError("cannot create the state directory \(directory.path): \(error.localizedDescription)", cause: error)
        }
        var settings = Settings()
        let main = directory.appendingPathComponent("settings.json")
        if let data = FileManager.default.contents(atPath: main.path) {
            do {
                settings = try JSONDecoder().decode(Settings.self, from: data)
            } catch {
                throw DomainError("\(main.path) is not valid settings: \(SettingsStore.explain(error))", cause: error)
            }
        }
        let keys = directory.appendingPathComponent("bindkeys.json")
        if FileManager.default.fileExists(atPath: keys.path) {
            var info = stat()
            if stat(keys.path, &info) == 0, info.st_mode & 0o077 != 0 {
                throw DomainError("\(keys.path) is readable by other users (mode \(String(info.st_mode & 0o777, radix: 8))); run `chmod 600 \(keys.path)`")
            }
            guard let data = FileManager.default.contents(atPath: keys.path) else {
                throw DomainError("cannot read \(keys.path)")
            }
            settings.bindkeys = try SettingsStore.parseBindkeys(data, file: keys.path)
        }
        store = StateStore(settings)
    }

    public var current: Settings { store.state }
    public func changes() -> AsyncStream<Settings> { store.states() }

    /// Changes the settings and writes them (atomically) before publishing.
    public func update(_ change: (inout Settings) -> Void) throws(DomainError) {
        var next = store.state
        change(&next)
        let snapshot = next
        let result: Result<Void, DomainError> = writeLock.withLock { _ in
            do throws(DomainError) {
                try write(snapshot)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
        store.update { $0 = snapshot }
    }

    private func write(_ settings: Settings) throws(DomainError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let main: Data
        do { main = try encoder.encode(settings) } catch { throw DomainError("cannot encode settings: \(error)", cause: error) }
        try atomicWrite(main, to: directory.appendingPathComponent("settings.json"), mode: 0o644)
        let keys = Dictionary(uniqueKeysWithValues: settings.bindkeys.map { ($0.key.description, $0.value.map { String(format: "%02x", $0) }.joined()) })
        let keyData: Data
        do { keyData = try encoder.encode(keys) } catch { throw DomainError("cannot encode bindkeys: \(error)", cause: error) }
        try atomicWrite(keyData, to: directory.appendingPathComponent("bindkeys.json"), mode: 0o600)
    }

    /// Writes a temporary file created with `mode`, syncs it, renames it over `url`.
    private func atomicWrite(_ data: Data, to url: URL, mode: mode_t) throws(DomainError) {
        let temp = url.path + ".tmp-\(getpid())"
        let fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw DomainError("cannot write \(temp): \(String(cString: strerror(errno)))") }
        _ = fchmod(fd, mode)
        let written = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == data.count, synced, rename(temp, url.path) == 0 else {
            unlink(temp)
            throw DomainError("cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
    }

    static func parseBindkeys(_ data: Data, file: String) throws(DomainError) -> [BluetoothAddress: [UInt8]] {
        guard let object = try? JSONSerialization.jsonObject(with: data), let dict = object as? [String: Any] else {
            throw DomainError("\(file) must be a JSON object of \"AA:BB:CC:DD:EE:FF\": \"32 hex digits\"")
        }
        var out: [BluetoothAddress: [UInt8]] = [:]
        for (key, value) in dict.sorted(by: { $0.key < $1.key }) {
            let address: BluetoothAddress
            do { address = try BluetoothAddress(key) } catch { throw DomainError("\(file): \(error.description)", cause: error) }
            guard let hex = value as? String, hex.count == 32 else {
                throw DomainError("\(file): the bindkey of \(key) must be 32 hex digits (16 bytes)")
            }
            var bytes: [UInt8] = []
            var index = hex.startIndex
            while index < hex.endIndex {
                let next = hex.index(index, offsetBy: 2)
                guard let b = UInt8(hex[index..<next], radix: 16) else {
                    throw DomainError("\(file): the bindkey of \(key) has a non-hex digit")
                }
                bytes.append(b)
                index = next
            }
            out[address] = bytes
        }
        return out
    }

    static func explain(_ error: any Error) -> String {
        guard let e = error as? DecodingError else { return "\(error)" }
        switch e {
        case let .dataCorrupted(c), let .typeMismatch(_, c), let .valueNotFound(_, c):
            let path = c.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return "\(path.isEmpty ? "" : path + ": ")\(c.debugDescription)"
        case let .keyNotFound(key, c):
            let path = c.codingPath.map(\.stringValue).joined(separator: ".")
            return "missing \(key.stringValue)\(path.isEmpty ? "" : " in " + path)"
        @unknown default:
            return "\(error)"
        }
    }
}
