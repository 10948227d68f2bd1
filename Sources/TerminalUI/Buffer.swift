import Locking

/// A terminal color. `.default` is the terminal's own foreground/background.
public enum Color: Sendable, Hashable {
    case `default`
    /// The 16 ANSI colors: 0–7 normal, 8–15 bright.
    case ansi(UInt8)
    /// The 256-color palette.
    case indexed(UInt8)
    case rgb(UInt8, UInt8, UInt8)

    public static let black = Color.ansi(0), red = Color.ansi(1), green = Color.ansi(2), yellow = Color.ansi(3)
    public static let blue = Color.ansi(4), magenta = Color.ansi(5), cyan = Color.ansi(6), white = Color.ansi(7)
    public static let gray = Color.ansi(8), brightRed = Color.ansi(9), brightGreen = Color.ansi(10)
    public static let brightYellow = Color.ansi(11), brightBlue = Color.ansi(12), brightCyan = Color.ansi(14)
}

/// How a cell looks.
public struct Style: Sendable, Hashable {
    public var foreground: Color
    public var background: Color
    public var bold: Bool
    public var dim: Bool
    public var italic: Bool
    public var underline: Bool
    public var reverse: Bool

    public init(foreground: Color = .default, background: Color = .default, bold: Bool = false, dim: Bool = false,
                italic: Bool = false, underline: Bool = false, reverse: Bool = false) {
        self.foreground = foreground
        self.background = background
        self.bold = bold
        self.dim = dim
        self.italic = italic
        self.underline = underline
        self.reverse = reverse
    }

    public static let plain = Style()
    public func with(_ change: (inout Style) -> Void) -> Style {
        var s = self
        change(&s)
        return s
    }
}

/// One screen cell: a grapheme cluster and its style. A wide character
/// (CJK, most emoji) takes two cells: the character, then a continuation
/// cell (`width == 0`) that draws nothing.
///
/// Plain data (no reference inside), so that a frame of cells is made,
/// copied, compared and freed as bytes: the character is kept as its one
/// Unicode scalar, or — for a cluster of several (an emoji sequence, a
/// letter with a combining mark) — as the number `Graphemes` gave it. With a
/// `Character` inside, every cell copy and compare went through the
/// runtime's value witnesses (~4 % of the dashboard's CPU in a flood, perf).
public struct Cell: Sendable, Hashable {
    /// A scalar's value, or `Graphemes.clusterBit` | a cluster's number.
    var code: UInt32
    /// Columns the character takes: 1, 2, or 0 for the continuation of a wide one.
    public var width: UInt8
    public var style: Style

    public var character: Character {
        get { Graphemes.character(code) }
        set { code = Graphemes.code(newValue) }
    }

    public init(_ character: Character = " ", width: UInt8 = 1, style: Style = .plain) {
        self.code = Graphemes.code(character)
        self.width = width
        self.style = style
    }

    /// A cell of one scalar (no lookup).
    init(scalar: Unicode.Scalar, width: UInt8 = 1, style: Style = .plain) {
        self.code = scalar.value
        self.width = width
        self.style = style
    }

    public static let blank = Cell()
}

/// The grapheme clusters of more than one scalar that cells have shown,
/// each numbered once for the process. Bounded: past `limit` different
/// clusters, a new one shows as U+FFFD (what a terminal shows for a
/// character it cannot draw).
enum Graphemes {
    static let clusterBit: UInt32 = 0x8000_0000
    static let limit = 65_536
    static let replacement = UInt32(0xFFFD)

    private struct Table {
        var numbers: [String: UInt32] = [:]
        var clusters: [String] = []
    }
    private static let table = Lock(Table())

    static func code(_ character: Character) -> UInt32 {
        var scalars = character.unicodeScalars.makeIterator()
        guard let first = scalars.next() else { return UInt32(0x20) }
        if scalars.next() == nil { return first.value }
        let cluster = String(character)
        return table.withLock { t in
            if let n = t.numbers[cluster] { return clusterBit | n }
            guard t.clusters.count < limit else { return replacement }
            let n = UInt32(t.clusters.count)
            t.clusters.append(cluster)
            t.numbers[cluster] = n
            return clusterBit | n
        }
    }

