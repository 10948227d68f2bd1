import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// A device's properties and history beside (or above) its GATT tree.
struct DeviceDetailWidget: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
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

    func properties(_ s: DeviceDetailPresenter.State, view: DashboardView, _ area: Rect, _ b: inout Buffer) {
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
            if !d.commands.isEmpty {
                let running: String = if case let .running(name) = s.profileCommand { " · \(name)… \(spinnerFrame(view.spinner))" } else { "" }
                lines.append(("Commands (m): \(d.commands.map { $0.arguments.isEmpty ? $0.name : "\($0.name) \($0.arguments(described: false))" }.joined(separator: ", "))\(running)", Theme.accent))
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

    func historyLine(_ s: DeviceDetailPresenter.State, view: DashboardView, width: Int) -> String {
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

    func commandName(_ c: DeviceDetailPresenter.Command) -> String {
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

    func gattTree(_ s: DeviceDetailPresenter.State, view: DashboardView, _ area: Rect, _ b: inout Buffer) {
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

    func flagsText(_ c: GATTCharacteristicNode) -> String {
        var f: [String] = []
        if c.canRead { f.append("R") }
        if c.canWrite { f.append("W") }
        if c.canWriteWithoutResponse { f.append("w") }
        if c.canNotify { f.append("N") }
        return f.joined()
    }

    func operationText(_ op: DeviceDetailPresenter.AttributeOperation) -> String {
        switch op {
        case .reading: return "reading…"
        case .writing: return "writing…"
        case .startingNotifications: return "subscribing…"
        case .stoppingNotifications: return "unsubscribing…"
        case let .failed(reason): return "✗ \(reason)"
        }
    }
}
