/// A key the user pressed, decoded from the terminal's byte stream.
public enum Key: Sendable, Hashable {
    /// A printable character (letters, digits, punctuation, space, any Unicode).
    case character(Character)
    /// Ctrl + a letter (lower-case), e.g. `.ctrl("c")`.
    case ctrl(Character)
    /// Alt/Meta + a character (ESC prefix).
    case alt(Character)
    case enter, escape, tab, backTab, backspace, delete, insert
    case up, down, left, right, home, end, pageUp, pageDown
    /// F1…F12.
    case function(Int)
}

/// A mouse event (SGR 1006 reporting), columns and rows from 0.
public struct MouseEvent: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        case press(button: Int)
        case release
        case scrollUp
        case scrollDown
        case drag(button: Int)
    }
    public var kind: Kind
    public var x: Int
    public var y: Int
    public init(kind: Kind, x: Int, y: Int) {
        self.kind = kind
        self.x = x
        self.y = y
    }
}

/// What the terminal reports: input, and changes of the terminal itself.
public enum TerminalEvent: Sendable, Hashable {
    case key(Key)
    case mouse(MouseEvent)
    /// Bracketed paste.
    case paste(String)
    /// The window changed size (SIGWINCH), in columns and rows.
    case resize(width: Int, height: Int)
    /// Back in the foreground after SIGTSTP/SIGCONT: everything must be redrawn.
    case resumed
    /// SIGINT, SIGTERM or SIGHUP: the application should stop (the terminal is restored by then).
    case terminate(signal: Int32)
}

/// How many colors the terminal shows.
public enum ColorMode: Sendable, Hashable {
    /// NO_COLOR set, TERM=dumb, or not a color terminal: attributes only (bold, reverse, …).
    case none
    case ansi16
    case indexed256
    case truecolor
}
