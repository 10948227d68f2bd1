import Bounds
import Foundation
import Vocabulary
import Yams

/// A scalar as this loader types it. Quoted and block scalars are always
/// strings; plain ones follow YAML 1.2's core schema for integers, floats and
/// null, and also take YAML 1.1's yes/no/on/off as booleans.
enum ScalarValue: Equatable {
    case null
    case bool(Bool)
    case integer(Int)
    /// Also integers too large for `Int`.
    case float(Double)
    case string(String, quoted: Bool)

    init(_ scalar: Node.Scalar) {
        let text = scalar.string
        let quoted = scalar.style != .plain && scalar.style != .any
        // The text decides for an untagged plain scalar: YAMLDocument composes
        // with Yams' basic resolver (its default one types scalars with
        // NSRegularExpression, which brought ICU's regex engine and data
        // into every gateway: ~1 MiB of RSS). Hashing a key resolves its tag
        // in place (to !!str with that resolver); values are not hashed, and
        // keys are read as text. Explicit core tags are typed by the text too.
        switch Tag.Name(rawValue: scalar.tag.rawValue) {
        case .implicit, .bool, .int, .float, .null:
            self = quoted ? .string(text, quoted: true) : Self.plain(text)
        default:
            self = .string(text, quoted: quoted)
        }
    }

    static func plain(_ text: String) -> ScalarValue {
        switch text {
        case "", "~", "null", "Null", "NULL": return .null
        case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON": return .bool(true)
        case "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF": return .bool(false)
        case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF": return .float(.infinity)
        case "-.inf", "-.Inf", "-.INF": return .float(-.infinity)
        case ".nan", ".NaN", ".NAN": return .float(.nan)
        default: break
        }
        if isInteger(text) {
            if let value = Int(text.hasPrefix("+") ? String(text.dropFirst()) : text) { return .integer(value) }
            return .float(Double(text) ?? .infinity)
        }
        if let value = hexOrOctal(text) { return .integer(value) }
        if isFloat(text), let value = Double(text) { return .float(value) }
        return .string(text, quoted: false)
    }

    private static func isInteger(_ text: String) -> Bool {
        var digits = Substring(text)
        if digits.first == "-" || digits.first == "+" { digits = digits.dropFirst() }
        return !digits.isEmpty && digits.allSatisfy { $0.isASCII && $0.isNumber }
    }

    private static func hexOrOctal(_ text: String) -> Int? {
        if text.hasPrefix("0x"), text.count > 2 { return Int(text.dropFirst(2), radix: 16) }
        if text.hasPrefix("0o"), text.count > 2 { return Int(text.dropFirst(2), radix: 8) }
        return nil
    }

    private static func isFloat(_ text: String) -> Bool {
        // [-+]? ( . digits | digits [. digits?] ) ( [eE] [-+]? digits )?
        let allowed = Set("0123456789.eE+-")
        return text.contains { $0.isNumber } && text.allSatisfy { allowed.contains($0) }
    }
}

/// A mapping's key and value, with the key path used in problems.
struct Entry {
    /// The key as written (without a duplicate marker).
    var key: String
    /// `mqtt.port`, `devices.watch[0].address`, …
    var path: String
    var keyLine: Int?
    var node: Node

    /// The value's line, or the key's when the value has no mark.
    var line: Int? { node.mark?.line ?? keyLine }

    var isNull: Bool {
        if case .scalar(let scalar) = node, ScalarValue(scalar) == .null { return true }
        return false
    }
}

/// A mapping whose keys were checked against the keys it may have.
struct Section {
    var path: String
    /// The line of the key that holds this mapping (or of the mapping itself).
    var line: Int?
    /// First occurrences of the allowed keys.
    var entries: [String: Entry]
    /// Keys suggested for misspelt ones: not also reported missing.
    var suggested: Set<String> = []

    subscript(key: String) -> Entry? { entries[key] }

    /// Present and not null.
    func value(_ key: String) -> Entry? {
        guard let entry = entries[key], !entry.isNull else { return nil }
        return entry
    }

