/// Turns buffers into the bytes that put them on a terminal.
///
/// The renderer remembers the last frame it produced and, for the next one,
/// emits only what differs: unchanged cells are skipped, the cursor is moved
/// (CUP, `ESC[row;colH`) only when the next changed cell is not where the
/// cursor already is, and SGR attributes are sent only when the style of
/// the cell to write differs from the one the terminal is using. The first
/// frame, the first after `invalidate()` and the first of a different size
/// clear the screen and draw everything.
///
/// SGR is sent as "reset, then set" (`ESC[0;1;31m`): one sequence per change,
/// and no state of the terminal's to get wrong.
public struct Renderer: Sendable {
    public let colorMode: ColorMode
    /// The last frame written, nil when the screen must be repainted in full.
    private var previous: Buffer?
    /// Where the terminal's cursor is, nil when unknown (before the first
    /// CUP, and after writing the last column, where terminals differ).
    private var cursor: (x: Int, y: Int)?
    /// The SGR parameters the terminal is using now, nil when unknown.
    private var activeSGR: [UInt8]?
    /// The style `activeSGR` was made from (a cheap check before encoding).
    private var activeStyle: Style?

    public init(colorMode: ColorMode) {
        self.colorMode = colorMode
    }

    /// Forgets what is on the screen: the next frame is a full repaint
    /// (after a resize, SIGCONT, or anything else that wrote to the terminal).
    public mutating func invalidate() {
        previous = nil
        cursor = nil
        activeSGR = nil
        activeStyle = nil
    }

    /// The bytes that turn the screen showing the previous frame into
    /// `buffer`; empty when nothing changed.
    public mutating func frame(_ buffer: Buffer) -> [UInt8] {
        var out: [UInt8] = []
        let old: Buffer?
        if let previous, previous.width == buffer.width, previous.height == buffer.height {
            old = previous
        } else {
            old = nil
            // Reset first: ED paints the cleared screen in the current background.
            out.append(contentsOf: Self.csi)
            out.append(contentsOf: Array("0m".utf8))
            out.append(contentsOf: Self.csi)
            out.append(contentsOf: Array("2J".utf8))
            activeSGR = []
            activeStyle = .plain
            cursor = nil
            out.reserveCapacity(buffer.width * buffer.height + 16 * buffer.height)
        }
        let width = buffer.width
        buffer.cells.withUnsafeBufferPointer { newCells in
            if let old {
                old.cells.withUnsafeBufferPointer { oldCells in
                    draw(newCells, over: oldCells, width: width, height: buffer.height, into: &out)
                }
            } else {
                draw(newCells, over: nil, width: width, height: buffer.height, into: &out)
            }
        }
        previous = buffer
        return out
    }

    private mutating func draw(_ newCells: UnsafeBufferPointer<Cell>, over oldCells: UnsafeBufferPointer<Cell>?,
                               width: Int, height: Int, into out: inout [UInt8]) {
        for y in 0..<height {
            let row = y * width
            for x in 0..<width {
                let i = row + x
                if let oldCells, Self.same(oldCells[i], newCells[i]) {
                    // Unchanged — unless it is a wide character whose second half changed.
                    if newCells[i].width != 2 || x + 1 >= width || Self.same(oldCells[i + 1], newCells[i + 1]) { continue }
                }
                var cell = newCells[i]
                if cell.width == 0 {
                    // The continuation of a wide character is drawn with it;
                    // one without its wide character is a blank.
                    if x > 0, newCells[i - 1].width == 2 { continue }
                    cell = Cell(scalar: " ", width: 1, style: cell.style)
                } else if cell.width == 2, x + 1 >= width {
                    // No room for the second column: a blank, as Buffer.put does.
                    cell = Cell(scalar: " ", width: 1, style: cell.style)
                }
                if cursor == nil || cursor?.x != x || cursor?.y != y {
                    Self.appendCUP(row: y, column: x, to: &out)
                }
                if activeStyle.map({ !Self.sameStyle($0, cell.style) }) ?? true {
                    let sgr = Self.sgrParameters(cell.style, mode: colorMode)
                    if activeSGR != sgr {
                        out.append(contentsOf: Self.csi)
                        out.append(contentsOf: sgr.isEmpty ? [UInt8(ascii: "0")] : [UInt8(ascii: "0"), UInt8(ascii: ";")] + sgr)
                        out.append(UInt8(ascii: "m"))
                        activeSGR = sgr
                    }
                    activeStyle = cell.style
                }
                if let scalar = Graphemes.scalar(cell.code) {
                    Self.appendScalar(scalar, to: &out)
                } else {
                    Self.appendCharacter(cell.character, to: &out)
                }
                let next = x + Int(cell.width)
                cursor = next < width ? (next, y) : nil
            }
        }
    }

