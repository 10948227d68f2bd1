import Foundation
import Yams

/// Turns the text into a Yams node tree, reporting syntax errors with their line.
///
/// Yams refuses a mapping with a duplicated key by throwing, which would stop
/// at the first problem. To go on collecting, the first occurrence of the key
/// the error names is renamed in the text with a numbered marker and the text
/// is composed again; ``ConfigReader`` strips the marker from keys and reports
/// the later occurrence as a duplicate, with the line of the first.
enum YAMLDocument {
    enum Outcome {
        /// The document's root; `nil` for an empty document.
        case parsed(Node?)
        /// A problem was reported; there is nothing to read.
        case failed
    }

    /// Upper bound on recomposing after duplicate keys (each round renames one key).
    static let maximumDuplicateRounds = 100

    static func compose(_ original: String, reader: ConfigReader) -> Outcome {
        var text = original
        var round = 0
        while true {
            do {
                // No implicit-tag rules: ScalarValue types plain scalars itself.
                return .parsed(try Yams.compose(yaml: text, .basic))
            } catch YamlError.duplicatedKeysInMapping(let duplicates, let context) {
                let marker = reader.duplicateMarker(round)
                if round < maximumDuplicateRounds, !original.contains(ConfigReader.duplicateMarkerPrefix),
                   let renamed = insert(marker, into: text, line: context.mark.line, column: context.mark.column) {
                    text = renamed
                    round += 1
                    continue
                }
                let keys = duplicates.map { "\"\($0)\"" }.joined(separator: ", ")
                reader.report(line: context.mark.line > 0 ? context.mark.line : nil, key: "", "duplicate key \(keys) in a mapping")
                return .failed
            } catch let error as YamlError {
                let (line, message) = describe(error)
                reader.report(line: line, key: "", message)
                return .failed
            } catch {
                reader.report(line: nil, key: "", "invalid YAML: \(error)")
                return .failed
            }
        }
    }

    struct InvalidUTF8: Error {
        var line: Int
        var problem: GatewayConfigError.Problem { .init(line: line, key: "", message: "the file is not valid UTF-8") }
    }

    /// Decodes a file's bytes; invalid UTF-8 is reported with the line it is on.
    static func decodeUTF8(_ bytes: [UInt8]) -> Result<String, InvalidUTF8> {
        if let text = String(validating: bytes, as: UTF8.self) { return .success(text) }
        var line = 1
        var iterator = bytes.makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        loop: while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let scalar):
                if Unicode.UTF8.decode(scalar) == "\n" { line += 1 }
            case .error:
                break loop
            case .emptyInput:
                break loop
            }
        }
        return .failure(InvalidUTF8(line: line))
    }

    /// Line and message for a Yams error. Line numbers from libyaml are 1-based.
    static func describe(_ error: YamlError) -> (line: Int?, message: String) {
        func text(_ problem: String, _ context: YamlError.Context?) -> String {
            var message = "invalid YAML: \(problem)"
            if let context {
                message += " (\(context.text) that starts on line \(context.mark.line))"
            }
            return message
        }
        switch error {
        case .scanner(let context, let problem, let mark, let yaml):
            if character(at: mark, in: yaml) == "\t" {
                return (mark.line, "invalid YAML: a tab where YAML allows only spaces (indent with spaces)")
            }
            return (mark.line, text(problem, context))
        case .parser(let context, let problem, let mark, _):
            return (mark.line, text(problem, context))
        case .composer(let context, let problem, let mark, _):
            // Yams words "more than one document" as context + problem at the second document.
            if let context, context.mark.line == 1, context.text.contains("single document") {
                return (mark.line, "invalid YAML: \(context.text), \(problem); a configuration file is one document")
            }
            return (mark.line, text(problem, context))
        case .reader(let problem, let offset, _, let yaml):
            return (offset.map { line(atCharacterOffset: $0, in: yaml) }, "invalid YAML: \(problem)")
        case .duplicatedKeysInMapping(let duplicates, let context):
            return (context.mark.line, "duplicate key \(duplicates.joined(separator: ", ")) in a mapping")
        default:
            return (nil, "invalid YAML: \(error)")
        }
    }

    /// The Unicode scalar at a libyaml mark, if the mark is inside the text.
    static func character(at mark: Mark, in text: String) -> Unicode.Scalar? {
        guard mark.line >= 1, mark.column >= 1 else { return nil }
        var line = 1
        var column = 1
        for scalar in text.unicodeScalars {
            if line == mark.line, column == mark.column { return scalar }
            if scalar == "\n" {
                if line == mark.line { return nil }
                line += 1
                column = 1
            } else {
                column += 1
            }
        }
        return nil
    }

    static func line(atCharacterOffset offset: Int, in text: String) -> Int {
        1 + text.prefix(offset).reduce(0) { $0 + ($1.isNewline ? 1 : 0) }
    }

    /// Inserts `insertion` before the character at libyaml's `line`:`column`
    /// (both 1-based, columns counted in Unicode scalars, breaks as libyaml sees them).
    static func insert(_ insertion: String, into text: String, line: Int, column: Int) -> String? {
        let scalars = Array(text.unicodeScalars)
        var index = scalars.first == "\u{FEFF}" ? 1 : 0
        var currentLine = 1
        var currentColumn = 1
        while index < scalars.count, currentLine != line || currentColumn != column {
            switch scalars[index] {
            case "\r":
                if index + 1 < scalars.count, scalars[index + 1] == "\n" { index += 1 }
                currentLine += 1
                currentColumn = 1
            case "\n", "\u{85}", "\u{2028}", "\u{2029}":
                currentLine += 1
                currentColumn = 1
            default:
                currentColumn += 1
            }
            index += 1
        }
        guard currentLine == line, currentColumn == column, index < scalars.count,
              !scalars[index].properties.isWhitespace else { return nil }
        // Inside the quotes of a quoted key, so that the key stays the same kind of scalar.
        if scalars[index] == "\"" || scalars[index] == "'" { index += 1 }
        var result = String.UnicodeScalarView()
        result.append(contentsOf: scalars[..<index])
        result.append(contentsOf: insertion.unicodeScalars)
        result.append(contentsOf: scalars[index...])
        return String(result)
    }
}