    func path(_ key: String) -> String { Section.join(path, key) }

    /// Whether a required key that is absent should be reported: not when a misspelling of it was.
    func isMissing(_ key: String) -> Bool { value(key) == nil && !suggested.contains(key) }

    static func join(_ path: String, _ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }
}

/// Collects problems while reading nodes. One per load; not shared across tasks.
final class ConfigReader {
    static let duplicateMarkerPrefix = "__blecompanion_duplicate_"

    private var problems: [GatewayConfigError.Problem] = []

    var problemsInFileOrder: [GatewayConfigError.Problem] {
        problems.enumerated().sorted { lhs, rhs in
            let left = lhs.element.line ?? 0
            let right = rhs.element.line ?? 0
            return left != right ? left < right : lhs.offset < rhs.offset
        }.map(\.element)
    }

    func report(line: Int?, key: String, _ message: String) {
        problems.append(.init(line: line, key: key, message: message))
    }

    func report(_ entry: Entry, _ message: String) {
        report(line: entry.line, key: entry.path, message)
    }

    // MARK: Duplicate keys

    func duplicateMarker(_ round: Int) -> String { "\(Self.duplicateMarkerPrefix)\(round)__" }

    /// The key as written, without a marker ``YAMLDocument`` added.
    static func unmarked(_ key: String) -> String {
        guard key.hasPrefix(duplicateMarkerPrefix) else { return key }
        let rest = key.dropFirst(duplicateMarkerPrefix.count).drop { $0.isASCII && $0.isNumber }
        return rest.hasPrefix("__") ? String(rest.dropFirst(2)) : key
    }

    // MARK: Mappings

    /// Checks that `node` is a mapping of string keys, reports unknown keys
    /// (with a suggestion) and duplicates, and returns the known ones.
    func section(_ node: Node, path: String, line: Int?, keys allowed: [String], what: String? = nil) -> Section? {
        guard case .mapping(let mapping) = node else {
            report(line: node.mark?.line ?? line, key: path, "expected \(what ?? "a mapping"), got \(Self.describe(node))")
            return nil
        }
        var section = Section(path: path, line: line ?? node.mark?.line, entries: [:])
        var firstLines: [String: Int?] = [:]
        for (keyNode, value) in mapping {
            let keyLine = keyNode.mark?.line
            guard case .scalar(let scalar) = keyNode else {
                report(line: keyLine, key: path, "keys must be plain words, got \(Self.describe(keyNode)) as a key")
                continue
            }
            let key = Self.unmarked(scalar.string)
            let keyPath = Section.join(path, key)
            if let first = firstLines[key] {
                report(line: keyLine, key: keyPath, "duplicate key" + (first.map { "; first given on line \($0)" } ?? ""))
                continue
            }
            firstLines[key] = keyLine
            guard allowed.contains(key) else {
                if key == "<<" {
                    report(line: keyLine, key: keyPath, "merge keys (<<) are not supported; write the keys out")
                } else if let suggestion = Suggestion.closest(to: key, among: allowed) {
                    section.suggested.insert(suggestion)
                    report(line: keyLine, key: keyPath, "unknown key; did you mean \(Section.join(path, suggestion))?")
                } else {
                    report(line: keyLine, key: keyPath, "unknown key; expected one of: \(allowed.joined(separator: ", "))")
                }
                continue
            }
            section.entries[key] = Entry(key: key, path: keyPath, keyLine: keyLine, node: value)
        }
        return section
    }

