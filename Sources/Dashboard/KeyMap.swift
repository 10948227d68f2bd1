import TerminalUI

/// Where the keyboard is: each context has its own bindings, and `?` lists
/// the current context's.
public enum KeyContext: Sendable, Hashable {
    case deviceList
    case deviceDetail
    case pairing
    case eventLog
    case adapters
    case firmware
    /// A text field is open (search, hex value, passkey): keys are typed.
    case input
    case help
    case confirm
}

/// What a key means, named for what the user wants.
public enum Command: Sendable, Hashable {
    case quit, help, back
    case up, down, pageUp, pageDown, top, bottom, open
    // Device list
    case toggleScan, search, cycleSort, toggleNamedOnly, toggleWatchedOnly, cycleFormat, raiseRSSIThreshold, lowerRSSIThreshold
    case showEventLog, showAdapters
    // Device detail
    case toggleConnection, pair, toggleTrust, forget, toggleWatch, read, write, toggleNotify, nextHistorySeries, nextHistoryWindow, profileCommand
    // Pairing and confirmations
    case accept, reject, enterCode
    // Event log
    case cycleSeverity, toggleFollow, clearLog
    // Adapters
    case togglePower, toggleDiscoverable, togglePairable, cycleTransport
    // Firmware (from the device screen)
    case firmware, chooseImage, upload, uploadTestReset, testImage, confirmImage, resetDevice, cancelUpload, refresh, provisionWiFi
}

public struct Binding: Sendable, Hashable {
    public let keys: [Key]
    /// What the help overlay shows for the keys, e.g. "↑/k".
    public let keyLabel: String
    public let description: String
    public let command: Command
}

/// Every binding, per context: the single table both key handling and the
/// help overlay read, so they cannot disagree.
public enum KeyMap {
    static let navigation: [Binding] = [
        Binding(keys: [.up, .character("k")], keyLabel: "↑/k", description: "move up", command: .up),
        Binding(keys: [.down, .character("j")], keyLabel: "↓/j", description: "move down", command: .down),
        Binding(keys: [.pageUp, .ctrl("b")], keyLabel: "PgUp", description: "page up", command: .pageUp),
        Binding(keys: [.pageDown, .ctrl("f")], keyLabel: "PgDn", description: "page down", command: .pageDown),
        Binding(keys: [.home, .character("g")], keyLabel: "Home/g", description: "first", command: .top),
        Binding(keys: [.end, .character("G")], keyLabel: "End/G", description: "last", command: .bottom),
    ]
    static let common: [Binding] = [
        Binding(keys: [.character("?")], keyLabel: "?", description: "help for this screen", command: .help),
        Binding(keys: [.character("q"), .ctrl("c")], keyLabel: "q", description: "quit", command: .quit),
    ]
    static let back = Binding(keys: [.escape, .left, .character("h"), .backspace], keyLabel: "Esc/←/h", description: "back", command: .back)

