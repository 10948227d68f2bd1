import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// The adapters: the scan filter, then each adapter with its switches.
struct AdaptersWidget: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
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

    func toggleText(_ t: AdaptersPresenter.Toggle) -> String {
        switch t {
        case .on: return "on"
        case .off: return "off"
        case .turningOn: return "turning on…"
        case .turningOff: return "turning off…"
        }
    }

    func transportName(_ t: DiscoveryFilter.Transport) -> String {
        switch t {
        case .le: return "LE"
        case .bredr: return "BR/EDR"
        case .auto: return "LE + BR/EDR"
        }
    }
}
