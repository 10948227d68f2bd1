import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// The dashboard's content: a pure function from what to show and the
/// terminal's size to a buffer of cells. No I/O, no clocks (the time is in
/// the view), so every screen can be snapshot-tested from a fixed state.
public enum DashboardContent {
    public static let minimumWidth = 60
    public static let minimumHeight = 16

    enum Theme {
        static let header = Style(foreground: .black, background: .cyan, reverse: false)
        static let headerDim = Style(foreground: .black, background: .cyan)
        static let title = Style(bold: true)
        static let selected = Style(reverse: true)
        static let dim = Style(dim: true)
        static let ok = Style(foreground: .green)
        static let warn = Style(foreground: .yellow)
        static let bad = Style(foreground: .red)
        static let error = Style(foreground: .brightRed, bold: true)
        static let key = Style(foreground: .cyan, bold: true)
        static let border = Style(foreground: .gray)
        static let accent = Style(foreground: .brightBlue)
    }

    public static func render(_ view: DashboardView, width: Int, height: Int) -> Buffer {
        var b = Buffer(width: width, height: height)
        guard width >= minimumWidth, height >= minimumHeight else {
            tooSmall(&b)
            return b
        }
        header(view, &b)
        let body = Rect(x: 0, y: 1, width: width, height: height - 3)
        switch view.screen {
        case .deviceList: deviceList(view, body, &b)
        case .deviceDetail, .pairing: deviceDetail(view, body, &b)
        case .eventLog: eventLog(view, body, &b)
        case .adapters: adapters(view, body, &b)
        }
        if case .pairing = view.screen, let p = view.pairing { pairingDialog(p, view: view, &b) }
        if view.detail?.confirming == .forget, case .deviceDetail = view.screen { confirmForget(view, &b) }
        statusLine(view, &b)
        footer(view, &b)
        if view.help { helpOverlay(view.context == .help ? helpContext(view) : view.context, &b) }
        return b
    }

    /// The context whose bindings the help overlay lists (the one under it).
    static func helpContext(_ view: DashboardView) -> KeyContext {
        var under = view
        under.help = false
        return under.context
    }

    // MARK: Frame

    static func tooSmall(_ b: inout Buffer) {
        let lines = ["Terminal too small: \(b.width)×\(b.height).",
                     "BLE Companion needs at least \(minimumWidth)×\(minimumHeight).",
                     "Enlarge the window, or press q to quit."]
        let top = max(0, b.height / 2 - 1)
        for (i, line) in lines.enumerated() where top + i < b.height {
            let w = min(b.width, TextWidth.of(line))
            b.put(line, x: max(0, (b.width - w) / 2), y: top + i, width: b.width, style: i == 0 ? Theme.error : .plain)
        }
    }

    static func header(_ view: DashboardView, _ b: inout Buffer) {
        b.fill(Rect(x: 0, y: 0, width: b.width, height: 1), style: Theme.header)
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
        b.put(parts.joined(separator: " │ "), x: 0, y: 0, width: b.width, style: Theme.header)
        let screenName: String
        switch view.screen {
        case .deviceList: screenName = "Devices"
        case .deviceDetail, .pairing: screenName = "Device"
        case .eventLog: screenName = "Event log"
        case .adapters: screenName = "Adapters"
        }
        let label = " \(screenName) "
        let w = TextWidth.of(label)
        if b.width - w > TextWidth.of(parts.joined(separator: " │ ")) + 2 {
            b.put(label, x: b.width - w, y: 0, style: Theme.header.with { $0.bold = true })
        }
    }

    static func spinnerFrame(_ n: Int) -> String {
        let frames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
        return frames[((n % frames.count) + frames.count) % frames.count]
    }