    /// A mapping whose keys are data (addresses), each entry's path being `path["key"]`.
    /// Duplicate keys are reported; `nil` when not a mapping (reported).
    func keyedEntries(_ entry: Entry) -> [Entry]? {
        guard case .mapping(let mapping) = entry.node else {
            report(entry, "expected a mapping, got \(Self.describe(entry.node))")
            return nil
        }
        var entries: [Entry] = []
        var firstLines: [String: Int?] = [:]
        for (keyNode, value) in mapping {
            let keyLine = keyNode.mark?.line
            guard case .scalar(let scalar) = keyNode else {
                report(line: keyLine, key: entry.path, "keys must be plain words, got \(Self.describe(keyNode)) as a key")
                continue
            }
            let key = Self.unmarked(scalar.string)
            let keyPath = "\(entry.path)[\(Self.quote(key))]"
            if let first = firstLines[key] {
                report(line: keyLine, key: keyPath, "duplicate key" + (first.map { "; first given on line \($0)" } ?? ""))
                continue
            }
            firstLines[key] = keyLine
            entries.append(Entry(key: key, path: keyPath, keyLine: keyLine, node: value))
        }
        return entries
    }

    /// A nested section; `nil` when absent, null or not a mapping (reported).
    func section(_ parent: Section, _ key: String, keys: [String]) -> Section? {
        guard let entry = parent.value(key) else { return nil }
        return section(entry.node, path: entry.path, line: entry.keyLine, keys: keys)
    }

    /// The items of a list, with their paths (`key[0]`…); `nil` when not a list (reported).
    func list(_ entry: Entry) -> [Entry]? {
        guard case .sequence(let sequence) = entry.node else {
            report(entry, "expected a list, got \(Self.describe(entry.node))")
            return nil
        }
        return sequence.enumerated().map { index, node in
            Entry(key: entry.key, path: "\(entry.path)[\(index)]", keyLine: node.mark?.line ?? entry.keyLine, node: node)
        }
    }

    // MARK: Scalars

    /// Any scalar but null, as written: `password: 1234` is the string "1234".
    func text(_ entry: Entry, expected: String = "a string") -> String? {
        guard case .scalar(let scalar) = entry.node else {
            report(entry, "expected \(expected), got \(Self.describe(entry.node))")
            return nil
        }
        if ScalarValue(scalar) == .null {
            report(entry, "expected \(expected), got nothing (null)")
            return nil
        }
        return scalar.string
    }

    /// A string that must not be empty.
    func nonEmptyText(_ entry: Entry, expected: String = "a string") -> String? {
        guard let text = text(entry, expected: expected) else { return nil }
        guard !text.isEmpty else {
            report(entry, "expected \(expected), got an empty string")
            return nil
        }
        return text
    }

    /// An integer in `range`; `bounds` words the range when `lowerBound…upperBound` would not read well.
    func integer(_ entry: Entry, in range: ClosedRange<Int>, bounds: String? = nil) -> Int? {
        let expected = "expected an integer \(bounds ?? "\(range.lowerBound)…\(range.upperBound)")"
        let value: ScalarValue? = if case .scalar(let scalar) = entry.node { ScalarValue(scalar) } else { nil }
        guard case .integer(let number) = value else {
            if case .string(let text, quoted: true) = value, ScalarValue.plain(text).isInteger {
                report(entry, "\(expected), got the string \(Self.quote(text)); remove the quotes")
            } else {
                report(entry, "\(expected), got \(Self.describe(entry.node))")
            }
            return nil
        }
        guard range.contains(number) else {
            report(entry, "\(expected), got \(number)")
            return nil
        }
        return number
    }

    func bool(_ entry: Entry) -> Bool? {
        if case .scalar(let scalar) = entry.node, case .bool(let value) = ScalarValue(scalar) { return value }
        report(entry, "expected true or false, got \(Self.describe(entry.node))")
        return nil
    }

    /// A number of seconds (integer or decimal) of at least `minimum`, or more
    /// than it when `exclusive`, and at most `Bounds.maximumInterval` (10 years).
    func seconds(_ entry: Entry, minimum: Double = 0, exclusive: Bool = false) -> TimeInterval? {
        let expected = "expected a number of seconds \(exclusive ? ">" : "≥") \(Self.format(minimum))"
        let value: Double
        switch entry.node.scalar.map(ScalarValue.init) {
        case .integer(let number)?: value = Double(number)
        case .float(let number)?: value = number
        case .string(let text, quoted: true)? where ScalarValue.plain(text).isNumber:
            report(entry, "\(expected), got the string \(Self.quote(text)); remove the quotes")
            return nil
        default:
            report(entry, "\(expected), got \(Self.describe(entry.node))")
            return nil
        }
        switch Bounds.interval(value, minimum: minimum, exclusive: exclusive) {
        case .success(let seconds): return seconds
        case .failure(let problem):
            report(entry, "\(problem.expected), got \(entry.node.scalar?.string ?? problem.description)")
            return nil
        }
    }

