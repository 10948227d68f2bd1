import Foundation
import Logging
import Locking
import Testing
@testable import ServiceSupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

private func object(_ line: Data) throws -> [String: Any] {
    let parsed = try JSONSerialization.jsonObject(with: line)
    return try #require(parsed as? [String: Any], "not a JSON object: \(String(decoding: line, as: UTF8.self))")
}

@Suite struct JSONLogHandlerTests {
    @Test func oneObjectPerLineWithTheFixedFieldsFirst() throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        let logger = Logger(label: "gateway.mqtt") { JSONLogHandler(label: $0, level: .debug, sink: LogSink(fileDescriptor: file.fd)) }

        logger.info("connected")
        logger.trace("below the level: not written")
        logger.debug("second", source: "MQTT")

        let lines = file.lines
        #expect(lines.count == 3)
        #expect(lines.last?.isEmpty == true, "the file ends with a newline")
        let first = try object(lines[0])
        #expect(first["level"] as? String == "info")
        #expect(first["label"] as? String == "gateway.mqtt")
        #expect(first["msg"] as? String == "connected")
        #expect(first["source"] as? String == "ServiceSupportTests")
        let timestamp = try #require(first["ts"] as? String)
        #expect(timestamp.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/) != nil, "\(timestamp)")
        #expect(String(decoding: lines[0], as: UTF8.self).hasPrefix(#"{"ts":""#))
        #expect(String(decoding: lines[0], as: UTF8.self).contains(#","level":"info","label":"gateway.mqtt","msg":"connected","#))

        let second = try object(lines[1])
        #expect(second["level"] as? String == "debug")
        #expect(second["source"] as? String == "MQTT")
    }

    @Test func timestampsAreUTCWithMilliseconds() {
        // 2026-11-23T02:00:00Z is 1795399200 seconds after the epoch.
        #expect(LogFormatting.timestamp(seconds: 1_795_399_200, nanoseconds: 123_999_999) == "2026-11-23T02:00:00.123Z")
        #expect(LogFormatting.timestamp(seconds: 0, nanoseconds: 5_000_000) == "1970-01-01T00:00:00.005Z")
    }

    @Test(arguments: [
        "plain",
        "quote \" and backslash \\ and slash /",
        "newline\nreturn\rtab\tbackspace\u{08}formfeed\u{0C}",
        "NUL \u{00} SOH \u{01} ESC \u{1B}[31m red US \u{1F} DEL \u{7F}",
        "non-ASCII: café, Größe, 温度計, 🌡️, line separator \u{2028}",
        "",
    ])
    func escapingSurvivesARoundTrip(message: String) throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        let logger = Logger(label: "escape \"label\"\n") { JSONLogHandler(label: $0, sink: LogSink(fileDescriptor: file.fd)) }
        logger.info("\(message)", metadata: ["name": "\(message)", "nested": ["k\n": "\(message)"]])

        let lines = file.lines
        #expect(lines.count == 2, "one line, then the final newline")
        let parsed = try object(lines[0])
        #expect(parsed["msg"] as? String == message)
        #expect(parsed["label"] as? String == "escape \"label\"\n")
        #expect(parsed["name"] as? String == message)
        #expect((parsed["nested"] as? [String: Any])?["k\n"] as? String == message)
    }

    @Test func controlCharactersAreEscapedAndNonASCIIIsKeptAsUTF8() throws {
        var out: [UInt8] = []
        LogFormatting.appendJSONString("a\u{01}\u{1B}\u{7F}\n\"\\é🌡", to: &out)
        #expect(String(decoding: out, as: UTF8.self) == #""a\u0001\u001b\u007f\n\"\\é🌡""#)
    }

    @Test func metadataIsFlattenedNestedAndTyped() throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        let provider = Logger.MetadataProvider { ["request": "r-42", "device": "from-provider"] }
        var logger = Logger(label: "gateway") {
            JSONLogHandler(label: $0, sink: LogSink(fileDescriptor: file.fd), metadataProvider: provider)
        }
        logger[metadataKey: "adapter"] = "hci0"
        logger[metadataKey: "device"] = "from-handler"

        logger.warning("reading", metadata: [
            "device": "AA:BB:CC:DD:EE:FF",
            "count": .stringConvertible(3),
            "ratio": .stringConvertible(0.5),
            "ok": .stringConvertible(true),
            "nan": .stringConvertible(Double.nan),
            "reading": ["kind": "temperature", "value": "21.5", "tags": ["a", "b"]],
            "msg": "collides with the message field",
        ])

        let parsed = try object(try #require(file.lines.first))
        #expect(parsed["msg"] as? String == "reading")
        #expect(parsed["meta.msg"] as? String == "collides with the message field")
        #expect(parsed["adapter"] as? String == "hci0")
        #expect(parsed["request"] as? String == "r-42")
        #expect(parsed["device"] as? String == "AA:BB:CC:DD:EE:FF", "the call's metadata wins")
        #expect(parsed["count"] as? Int == 3)
        #expect(parsed["ratio"] as? Double == 0.5)
        #expect(parsed["ok"] as? Bool == true)
        #expect(parsed["nan"] as? String == "nan", "not a JSON number, so a string")
        let reading = try #require(parsed["reading"] as? [String: Any])
        #expect(reading["kind"] as? String == "temperature")
        #expect(reading["tags"] as? [String] == ["a", "b"])
    }

    @Test func errorsAndLocationAreFields() throws {
        struct Failure: Error, CustomStringConvertible { var description: String { "broker refused: \"bad password\"" } }
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        let handler = JSONLogHandler(label: "x", sink: LogSink(fileDescriptor: file.fd), includeLocation: true)
        handler.log(event: LogEvent(level: .error, message: "connect failed", error: Failure(), metadata: nil,
                                    source: "MQTT", file: "Gateway/Publisher.swift", function: "connect()", line: 42))

        let parsed = try object(try #require(file.lines.first))
        #expect(parsed["error"] as? String == "broker refused: \"bad password\"")
        #expect(parsed["file"] as? String == "Gateway/Publisher.swift")
        #expect(parsed["line"] as? Int == 42)
        #expect(parsed["function"] as? String == "connect()")
    }

    /// Into a pipe, as under systemd (stderr is a stream to journald): a write
    /// larger than PIPE_BUF (4096 bytes) is not atomic there, so without the
    /// sink's lock the lines of different threads would interleave.
    @Test func concurrentLoggingFromThreadsWritesOnlyWholeLines() async throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw SupportError.posix("pipe") }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        defer { close(readEnd) }
        let sink = LogSink(fileDescriptor: writeEnd)
        let threads = 8
        let perThread = 300
        let padding = String(repeating: "ä0123456789", count: 500)  // about 6 KB a line

        let output = try await offPool { () -> Data in
            // The reader drains the pipe while the writers fill it.
            let received = Lock<Data>(Data())
            let readerDone = DispatchSemaphore(value: 0)
            Thread {
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let count = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
                    if count < 0 && errno == EINTR { continue }
                    if count <= 0 { break }
                    received.withLock { $0.append(contentsOf: buffer[0..<count]) }
                }
                readerDone.signal()
            }.start()

            let writersDone = DispatchSemaphore(value: 0)
            for t in 0..<threads {
                Thread {
                    let logger = Logger(label: "thread-\(t)") { JSONLogHandler(label: $0, sink: sink) }
                    for i in 0..<perThread {
                        logger.info("line", metadata: ["thread": .stringConvertible(t), "seq": .stringConvertible(i), "pad": "\(padding)"])
                    }
                    writersDone.signal()
                }.start()
            }
            var finished = 0
            for _ in 0..<threads where writersDone.wait(timeout: .now() + 120) == .success { finished += 1 }
            close(writeEnd)
            guard finished == threads else { throw SupportError("a logging thread did not finish") }
            guard readerDone.wait(timeout: .now() + 60) == .success else { throw SupportError("the reader did not see the end") }
            return received.withLock { $0 }
        }

        let lines = output.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { Data($0) }
        #expect(lines.count == threads * perThread + 1)
        #expect(lines.last?.isEmpty == true)
        var next = [Int](repeating: 0, count: threads)
        for line in lines.dropLast() {
            let parsed = try object(line)
            let thread = try #require(parsed["thread"] as? Int)
            #expect(parsed["seq"] as? Int == next[thread], "lines of one thread stay in order")
            #expect(parsed["pad"] as? String == padding)
            next[thread] += 1
        }
        #expect(next == [Int](repeating: perThread, count: threads))
    }
}