    /// The second-to-last row: the open input line, else the newest notice.
    static func statusLine(_ view: DashboardView, _ b: inout Buffer) {
        let y = b.height - 2
        if let input = view.input {
            let x = b.put(input.prompt, x: 0, y: y, style: Theme.key)
            let end = b.put(input.text, x: x, y: y, width: b.width - x - 1)
            b.put("▏", x: end, y: y, style: Theme.key)
            return
        }
        if let notice = view.notices.last {
            b.put(notice.level == .error ? "✗ " + notice.text : notice.text, x: 0, y: y, width: b.width,
                  style: notice.level == .error ? Theme.error : Theme.ok)
        }
    }

    /// The last row: the most useful keys of the current context.
    static func footer(_ view: DashboardView, _ b: inout Buffer) {
        let y = b.height - 1
        let context = view.context
        let wanted: [Command]
        switch context {
        case .deviceList: wanted = [.toggleScan, .open, .search, .cycleSort, .showEventLog, .showAdapters, .help, .quit]
        case .deviceDetail: wanted = [.toggleConnection, .pair, .read, .write, .toggleNotify, .toggleTrust, .back, .help]
        case .pairing: wanted = [.accept, .reject, .back]
        case .eventLog: wanted = [.search, .cycleSeverity, .toggleFollow, .clearLog, .open, .back, .help]
        case .adapters: wanted = [.togglePower, .toggleScan, .toggleDiscoverable, .togglePairable, .cycleTransport, .back, .help]
        case .input: wanted = [.accept, .reject]
        case .help: wanted = [.back]
        case .confirm: wanted = [.accept, .reject]
        }
        let bindings = KeyMap.bindings(context)
        var x = 0
        for command in wanted {
            guard let binding = bindings.first(where: { $0.command == command }) else { continue }
            let short = shortDescription(binding)
            let need = TextWidth.of(binding.keyLabel) + 1 + TextWidth.of(short) + 2
            if x + need > b.width { break }
            x = b.put(binding.keyLabel, x: x, y: y, style: Theme.key)
            x = b.put(" " + short + "  ", x: x, y: y, style: Theme.dim)
        }
    }