    /// Cell equality, cheapest comparisons first. (Written out: the
    /// synthesized `Style ==` made diffing an unchanged frame 4× slower.)
    @inline(__always)
    static func same(_ a: Cell, _ b: Cell) -> Bool {
        a.width == b.width && a.code == b.code && sameStyle(a.style, b.style)
    }

    @inline(__always)
    static func sameStyle(_ a: Style, _ b: Style) -> Bool {
        a.bold == b.bold && a.dim == b.dim && a.italic == b.italic && a.underline == b.underline && a.reverse == b.reverse
            && sameColor(a.foreground, b.foreground) && sameColor(a.background, b.background)
    }

    @inline(__always)
    static func sameColor(_ a: Color, _ b: Color) -> Bool {
        switch (a, b) {
        case (.default, .default): return true
        case let (.ansi(x), .ansi(y)): return x == y
        case let (.indexed(x), .indexed(y)): return x == y
        case let (.rgb(r1, g1, b1), .rgb(r2, g2, b2)): return r1 == r2 && g1 == g2 && b1 == b2
        default: return false
        }
    }

    // MARK: Encoding

    static let csi: [UInt8] = [0x1B, UInt8(ascii: "[")]

    static func appendCUP(row: Int, column: Int, to out: inout [UInt8]) {
        out.append(contentsOf: csi)
        appendDecimal(row + 1, to: &out)
        out.append(UInt8(ascii: ";"))
        appendDecimal(column + 1, to: &out)
        out.append(UInt8(ascii: "H"))
    }

    static func appendDecimal(_ value: Int, to out: inout [UInt8]) {
        if value >= 10 { appendDecimal(value / 10, to: &out) }
        out.append(UInt8(ascii: "0") + UInt8(value % 10))
    }

    /// One scalar as UTF-8; a control character as a space (it would move the cursor).
    static func appendScalar(_ scalar: Unicode.Scalar, to out: inout [UInt8]) {
        let v = scalar.value
        if v < 0x20 || (v >= 0x7F && v < 0xA0) {
            out.append(UInt8(ascii: " "))
        } else if v < 0x80 {
            out.append(UInt8(v))
        } else {
            UTF8.encode(scalar) { out.append($0) }
        }
    }

    static func appendCharacter(_ character: Character, to out: inout [UInt8]) {
        let utf8 = character.utf8
        if utf8.count == 1, let v = utf8.first {
            // Control characters would move the cursor: never let one through.
            out.append(v < 0x20 || v == 0x7F ? UInt8(ascii: " ") : v)
            return
        }
        for scalar in character.unicodeScalars {
            let v = scalar.value
            if v < 0x20 || (v >= 0x7F && v < 0xA0) {
                out.append(UInt8(ascii: " "))
            } else {
                out.append(contentsOf: Array(String(scalar).utf8))
            }
        }
    }

    /// The SGR parameters (without the leading reset, `;`-separated) for
    /// `style` in `mode`; empty for the plain style.
    static func sgrParameters(_ style: Style, mode: ColorMode) -> [UInt8] {
        var params: [String] = []
        if style.bold { params.append("1") }
        if style.dim { params.append("2") }
        if style.italic { params.append("3") }
        if style.underline { params.append("4") }
        if style.reverse { params.append("7") }
        if let fg = colorParameters(style.foreground, background: false, mode: mode) { params.append(fg) }
        if let bg = colorParameters(style.background, background: true, mode: mode) { params.append(bg) }
        return Array(params.joined(separator: ";").utf8)
    }

