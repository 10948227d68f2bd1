import Testing
@testable import TerminalUI

@Suite struct BufferTests {
    @Test func putClipsAndTruncatesWithAnEllipsis() {
        var b = Buffer(width: 10, height: 2)
        b.put("Heart Strap 72 bpm", x: 0, y: 0, width: 10)
        #expect(b.text.split(separator: "\n").first == "Heart Str…")
        let end = b.put("abc", x: 8, y: 1)
        #expect(end == 10)
        #expect(b.text.split(separator: "\n", omittingEmptySubsequences: false)[1] == "        ab")
    }

    /// Printable ASCII takes a path without grapheme breaking; a zero-width
    /// space (U+200B, drawn as nothing) at the end sends the same text down
    /// the general path. Both must leave the same cells and return the same
    /// column: clipped on either side, past the right edge, over a wide
    /// character, padded.
    @Test func asciiPathDrawsAsTheGeneralPath() {
        let texts = ["", "a", "AA:BB:CC:DD:EE:FF", "-67 dBm  21.5 C", "x y z ~!", String(repeating: "w", count: 30)]
        let places: [(x: Int, clip: Rect?)] = [(0, nil), (5, nil), (-3, nil), (18, nil), (25, nil),
                                               (2, Rect(x: 4, y: 0, width: 6, height: 1)), (7, Rect(x: 0, y: 0, width: 9, height: 1))]
        for text in texts {
            for place in places {
                var fast = Buffer(width: 20, height: 1), slow = Buffer(width: 20, height: 1)
                fast.put("温度温度温度温度温度", x: 0, y: 0)   // wide characters underneath
                slow.put("温度温度温度温度温度", x: 0, y: 0)
                let a = fast.put(text, x: place.x, y: 0, clip: place.clip)
                let b = slow.put(text + "\u{200B}", x: place.x, y: 0, clip: place.clip)
                #expect(a == b, "\(text) at \(place)")
                #expect(fast == slow, "\(text) at \(place): \(fast.text) vs \(slow.text)")
            }
            var fast = Buffer(width: 12, height: 1), slow = Buffer(width: 12, height: 1)
            let a = fast.put(text, x: 1, y: 0, width: 9, pad: true)
            let b = slow.put(text + "\u{200B}", x: 1, y: 0, width: 9, pad: true)
            #expect(a == b && fast == slow, "\(text) padded: \(fast.text) vs \(slow.text)")
        }
    }

    @Test func wideAndCombiningCharactersKeepColumnsAligned() {
        #expect(TextWidth.of("温度") == 4)
        #expect(TextWidth.of("e\u{301}") == 1)          // e + combining acute: one column
        #expect(TextWidth.of("🌡️") == 2)
        #expect(TextWidth.of("°C") == 2)
        var b = Buffer(width: 6, height: 1)
        b.put("温度x", x: 0, y: 0)
        #expect(b[0, 0].width == 2 && b[1, 0].width == 0 && b[4, 0].character == "x")
        #expect(b.text == "温度x ")
        // A wide character that does not fit whole becomes a space.
        var c = Buffer(width: 3, height: 1)
        c.put("a温度", x: 0, y: 0)
        #expect(c.text == "a温")
        var d = Buffer(width: 2, height: 1)
        d.put("a温", x: 0, y: 0)
        #expect(d.text == "a ")
        // Overwriting half of a wide character blanks the other half.
        b.put("y", x: 1, y: 0)
        #expect(b.text == " y度x ")
        #expect(TextWidth.truncate("温度温度", to: 5) == "温度…")
        // Filling a rectangle that cuts a wide character blanks its other half.
        var e = Buffer(width: 6, height: 1)
        e.put("温度計", x: 0, y: 0)
        e.fill(Rect(x: 1, y: 0, width: 2, height: 1), style: .plain)
        #expect(e.text == "    計")
        #expect(TextWidth.pad("ab", to: 4) == "ab  " && TextWidth.pad("ab", to: 4, alignRight: true) == "  ab")
    }