@Suite struct TextLogHandlerTests {
    @Test func oneEscapedLinePerMessage() throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory, name: "log.txt")
        let handler = TextLogHandler(label: "gateway", sink: LogSink(fileDescriptor: file.fd))
        handler.log(event: LogEvent(level: .notice, message: "device \u{1B}[2J named\nEvil", metadata: ["name": "Kitchen sensor", "rssi": "-60"],
                                    source: "Gateway", file: #fileID, function: #function, line: #line))

        let text = String(decoding: file.contents, as: UTF8.self)
        #expect(text.hasSuffix("\n"))
        #expect(text.filter { $0 == "\n" }.count == 1, "a newline in the message does not split the line")
        #expect(!text.contains("\u{1B}"), "no escape sequence reaches the terminal")
        #expect(text.contains(#" notice gateway: device \u001b[2J named\nEvil name="Kitchen sensor" rssi=-60 [Gateway]"#), "\(text)")
        #expect(text.prefix(24).wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/) != nil)
    }
}

@Suite struct LoggingBootstrapTests {
    @Test func anExplicitChoiceWins() throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        #expect(LoggingBootstrap.usesJSON(true, fileDescriptor: file.fd))
        #expect(!LoggingBootstrap.usesJSON(false, fileDescriptor: file.fd))
    }

    @Test func automaticIsJSONForAFileAndTextForATerminal() throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        #expect(LoggingBootstrap.usesJSON(nil, fileDescriptor: file.fd))

        var master: Int32 = -1, terminal: Int32 = -1
        guard openpty(&master, &terminal, nil, nil, nil) == 0 else { throw SupportError.posix("openpty") }
        defer { close(master); close(terminal) }
        #expect(!LoggingBootstrap.usesJSON(nil, fileDescriptor: terminal))
    }

    @Test func theFactoryMakesTheChosenHandler() throws {
        let directory = try TemporaryDirectory()
        let file = try LogFile(in: directory)
        let sink = LogSink(fileDescriptor: file.fd)
        let json = LoggingBootstrap.makeFactory(level: .warning, json: true, sink: sink)("a")
        let text = LoggingBootstrap.makeFactory(level: .debug, json: false, sink: sink)("b")
        #expect(json is JSONLogHandler)
        #expect(json.logLevel == .warning)
        #expect(text is TextLogHandler)
        #expect(text.logLevel == .debug)

        Logger(label: "a") { _ in json }.warning("to the file")
        let parsed = try object(try #require(file.lines.first))
        #expect(parsed["msg"] as? String == "to the file")
    }
}
