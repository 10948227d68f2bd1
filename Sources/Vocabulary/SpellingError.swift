/// Text that does not spell the value it was given as: which kind of value,
/// the text itself, what was expected and, where it is known, the byte offset
/// at which the text went wrong. Every front end (CLI, configuration file,
/// scenario file, MQTT command, HTTP query) shows ``description`` as it is,
/// so a user sees the same sentence wherever they typed the same mistake.
public struct SpellingError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case address = "a Bluetooth address"
        case uuid = "a Bluetooth UUID"
        case hex = "hex bytes"
    }

    public let kind: Kind
    /// The text as it was given (cut to 64 characters: it may come from a file or the network).
    public let text: String
    /// What a valid spelling looks like, or what was expected where it went wrong.
    public let expected: String
    /// UTF-8 offset into `text` where it went wrong, when one place is to blame.
    public let offset: Int?

    public init(_ kind: Kind, _ text: String, expected: String, offset: Int? = nil) {
        self.kind = kind
        self.text = text.utf8.count > 64 ? String(text.prefix(64)) + "…" : text
        self.expected = expected
        self.offset = offset
    }

    public var description: String {
        "\"\(text)\" is not \(kind.rawValue) (expected \(expected)\(offset.map { ", at character \($0 + 1)" } ?? ""))"
    }
}