    /// A cell keeps a single scalar as itself and a cluster of several
    /// (an emoji sequence, a letter and a combining mark, a flag) by a
    /// number: each comes back whole, equal cells of one cluster compare
    /// equal, different clusters do not, and the renderer writes the
    /// cluster's bytes.
    @Test func clustersOfSeveralScalarsComeBackWhole() {
        let family: Character = "👩‍👩‍👧"
        let decomposed: Character = "e\u{301}"
        let flag: Character = "🇫🇮"
        for ch in [Character("A"), "é", "温", family, decomposed, flag] {
            let cell = Cell(ch, width: 1)
            #expect(cell.character == ch)
            #expect(Cell(ch, width: 1) == cell)
        }
        #expect(Cell(family) != Cell(flag))
        #expect(Cell(decomposed) != Cell("é"))   // different scalars, as a terminal sees them
        #expect(Graphemes.scalar(Cell(family).code) == nil && Graphemes.scalar(Cell("é").code) == "é")
        var b = Buffer(width: 6, height: 1)
        b.put("a\u{301}🇫🇮x", x: 0, y: 0)
        #expect(b.text == "a\u{301}🇫🇮x  ")
        var r = Renderer(colorMode: .none)
        let bytes = r.frame(b)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.contains("a\u{301}") && text.contains("🇫🇮x"), "\(text.debugDescription)")
    }

    @Test func boxDrawsBordersAndTitle() {
        var b = Buffer(width: 12, height: 3)
        b.box(b.bounds, title: "Devices")
        #expect(b.text == "┌ Devices ─┐\n│          │\n└──────────┘")
    }

    /// Found by the renderer's round-trip test: both left a wide character
    /// with its second half overwritten (3 columns of text in 2 cells).
    @Test func fillAndAWideCharacterThatDoesNotFitBlankTheOtherHalf() {
        var b = Buffer(width: 3, height: 1)
        b.put("温", x: 0, y: 0)
        b.fill(Rect(x: 1, y: 0, width: 1, height: 1), style: .plain)
        #expect(b[0, 0].width == 1 && b.text == "   ")
        b.put("温", x: 0, y: 0)
        b.fill(Rect(x: 0, y: 0, width: 1, height: 1), style: .plain)
        #expect(b[1, 0].width == 1 && b.text == "   ")
        var c = Buffer(width: 3, height: 1)
        c.put("a温", x: 0, y: 0)
        c.put("度", x: 2, y: 0)
        #expect(c[1, 0].width == 1 && c.text == "a  ")
    }
}

/// The per-scalar width of a string agrees with the cluster-by-cluster one
/// for every string, also where the fast path must give way (emoji
/// sequences, variation selectors, Hangul jamo, Indic spacing marks).
@Test func textWidthByScalarsAgreesWithClusters() {
    let pools: [[UInt32]] = [
        Array(0x20...0x7E), [0x09, 0x0A, 0x0D, 0x7F], Array(0xA0...0xFF), Array(0x300...0x36F),
        [0x5D0, 0x5B4, 0x627, 0x64E], [0x915, 0x93E, 0x93F, 0x94D], [0x1100, 0x1161, 0x11A8, 0xAC00],
        Array(0x2010...0x2027), [0x200B, 0x200C, 0x200D, 0x20AC, 0x20E3], Array(0x2190...0x2199), Array(0x2500...0x25FF),
        [0x2600, 0x2614, 0x2615, 0x2764, 0x2B50, 0xFE0E, 0xFE0F], [0x1F600, 0x1F468, 0x1F469, 0x1F467, 0x1F1E9, 0x1F1EA, 0x1F3FB],
        [0x4E2D, 0x6587, 0xFF21, 0x3042],
    ]
    var rng = SystemRandomNumberGenerator()
    var checked = 0
    for _ in 0..<20_000 {
        var s = String.UnicodeScalarView()
        for _ in 0..<Int.random(in: 0...8, using: &rng) {
            let pool = pools.randomElement(using: &rng) ?? pools[0]
            if let v = pool.randomElement(using: &rng), let scalar = Unicode.Scalar(v) { s.append(scalar) }
        }
        let text = String(s)
        #expect(TextWidth.of(text) == TextWidth.byClusters(text), "\(text.unicodeScalars.map { String($0.value, radix: 16) })")
        checked += 1
    }
    #expect(checked == 20_000)
    #expect(TextWidth.of("24.3 °C ▂▄▆█ -60") == 16)
    #expect(TextWidth.of("👨‍👩‍👧") == 2 && TextWidth.of("❤️") == 2 && TextWidth.of("한") == 2)
}