    static func character(_ code: UInt32) -> Character {
        if code & clusterBit == 0 {
            return Unicode.Scalar(code).map(Character.init) ?? "\u{FFFD}"
        }
        let n = Int(code & ~clusterBit)
        let cluster = table.withLock { t in n < t.clusters.count ? t.clusters[n] : nil }
        return cluster.flatMap(\.first) ?? "\u{FFFD}"
    }

    /// The code's scalar when it is one (nil for a cluster).
    static func scalar(_ code: UInt32) -> Unicode.Scalar? {
        code & clusterBit == 0 ? Unicode.Scalar(code) : nil
    }
}

/// A rectangle of cells, in columns and rows from the top-left corner.
public struct Rect: Sendable, Hashable {
    public var x: Int
    public var y: Int
    public var width: Int
    public var height: Int
    public init(x: Int, y: Int, width: Int, height: Int) {
        self.x = x
        self.y = y
        self.width = max(0, width)
        self.height = max(0, height)
    }
    public var maxX: Int { x + width }
    public var maxY: Int { y + height }
    /// This rectangle less `n` cells on every side.
    public func inset(_ n: Int) -> Rect { Rect(x: x + n, y: y + n, width: width - 2 * n, height: height - 2 * n) }
    /// Rows `from..<to` of this rectangle (relative, clamped).
    public func rows(_ from: Int, _ count: Int) -> Rect {
        let top = min(max(0, from), height)
        return Rect(x: x, y: y + top, width: width, height: min(count, height - top))
    }
}

/// What a screen shows: width × height cells. Content functions draw into
/// one; the renderer compares it with the last one drawn.
public struct Buffer: Sendable, Equatable {
    public let width: Int
    public let height: Int
    public private(set) var cells: [Cell]

    public init(width: Int, height: Int) {
        self.width = max(0, width)
        self.height = max(0, height)
        cells = Array(repeating: .blank, count: self.width * self.height)
    }

    public var bounds: Rect { Rect(x: 0, y: 0, width: width, height: height) }

    public subscript(x: Int, y: Int) -> Cell {
        get { cells[y * width + x] }
        set { cells[y * width + x] = newValue }
    }

    /// The cells of row `y` (a copy), to put back whole with
    /// ``putRow(_:y:)`` in a later frame.
    public func row(_ y: Int) -> [Cell] {
        guard y >= 0, y < height else { return [] }
        return Array(cells[(y * width)..<((y + 1) * width)])
    }

    /// Sets row `y` to `row` (cells from ``row(_:)`` of a buffer as wide as
    /// this one; a row of another width is ignored).
    public mutating func putRow(_ row: [Cell], y: Int) {
        guard y >= 0, y < height, row.count == width else { return }
        cells.replaceSubrange((y * width)..<((y + 1) * width), with: row)
    }

    /// Writes `text` from (`x`, `y`), clipped to `clip` (default: the row to
    /// the buffer's edge). A wide character that would not fit whole is
    /// replaced by a space; zero-width characters (combining marks) join the
    /// previous cell. Returns the column after the last one written.
    @discardableResult
    public mutating func put(_ text: String, x: Int, y: Int, style: Style = .plain, clip: Rect? = nil) -> Int {
        let area = clip ?? bounds
        guard y >= area.y, y < area.maxY, y >= 0, y < height else { return x }
        let right = min(area.maxX, width)
        if let end = putPrintableASCII(text, x: x, y: y, style: style, left: area.x, right: right) { return end }
        var col = x
        for ch in text {
            let w = TextWidth.of(ch)
            // Combining marks arrive inside their base's Character; a lone
            // zero-width character (ZWSP, a mark at the start) draws nothing.
            if w == 0 { continue }
            if col >= right { break }
            if col < area.x || col < 0 {
                col += w
                continue
            }
            if w == 2 && col + 1 >= right {
                clearWide(at: col, y)
                self[col, y] = Cell(scalar: " ", width: 1, style: style)
                col += 1
                break
            }
            clearWide(at: col, y)
            self[col, y] = Cell(ch, width: UInt8(w), style: style)
            if w == 2 {
                clearWide(at: col + 1, y)
                self[col + 1, y] = Cell(scalar: " ", width: 0, style: style)
            }
            col += w
        }
        return col
    }

