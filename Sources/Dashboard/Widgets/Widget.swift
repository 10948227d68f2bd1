import TerminalUI

/// A part of the dashboard that draws itself into the rectangle it is
/// given (ratatui's widget model). Where each rectangle is comes from one
/// `DashboardLayout` per frame, which the mouse hit-test reads too.
protocol Widget {
    func draw(in area: Rect, _ b: inout Buffer)
}

/// The dashboard's styles, one name per meaning.
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

/// Frame `n` of the busy spinner (any `n`, negative too).
func spinnerFrame(_ n: Int) -> String {
    let frames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
    return frames[((n % frames.count) + frames.count) % frames.count]
}

/// The first of `count` lines to show in `visible` rows so that `cursor`
/// stays in view, near the middle once the list is longer than the view.
func scrollOffset(cursor: Int, count: Int, visible: Int) -> Int {
    guard visible > 0, count > visible else { return 0 }
    return min(max(0, cursor - visible / 2), count - visible)
}

/// `text` centred in `area` (or on its bottom row), cut to its width.
func centered(_ text: String, in area: Rect, _ b: inout Buffer, style: Style = .plain, bottom: Bool = false) {
    guard area.height > 0 else { return }
    let w = min(area.width, TextWidth.of(text))
    let y = bottom ? area.maxY - 1 : area.y + (area.height - 1) / 2
    b.put(text, x: area.x + max(0, (area.width - w) / 2), y: y, width: area.width, style: style)
}
