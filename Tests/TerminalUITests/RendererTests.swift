import Testing
@testable import TerminalUI

/// ESC as a string, so expectations read like the sequences they are.
private let e = "\u{1B}"
private let fullRepaintPrefix = "\(e)[0m\(e)[2J"

private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

@Suite struct RendererTests {
    @Test func firstFrameIsAFullRepaintAndAnIdenticalFrameIsEmpty() {
        var r = Renderer(colorMode: .ansi16)
        var b = Buffer(width: 3, height: 2)
        b.put("ab", x: 0, y: 0)
        b.put("c", x: 2, y: 1)
        // Clear, then every cell; a CUP at the start of each row (after the
        // last column the cursor position is terminal-dependent).
        #expect(text(r.frame(b)) == "\(fullRepaintPrefix)\(e)[1;1Hab \(e)[2;1H  c")
        #expect(r.frame(b).isEmpty)
        #expect(r.frame(b).isEmpty)
    }

    @Test func oneChangedCellIsOneCUPAndTheCell() {
        var r = Renderer(colorMode: .truecolor)
        var b = Buffer(width: 80, height: 24)
        for y in 0..<24 { b.put("row \(y) with some text on it", x: 2, y: y) }
        let full = r.frame(b)
        b.put("X", x: 10, y: 5)
        let diff = r.frame(b)
        #expect(text(diff) == "\(e)[6;11HX")
        #expect(diff.count * 100 < full.count)
        // Same cell, now red: the SGR comes with it (and resets after, for the next plain change).
        b.put("X", x: 10, y: 5, style: Style(foreground: .red))
        #expect(text(r.frame(b)) == "\(e)[6;11H\(e)[0;31mX")
        b.put("Y", x: 11, y: 5)
        // The cursor is already at column 12 after writing column 11: no CUP; the style changes back.
        #expect(text(r.frame(b)) == "\(e)[0mY")
    }

    @Test func aSizeChangeOrInvalidateRepaintsEverything() {
        var r = Renderer(colorMode: .ansi16)
        var b = Buffer(width: 2, height: 1)
        b.put("ok", x: 0, y: 0)
        _ = r.frame(b)
        r.invalidate()
        #expect(text(r.frame(b)) == "\(fullRepaintPrefix)\(e)[1;1Hok")
        var wider = Buffer(width: 3, height: 1)
        wider.put("ok", x: 0, y: 0)
        #expect(text(r.frame(wider)) == "\(fullRepaintPrefix)\(e)[1;1Hok ")
    }

    @Test func wideCharactersAreWrittenOnceAndAdvanceTwoColumns() {
        var r = Renderer(colorMode: .ansi16)
        var b = Buffer(width: 4, height: 1)
        b.put("温", x: 0, y: 0)
        #expect(text(r.frame(b)) == "\(fullRepaintPrefix)\(e)[1;1H温  ")
        // Replacing the wide character: one write, the continuation cell skipped.
        b.put("度", x: 0, y: 0)
        #expect(text(r.frame(b)) == "\(e)[1;1H度")
        // Two narrow characters over it: both columns written.
        b.put("ab", x: 0, y: 0)
        #expect(text(r.frame(b)) == "\(e)[1;1Hab")
        // A wide character over "b" and the blank after it.
        b.put("温", x: 1, y: 0)
        #expect(b.text == "a温 ")
        #expect(text(r.frame(b)) == "\(e)[1;2H温")
        // The cursor is now at column 3 (two past the wide character's column): no CUP.
        b.put("z", x: 3, y: 0)
        #expect(text(r.frame(b)) == "z")
    }