    static func colorParameters(_ color: Color, background: Bool, mode: ColorMode) -> String? {
        func ansi(_ n: Int) -> String {
            // 30–37 / 90–97 foreground, 40–47 / 100–107 background.
            let base = n < 8 ? (background ? 40 : 30) : (background ? 100 : 90)
            return String(base + n % 8)
        }
        let select = background ? "48" : "38"
        switch (mode, color) {
        case (.none, _), (_, .default):
            return nil
        case (_, .ansi(let n)) where n < 16:
            return ansi(Int(n))
        case (.ansi16, .ansi(let n)), (.ansi16, .indexed(let n)):
            return ansi(n < 16 ? Int(n) : ColorMath.nearestANSI(ColorMath.rgb(ofIndexed: n)))
        case (.ansi16, .rgb(let r, let g, let b)):
            return ansi(ColorMath.nearestANSI((r, g, b)))
        case (_, .ansi(let n)), (_, .indexed(let n)):
            return "\(select);5;\(n)"
        case (.indexed256, .rgb(let r, let g, let b)):
            return "\(select);5;\(ColorMath.nearestIndexed((r, g, b)))"
        case (.truecolor, .rgb(let r, let g, let b)):
            return "\(select);2;\(r);\(g);\(b)"
        }
    }

    // MARK: Color mode

    /// The colors to use for a terminal with this environment: NO_COLOR
    /// present (whatever its value), TERM unset or `dumb`, or an output that
    /// is not a terminal → `.none`; COLORTERM `truecolor`/`24bit` →
    /// `.truecolor`; TERM containing `256color` → `.indexed256`; else `.ansi16`.
    public static func detectColorMode(environment: [String: String], isTTY: Bool) -> ColorMode {
        guard isTTY, environment["NO_COLOR"] == nil else { return .none }
        guard let term = environment["TERM"]?.lowercased(), !term.isEmpty, term != "dumb" else { return .none }
        let colorTerm = environment["COLORTERM"]?.lowercased()
        if colorTerm == "truecolor" || colorTerm == "24bit" { return .truecolor }
        if term.contains("256color") { return .indexed256 }
        return .ansi16
    }
}

/// Mapping colors onto smaller palettes (xterm's default palette values).
enum ColorMath {
    typealias RGB = (UInt8, UInt8, UInt8)

    /// xterm's default values for the 16 ANSI colors.
    static let ansiPalette: [RGB] = [
        (0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205), (0, 205, 205), (229, 229, 229),
        (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0), (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255),
    ]
    /// The six levels of each component of the 6×6×6 cube (indices 16–231).
    static let cubeLevels: [Int] = [0, 95, 135, 175, 215, 255]

    static func distance(_ a: RGB, _ b: RGB) -> Int {
        let dr = Int(a.0) - Int(b.0), dg = Int(a.1) - Int(b.1), db = Int(a.2) - Int(b.2)
        return dr * dr + dg * dg + db * db
    }

    static func rgb(ofIndexed n: UInt8) -> RGB {
        switch n {
        case 0..<16:
            return ansiPalette[Int(n)]
        case 16..<232:
            let i = Int(n) - 16
            return (UInt8(cubeLevels[i / 36]), UInt8(cubeLevels[(i / 6) % 6]), UInt8(cubeLevels[i % 6]))
        default:
            let v = UInt8(8 + 10 * (Int(n) - 232))
            return (v, v, v)
        }
    }

    /// The closest of the 16 ANSI colors.
    static func nearestANSI(_ c: RGB) -> Int {
        var best = 0, bestDistance = Int.max
        for (i, p) in ansiPalette.enumerated() {
            let d = distance(c, p)
            if d < bestDistance { best = i; bestDistance = d }
        }
        return best
    }

    /// The closest entry of the 256-color cube or gray ramp (16–255; the
    /// first 16 are left out because terminals re-theme them).
    static func nearestIndexed(_ c: RGB) -> Int {
        func level(_ v: UInt8) -> Int {
            var best = 0
            for (i, l) in cubeLevels.enumerated() where abs(l - Int(v)) < abs(cubeLevels[best] - Int(v)) { best = i }
            return best
        }
        let r = level(c.0), g = level(c.1), b = level(c.2)
        let cube = 16 + 36 * r + 6 * g + b
        let average = (Int(c.0) + Int(c.1) + Int(c.2)) / 3
        let grayStep = min(23, max(0, (average - 8 + 5) / 10))
        let gray = 232 + grayStep
        return distance(c, rgb(ofIndexed: UInt8(gray))) < distance(c, rgb(ofIndexed: UInt8(cube))) ? gray : cube
    }
}
