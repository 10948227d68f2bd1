import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// The device list: the filter and sort line, the column titles and the
/// rows in view, in the regions `DeviceListLayout` gives it.
struct DeviceListWidget: Widget {
    let view: DashboardView
    /// Rows drawn in earlier frames, reused while unchanged (nil: draw all).
    var rowCache: DeviceRowCache? = nil

    func draw(in area: Rect, _ b: inout Buffer) {
        let state = view.list
        let regions = DeviceListLayout(area)
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
        b.put(summary, x: regions.summary.x + 1, y: regions.summary.y, width: regions.summary.width - 2, style: Theme.dim)

        let columns = ListColumns(width: area.width)
        columns.header(&b, y: regions.columnTitles.y)
        let listArea = regions.rows

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
            rowCache?.beginFrame()
            for (i, row) in rows[first..<min(rows.count, first + visible)].enumerated() {
                let y = listArea.y + i
                let selected = first + i == cursor
                if let rowCache, listArea.x == 0, columns.width == b.width {
                    rowCache.draw(row, selected: selected, columns: columns, now: view.now, &b, y: y)
                } else {
                    columns.row(row, selected: selected, now: view.now, &b, y: y)
                }
            }
            if rows.count > visible {
                b.put("\(cursor + 1)/\(rows.count)", x: regions.summary.maxX - 8, y: regions.summary.y, width: 8, style: Theme.dim)
            }
        }
    }

}

/// Where the device list's parts go in the body: a summary line, the column
/// titles, then the rows. The same value places the rows for drawing and
/// for the mouse (``DashboardLayout/deviceListIndex(atRow:cursor:count:)``).
struct DeviceListLayout: Equatable {
    let summary: Rect
    let columnTitles: Rect
    let rows: Rect

    init(_ body: Rect) {
        summary = body.rows(0, 1)
        columnTitles = body.rows(1, 1)
        rows = body.rows(2, body.height - 2)
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

    /// Draws row `r` at line `y`; returns the x of its last column (SEEN),
    /// the only one that changes with the time alone.
    @discardableResult
    func row(_ r: DeviceListPresenter.Row, selected: Bool, now: Date, _ b: inout Buffer, y: Int) -> Int {
        let base: Style = selected ? Theme.selected : (r.stale ? Theme.dim : .plain)
        b.fill(Rect(x: 0, y: y, width: width, height: 1), style: base)
        b.put(selected ? "▶" : " ", x: 0, y: y, style: base)
        var x = 2
        // Cut and padded in the cells (as TextWidth.pad would, without
        // building the padded string for every cell of every frame).
        func col(_ text: String, _ w: Int, style: Style? = nil, right: Bool = false) {
            guard w > 0 else { return }
            let style = style ?? base
            if right {
                Self.putRight(text, x: x, y: y, width: w, style: style, &b)
            } else {
                b.put(text, x: x, y: y, width: w, style: style, pad: true)
            }
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
        let seenX = x
        seen(r, selected: selected, now: now, &b, x: seenX, y: y)
        return seenX
    }

    /// The SEEN column: how long ago the device was last heard.
    func seen(_ r: DeviceListPresenter.Row, selected: Bool, now: Date, _ b: inout Buffer, x: Int, y: Int) {
        let style: Style = selected ? Theme.selected : (r.stale ? Theme.dim : .plain)
        Self.putRight(Format.age(r.lastSeen, now: now), x: x, y: y, width: ListColumns.seen, style: style, &b)
    }

    /// `text` right-aligned in `width` columns from `x` (cut when longer),
    /// blanks of `style` before it.
    static func putRight(_ text: String, x: Int, y: Int, width w: Int, style: Style, _ b: inout Buffer) {
        let whole = TextWidth.of(text)
        let cut = whole <= w ? text : TextWidth.truncate(text, to: w)
        let used = whole <= w ? whole : TextWidth.of(cut)
        if used < w { b.fill(Rect(x: x, y: y, width: w - used, height: 1), style: style) }
        b.put(cut, x: x + w - used, y: y, style: style)
    }
}

/// The device list's rows as drawn in the last frame, by device: a row
/// whose device, selection and width are as then is copied back into the
/// buffer and only its SEEN column drawn again (the time moves on). In a
/// flood most rows on screen are unchanged from one frame to the next, and
/// drawing them (formatting readings, walking text into cells) was most of
/// drawing a frame. Holds the rows of one frame only: at most a screenful.
///
/// Used by the app's loop alone (one frame at a time); a snapshot test or
/// any caller without one draws every row.
final class DeviceRowCache {
    struct Entry {
        let row: DeviceListPresenter.Row
        let selected: Bool
        let cells: [Cell]
        let seenX: Int
    }
    private var previous: [DeviceID: Entry] = [:]
    private var current: [DeviceID: Entry] = [:]
    /// Rows copied back rather than drawn, since the cache was made (tests).
    private(set) var reused = 0

    /// Starts a frame: what the last one drew is what can be reused.
    func beginFrame() {
        previous = current
        current.removeAll(keepingCapacity: true)
    }

    func draw(_ r: DeviceListPresenter.Row, selected: Bool, columns: ListColumns, now: Date, _ b: inout Buffer, y: Int) {
        if let kept = previous[r.id] ?? current[r.id], kept.selected == selected, kept.cells.count == b.width, kept.row == r {
            b.putRow(kept.cells, y: y)
            columns.seen(r, selected: selected, now: now, &b, x: kept.seenX, y: y)
            current[r.id] = kept
            reused += 1
            return
        }
        let seenX = columns.row(r, selected: selected, now: now, &b, y: y)
        current[r.id] = Entry(row: r, selected: selected, cells: b.row(y), seenX: seenX)
    }
}