    @Test func styleChangesEmitSGROnlyWhenNeeded() {
        var r = Renderer(colorMode: .ansi16)
        var b = Buffer(width: 4, height: 1)
        let bold = Style(bold: true)
        b.put("ab", x: 0, y: 0, style: bold)
        // One SGR for both bold cells, one reset for the plain rest.
        #expect(text(r.frame(b)) == "\(fullRepaintPrefix)\(e)[1;1H\(e)[0;1mab\(e)[0m  ")
        // The terminal is plain again after that frame: a bold change needs its SGR.
        b.put("c", x: 1, y: 0, style: bold)
        #expect(text(r.frame(b)) == "\(e)[1;2H\(e)[0;1mc")
        // Two plain changes in a row: one reset, no SGR for the second.
        b.put("yz", x: 2, y: 0)
        #expect(text(r.frame(b)) == "\(e)[0myz")
        // Only the style of a cell changes: it is written again.
        b.fill(Rect(x: 0, y: 0, width: 1, height: 1), style: Style(underline: true, reverse: true), clear: false)
        #expect(text(r.frame(b)) == "\(e)[1;1H\(e)[0;4;7ma")
    }

    /// One bold cell with an rgb foreground and a 256-palette background,
    /// one cell in bright blue on yellow, one plain cell, in every mode.
    @Test(arguments: [
        (ColorMode.none, "\(e)[0;1ma\(e)[0mbc"),
        (.ansi16, "\(e)[0;1;91;44ma\(e)[0;94;43mb\(e)[0mc"),
        (.indexed256, "\(e)[0;1;38;5;196;48;5;21ma\(e)[0;94;43mb\(e)[0mc"),
        (.truecolor, "\(e)[0;1;38;2;255;0;0;48;5;21ma\(e)[0;94;43mb\(e)[0mc"),
    ])
    func colorModes(mode: ColorMode, cells: String) {
        var r = Renderer(colorMode: mode)
        var b = Buffer(width: 3, height: 1)
        b.put("a", x: 0, y: 0, style: Style(foreground: .rgb(255, 0, 0), background: .indexed(21), bold: true))
        b.put("b", x: 1, y: 0, style: Style(foreground: .brightBlue, background: .yellow))
        b.put("c", x: 2, y: 0)
        #expect(text(r.frame(b)) == "\(fullRepaintPrefix)\(e)[1;1H" + cells)
    }

    @Test func colorsMapToTheNearestPaletteEntry() {
        // ansi16: a dark gray rgb is "bright black"; 256-color grays use the gray ramp.
        #expect(Renderer.colorParameters(.rgb(120, 120, 120), background: false, mode: .ansi16) == "90")
        #expect(Renderer.colorParameters(.rgb(128, 128, 128), background: false, mode: .indexed256) == "38;5;244")
        #expect(Renderer.colorParameters(.rgb(0, 135, 255), background: true, mode: .indexed256) == "48;5;33")
        #expect(Renderer.colorParameters(.indexed(196), background: true, mode: .ansi16) == "101")
        #expect(Renderer.colorParameters(.indexed(7), background: false, mode: .ansi16) == "37")
        #expect(Renderer.colorParameters(.default, background: false, mode: .truecolor) == nil)
    }

    @Test func detectColorMode() {
        let tty = ["TERM": "xterm-256color", "COLORTERM": "truecolor"]
        #expect(Renderer.detectColorMode(environment: tty, isTTY: true) == .truecolor)
        #expect(Renderer.detectColorMode(environment: ["TERM": "xterm", "COLORTERM": "24bit"], isTTY: true) == .truecolor)
        #expect(Renderer.detectColorMode(environment: ["TERM": "xterm-256color"], isTTY: true) == .indexed256)
        #expect(Renderer.detectColorMode(environment: ["TERM": "screen-256color", "COLORTERM": "yes"], isTTY: true) == .indexed256)
        #expect(Renderer.detectColorMode(environment: ["TERM": "xterm"], isTTY: true) == .ansi16)
        #expect(Renderer.detectColorMode(environment: ["TERM": "linux"], isTTY: true) == .ansi16)
        // NO_COLOR wins whatever its value, even empty.
        #expect(Renderer.detectColorMode(environment: tty.merging(["NO_COLOR": "1"]) { a, _ in a }, isTTY: true) == .none)
        #expect(Renderer.detectColorMode(environment: tty.merging(["NO_COLOR": ""]) { a, _ in a }, isTTY: true) == .none)
        #expect(Renderer.detectColorMode(environment: ["TERM": "dumb", "COLORTERM": "truecolor"], isTTY: true) == .none)
        #expect(Renderer.detectColorMode(environment: ["COLORTERM": "truecolor"], isTTY: true) == .none)
        #expect(Renderer.detectColorMode(environment: tty, isTTY: false) == .none)
    }

