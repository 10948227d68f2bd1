/// Decodes the bytes a terminal sends into keys, mouse events and pastes.
///
/// Stateful: a sequence (or a UTF-8 character) split across reads is kept
/// until the rest arrives. A lone ESC is ambiguous — the Escape key, or the
/// start of a sequence still on its way — so it stays pending until more
/// bytes come or the caller, after a short silence, calls
/// `flushPendingEscape()`.
///
/// Formats (xterm ctlseqs): CSI `ESC [ params final`, SS3 `ESC O final`,
/// SGR mouse `ESC [ < b ; x ; y M|m`, bracketed paste `ESC [ 200 ~ … ESC [ 201 ~`,
/// the Linux console's `ESC [ [ A…E` for F1–F5. Sequences it does not know
/// are dropped whole; a byte that cannot belong to a sequence ends it and is
/// decoded on its own, so what follows is never swallowed.
public struct InputParser: Sendable {
    /// Bytes not decoded yet: an incomplete sequence or character.
    private var pending: [UInt8] = []
    /// Inside a bracketed paste: the pasted bytes so far.
    private var paste: [UInt8]?

    /// The longest CSI accepted; longer ones are dropped (nothing we decode
    /// comes close: a mouse report at column 9999 is 18 bytes).
    static let maxSequenceLength = 64
    static let pasteEnd: [UInt8] = [0x1B, UInt8(ascii: "["), UInt8(ascii: "2"), UInt8(ascii: "0"), UInt8(ascii: "1"), UInt8(ascii: "~")]

    public init() {}

    /// True when the bytes so far end in an incomplete escape sequence
    /// (a lone ESC included): the caller should wait a short time for more,
    /// then call `flushPendingEscape()`.
    public var hasPendingEscape: Bool { paste == nil && pending.first == 0x1B }

    /// Decodes `bytes` (with whatever was pending) into events.
    public mutating func feed(_ bytes: [UInt8]) -> [TerminalEvent] {
        var events: [TerminalEvent] = []
        var input = pending
        input.append(contentsOf: bytes)
        pending = []
        var i = 0
        while i < input.count {
            if paste != nil {
                i = consumePaste(input, from: i, into: &events)
                continue
            }
            switch decode(input, at: i) {
            case .event(let event, let length):
                if let event { events.append(event) }
                i += length
            case .startPaste(let length):
                paste = []
                i += length
            case .incomplete:
                pending = Array(input[i...])
                return events
            }
        }
        return events
    }

    /// After a short silence: what is pending is not the start of a longer
    /// sequence. A lone ESC is the Escape key; ESC `[` or ESC `O` is Alt with
    /// that character; a longer incomplete sequence is dropped. A paste in
    /// progress or an incomplete UTF-8 character is kept.
    public mutating func flushPendingEscape() -> [TerminalEvent] {
        guard hasPendingEscape else { return [] }
        if pending.count > 1, pending[1] >= 0x80 {
            // ESC and part of a UTF-8 character: Escape; the character may still complete.
            pending.removeFirst()
            return [.key(.escape)]
        }
        defer { pending = [] }
        if pending.count == 1 { return [.key(.escape)] }
        if pending.count == 2 { return [.key(.alt(Character(Unicode.Scalar(pending[1]))))] }
        return []
    }

    // MARK: Decoding

    enum Step {
        /// A decoded event (nil: dropped) and the bytes it took.
        case event(TerminalEvent?, Int)
        case startPaste(Int)
        case incomplete
    }

    private func decode(_ b: [UInt8], at i: Int) -> Step {
        let byte = b[i]
        switch byte {
        case 0x1B:
            return decodeEscape(b, at: i)
        case 0x0D, 0x0A:
            return .event(.key(.enter), 1)
        case 0x09:
            return .event(.key(.tab), 1)
        case 0x7F, 0x08:
            return .event(.key(.backspace), 1)
        case 0x00:
            return .event(.key(.ctrl(" ")), 1)
        case 0x01...0x1A:
            return .event(.key(.ctrl(Character(Unicode.Scalar(byte + 0x60)))), 1)
        case 0x1C...0x1F:
            // Ctrl+\ ] ^ _
            return .event(.key(.ctrl(Character(Unicode.Scalar(byte + 0x40)))), 1)
        case 0x20...0x7E:
            return .event(.key(.character(Character(Unicode.Scalar(byte)))), 1)
        default:
            switch Self.decodeUTF8(b, at: i) {
            case .scalar(let s, let length): return .event(.key(.character(Character(s))), length)
            case .invalid: return .event(nil, 1)
            case .incomplete: return .incomplete
            }
        }
    }