    /// One of a few words; suggests the closest when it is near enough.
    func choice(_ entry: Entry, _ choices: [String], expected: String? = nil) -> String? {
        guard let word = text(entry, expected: expected ?? Self.oneOf(choices)) else { return nil }
        if choices.contains(word) { return word }
        var message = "expected \(expected ?? Self.oneOf(choices)), got \(Self.quote(word))"
        if let suggestion = Suggestion.closest(to: word, among: choices) { message += "; did you mean \(Self.quote(suggestion))?" }
        report(entry, message)
        return nil
    }

    /// A Bluetooth address in any spelling the vocabulary takes; nil when not one (reported).
    func address(_ entry: Entry) -> BluetoothAddress? {
        let expected = "a Bluetooth address like \"A4:C1:38:00:00:01\""
        guard let text = text(entry, expected: expected) else { return nil }
        do { return try BluetoothAddress(text) } catch {
            report(entry, error.description)
            return nil
        }
    }

    /// A service or characteristic UUID (16-bit like "fcd2" or 128-bit); nil when not one (reported).
    func uuid(_ entry: Entry, what: String = "a UUID") -> BluetoothUUID? {
        let expected = "\(what): 16-bit like \"fcd2\" or 128-bit like \"0000fcd2-0000-1000-8000-00805f9b34fb\""
        guard let text = text(entry, expected: expected) else { return nil }
        do { return try BluetoothUUID(parsing: text) } catch {
            report(entry, "\(error)")
            return nil
        }
    }

    // MARK: Wording

    static func describe(_ node: Node) -> String {
        switch node {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .alias: return "an alias"
        case .scalar(let scalar):
            switch ScalarValue(scalar) {
            case .null: return "nothing (null)"
            case .string(let text, _): return quote(text)
            case .bool, .integer, .float: return scalar.string
            }
        }
    }

    static func quote(_ text: String) -> String {
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\t": escaped += "\\t"
            default:
                if scalar.properties.generalCategory == .control {
                    escaped += "\\u{\(String(scalar.value, radix: 16))}"
                } else {
                    escaped.unicodeScalars.append(scalar)
                }
            }
        }
        return "\"\(escaped)\""
    }

    static func oneOf(_ choices: [String]) -> String {
        let quoted = choices.map(quote)
        guard quoted.count > 1 else { return quoted.first ?? "" }
        return quoted.dropLast().joined(separator: ", ") + " or " + (quoted.last ?? "")
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}

extension ScalarValue {
    var isInteger: Bool { if case .integer = self { true } else { false } }
    var isNumber: Bool {
        switch self {
        case .integer, .float: true
        default: false
        }
    }
}

/// "Did you mean": the closest word by edit distance (a swap of two neighbours
/// counts as one edit), or the same word spelled with other case, `_` or `-`.
enum Suggestion {
    static func closest(to word: String, among candidates: [String]) -> String? {
        let folded = fold(word)
        if let same = candidates.first(where: { fold($0) == folded }) { return same }
        let limit = word.count <= 4 ? 1 : 2
        var best: (candidate: String, distance: Int)?
        for candidate in candidates {
            let distance = editDistance(Array(folded), Array(fold(candidate)))
            if distance <= limit, distance < (best?.distance ?? Int.max) {
                best = (candidate, distance)
            }
        }
        return best?.candidate
    }

    private static func fold(_ word: String) -> String {
        word.lowercased().filter { $0 != "_" && $0 != "-" }
    }

    /// Optimal string alignment distance.
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var distance = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    distance = min(distance, table[i - 2][j - 2] + 1)
                }
                table[i][j] = distance
            }
        }
        return table[a.count][b.count]
    }
}
