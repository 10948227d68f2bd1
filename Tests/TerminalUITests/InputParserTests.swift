import Testing
@testable import TerminalUI

private func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
private let esc = "\u{1B}"

/// Every case: the bytes a terminal sends and the events they mean.
private let cases: [(String, [UInt8], [TerminalEvent])] = [
    ("ascii", bytes("aZ 9~"), "aZ 9~".map { .key(.character($0)) }),
    ("two-byte UTF-8", bytes("é"), [.key(.character("é"))]),
    ("three-byte UTF-8", bytes("温度"), [.key(.character("温")), .key(.character("度"))]),
    ("four-byte UTF-8", bytes("😀"), [.key(.character("😀"))]),
    ("enter CR", [0x0D], [.key(.enter)]),
    ("enter LF", [0x0A], [.key(.enter)]),
    ("tab", [0x09], [.key(.tab)]),
    ("backspace DEL", [0x7F], [.key(.backspace)]),
    ("backspace BS", [0x08], [.key(.backspace)]),
    ("ctrl letters", [0x01, 0x03, 0x11, 0x1A], [.key(.ctrl("a")), .key(.ctrl("c")), .key(.ctrl("q")), .key(.ctrl("z"))]),
    ("alt letter", bytes("\(esc)x"), [.key(.alt("x"))]),
    ("alt UTF-8", bytes("\(esc)é"), [.key(.alt("é"))]),
    ("CSI arrows", bytes("\(esc)[A\(esc)[B\(esc)[C\(esc)[D"), [.key(.up), .key(.down), .key(.right), .key(.left)]),
    ("CSI arrows with modifiers", bytes("\(esc)[1;5A\(esc)[1;2D"), [.key(.up), .key(.left)]),
    ("CSI home/end", bytes("\(esc)[H\(esc)[F\(esc)[1~\(esc)[4~\(esc)[7~\(esc)[8~"),
     [.key(.home), .key(.end), .key(.home), .key(.end), .key(.home), .key(.end)]),
    ("CSI editing keys", bytes("\(esc)[2~\(esc)[3~\(esc)[5~\(esc)[6~\(esc)[3;5~"),
     [.key(.insert), .key(.delete), .key(.pageUp), .key(.pageDown), .key(.delete)]),
    ("SS3 arrows, home, end", bytes("\(esc)OA\(esc)OB\(esc)OC\(esc)OD\(esc)OH\(esc)OF"),
     [.key(.up), .key(.down), .key(.right), .key(.left), .key(.home), .key(.end)]),
    ("F1-F4 SS3", bytes("\(esc)OP\(esc)OQ\(esc)OR\(esc)OS"), (1...4).map { .key(.function($0)) }),
    ("F1-F4 CSI with modifiers", bytes("\(esc)[1;2P\(esc)[1;5S"), [.key(.function(1)), .key(.function(4))]),
    ("F5-F12", bytes(["15", "17", "18", "19", "20", "21", "23", "24"].map { "\(esc)[\($0)~" }.joined()),
     (5...12).map { .key(.function($0)) }),
    ("F1-F5 Linux console", bytes("\(esc)[[A\(esc)[[E"), [.key(.function(1)), .key(.function(5))]),
    ("back tab", bytes("\(esc)[Z"), [.key(.backTab)]),
    ("mouse press and release", bytes("\(esc)[<0;10;5M\(esc)[<0;10;5m"),
     [.mouse(MouseEvent(kind: .press(button: 0), x: 9, y: 4)), .mouse(MouseEvent(kind: .release, x: 9, y: 4))]),
    ("mouse right button with ctrl, drag", bytes("\(esc)[<18;1;1M\(esc)[<32;120;40M"),
     [.mouse(MouseEvent(kind: .press(button: 2), x: 0, y: 0)), .mouse(MouseEvent(kind: .drag(button: 0), x: 119, y: 39))]),
    ("mouse wheel", bytes("\(esc)[<64;3;4M\(esc)[<65;3;4M"),
     [.mouse(MouseEvent(kind: .scrollUp, x: 2, y: 3)), .mouse(MouseEvent(kind: .scrollDown, x: 2, y: 3))]),
    ("paste", bytes("\(esc)[200~hello\r\nwörld\r!\(esc)[201~"), [.paste("hello\nwörld\n!")]),
    ("paste keeps what looks like keys", bytes("\(esc)[200~a\(esc)[Ab\t\(esc)[201~x"), [.paste("a\(esc)[Ab\t"), .key(.character("x"))]),
    ("empty paste", bytes("\(esc)[200~\(esc)[201~"), [.paste("")]),
    ("unknown CSI, then keys", bytes("\(esc)[99~x\(esc)[?1;2cy\(esc)[1;2;3Xq"),
     [.key(.character("x")), .key(.character("y")), .key(.character("q"))]),
    ("unknown SS3, then a key", bytes("\(esc)Ozq"), [.key(.character("q"))]),
    ("CSI cut short by a control byte", bytes("\(esc)[12\r"), [.key(.enter)]),
    ("CSI cut short by ESC", bytes("\(esc)[1;\(esc)[B"), [.key(.down)]),
    ("malformed mouse", bytes("\(esc)[<1;2M\(esc)[<1;2;3;4M\(esc)[<67;1;1Mk"), [.key(.character("k"))]),
    ("escape then a sequence", bytes("\(esc)\(esc)[A"), [.key(.escape), .key(.up)]),
    ("escape then a control key", bytes("\(esc)\r"), [.key(.escape), .key(.enter)]),
    ("invalid UTF-8 is dropped, not what follows", [0xC3, 0x41, 0xFF, 0x42, 0xED, 0xA0, 0x80, 0x43],
     [.key(.character("A")), .key(.character("B")), .key(.character("C"))]),
    ("ctrl symbols and NUL", [0x00, 0x1C, 0x1F], [.key(.ctrl(" ")), .key(.ctrl("\\")), .key(.ctrl("_"))]),
]

