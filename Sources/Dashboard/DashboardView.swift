import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters

/// A short-lived message at the bottom of the screen (every failure gets one).
public struct Notice: Sendable, Equatable {
    public enum Level: Sendable, Equatable { case info, error }
    public var text: String
    public var level: Level
    public var expires: Date
    public init(_ text: String, level: Level, expires: Date) {
        self.text = text
        self.level = level
        self.expires = expires
    }
}

/// A one-line text field at the bottom (search, a hex value to write).
public struct InputLine: Sendable, Equatable {
    public enum Purpose: Sendable, Equatable {
        case searchDevices
        case searchLog
        case write(GATTAttributeID, withoutResponse: Bool)
        /// A profile command: its name and ARG=VALUE words.
        case profileCommand
        /// The firmware screen: an image file's path; a network name; its password (shown masked).
        case firmwareImage
        case wifiSSID
        case wifiPassword(ssid: String)
    }
    public var purpose: Purpose
    public var text: String
    public init(purpose: Purpose, text: String = "") {
        self.purpose = purpose
        self.text = text
    }
    public var prompt: String {
        switch purpose {
        case .searchDevices, .searchLog: return "/"
        case .write: return "write hex: "
        case .profileCommand: return "command: "
        case .firmwareImage: return "image file: "
        case .wifiSSID: return "Wi-Fi network (SSID): "
        case let .wifiPassword(ssid): return "password for \(ssid): "
        }
    }

    /// What the line shows: a password as bullets.
    public var shown: String {
        if case .wifiPassword = purpose { return String(repeating: "•", count: text.count) }
        return text
    }
}

/// Everything the dashboard draws, at one moment: the presenters' states
/// plus the front end's own view state (cursors, open overlays, notices).
/// `DashboardContent.render` turns it into cells; nothing else does.
public struct DashboardView: Sendable, Equatable {
    public var screen: Screen = .deviceList
    public var list = DeviceListPresenter.State()
    public var listCursor = 0
    /// The device under the cursor: the cursor follows it when the list
    /// reorders (RSSI sorting moves rows all the time).
    public var listSelection: DeviceID?
    public var detail: DeviceDetailPresenter.State?
    /// Index among the detail screen's characteristics.
    public var detailCursor = 0
    /// Which history series the sparkline shows (index into the loaded series).
    public var historySeries = 0
    public var pairing: PairingPresenter.State?
    public var firmware: FirmwarePresenter.State?
    public var log = EventLogPresenter.State()
    public var logCursor = 0
    public var adapters = AdaptersPresenter.State()
    public var adapterCursor = 0
    public var input: InputLine?
    public var help = false
    public var notices: [Notice] = []
    /// False while bluetoothd keeps its bus name but does not answer its
    /// pings (the log's last word on it; see `BluetoothdLiveness`).
    public var bluetoothdAnswering = true
    public var now: Date
    /// Times in the event log are shown in this zone (the user's).
    public var timeZone: TimeZone = .current
    /// Advances while something is in progress (scanning, connecting).
    public var spinner = 0

    public init(now: Date) { self.now = now }

    /// Where the keyboard is.
    public var context: KeyContext {
        if help { return .help }
        if input != nil { return .input }
        if pairing != nil, case .pairing = screen { return .pairing }
        if detail?.confirming != nil, case .deviceDetail = screen { return .confirm }
        switch screen {
        case .deviceList: return .deviceList
        case .deviceDetail: return .deviceDetail
        case .pairing: return .pairing
        case .eventLog: return .eventLog
        case .adapters: return .adapters
        case .firmware: return .firmware
        }
    }

    /// The detail screen's characteristics in display order.
    public var detailCharacteristics: [GATTCharacteristicNode] {
        detail?.services.value?.flatMap(\.characteristics) ?? []
    }

    /// The log rows shown (the presenter's filtered entries).
    public var logRows: [EventLogPresenter.Row] { log.entries.value ?? [] }
}