    private func decodeEscape(_ b: [UInt8], at i: Int) -> Step {
        guard i + 1 < b.count else { return .incomplete }
        let next = b[i + 1]
        switch next {
        case UInt8(ascii: "["):
            return decodeCSI(b, at: i)
        case UInt8(ascii: "O"):
            guard i + 2 < b.count else { return .incomplete }
            let final = b[i + 2]
            guard (0x40...0x7E).contains(final) else { return .event(.key(.alt("O")), 2) }
            return .event(Self.ss3Key(final).map { .key($0) }, 3)
        case 0x1B:
            // ESC ESC…: the first is the Escape key; the second starts afresh.
            return .event(.key(.escape), 1)
        case 0x20...0x7E:
            return .event(.key(.alt(Character(Unicode.Scalar(next)))), 2)
        case 0x80...:
            switch Self.decodeUTF8(b, at: i + 1) {
            case .scalar(let s, let length): return .event(.key(.alt(Character(s))), 1 + length)
            case .invalid: return .event(.key(.escape), 1)
            case .incomplete: return .incomplete
            }
        default:
            // ESC + a control character: Escape, then that key on its own.
            return .event(.key(.escape), 1)
        }
    }

    private func decodeCSI(_ b: [UInt8], at i: Int) -> Step {
        // b[i] = ESC, b[i+1] = '['.
        var j = i + 2
        guard j < b.count else { return .incomplete }
        if b[j] == UInt8(ascii: "[") {
            // Linux console F1–F5: ESC [ [ A…E.
            guard j + 1 < b.count else { return .incomplete }
            let final = b[j + 1]
            guard (0x40...0x7E).contains(final) else { return .event(nil, 3) }
            let key: Key? = (UInt8(ascii: "A")...UInt8(ascii: "E")).contains(final) ? .function(Int(final - UInt8(ascii: "A")) + 1) : nil
            return .event(key.map { .key($0) }, 4)
        }
        let paramsStart = j
        while j < b.count, (0x30...0x3F).contains(b[j]) { j += 1 }
        let paramsEnd = j
        while j < b.count, (0x20...0x2F).contains(b[j]) { j += 1 }
        if j - i > Self.maxSequenceLength { return .event(nil, j - i) }
        guard j < b.count else { return .incomplete }
        let final = b[j]
        let length = j + 1 - i
        // Not a final byte: the sequence ends here, the byte is decoded on its own.
        guard (0x40...0x7E).contains(final) else { return .event(nil, j - i) }
        let params = Array(b[paramsStart..<paramsEnd])
        if params.first == UInt8(ascii: "<") {
            guard final == UInt8(ascii: "M") || final == UInt8(ascii: "m") else { return .event(nil, length) }
            return .event(Self.sgrMouse(Array(params.dropFirst()), released: final == UInt8(ascii: "m")).map { .mouse($0) }, length)
        }
        // Private parameters (`?`, `>`, `=`) are replies to queries we never send.
        if let first = params.first, first >= 0x3C { return .event(nil, length) }
        let numbers = Self.numbers(params)
        switch final {
        case UInt8(ascii: "A"): return .event(.key(.up), length)
        case UInt8(ascii: "B"): return .event(.key(.down), length)
        case UInt8(ascii: "C"): return .event(.key(.right), length)
        case UInt8(ascii: "D"): return .event(.key(.left), length)
        case UInt8(ascii: "H"): return .event(.key(.home), length)
        case UInt8(ascii: "F"): return .event(.key(.end), length)
        case UInt8(ascii: "Z"): return .event(.key(.backTab), length)
        case UInt8(ascii: "P")...UInt8(ascii: "S"):
            // F1–F4 with modifiers: ESC [ 1 ; m P…S.
            return .event(.key(.function(Int(final - UInt8(ascii: "P")) + 1)), length)
        case UInt8(ascii: "~"):
            if numbers.first == 200 { return .startPaste(length) }
            let key: Key?
            switch numbers.first ?? -1 {
            case 1, 7: key = .home
            case 2: key = .insert
            case 3: key = .delete
            case 4, 8: key = .end
            case 5: key = .pageUp
            case 6: key = .pageDown
            case 11...15: key = .function((numbers.first ?? 0) - 10)
            case 17...21: key = .function((numbers.first ?? 0) - 11)
            case 23, 24: key = .function((numbers.first ?? 0) - 12)
            default: key = nil
            }
            return .event(key.map { .key($0) }, length)
        default:
            return .event(nil, length)
        }
    }

