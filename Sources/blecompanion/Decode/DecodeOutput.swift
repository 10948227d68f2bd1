import ArgumentParser
import BLEParsing
import Foundation

/// Prints decoded models (human text or JSON) and decode errors.
enum DecodeOutput {
    /// One model in the uniform JSON shape
    /// `{"format":…,"model":…,"readings":[{"kind":…,"value":…,"unit":…}],"fields":{…}}`
    /// (a reading also carries `"label"` when the model has several readings of one kind).
    static func json(_ model: some DecodedModel) -> String {
        model.jsonString
    }

    /// Human-readable form: format, model, readings with units, then the fields.
    static func text(_ model: some DecodedModel) -> String {
        var lines = ["format:   \(model.formatName)", "model:    \(model.modelName)"]
        if model.readings.isEmpty {
            lines.append("readings: (none)")
        } else {
            lines.append("readings:")
            let names = model.readings.map(readingName)
            let width = names.map(\.count).max() ?? 0
            for (name, reading) in zip(names, model.readings) {
                var line = "  " + name + String(repeating: " ", count: width - name.count) + "  " + readingValue(reading.value)
                if let unit = reading.unit, !unit.isEmpty { line += " " + unit }
                lines.append(line)
            }
        }
        if model.fields.isEmpty {
            lines.append("fields:   (none)")
        } else {
            lines.append("fields:")
            let width = model.fields.map(\.0.count).max() ?? 0
            for (name, value) in model.fields {
                lines.append("  " + name + ":" + String(repeating: " ", count: width - name.count) + " " + fieldText(value))
            }
        }
        return lines.joined(separator: "\n")
    }

    static func readingName(_ r: Reading) -> String {
        r.label.map { "\(r.kind.rawValue) (\($0))" } ?? r.kind.rawValue
    }

    static func readingValue(_ v: ReadingValue) -> String {
        switch v {
        case let .number(d): return formatNumber(d)
        case let .bool(b): return b ? "true" : "false"
        case let .text(s): return s
        }
    }

    static func fieldText(_ v: FieldValue) -> String {
        switch v {
        case let .string(s): return s
        case let .number(d): return formatNumber(d)
        default: return JSON.serialize(v)
        }
    }

    /// Writes `Error: <message>` to standard error.
    static func error(_ message: String) {
        FileHandle.standardError.write(Data(("Error: " + message + "\n").utf8))
    }

    /// Prints one decoded model, or reports the error and exits with status 2.
    static func emit(_ result: Result<some DecodedModel, DecodeError>, json: Bool) throws {
        switch result {
        case let .success(model):
            print(json ? DecodeOutput.json(model) : text(model))
        case let .failure(e):
            error(e.description)
            throw ExitCode(2)
        }
    }
}
