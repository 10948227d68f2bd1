import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// "Enlarge the window": all that is drawn below the minimum size.
struct TooSmallMessage: Widget {
    func draw(in area: Rect, _ b: inout Buffer) {
        let lines = ["Terminal too small: \(area.width)×\(area.height).",
                     "BLE Companion needs at least \(DashboardContent.minimumWidth)×\(DashboardContent.minimumHeight).",
                     "Enlarge the window, or press q to quit."]
        let top = max(0, area.y + area.height / 2 - 1)
        for (i, line) in lines.enumerated() where top + i < area.maxY {
            let w = min(area.width, TextWidth.of(line))
            b.put(line, x: area.x + max(0, (area.width - w) / 2), y: top + i, width: area.width, style: i == 0 ? Theme.error : .plain)
        }
    }
}

/// The top row: adapter, scan, device count, bluetoothd, the screen's name.
struct HeaderBar: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
        b.fill(area.rows(0, 1), style: Theme.header)
        var parts: [String] = [" BLE Companion"]
        let adapter = view.adapters.adapters.value?.first { $0.id == view.adapters.selected } ?? view.adapters.adapters.value?.first
        if let a = adapter {
            parts.append("\(a.id.name) \(a.title)")
            parts.append(a.power == .on ? "● on" : a.power == .off ? "○ off" : "◌ \(a.power == .turningOn ? "turning on" : "turning off")")
        }
        switch view.list.scan {
        case .on: parts.append("scanning \(spinnerFrame(view.spinner))")
        case .starting: parts.append("starting scan…")
        case .stopping: parts.append("stopping scan…")
        case .off: parts.append("not scanning")
        case .failed: parts.append("scan failed")
        }
        switch view.list.devices {
        case let .loaded(rows): parts.append("\(rows.count) device\(rows.count == 1 ? "" : "s")")
        case .loading: parts.append("…")
        case .failed, .unavailable: break
        }
        if case let .unavailable(why) = view.list.devices {
            parts.append("⚠ \(why)")
        } else {
            parts.append(view.bluetoothdAnswering ? "bluetoothd ✓" : "⚠ bluetoothd not answering")
        }
        b.put(parts.joined(separator: " │ "), x: area.x, y: area.y, width: area.width, style: Theme.header)
        let screenName: String
        switch view.screen {
        case .deviceList: screenName = "Devices"
        case .deviceDetail, .pairing: screenName = "Device"
        case .eventLog: screenName = "Event log"
        case .adapters: screenName = "Adapters"
        case .firmware: screenName = "Firmware"
        }
        let label = " \(screenName) "
        let w = TextWidth.of(label)
        if area.width - w > TextWidth.of(parts.joined(separator: " │ ")) + 2 {
            b.put(label, x: area.maxX - w, y: area.y, style: Theme.header.with { $0.bold = true })
        }
    }
}

/// The second-to-last row: the open input line, else the newest notice.
struct StatusLine: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
        let y = area.y
        if let input = view.input {
            let x = b.put(input.prompt, x: area.x, y: y, style: Theme.key)
            let end = b.put(input.shown, x: x, y: y, width: area.maxX - x - 1)
            b.put("▏", x: end, y: y, style: Theme.key)
            return
        }
        if let notice = view.notices.last {
            b.put(notice.level == .error ? "✗ " + notice.text : notice.text, x: area.x, y: y, width: area.width,
                  style: notice.level == .error ? Theme.error : Theme.ok)
        }
    }
}

/// The last row: the most useful keys of the current context.
struct KeyFooter: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
        let y = area.y
        let context = view.context
        let wanted: [Command]
        switch context {
        case .deviceList: wanted = [.toggleScan, .open, .search, .cycleSort, .showEventLog, .showAdapters, .help, .quit]
        case .deviceDetail: wanted = [.toggleConnection, .pair, .read, .write, .toggleNotify, .toggleTrust, .back, .help]
        case .pairing: wanted = [.accept, .reject, .back]
        case .eventLog: wanted = [.search, .cycleSeverity, .toggleFollow, .clearLog, .open, .back, .help]
        case .adapters: wanted = [.togglePower, .toggleScan, .toggleDiscoverable, .togglePairable, .cycleTransport, .back, .help]
        case .firmware: wanted = [.chooseImage, .upload, .uploadTestReset, .confirmImage, .resetDevice, .cancelUpload, .provisionWiFi, .back, .help]
        case .input: wanted = [.accept, .reject]
        case .help: wanted = [.back]
        case .confirm: wanted = [.accept, .reject]
        }
        let bindings = KeyMap.bindings(context)
        var x = area.x
        for command in wanted {
            guard let binding = bindings.first(where: { $0.command == command }) else { continue }
            let short = shortDescription(binding)
            let need = TextWidth.of(binding.keyLabel) + 1 + TextWidth.of(short) + 2
            if x + need > area.maxX { break }
            x = b.put(binding.keyLabel, x: x, y: y, style: Theme.key)
            x = b.put(" " + short + "  ", x: x, y: y, style: Theme.dim)
        }
    }

    func shortDescription(_ b: Binding) -> String {
        switch b.command {
        case .toggleScan: return "scan"
        case .open: return "open"
        case .search: return "search"
        case .cycleSort: return "sort"
        case .showEventLog: return "log"
        case .showAdapters: return "adapters"
        case .help: return "help"
        case .quit: return "quit"
        case .toggleConnection: return "connect"
        case .pair: return "pair"
        case .read: return "read"
        case .write: return "write"
        case .toggleNotify: return "notify"
        case .toggleTrust: return "trust"
        case .back: return "back"
        case .accept: return "yes"
        case .reject: return "no"
        case .cycleSeverity: return "severity"
        case .toggleFollow: return "follow"
        case .clearLog: return "clear"
        case .togglePower: return "power"
        case .toggleDiscoverable: return "discoverable"
        case .togglePairable: return "pairable"
        case .cycleTransport: return "transport"
        case .chooseImage: return "image"
        case .upload: return "upload"
        case .uploadTestReset: return "upload+test"
        case .confirmImage: return "confirm"
        case .resetDevice: return "reset"
        case .cancelUpload: return "cancel"
        case .provisionWiFi: return "Wi-Fi"
        default: return b.description
        }
    }
}