    /// ``put(_:x:y:style:clip:)`` for text of printable ASCII only (most of
    /// a dashboard: addresses, numbers, units), a column per byte without
    /// grapheme breaking, which was most of drawing a row. Nil as soon as a
    /// byte is anything else: the caller then writes the whole text the
    /// general way (cells written so far get the same values again).
    private mutating func putPrintableASCII(_ text: String, x: Int, y: Int, style: Style, left: Int, right: Int) -> Int? {
        var col = x
        for byte in text.utf8 {
            guard byte >= 0x20, byte < 0x7F else { return nil }
            if col >= right { continue }   // still checked: a later byte may not be ASCII
            if col < left || col < 0 {
                col += 1
                continue
            }
            clearWide(at: col, y)
            self[col, y] = Cell(scalar: Unicode.Scalar(byte), width: 1, style: style)
            col += 1
        }
        return col
    }

    /// Writes `text` cut to `width` columns, ending in "…" when cut; pads
    /// with spaces to `width` when `pad`.
    @discardableResult
    public mutating func put(_ text: String, x: Int, y: Int, width: Int, style: Style = .plain, pad: Bool = false) -> Int {
        guard width > 0 else { return x }
        let fitted = TextWidth.truncate(text, to: width)
        let end = put(fitted, x: x, y: y, style: style, clip: Rect(x: x, y: y, width: width, height: 1))
        if pad && end < x + width {
            // Blanks straight into the cells (no string of spaces to build and walk).
            let stop = min(x + width, self.width)
            guard y >= 0, y < height else { return end }
            for col in max(end, 0)..<max(stop, max(end, 0)) {
                clearWide(at: col, y)
                self[col, y] = Cell(scalar: " ", width: 1, style: style)
            }
            return max(end, stop)
        }
        return end
    }

    /// Sets the style of every cell in `rect` (keeping characters), or
    /// clears them to blanks of `style` when `clear`.
    public mutating func fill(_ rect: Rect, style: Style, clear: Bool = true) {
        for yy in max(0, rect.y)..<min(height, rect.maxY) {
            // A wide character cut by the rectangle's edges loses its outer half.
            if clear {
                clearWide(at: max(0, rect.x), yy)
                clearWide(at: min(width, rect.maxX) - 1, yy)
            }
            for xx in max(0, rect.x)..<min(width, rect.maxX) {
                if clear {
                    clearWide(at: xx, yy)
                    self[xx, yy] = Cell(scalar: " ", width: 1, style: style)
                } else {
                    self[xx, yy].style = style
                }
            }
        }
    }

    /// A box border around `rect` with an optional title on the top edge.
    public mutating func box(_ rect: Rect, title: String? = nil, style: Style = .plain, titleStyle: Style? = nil) {
        guard rect.width >= 2, rect.height >= 2 else { return }
        let right = rect.maxX - 1, bottom = rect.maxY - 1
        for xx in rect.x...right {
            put(xx == rect.x ? "┌" : xx == right ? "┐" : "─", x: xx, y: rect.y, style: style)
            put(xx == rect.x ? "└" : xx == right ? "┘" : "─", x: xx, y: bottom, style: style)
        }
        if rect.height > 2 {
            for yy in (rect.y + 1)..<bottom {
                put("│", x: rect.x, y: yy, style: style)
                put("│", x: right, y: yy, style: style)
            }
        }
        if let title, rect.width > 4 {
            put(" \(title) ", x: rect.x + 1, y: rect.y, width: rect.width - 2, style: titleStyle ?? style)
        }
    }

