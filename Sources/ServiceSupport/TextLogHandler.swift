// Plain one-line logging for a person at a terminal.
import Logging

/// A `LogHandler` for terminals: one line per message,
///
///     2026-11-23T02:00:00.123Z info gateway: connected broker=127.0.0.1:1883 [Gateway]
///
/// Why not swift-log's `StreamLogHandler`: it writes messages and metadata
/// as they are, and the gateway logs text that radios send (device names,
/// decoded strings) — an escape sequence in a BLE name must not reach a
/// terminal, nor a newline split one log line in two. Here every control
/// character is escaped as in JSON (`\n`, `\u001b`), and lines share the
/// `LogSink` lock with the JSON handler.
public struct TextLogHandler: LogHandler {
    public let label: String
    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let sink: LogSink

    public init(
        label: String,
        level: Logger.Level = .info,
        sink: LogSink = .standardError,
        metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider
    ) {
        self.label = label
        self.logLevel = level
        self.sink = sink
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        sink.write(line: line(for: event, timestamp: LogFormatting.timestamp()))
    }

    func line(for event: LogEvent, timestamp: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(120)
        out += Array(timestamp.utf8)
        out.append(UInt8(ascii: " "))
        out += Array(event.level.rawValue.utf8)
        out.append(UInt8(ascii: " "))
        LogFormatting.appendEscaped(label, to: &out)
        out += [UInt8(ascii: ":"), UInt8(ascii: " ")]
        LogFormatting.appendEscaped(event.message.description, to: &out)
        let all = LogFormatting.merged(metadata, metadataProvider, event.metadata)
        for key in all.keys.sorted() {
            guard let value = all[key] else { continue }
            out.append(UInt8(ascii: " "))
            LogFormatting.appendEscaped(key, to: &out)
            out.append(UInt8(ascii: "="))
            LogFormatting.appendText(value, to: &out)
        }
        if let error = event.error {
            out += Array(" error=".utf8)
            LogFormatting.appendText(.string(String(describing: error)), to: &out)
        }
        out += Array(" [".utf8)
        LogFormatting.appendEscaped(event.source, to: &out)
        out += [UInt8(ascii: "]"), UInt8(ascii: "\n")]
        return out
    }
}