    /// Inside a bracketed paste: collects bytes up to `ESC [ 201 ~`.
    private mutating func consumePaste(_ b: [UInt8], from i: Int, into events: inout [TerminalEvent]) -> Int {
        var collected = paste ?? []
        let end = Self.pasteEnd
        var k = i
        while k < b.count {
            if b[k] == 0x1B {
                let available = min(end.count, b.count - k)
                if b[k..<(k + available)].elementsEqual(end[0..<available]) {
                    if available < end.count {
                        // Maybe the start of the end marker: wait for the rest.
                        paste = collected
                        pending = Array(b[k...])
                        return b.count
                    }
                    paste = nil
                    events.append(.paste(Self.pasteText(collected)))
                    return k + end.count
                }
            }
            collected.append(b[k])
            k += 1
        }
        paste = collected
        return b.count
    }

    /// Pasted bytes as text, line ends as "\n" (terminals send CR for them).
    static func pasteText(_ bytes: [UInt8]) -> String {
        var normalized: [UInt8] = []
        normalized.reserveCapacity(bytes.count)
        var k = 0
        while k < bytes.count {
            if bytes[k] == 0x0D {
                normalized.append(0x0A)
                if k + 1 < bytes.count, bytes[k + 1] == 0x0A { k += 1 }
            } else {
                normalized.append(bytes[k])
            }
            k += 1
        }
        return String(decoding: normalized, as: UTF8.self)
    }

    static func ss3Key(_ final: UInt8) -> Key? {
        switch final {
        case UInt8(ascii: "A"): return .up
        case UInt8(ascii: "B"): return .down
        case UInt8(ascii: "C"): return .right
        case UInt8(ascii: "D"): return .left
        case UInt8(ascii: "H"): return .home
        case UInt8(ascii: "F"): return .end
        case UInt8(ascii: "M"): return .enter  // keypad Enter
        case UInt8(ascii: "P")...UInt8(ascii: "S"): return .function(Int(final - UInt8(ascii: "P")) + 1)
        default: return nil
        }
    }

    /// `b;x;y` of an SGR mouse report; coordinates become 0-based.
    static func sgrMouse(_ params: [UInt8], released: Bool) -> MouseEvent? {
        let n = numbers(params)
        guard n.count == 3, n.allSatisfy({ $0 >= 0 }) else { return nil }
        let code = n[0], x = max(0, n[1] - 1), y = max(0, n[2] - 1)
        let button = code & 3
        let kind: MouseEvent.Kind
        if code & 64 != 0 {
            // Wheel: 64 up, 65 down (66/67, sideways, are not reported).
            switch button {
            case 0: kind = .scrollUp
            case 1: kind = .scrollDown
            default: return nil
            }
        } else if released {
            kind = .release
        } else if code & 32 != 0 {
            // Motion: with a button held it is a drag; without (button 3) it is not asked for.
            guard button != 3 else { return nil }
            kind = .drag(button: button)
        } else {
            guard button != 3 else { return nil }
            kind = .press(button: button)
        }
        return MouseEvent(kind: kind, x: x, y: y)
    }

    /// The `;`-separated decimal parameters; an empty one is 0, a malformed one -1.
    static func numbers(_ params: [UInt8]) -> [Int] {
        guard !params.isEmpty else { return [] }
        var out: [Int] = []
        var value = 0, valid = true
        for p in params {
            if p == UInt8(ascii: ";") {
                out.append(valid ? value : -1)
                value = 0
                valid = true
            } else if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p), value < 1_000_000 {
                value = value * 10 + Int(p - UInt8(ascii: "0"))
            } else {
                valid = false
            }
        }
        out.append(valid ? value : -1)
        return out
    }

    enum UTF8Step {
        case scalar(Unicode.Scalar, Int)
        case invalid
        case incomplete
    }

    /// One UTF-8 encoded scalar at `i` (rejecting overlong forms and surrogates).
    static func decodeUTF8(_ b: [UInt8], at i: Int) -> UTF8Step {
        let lead = b[i]
        let length: Int
        var value: UInt32
        switch lead {
        case 0x00...0x7F: return .scalar(Unicode.Scalar(lead), 1)
        case 0xC2...0xDF: length = 2; value = UInt32(lead & 0x1F)
        case 0xE0...0xEF: length = 3; value = UInt32(lead & 0x0F)
        case 0xF0...0xF4: length = 4; value = UInt32(lead & 0x07)
        default: return .invalid
        }
        for k in 1..<length {
            guard i + k < b.count else { return .incomplete }
            let c = b[i + k]
            guard c & 0xC0 == 0x80 else { return .invalid }
            value = value << 6 | UInt32(c & 0x3F)
        }
        let minimum: UInt32 = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000
        guard value >= minimum, let scalar = Unicode.Scalar(value) else { return .invalid }
        return .scalar(scalar, length)
    }
}