    /// Overwriting one half of a wide character blanks the other half.
    private mutating func clearWide(at x: Int, _ y: Int) {
        guard x >= 0, x < width else { return }
        let c = self[x, y]
        if c.width == 0, x > 0, self[x - 1, y].width == 2 { self[x - 1, y] = Cell(scalar: " ", style: self[x - 1, y].style) }
        if c.width == 2, x + 1 < width { self[x + 1, y] = Cell(scalar: " ", style: self[x + 1, y].style) }
    }

    /// The characters, row by row (continuation cells omitted), trailing
    /// spaces kept: what a text snapshot compares.
    public var text: String {
        var out = ""
        out.reserveCapacity((width + 1) * height)
        for yy in 0..<height {
            for xx in 0..<width {
                let c = self[xx, yy]
                if c.width != 0 { out.append(c.character) }
            }
            if yy < height - 1 { out.append("\n") }
        }
        return out
    }
}

/// Display width of characters in a terminal (what wcwidth answers),
/// from Unicode properties: combining and zero-width marks take 0 columns;
/// East Asian wide/fullwidth ranges and emoji presentation take 2.
public enum TextWidth {
    public static func of(_ c: Character) -> Int {
        // A cluster is as wide as its first scalar, unless it asks for emoji presentation.
        guard let first = c.unicodeScalars.first else { return 0 }
        if c.unicodeScalars.count > 1, c.unicodeScalars.contains(where: { $0.value == 0xFE0F }) { return 2 }
        return of(first)
    }

    public static func of(_ s: Unicode.Scalar) -> Int {
        let v = s.value
        if v < 0x20 || (v >= 0x7F && v < 0xA0) { return 0 }
        if v < 0x300 { return 1 }
        if v >= 0x2500 && v < 0x25A0 { return 1 }   // box drawing and block elements
        switch s.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format: return 0
        default: break
        }
        if v == 0x200B { return 0 }
        if isWide(v) || s.properties.isEmojiPresentation { return 2 }
        return 1
    }

    static func isWide(_ v: UInt32) -> Bool {
        (0x1100...0x115F).contains(v) || (0x2E80...0x303E).contains(v) || (0x3041...0x33FF).contains(v)
            || (0x3400...0x4DBF).contains(v) || (0x4E00...0x9FFF).contains(v) || (0xA000...0xA4CF).contains(v)
            || (0xAC00...0xD7A3).contains(v) || (0xF900...0xFAFF).contains(v) || (0xFE30...0xFE4F).contains(v)
            || (0xFF00...0xFF60).contains(v) || (0xFFE0...0xFFE6).contains(v) || (0x20000...0x3FFFD).contains(v)
    }

    /// A string's width: the sum of its clusters' widths. Measured per
    /// scalar while every scalar is one whose cluster width is the sum of
    /// its scalars' widths (below U+0900 — combining marks there are 0
    /// either way — and U+2000–U+2BFF but the zero-width joiner): grapheme
    /// breaking was most of drawing a dashboard row. Anything else (Indic
    /// spacing marks, Hangul jamo, emoji sequences, variation selectors)
    /// goes by clusters.
    public static func of(_ s: String) -> Int {
        var width = 0
        for scalar in s.unicodeScalars {
            let v = scalar.value
            guard v < 0x0900 || (v >= 0x2000 && v < 0x2C00 && v != 0x200D) else { return byClusters(s) }
            width += of(scalar)
        }
        return width
    }

    static func byClusters(_ s: String) -> Int { s.reduce(0) { $0 + of($1) } }

    /// `s` cut to at most `width` columns, with "…" as the last column when cut.
    public static func truncate(_ s: String, to width: Int) -> String {
        guard width > 0 else { return "" }
        if of(s) <= width { return s }
        var out = ""
        var used = 0
        for ch in s {
            let w = of(ch)
            if used + w > width - 1 { break }
            out.append(ch)
            used += w
        }
        return out + "…"
    }

    /// `s` padded with spaces (or cut) to exactly `width` columns.
    public static func pad(_ s: String, to width: Int, alignRight: Bool = false) -> String {
        let cut = truncate(s, to: width)
        let gap = String(repeating: " ", count: max(0, width - of(cut)))
        return alignRight ? gap + cut : cut + gap
    }
}
