// Server-sent events: the text/event-stream format of the HTML standard
// ("Server-sent events", section "Parsing an event stream").

public enum ServerSentEvents {
    public static let contentType = "text/event-stream"

    /// A comment line: clients ignore it, and it keeps proxies and idle
    /// timeouts from closing a quiet stream.
    public static let keepAlive: [UInt8] = Array(": keep-alive\n\n".utf8)

    /// One event. `data` may span lines (CRLF, LF or CR): each line becomes a
    /// `data:` field, and the client joins them with LF again. Line breaks in
    /// `name` and `id` (which cannot hold them) become spaces; NUL is dropped
    /// from `id` (a client would ignore the whole id). `retry` is the client's
    /// reconnection delay in milliseconds.
    public static func event(name: String? = nil, data: String, id: String? = nil, retry: Int? = nil) -> [UInt8] {
        var out: [UInt8] = []
        if let id {
            out += Array("id: ".utf8) + singleLine(id).filter { $0 != 0 } + [0x0A]
        }
        if let name {
            out += Array("event: ".utf8) + singleLine(name) + [0x0A]
        }
        if let retry, retry >= 0 {
            out += Array("retry: \(retry)\n".utf8)
        }
        for line in lines(data) {
            out += Array("data: ".utf8) + line + [0x0A]
        }
        out.append(0x0A)
        return out
    }

    /// A comment (each line prefixed with ":"), e.g. for diagnostics.
    public static func comment(_ text: String) -> [UInt8] {
        var out: [UInt8] = []
        for line in lines(text) { out += Array(": ".utf8) + line + [0x0A] }
        out.append(0x0A)
        return out
    }

    /// A 200 response streaming `events` (already formatted, e.g. by `event`).
    public static func response(_ events: AsyncStream<[UInt8]>) -> HTTPResponse {
        .stream(status: .ok, headers: ["Content-Type": contentType, "Cache-Control": "no-cache"], body: events)
    }

    private static func lines(_ text: String) -> [ArraySlice<UInt8>] {
        let bytes = Array(text.utf8)
        var result: [ArraySlice<UInt8>] = []
        var start = 0
        var i = 0
        while i < bytes.count {
            if bytes[i] == 0x0D || bytes[i] == 0x0A {
                result.append(bytes[start..<i])
                if bytes[i] == 0x0D, i + 1 < bytes.count, bytes[i + 1] == 0x0A { i += 1 }
                start = i + 1
            }
            i += 1
        }
        result.append(bytes[start...])
        return result
    }

    private static func singleLine(_ text: String) -> [UInt8] {
        text.utf8.map { $0 == 0x0D || $0 == 0x0A ? 0x20 : $0 }
    }
}
