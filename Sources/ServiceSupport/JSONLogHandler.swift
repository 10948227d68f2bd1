// JSON Lines logging for the gateway: one object per line, for journald,
// container logs and anything that reads JSON.
import Logging

/// A `LogHandler` that writes one JSON object per line:
///
///     {"ts":"2026-11-23T02:00:00.123Z","level":"info","label":"gateway","msg":"connected","broker":"127.0.0.1:1883","source":"Gateway"}
///
/// - `ts` is UTC with milliseconds; `level` is swift-log's level name.
/// - Metadata (the handler's, the metadata provider's, then the call's) is
///   flattened into the top-level object, keys sorted; nested dictionaries and
///   arrays stay nested. A metadata key that would collide with a fixed field
///   (`ts`, `level`, `label`, `msg`, `error`, `source`, `file`, `line`,
///   `function`) is written as `meta.<key>` so no key appears twice.
/// - An `error` passed to the logger becomes `"error"` (its description).
/// - `file`, `line` and `function` are added when `includeLocation` is set.
/// - Strings are escaped as JSON requires (quotes, backslash, every control
///   character); non-ASCII text is written as UTF-8, not `\u` escapes.
///
/// Each line goes to the `LogSink` in one locked write, so lines from several
/// threads never interleave.
public struct JSONLogHandler: LogHandler {
    public let label: String
    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var includeLocation: Bool
    private let sink: LogSink

    static let reservedKeys: Set<String> = ["ts", "level", "label", "msg", "error", "source", "file", "line", "function"]

    public init(
        label: String,
        level: Logger.Level = .info,
        sink: LogSink = .standardError,
        includeLocation: Bool = false,
        metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider
    ) {
        self.label = label
        self.logLevel = level
        self.sink = sink
        self.includeLocation = includeLocation
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        sink.write(line: line(for: event, timestamp: LogFormatting.timestamp()))
    }

    /// The bytes of one log line, newline included (separate for tests).
    func line(for event: LogEvent, timestamp: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        func field(_ name: String) {
            out.append(UInt8(ascii: ","))
            LogFormatting.appendJSONString(name, to: &out)
            out.append(UInt8(ascii: ":"))
        }
        out += Array(#"{"ts":"#.utf8)
        LogFormatting.appendJSONString(timestamp, to: &out)
        field("level")
        LogFormatting.appendJSONString(event.level.rawValue, to: &out)
        field("label")
        LogFormatting.appendJSONString(label, to: &out)
        field("msg")
        LogFormatting.appendJSONString(event.message.description, to: &out)

        let all = LogFormatting.merged(metadata, metadataProvider, event.metadata)
        for key in all.keys.sorted() {
            guard let value = all[key] else { continue }
            field(Self.reservedKeys.contains(key) ? "meta." + key : key)
            LogFormatting.appendJSON(value, to: &out)
        }
        if let error = event.error {
            field("error")
            LogFormatting.appendJSONString(String(describing: error), to: &out)
        }
        field("source")
        LogFormatting.appendJSONString(event.source, to: &out)
        if includeLocation {
            field("file")
            LogFormatting.appendJSONString(event.file, to: &out)
            field("line")
            out += Array(String(event.line).utf8)
            field("function")
            LogFormatting.appendJSONString(event.function, to: &out)
        }
        out += [UInt8(ascii: "}"), UInt8(ascii: "\n")]
        return out
    }
}