    static func shortDescription(_ b: Binding) -> String {
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
        default: return b.description
        }
    }

    // MARK: Device list

    static func deviceList(_ view: DashboardView, _ area: Rect, _ b: inout Buffer) {
        let state = view.list
        // Filter summary.
        var filters: [String] = []
        if !state.filter.text.isEmpty { filters.append("“\(state.filter.text)”") }
        if state.filter.namedOnly { filters.append("named only") }
        if state.filter.watchedOnly { filters.append("watched only") }
        if let f = state.filter.format { filters.append("format \(f)") }
        if let r = state.filter.minimumRSSI { filters.append("≥ \(r) dBm") }
        let sortName: String
        switch state.sort {
        case .rssi: sortName = "signal"
        case .name: sortName = "name"
        case .lastSeen: sortName = "last seen"
        }
        let summary = "Filter: \(filters.isEmpty ? "none" : filters.joined(separator: " · "))   Sort: \(sortName)"
        b.put(summary, x: 1, y: area.y, width: area.width - 2, style: Theme.dim)

        let columns = ListColumns(width: area.width)
        let headY = area.y + 1
        columns.header(&b, y: headY)
        let listArea = Rect(x: area.x, y: area.y + 2, width: area.width, height: area.height - 2)

        switch state.devices {
        case .loading:
            centered("Waiting for bluetoothd…", in: listArea, &b, style: Theme.dim)
        case let .failed(reason):
            centered("✗ \(reason)", in: listArea, &b, style: Theme.error)
        case let .unavailable(why):
            let hint: String
            switch why {
            case .bluetooth(.adapterOff): hint = "Press a for adapters, then P to power it on."
            case .bluetooth(.bluetoothdGone): hint = "Start it with `sudo systemctl start bluetooth`; the list comes back by itself."
            default: hint = "Plug in an adapter, or check `rfkill list`."
            }
            centered("⚠ \(why)", in: listArea.rows(0, max(1, listArea.height / 2)), &b, style: Theme.warn, bottom: true)
            centered(hint, in: listArea.rows(listArea.height / 2, listArea.height - listArea.height / 2), &b, style: Theme.dim)
        case let .loaded(rows):
            if rows.isEmpty {
                let text: String
                if state.scan == .on { text = "Scanning… \(spinnerFrame(view.spinner)) no devices yet" }
                else if !filters.isEmpty { text = "No device matches the filter." }
                else { text = "No devices yet — press s to scan." }
                centered(text, in: listArea, &b, style: Theme.dim)
                return
            }
            let visible = listArea.height
            let cursor = min(max(0, view.listCursor), rows.count - 1)
            let first = scrollOffset(cursor: cursor, count: rows.count, visible: visible)
            for (i, row) in rows[first..<min(rows.count, first + visible)].enumerated() {
                columns.row(row, selected: first + i == cursor, now: view.now, &b, y: listArea.y + i)
            }
            if rows.count > visible {
                b.put("\(cursor + 1)/\(rows.count)", x: area.width - 8, y: area.y, width: 8, style: Theme.dim)
            }
        }
    }

    /// The device list's columns for a terminal width: the address and
    /// format columns go first when space runs out.
    struct ListColumns {
        let width: Int
        let name: Int
        let address: Int
        let format: Int
        let values: Int
        static let signal = 9, battery = 4, flags = 4, seen = 4

        init(width: Int) {
            self.width = width
            let showAddress = width >= 80
            let showFormat = width >= 110
            name = width >= 120 ? 22 : 16
            address = showAddress ? 17 : 0
            format = showFormat ? 9 : 0
            let fixed = 2 + name + 1 + (address > 0 ? address + 1 : 0) + ListColumns.signal + 1 + (format > 0 ? format + 1 : 0)
                + 1 + ListColumns.battery + 1 + ListColumns.flags + 1 + ListColumns.seen + 1
            values = max(0, width - fixed)
        }

        func header(_ b: inout Buffer, y: Int) {
            var x = 2
            func col(_ text: String, _ w: Int, right: Bool = false) {
                guard w > 0 else { return }
                b.put(TextWidth.pad(text, to: w, alignRight: right), x: x, y: y, style: Theme.title)
                x += w + 1
            }
            col("NAME", name)
            col("ADDRESS", address)
            col("SIGNAL", ListColumns.signal)
            col("FORMAT", format)
            col("VALUES", values)
            col("BAT", ListColumns.battery, right: true)
            col("PTCW", ListColumns.flags)
            col("SEEN", ListColumns.seen, right: true)
        }

        func row(_ r: DeviceListPresenter.Row, selected: Bool, now: Date, _ b: inout Buffer, y: Int) {
            let base: Style = selected ? Theme.selected : (r.stale ? Theme.dim : .plain)
            b.fill(Rect(x: 0, y: y, width: width, height: 1), style: base)
            b.put(selected ? "▶" : " ", x: 0, y: y, style: base)
            var x = 2
            func col(_ text: String, _ w: Int, style: Style? = nil, right: Bool = false) {
                guard w > 0 else { return }
                b.put(TextWidth.pad(text, to: w, alignRight: right), x: x, y: y, style: style ?? base)
                x += w + 1
            }
            col(r.title, name)
            col(r.id.address.description, address)
            let (bars, level) = Format.signalBars(r.rssi)
            let signalStyle = selected ? base : r.stale ? Theme.dim : level >= 3 ? Theme.ok : level == 2 ? Theme.warn : Theme.bad
            col(bars + (r.rssi.map { TextWidth.pad(" " + String($0), to: 5, alignRight: true) } ?? "     "), ListColumns.signal, style: signalStyle)
            col(r.format ?? "", format)
            col(Format.headline(r.readings), values)
            col(Format.battery(r.readings) ?? "", ListColumns.battery, right: true)
            var flags = ""
            flags.append(r.paired ? "P" : "·")
            flags.append(r.trusted ? "T" : "·")
            flags.append(r.connected ? "C" : "·")
            flags.append(r.watch == nil ? "·" : "W")
            let flagStyle: Style
            switch r.watch {
            case .retrying?: flagStyle = selected ? base : Theme.bad
            case .connecting?, .waitingForDevice?: flagStyle = selected ? base : Theme.warn
            default: flagStyle = base
            }
            col(flags, ListColumns.flags, style: flagStyle)
            col(Format.age(r.lastSeen, now: now), ListColumns.seen, right: true)
        }
    }

    static func scrollOffset(cursor: Int, count: Int, visible: Int) -> Int {
        guard visible > 0, count > visible else { return 0 }
        return min(max(0, cursor - visible / 2), count - visible)
    }

    static func centered(_ text: String, in area: Rect, _ b: inout Buffer, style: Style = .plain, bottom: Bool = false) {
        guard area.height > 0 else { return }
        let w = min(area.width, TextWidth.of(text))
        let y = bottom ? area.maxY - 1 : area.y + (area.height - 1) / 2
        b.put(text, x: area.x + max(0, (area.width - w) / 2), y: y, width: area.width, style: style)
    }

    // MARK: Device detail

    static func deviceDetail(_ view: DashboardView, _ area: Rect, _ b: inout Buffer) {
        guard let state = view.detail else {
            centered("…", in: area, &b, style: Theme.dim)
            return
        }
        let sideBySide = area.width >= 110
        let propsArea = sideBySide ? Rect(x: area.x, y: area.y, width: 46, height: area.height)
                                   : Rect(x: area.x, y: area.y, width: area.width, height: min(9, area.height / 2))
        let gattArea = sideBySide ? Rect(x: area.x + 46, y: area.y, width: area.width - 46, height: area.height)
                                  : Rect(x: area.x, y: propsArea.maxY, width: area.width, height: area.height - propsArea.height)
        properties(state, view: view, propsArea, &b)
        gattTree(state, view: view, gattArea, &b)
    }

    static func properties(_ s: DeviceDetailPresenter.State, view: DashboardView, _ area: Rect, _ b: inout Buffer) {
        b.box(area, title: "Device", style: Theme.border, titleStyle: Theme.title)
        let inner = area.inset(1)
        var lines: [(String, Style)] = []
        switch s.device {
        case .loading:
            lines.append(("Loading…", Theme.dim))
        case .failed, .unavailable:
            lines.append(("⚠ \(s.device.problem ?? "")", Theme.warn))
        case let .loaded(d):
            lines.append(("\(d.name ?? "(no name)")  \(d.id.address) \(d.addressType ?? "")", Theme.title))
            var status = [d.connected ? "connected" : "disconnected"]
            if d.paired { status.append("paired") }
            if d.bonded { status.append("bonded") }
            if d.trusted { status.append("trusted") }
            if d.blocked { status.append("blocked") }
            lines.append((status.joined(separator: " · "), d.connected ? Theme.ok : .plain))
            switch s.command {
            case .idle: break
            case let .running(c): lines.append(("\(commandName(c))… \(spinnerFrame(view.spinner))", Theme.warn))
            case let .failed(c, reason): lines.append(("✗ \(commandName(c)) failed: \(reason)", Theme.error))
            }
            var signal = "RSSI \(d.rssi.map { "\($0) dBm" } ?? "—")"
            if let tx = d.txPower { signal += " · TX \(tx) dBm" }
            let spark = Format.sparkline(s.rssiHistory.map { Double($0.value) }, width: 16)
            if !spark.isEmpty { signal += "  " + spark }
            lines.append((signal, .plain))
            var power = "Battery \(d.battery.map { "\($0) %" } ?? "—")"
            switch s.watch {
            case .unknown: break
            case .notWatched: power += " · not watched"
            case let .watched(status): power += " · \(Format.connection(status))"
            }
            lines.append((power, .plain))
            if let format = d.format {
                lines.append(("\(format): \(d.readings.map { Format.reading($0) }.joined(separator: ", "))", Theme.accent))
            }
            let age = Format.age(d.lastSeen, now: view.now)
            let seen = d.lastSeen == nil ? "Not heard this session" : age == "now" ? "Heard just now" : "Heard \(age) ago"
            lines.append(("\(seen) · \(d.uuids.count) service UUID\(d.uuids.count == 1 ? "" : "s")", Theme.dim))
            lines.append((historyLine(s, view: view, width: inner.width), .plain))
        }
        for (i, line) in lines.enumerated() where i < inner.height {
            b.put(line.0, x: inner.x, y: inner.y + i, width: inner.width, style: line.1)
        }
    }

    static func historyLine(_ s: DeviceDetailPresenter.State, view: DashboardView, width: Int) -> String {
        let window = s.historyWindow >= 86_400 * 2 ? "\(Int(s.historyWindow / 86_400)) d" : "\(Int(s.historyWindow / 3_600)) h"
        switch s.history {
        case .loading: return "History (\(window)): loading…"
        case .failed, .unavailable: return "History: \(s.history.problem ?? "")"
        case let .loaded(series):
            guard !series.isEmpty else { return "History (\(window)): nothing recorded" }
            let chosen = series[min(max(0, view.historySeries), series.count - 1)]
            let values = chosen.points.map(\.value)
            let name = chosen.kind.rawValue.replacingOccurrences(of: "_", with: " ") + (chosen.label.isEmpty ? "" : "[\(chosen.label)]")
            let range = "\(Format.number(values.min() ?? 0))–\(Format.number(values.max() ?? 0))"
            let prefix = "\(name) \(window) \(range) "
            return prefix + Format.sparkline(values, width: max(4, width - TextWidth.of(prefix)))
        }
    }

    static func commandName(_ c: DeviceDetailPresenter.Command) -> String {
        switch c {
        case .connect: return "connecting"
        case .disconnect: return "disconnecting"
        case .trust: return "trusting"
        case .untrust: return "untrusting"
        case .forget: return "forgetting"
        case .watch: return "watching"
        case .unwatch: return "unwatching"
        }
    }

    static func gattTree(_ s: DeviceDetailPresenter.State, view: DashboardView, _ area: Rect, _ b: inout Buffer) {
        b.box(area, title: "GATT", style: Theme.border, titleStyle: Theme.title)
        let inner = area.inset(1)
        guard inner.height > 0 else { return }
        switch s.services {
        case .loading:
            centered("Resolving services… \(spinnerFrame(view.spinner))", in: inner, &b, style: Theme.dim)
            return
        case .unavailable(.notConnected):
            centered("Press c to connect and discover services.", in: inner, &b, style: Theme.dim)
            return
        case .failed, .unavailable:
            centered(s.services.problem ?? "", in: inner, &b, style: Theme.dim)
            return
        case let .loaded(services):
            if services.isEmpty {
                centered("No services.", in: inner, &b, style: Theme.dim)
                return
            }
            // Lines: a service header, then its characteristics (selectable).
            var lines: [(text: String, style: Style, characteristic: Int?)] = []
            var index = 0
            for service in services {
                lines.append(("\(service.name ?? "Service") (\(Format.shortUUID(service.uuid)))\(service.primary ? "" : " secondary")", Theme.title, nil))
                for c in service.characteristics {
                    var text = "  \(c.name ?? Format.shortUUID(c.uuid)) [\(flagsText(c))]"
                    if c.notifying { text += " ◉" }
                    if let v = c.value { text += " = \(hexString(bytes: v))" }
                    if let d = Format.decoded(c.decoded) { text += " → \(d)" }
                    if let op = s.operations[c.id] { text += "  " + operationText(op) }
                    lines.append((text, .plain, index))
                    index += 1
                }
            }
            let cursor = min(max(0, view.detailCursor), max(0, index - 1))
            let cursorLine = lines.firstIndex { $0.characteristic == cursor } ?? 0
            let first = scrollOffset(cursor: cursorLine, count: lines.count, visible: inner.height)
            for (i, line) in lines[first..<min(lines.count, first + inner.height)].enumerated() {
                let selected = line.characteristic == cursor
                var style = line.style
                if selected { style = Theme.selected } else if line.text.contains("  ✗ ") { style = Theme.error }
                b.put(line.text, x: inner.x, y: inner.y + i, width: inner.width, style: style, pad: selected)
            }
        }
    }

    static func flagsText(_ c: GATTCharacteristicNode) -> String {
        var f: [String] = []
        if c.canRead { f.append("R") }
        if c.canWrite { f.append("W") }
        if c.canWriteWithoutResponse { f.append("w") }
        if c.canNotify { f.append("N") }
        return f.joined()
    }

    static func operationText(_ op: DeviceDetailPresenter.AttributeOperation) -> String {
        switch op {
        case .reading: return "reading…"
        case .writing: return "writing…"
        case .startingNotifications: return "subscribing…"
        case .stoppingNotifications: return "unsubscribing…"
        case let .failed(reason): return "✗ \(reason)"
        }
    }

    // MARK: Dialogs

    static func dialogRect(_ b: Buffer, width: Int, height: Int) -> Rect {
        let w = min(b.width - 4, width), h = min(b.height - 4, height)
        return Rect(x: (b.width - w) / 2, y: (b.height - h) / 2, width: w, height: h)
    }

    static func pairingDialog(_ p: PairingPresenter.State, view: DashboardView, _ b: inout Buffer) {
        let r = dialogRect(b, width: 56, height: 9)
        b.fill(r, style: .plain)
        let name = view.detail?.device.value?.name ?? p.device.address.description
        b.box(r, title: "Pairing with \(name)", style: Theme.accent, titleStyle: Theme.title)
        let inner = r.inset(1).inset(0)
        var lines: [(String, Style)] = []
        switch p.phase {
        case .idle:
            lines = [("Starting…", Theme.dim)]
        case .pairing(nil):
            lines = [("Pairing… \(spinnerFrame(view.spinner))", Theme.warn), ("bluetoothd is talking to the device.", Theme.dim), ("", .plain), ("Esc cancels.", Theme.dim)]
        case let .pairing(question?):
            switch question {
            case .enterPasskey, .enterPIN:
                let what = question == .enterPasskey ? "the 6-digit passkey the device shows" : "the device's PIN code"
                lines = [("Enter \(what):", .plain), ("", .plain), ("  [ \(TextWidth.pad(p.input + "▏", to: 18)) ]", Theme.key),
                         (p.inputProblem ?? "", Theme.dim), ("Enter submits · Esc cancels", Theme.dim)]
            case let .confirmPasskey(code):
                lines = [("Does the device show this passkey?", .plain), ("", .plain), ("      \(code)", Theme.title), ("", .plain),
                         ("y confirm · n reject · Esc cancel", Theme.dim)]
            case .authorize:
                lines = [("The device asks to pair without a code.", .plain), ("Allow it?", .plain), ("", .plain), ("y allow · n reject", Theme.dim)]
            case let .authorizeService(uuid):
                let service = AttributeDecoding.name(of: uuid).map { "\($0) (\(Format.shortUUID(uuid)))" } ?? Format.shortUUID(uuid)
                lines = [("The device wants to use a service:", .plain), ("  \(service)", Theme.title), ("", .plain), ("y allow · n reject", Theme.dim)]
            case let .typeOnDevice(code):
                lines = [("Type this code on the device:", .plain), ("", .plain), ("      \(code)", Theme.title), ("", .plain),
                         ("Waiting for the device… Esc cancels", Theme.dim)]
            }
        case .paired:
            lines = [("✓ Paired with \(name).", Theme.ok), ("", .plain), ("Esc closes.", Theme.dim)]
        case let .failed(reason):
            lines = [("✗ Pairing failed:", Theme.error), (reason, .plain), ("", .plain), ("Esc closes.", Theme.dim)]
        }
        for (i, line) in lines.enumerated() where i < inner.height {
            b.put(line.0, x: inner.x + 1, y: inner.y + i, width: inner.width - 2, style: line.1)
        }
    }

    static func confirmForget(_ view: DashboardView, _ b: inout Buffer) {
        let r = dialogRect(b, width: 52, height: 7)
        b.fill(r, style: .plain)
        b.box(r, title: "Forget device", style: Theme.warn, titleStyle: Theme.title)
        let name = view.detail?.device.value?.name ?? view.detail?.id.address.description ?? ""
        let inner = r.inset(1)
        b.put("Remove \(name) from bluetoothd?", x: inner.x + 1, y: inner.y, width: inner.width - 2)
        b.put("Its pairing keys are deleted too.", x: inner.x + 1, y: inner.y + 1, width: inner.width - 2, style: Theme.dim)
        b.put("y forget · n keep", x: inner.x + 1, y: inner.y + 3, width: inner.width - 2, style: Theme.key)
    }

    static func helpOverlay(_ context: KeyContext, _ b: inout Buffer) {
        let bindings = KeyMap.bindings(context)
        // One column when it fits, else two.
        let maxRows = b.height - 4 - 3
        let columns = bindings.count > maxRows ? 2 : 1
        let perColumn = (bindings.count + columns - 1) / columns
        let r = dialogRect(b, width: columns == 1 ? 64 : 78, height: perColumn + 3)
        b.fill(r, style: .plain)
        b.box(r, title: "Keys — \(contextName(context))", style: Theme.accent, titleStyle: Theme.title)
        let inner = r.inset(1)
        let columnWidth = inner.width / columns
        for (i, binding) in bindings.enumerated() {
            let column = i / perColumn, row = i % perColumn
            guard row < inner.height - 1 else { continue }
            let x = inner.x + 1 + column * columnWidth
            let keyWidth = columns == 1 ? 12 : 10
            b.put(TextWidth.pad(binding.keyLabel, to: keyWidth), x: x, y: inner.y + row, style: Theme.key)
            b.put(binding.description, x: x + keyWidth + 1, y: inner.y + row, width: columnWidth - keyWidth - 2)
        }
        b.put("Esc or ? closes", x: inner.x + 1, y: inner.maxY - 1, width: inner.width - 2, style: Theme.dim)
    }

    static func contextName(_ c: KeyContext) -> String {
        switch c {
        case .deviceList: return "device list"
        case .deviceDetail: return "device"
        case .pairing: return "pairing"
        case .eventLog: return "event log"
        case .adapters: return "adapters"
        case .input: return "text field"
        case .help: return "help"
        case .confirm: return "confirmation"
        }
    }

    // MARK: Event log

    static func eventLog(_ view: DashboardView, _ area: Rect, _ b: inout Buffer) {
        let s = view.log
        let severity: String
        switch s.filter.minimumSeverity {
        case .info: severity = "all"
        case .warning: severity = "warnings and errors"
        case .error: severity = "errors"
        }
        var summary = "Showing \(severity)"
        if !s.filter.text.isEmpty { summary += " · “\(s.filter.text)”" }
        switch s.follow {
        case .following: summary += " · following"
        case .frozen: summary += " · frozen (F follows)"
        }
        if s.dropped > 0 { summary += " · \(s.dropped) older dropped" }
        b.put(summary, x: 1, y: area.y, width: area.width - 2, style: Theme.dim)
        let listArea = Rect(x: area.x, y: area.y + 1, width: area.width, height: area.height - 1)
        switch s.entries {
        case .loading: centered("…", in: listArea, &b, style: Theme.dim)
        case .failed, .unavailable: centered(s.entries.problem ?? "", in: listArea, &b, style: Theme.warn)
        case let .loaded(rows):
            if rows.isEmpty {
                centered("Nothing logged yet.", in: listArea, &b, style: Theme.dim)
                return
            }
            let cursor = min(max(0, view.logCursor), rows.count - 1)
            let first = scrollOffset(cursor: cursor, count: rows.count, visible: listArea.height)
            for (i, row) in rows[first..<min(rows.count, first + listArea.height)].enumerated() {
                let selected = first + i == cursor
                let y = listArea.y + i
                let mark: String, style: Style
                switch row.severity {
                case .info: (mark, style) = ("·", .plain)
                case .warning: (mark, style) = ("⚠", Theme.warn)
                case .error: (mark, style) = ("✗", Theme.error)
                }
                let line = "\(Format.clock(row.at, timeZone: view.timeZone))  \(mark) \(row.message)"
                b.put(line, x: 1, y: y, width: area.width - 2, style: selected ? Theme.selected : style, pad: selected)
            }
        }
    }

    // MARK: Adapters

    static func adapters(_ view: DashboardView, _ area: Rect, _ b: inout Buffer) {
        let s = view.adapters
        let draft = s.appliedFilter
        var filter = "Scan filter: \(transportName(draft.transport))"
        if let r = draft.rssiThreshold { filter += " · RSSI ≥ \(r) dBm" }
        if !draft.uuids.isEmpty { filter += " · UUIDs \(draft.uuids.joined(separator: ","))" }
        if !draft.pattern.isEmpty { filter += " · “\(draft.pattern)”" }
        b.put(filter, x: 1, y: area.y, width: area.width - 2, style: Theme.dim)
        let listArea = Rect(x: area.x, y: area.y + 2, width: area.width, height: area.height - 2)
        switch s.adapters {
        case .loading: centered("…", in: listArea, &b, style: Theme.dim)
        case .failed, .unavailable: centered("⚠ \(s.adapters.problem ?? "")", in: listArea, &b, style: Theme.warn)
        case let .loaded(rows):
            if rows.isEmpty {
                centered("No adapters.", in: listArea, &b, style: Theme.dim)
                return
            }
            let cursor = min(max(0, view.adapterCursor), rows.count - 1)
            for (i, row) in rows.enumerated() where i * 3 + 2 < listArea.height {
                let y = listArea.y + i * 3
                let selected = i == cursor
                let chosen = row.id == s.selected
                let title = "\(chosen ? "●" : "○") \(row.id.name)  \(row.title)  \(row.address ?? "")"
                b.put(title, x: 1, y: y, width: area.width - 2, style: selected ? Theme.selected : Theme.title, pad: selected)
                let switches = "power \(toggleText(row.power)) · discoverable \(toggleText(row.discoverable)) · pairable \(toggleText(row.pairable)) · scan \(toggleText(row.scan))\(row.discovering && row.scan == .off ? " (another client scans)" : "")"
                b.put(switches, x: 3, y: y + 1, width: area.width - 4)
            }
        }
        if let error = s.error {
            b.put("✗ \(error)", x: 1, y: area.maxY - 1, width: area.width - 2, style: Theme.error)
        }
    }

    static func toggleText(_ t: AdaptersPresenter.Toggle) -> String {
        switch t {
        case .on: return "on"
        case .off: return "off"
        case .turningOn: return "turning on…"
        case .turningOff: return "turning off…"
        }
    }

    static func transportName(_ t: DiscoveryFilter.Transport) -> String {
        switch t {
        case .le: return "LE"
        case .bredr: return "BR/EDR"
        case .auto: return "LE + BR/EDR"
        }
    }
}
