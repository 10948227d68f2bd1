import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// The event log: what it shows, then its entries around the cursor.
struct EventLogWidget: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
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
}