    /// Random frames (seeded), each turned into bytes and applied to a small
    /// terminal emulator: the emulated screen must equal the buffer — text
    /// and styles — after every frame. This is what proves the diff correct,
    /// not just small.
    @Test(arguments: [ColorMode.truecolor, .none])
    func randomFramesRoundTripThroughAnEmulator(mode: ColorMode) {
        var rng = SplitMix64(seed: 0x7E57_C0DE)
        var r = Renderer(colorMode: mode)
        var width = 17, height = 6
        var b = Buffer(width: width, height: height)
        var screen = Emulator(width: width, height: height)
        let words = ["a", "bc", "温度", "x温", "😀", "RSSI -67", "°C", "–", " ", "é", "🌡️ 21.5", "度y"]
        let styles: [Style] = [
            .plain, Style(bold: true), Style(foreground: .red), Style(foreground: .rgb(1, 2, 3), background: .indexed(200)),
            Style(background: .brightGreen, underline: true), Style(dim: true, italic: true, reverse: true),
        ]
        var totalBytes = 0
        for round in 0..<2000 {
            switch rng.next(40) {
            case 0:
                r.invalidate()
            case 1:
                width = 3 + rng.next(20)
                height = 1 + rng.next(7)
                b = Buffer(width: width, height: height)
                screen = Emulator(width: width, height: height)
            case 2:
                b.fill(Rect(x: rng.next(width), y: rng.next(height), width: rng.next(8), height: rng.next(3)),
                       style: styles[rng.next(styles.count)], clear: rng.next(2) == 0)
            default:
                for _ in 0..<rng.next(4) {
                    b.put(words[rng.next(words.count)], x: rng.next(width + 2) - 1, y: rng.next(height),
                          style: styles[rng.next(styles.count)])
                }
            }
            let bytes = r.frame(b)
            totalBytes += bytes.count
            screen.apply(bytes)
            #expect(screen.errors.isEmpty, "round \(round): \(screen.errors)")
            #expect(screen.text == b.text, "round \(round)")
            if mode == .truecolor {
                #expect(screen.stylesMatch(b), "round \(round): styles differ")
            }
            if screen.text != b.text || !screen.errors.isEmpty { return }
        }
        #expect(totalBytes > 0)
    }
}

// MARK: - Test support

/// A deterministic generator (SplitMix64), so a failing round can be replayed.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(_ bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }
}

/// Just enough of a terminal to check the renderer: CUP, ED 2, SGR (kept,
/// for checking styles), printable characters with their widths, and what
/// terminals do when half of a wide character is overwritten. Writing past
/// the right edge is recorded as an error (the renderer never relies on
/// auto-wrap).
struct Emulator {
    struct Slot: Equatable {
        var text: String = " "
        var continuation = false
        var style = Style.plain
    }

    let width: Int, height: Int
    var slots: [Slot]
    var x = 0, y = 0
    var pen = Style.plain
    var errors: [String] = []

    init(width: Int, height: Int) {
        self.width = width
        self.height = height
        slots = Array(repeating: Slot(), count: width * height)
    }

    var text: String {
        (0..<height).map { row in
            slots[(row * width)..<((row + 1) * width)].filter { !$0.continuation }.map(\.text).joined()
        }.joined(separator: "\n")
    }

    func stylesMatch(_ b: Buffer) -> Bool {
        for i in 0..<slots.count where !slots[i].continuation {
            if slots[i].style != b.cells[i].style { return false }
        }
        return true
    }

