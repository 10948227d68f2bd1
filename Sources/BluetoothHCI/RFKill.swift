/// One rfkill switch as exposed in `/sys/class/rfkill/rfkillN/`.
public struct RFKillSwitch: Sendable, Hashable {
    /// Directory name, e.g. "rfkill0".
    public let id: String
    /// Contents of `name`, e.g. "hci0".
    public let name: String
    /// Contents of `type`, e.g. "bluetooth".
    public let type: String
    /// `soft` == 1: blocked by software (`rfkill block`, desktop airplane mode).
    public let softBlocked: Bool
    /// `hard` == 1: blocked by a hardware switch, key or firmware; software cannot clear it.
    public let hardBlocked: Bool

    public var isBlocked: Bool { softBlocked || hardBlocked }

    public init(id: String, name: String, type: String, softBlocked: Bool, hardBlocked: Bool) {
        self.id = id
        self.name = name
        self.type = type
        self.softBlocked = softBlocked
        self.hardBlocked = hardBlocked
    }
}

/// What rfkill says about Bluetooth.
public struct RFKillState: Sendable, Hashable {
    /// Whether `<sysfs>/class/rfkill` exists at all (absent: kernel without CONFIG_RFKILL,
    /// or sysfs not mounted).
    public let classDirectoryExists: Bool
    /// Switches whose `type` is "bluetooth", in natural order (rfkill2 before rfkill10).
    public let bluetoothSwitches: [RFKillSwitch]

    public init(classDirectoryExists: Bool, bluetoothSwitches: [RFKillSwitch]) {
        self.classDirectoryExists = classDirectoryExists
        self.bluetoothSwitches = bluetoothSwitches
    }
}

/// Why rfkill state could not be read.
public enum RFKillError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A directory or attribute could not be read (the failed call names the path).
    case unreadable(SystemCallError)
    /// An attribute had unexpected contents.
    case malformed(path: String, contents: String, expected: String)

    public var description: String {
        switch self {
        case .unreadable(let e):
            return "cannot read rfkill state: \(e)"
        case .malformed(let path, let contents, let expected):
            return "malformed rfkill attribute \(path): found \"\(contents)\", expected \(expected)"
        }
    }
}

public enum RFKill {
    /// Reads every `<sysfsRoot>/class/rfkill/rfkill*` entry and returns the Bluetooth ones.
    ///
    /// Entries of other types (wlan, wwan, …) are ignored without reading their block state,
    /// so a broken non-Bluetooth entry does not fail the call.
    /// - Parameter sysfsRoot: normally "/sys"; tests point it at a temporary tree.
    public static func read(sysfsRoot: String = "/sys") throws(RFKillError) -> RFKillState {
        let classDirectory = sysfsRoot + "/class/rfkill"
        guard POSIXFile.isDirectory(classDirectory) else {
            return RFKillState(classDirectoryExists: false, bluetoothSwitches: [])
        }
        let names: [String]
        switch POSIXFile.list(directory: classDirectory) {
        case .success(let list): names = list
        case .failure(let e): throw RFKillError.unreadable(e)
        }
        var switches: [RFKillSwitch] = []
        for entry in names where entry.hasPrefix("rfkill") {
            let directory = classDirectory + "/" + entry
            let type = try attribute(directory + "/type")
            guard type == "bluetooth" else { continue }
            let name = try attribute(directory + "/name")
            let soft = try flag(directory + "/soft")
            let hard = try flag(directory + "/hard")
            switches.append(RFKillSwitch(id: entry, name: name, type: type, softBlocked: soft, hardBlocked: hard))
        }
        return RFKillState(classDirectoryExists: true, bluetoothSwitches: switches)
    }

    /// A sysfs text attribute without its trailing newline.
    static func attribute(_ path: String) throws(RFKillError) -> String {
        switch POSIXFile.read(path: path, limit: 4096) {
        case .failure(let e):
            throw RFKillError.unreadable(e)
        case .success(let bytes):
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw RFKillError.malformed(path: path, contents: bytes.map { String($0) }.joined(separator: " "),
                                            expected: "UTF-8 text")
            }
            return text.trimmingTrailingNewlines()
        }
    }

    /// A 0/1 attribute (`soft`, `hard`).
    static func flag(_ path: String) throws(RFKillError) -> Bool {
        let text = try attribute(path)
        switch text {
        case "0": return false
        case "1": return true
        default: throw RFKillError.malformed(path: path, contents: text, expected: "0 or 1")
        }
    }
}

/// Facts from `/sys/class/bluetooth`.
public enum BluetoothSysfs {
    /// Entries of `<sysfsRoot>/class/bluetooth` (e.g. ["hci0"]), or nil when the directory
    /// does not exist (no Bluetooth core in the kernel, or sysfs not mounted).
    public static func classEntries(sysfsRoot: String = "/sys") -> Result<[String], SystemCallError>? {
        let directory = sysfsRoot + "/class/bluetooth"
        guard POSIXFile.isDirectory(directory) else { return nil }
        return POSIXFile.list(directory: directory)
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = Substring(self)
        while let last = s.last, last == "\n" || last == "\r" { s = s.dropLast() }
        return String(s)
    }
}
