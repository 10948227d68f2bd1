import TerminalUI

/// Where each part of the dashboard goes for one terminal size: worked out
/// once per frame, read by the drawing (`DashboardContent.render`) and by
/// the mouse (`DashboardScreen`), so a click lands on the row that was
/// drawn there.
///
/// Rows, top to bottom: the header bar, the body (the current screen), the
/// status line, the key footer. On the device list the body is a summary
/// line, the column titles, then the rows.
public struct DashboardLayout: Sendable, Equatable {
    /// Below the minimum size only the "enlarge the window" message fits.
    public let tooSmall: Bool
    let screen: Rect
    let header: Rect
    let body: Rect
    let statusLine: Rect
    let footer: Rect
    let deviceList: DeviceListLayout

    public var width: Int { screen.width }
    public var height: Int { screen.height }

    public init(width: Int, height: Int) {
        tooSmall = width < DashboardContent.minimumWidth || height < DashboardContent.minimumHeight
        screen = Rect(x: 0, y: 0, width: width, height: height)
        header = screen.rows(0, 1)
        body = screen.rows(1, height - 3)
        statusLine = screen.rows(height - 2, 1)
        footer = screen.rows(height - 1, 1)
        deviceList = DeviceListLayout(body)
    }

    /// How many device rows are in view (at least one, for scrolling maths).
    var visibleDeviceRows: Int { max(1, deviceList.rows.height) }

    /// The index of the device row drawn at screen row `y` in a list of
    /// `count` rows with the cursor at `cursor`; nil off the rows or past
    /// the list's end.
    func deviceListIndex(atRow y: Int, cursor: Int, count: Int) -> Int? {
        let rows = deviceList.rows
        guard !tooSmall, y >= rows.y, y < rows.maxY, count > 0 else { return nil }
        let first = scrollOffset(cursor: min(max(0, cursor), count - 1), count: count, visible: rows.height)
        let index = first + (y - rows.y)
        return index < count ? index : nil
    }
}