    mutating func apply(_ bytes: [UInt8]) {
        var i = 0
        var run: [UInt8] = []
        while i < bytes.count {
            if bytes[i] != 0x1B {
                run.append(bytes[i])
                i += 1
                continue
            }
            putText(run)
            run = []
            guard i + 1 < bytes.count, bytes[i + 1] == UInt8(ascii: "[") else {
                errors.append("ESC not followed by [ at \(i)")
                return
            }
            var j = i + 2
            while j < bytes.count, (0x30...0x3F).contains(bytes[j]) { j += 1 }
            guard j < bytes.count else { errors.append("unterminated CSI"); return }
            let params = String(decoding: bytes[(i + 2)..<j], as: UTF8.self)
                .split(separator: ";", omittingEmptySubsequences: false).map { Int($0) ?? 0 }
            switch bytes[j] {
            case UInt8(ascii: "H"):
                y = max(1, params.first ?? 1) - 1
                x = max(1, params.count > 1 ? params[1] : 1) - 1
            case UInt8(ascii: "J"):
                if params.first == 2 {
                    // ED paints with the current background (the renderer resets first).
                    slots = Array(repeating: Slot(text: " ", continuation: false, style: Style(background: pen.background)),
                                  count: width * height)
                } else {
                    errors.append("ED \(params)")
                }
            case UInt8(ascii: "m"):
                sgr(params)
            default:
                errors.append("unexpected CSI final \(bytes[j])")
            }
            i = j + 1
        }
        putText(run)
    }

    /// Text between sequences, character by character, with the widths the
    /// buffer uses (this checks the renderer, not width tables).
    mutating func putText(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        guard let s = String(validating: bytes, as: UTF8.self) else {
            errors.append("bad UTF-8")
            return
        }
        for ch in s { put(ch) }
    }

    mutating func put(_ ch: Character) {
        let w = TextWidth.of(ch)
        if ch.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            errors.append("control character in output")
            return
        }
        guard w > 0 else { errors.append("zero-width character written alone"); return }
        guard y < height, x + w <= width else {
            errors.append("write past the edge at \(x),\(y)")
            return
        }
        let i = y * width + x
        clearHalf(i)
        if w == 2 { clearHalf(i + 1) }
        slots[i] = Slot(text: String(ch), continuation: false, style: pen)
        if w == 2 { slots[i + 1] = Slot(text: "", continuation: true, style: pen) }
        x += w
    }

    /// Overwriting either half of a wide character blanks the other half.
    mutating func clearHalf(_ i: Int) {
        let col = i % width
        if slots[i].continuation, col > 0 { slots[i - 1] = Slot(text: " ", continuation: false, style: slots[i - 1].style) }
        if !slots[i].continuation, col + 1 < width, slots[i + 1].continuation {
            slots[i + 1] = Slot(text: " ", continuation: false, style: slots[i + 1].style)
        }
    }

    mutating func sgr(_ params: [Int]) {
        var k = 0
        func color(_ base: Int) -> Color? {
            // 38/48: 5;n or 2;r;g;b
            guard k + 1 < params.count else { return nil }
            if params[k + 1] == 5, k + 2 < params.count {
                k += 2
                return .indexed(UInt8(params[k]))
            }
            if params[k + 1] == 2, k + 4 < params.count {
                k += 4
                return .rgb(UInt8(params[k - 2]), UInt8(params[k - 1]), UInt8(params[k]))
            }
            return nil
        }
        while k < params.count {
            let p = params[k]
            switch p {
            case 0: pen = .plain
            case 1: pen.bold = true
            case 2: pen.dim = true
            case 3: pen.italic = true
            case 4: pen.underline = true
            case 7: pen.reverse = true
            case 30...37: pen.foreground = .ansi(UInt8(p - 30))
            case 90...97: pen.foreground = .ansi(UInt8(p - 90 + 8))
            case 40...47: pen.background = .ansi(UInt8(p - 40))
            case 100...107: pen.background = .ansi(UInt8(p - 100 + 8))
            case 38: if let c = color(38) { pen.foreground = c } else { errors.append("bad 38") }
            case 48: if let c = color(48) { pen.background = c } else { errors.append("bad 48") }
            default: errors.append("unexpected SGR \(p)")
            }
            k += 1
        }
    }
}