@Suite struct InputParserTests {
    @Test(arguments: cases.indices)
    func decodesWholeAndSplitAtEveryByte(_ index: Int) {
        let (name, input, expected) = cases[index]
        var whole = InputParser()
        #expect(whole.feed(input) == expected, "\(name): in one read")
        #expect(!whole.hasPendingEscape, "\(name)")
        for cut in 1..<input.count {
            var p = InputParser()
            let events = p.feed(Array(input[..<cut])) + p.feed(Array(input[cut...]))
            #expect(events == expected, "\(name): split at \(cut)")
        }
        var p = InputParser()
        let oneByOne = input.flatMap { p.feed([$0]) }
        #expect(oneByOne == expected, "\(name): one byte at a time")
    }

    @Test func allCasesConcatenatedAndCutAtRandomPoints() {
        let input = cases.flatMap(\.1)
        let expected = cases.flatMap(\.2)
        var rng = SplitMix64(seed: 42)
        for _ in 0..<50 {
            var p = InputParser()
            var events: [TerminalEvent] = []
            var i = 0
            while i < input.count {
                let n = 1 + rng.next(9)
                events += p.feed(Array(input[i..<min(input.count, i + n)]))
                i += n
            }
            #expect(events == expected)
        }
    }

    @Test func aLoneEscapeIsTheEscapeKeyOnlyAfterTheFlush() {
        var p = InputParser()
        #expect(p.feed([0x1B]).isEmpty)
        #expect(p.hasPendingEscape)
        #expect(p.flushPendingEscape() == [.key(.escape)])
        #expect(!p.hasPendingEscape)
        #expect(p.flushPendingEscape().isEmpty)
        // After the flush, the next bytes start afresh.
        #expect(p.feed(bytes("[A")) == [.key(.character("[")), .key(.character("A"))])
        // Without a flush, the same ESC starts a sequence.
        #expect(p.feed([0x1B]).isEmpty)
        #expect(p.feed(bytes("[A")) == [.key(.up)])
    }

    @Test func flushingAnIncompleteSequence() {
        var p = InputParser()
        // ESC [ alone is Alt+[ (what the key sends).
        #expect(p.feed(bytes("\(esc)[")).isEmpty)
        #expect(p.flushPendingEscape() == [.key(.alt("["))])
        // A longer incomplete sequence is dropped; the following keys decode.
        #expect(p.feed(bytes("\(esc)[1;5")).isEmpty)
        #expect(p.flushPendingEscape().isEmpty)
        #expect(p.feed(bytes("q")) == [.key(.character("q"))])
        // ESC and half a UTF-8 character: Escape, and the character can still complete.
        #expect(p.feed([0x1B, 0xC3]).isEmpty)
        #expect(p.flushPendingEscape() == [.key(.escape)])
        #expect(p.feed([0xA9]) == [.key(.character("é"))])
    }

    @Test func aPasteIsNotFlushedAndAnIncompleteUTF8CharacterIsNotAnEscape() {
        var p = InputParser()
        #expect(p.feed(bytes("\(esc)[200~abc\(esc)[20")).isEmpty)
        #expect(!p.hasPendingEscape)
        #expect(p.flushPendingEscape().isEmpty)
        #expect(p.feed(bytes("1~")) == [.paste("abc")])
        #expect(p.feed([0xE6, 0xB8]).isEmpty)
        #expect(!p.hasPendingEscape)
        #expect(p.feed([0xA9]) == [.key(.character("温"))])
    }

    @Test func aRunawaySequenceIsDroppedAndDoesNotWaitForever() {
        var p = InputParser()
        let long = bytes("\(esc)[" + String(repeating: "1;", count: 60))
        #expect(p.feed(long).isEmpty)
        #expect(!p.hasPendingEscape)
        #expect(p.feed(bytes("ok")) == [.key(.character("o")), .key(.character("k"))])
    }
}