    public static func bindings(_ context: KeyContext) -> [Binding] {
        switch context {
        case .deviceList:
            return navigation + [
                Binding(keys: [.enter, .right, .character("l")], keyLabel: "Enter/→/l", description: "open device", command: .open),
                Binding(keys: [.character("s")], keyLabel: "s", description: "start/stop scanning", command: .toggleScan),
                Binding(keys: [.character("/")], keyLabel: "/", description: "search name, address, format", command: .search),
                Binding(keys: [.character("o")], keyLabel: "o", description: "sort: RSSI, name, last seen", command: .cycleSort),
                Binding(keys: [.character("n")], keyLabel: "n", description: "only named devices", command: .toggleNamedOnly),
                Binding(keys: [.character("w")], keyLabel: "w", description: "only watched devices", command: .toggleWatchedOnly),
                Binding(keys: [.character("f")], keyLabel: "f", description: "filter by format", command: .cycleFormat),
                Binding(keys: [.character("+")], keyLabel: "+", description: "raise RSSI threshold 5 dB", command: .raiseRSSIThreshold),
                Binding(keys: [.character("-")], keyLabel: "-", description: "lower RSSI threshold 5 dB", command: .lowerRSSIThreshold),
                Binding(keys: [.character("e")], keyLabel: "e", description: "event log", command: .showEventLog),
                Binding(keys: [.character("a")], keyLabel: "a", description: "adapters", command: .showAdapters),
            ] + common
        case .deviceDetail:
            return navigation + [
                back,
                Binding(keys: [.character("c")], keyLabel: "c", description: "connect / disconnect", command: .toggleConnection),
                Binding(keys: [.character("p")], keyLabel: "p", description: "pair", command: .pair),
                Binding(keys: [.character("t")], keyLabel: "t", description: "trust / untrust", command: .toggleTrust),
                Binding(keys: [.character("W")], keyLabel: "W", description: "watch (keep connected, record)", command: .toggleWatch),
                Binding(keys: [.character("x")], keyLabel: "x", description: "forget (remove from bluetoothd)", command: .forget),
                Binding(keys: [.character("r"), .enter], keyLabel: "r/Enter", description: "read characteristic", command: .read),
                Binding(keys: [.character("w")], keyLabel: "w", description: "write hex to characteristic", command: .write),
                Binding(keys: [.character("n")], keyLabel: "n", description: "notifications on/off", command: .toggleNotify),
                Binding(keys: [.character("m")], keyLabel: "m", description: "run a command of the device's profile", command: .profileCommand),
                Binding(keys: [.character("F")], keyLabel: "F", description: "firmware and Wi-Fi provisioning", command: .firmware),
                Binding(keys: [.character("]")], keyLabel: "]", description: "next reading in the sparkline", command: .nextHistorySeries),
                Binding(keys: [.character("H")], keyLabel: "H", description: "history: 1 h, 24 h, 7 d", command: .nextHistoryWindow),
            ] + common
        case .pairing:
            return [
                Binding(keys: [.character("y")], keyLabel: "y", description: "accept / confirm", command: .accept),
                Binding(keys: [.character("n")], keyLabel: "n", description: "reject", command: .reject),
                Binding(keys: [.character("i"), .enter], keyLabel: "i/Enter", description: "type the passkey or PIN", command: .enterCode),
                Binding(keys: [.escape], keyLabel: "Esc", description: "cancel pairing / close", command: .back),
            ] + common
        case .eventLog:
            return navigation + [
                back,
                Binding(keys: [.enter, .right, .character("l")], keyLabel: "Enter", description: "open the entry's device", command: .open),
                Binding(keys: [.character("/")], keyLabel: "/", description: "search messages", command: .search),
                Binding(keys: [.character("v")], keyLabel: "v", description: "severity: all, warnings, errors", command: .cycleSeverity),
                Binding(keys: [.character("F")], keyLabel: "F", description: "follow new entries / freeze", command: .toggleFollow),
                Binding(keys: [.character("C")], keyLabel: "C", description: "clear the log", command: .clearLog),
            ] + common
        case .adapters:
            return navigation + [
                back,
                Binding(keys: [.enter, .character(" ")], keyLabel: "Enter", description: "select adapter", command: .open),
                Binding(keys: [.character("P")], keyLabel: "P", description: "power on/off", command: .togglePower),
                Binding(keys: [.character("d")], keyLabel: "d", description: "discoverable on/off", command: .toggleDiscoverable),
                Binding(keys: [.character("b")], keyLabel: "b", description: "pairable (bondable) on/off", command: .togglePairable),
                Binding(keys: [.character("s")], keyLabel: "s", description: "scan on/off", command: .toggleScan),
                Binding(keys: [.character("T")], keyLabel: "T", description: "filter transport: LE, BR/EDR, auto", command: .cycleTransport),
                Binding(keys: [.character("+")], keyLabel: "+", description: "raise filter RSSI 5 dB", command: .raiseRSSIThreshold),
                Binding(keys: [.character("-")], keyLabel: "-", description: "lower filter RSSI 5 dB", command: .lowerRSSIThreshold),
            ] + common
        case .firmware:
            return [
                back,
                Binding(keys: [.character("o")], keyLabel: "o", description: "choose an image file", command: .chooseImage),
                Binding(keys: [.character("u")], keyLabel: "u", description: "upload the image", command: .upload),
                Binding(keys: [.character("U")], keyLabel: "U", description: "upload, test and reset", command: .uploadTestReset),
                Binding(keys: [.character("t")], keyLabel: "t", description: "test the uploaded image on the next reset", command: .testImage),
                Binding(keys: [.character("c")], keyLabel: "c", description: "confirm the running image", command: .confirmImage),
                Binding(keys: [.character("R")], keyLabel: "R", description: "reset the device", command: .resetDevice),
                Binding(keys: [.character("x")], keyLabel: "x", description: "cancel the upload", command: .cancelUpload),
                Binding(keys: [.character("r")], keyLabel: "r", description: "read the slots again", command: .refresh),
                Binding(keys: [.character("w")], keyLabel: "w", description: "Wi-Fi credentials (Improv)", command: .provisionWiFi),
            ] + common
        case .confirm:
            return [
                Binding(keys: [.character("y")], keyLabel: "y", description: "yes", command: .accept),
                Binding(keys: [.character("n"), .escape], keyLabel: "n/Esc", description: "no", command: .reject),
            ]
        case .input:
            return [
                Binding(keys: [.enter], keyLabel: "Enter", description: "submit", command: .accept),
                Binding(keys: [.escape], keyLabel: "Esc", description: "cancel", command: .reject),
            ]
        case .help:
            return [Binding(keys: [.escape, .character("?"), .character("q")], keyLabel: "Esc/?", description: "close help", command: .back)]
        }
    }

    /// The command `key` means in `context`, if any.
    public static func command(for key: Key, in context: KeyContext) -> Command? {
        bindings(context).first { $0.keys.contains(key) }?.command
    }
}
