// The request reader under a fuzzer (scripts/fuzz-all's `http` harness):
// the bytes a client sends, through the same steps a connection takes
// before a handler runs, without a socket.

/// Runs one input through the head scanner, the head parser, the body
/// length, the target parser and the keep-alive rules. Traps only where a
/// property fails: scanning the bytes in pieces must find the same end of
/// head as scanning them at once; a refusal must be a 4xx/5xx with a
/// message; what is accepted must be within the limits the server promises.
@_spi(Fuzzing) public enum HTTPRequestFuzzing {
    /// Limits small enough for a fuzzer to reach them.
    static let headLimit = 512
    static let bodyLimit = 4096

    public static func run(_ input: [UInt8]) -> Int {
        // The first byte picks the size of the pieces the scanner is fed
        // (1 to 256 bytes), as reads of any size may deliver them.
        guard let first = input.first else { return 0 }
        let piece = 1 + Int(first)
        let bytes = Array(input.dropFirst())

        var whole = HeadScanner(limit: headLimit)
        let atOnce = whole.scan(bytes)
        var dripped = HeadScanner(limit: headLimit)
        var buffer: [UInt8] = []
        var inPieces = HeadScanner.Outcome.needMore
        var at = 0
        repeat {
            let end = min(at + piece, bytes.count)
            buffer.append(contentsOf: bytes[at..<end])
            at = end
            inPieces = dripped.scan(buffer)
        } while inPieces == .needMore && at < bytes.count
        precondition(inPieces == atOnce, "the head scanner found \(inPieces) in pieces of \(piece) but \(atOnce) at once")

        switch atOnce {
        case .needMore:
            precondition(bytes.count < headLimit, "needMore with \(bytes.count) bytes against a limit of \(headLimit)")
            return 1
        case let .tooLarge(error):
            check(error)
            return 2
        case let .complete(end):
            precondition(end <= headLimit && end <= bytes.count, "a head of \(end) bytes past the limit or the input")
            switch RequestHead.parse(bytes[..<end]) {
            case let .failure(error):
                check(error)
                return 3
            case let .success(head):
                precondition(!head.method.isEmpty && head.method.utf8.allSatisfy(isTokenByte), "method \(head.method) is not a token")
                var score = 4 + head.headers.count
                switch head.bodyLength(limit: bodyLimit) {
                case let .failure(error): check(error)
                case let .success(length):
                    precondition((0...bodyLimit).contains(length), "a body of \(length) bytes passed the limit of \(bodyLimit)")
                    score += length
                }
                if head.wantsKeepAlive { score += 1 }
                if head.expectsContinue { score += 1 }
                switch RequestTarget.parse(head.target) {
                case let .failure(error): check(error)
                case let .success(target):
                    precondition(target.path.hasPrefix("/") || target.path == "*", "path \(target.path) of target \(head.target)")
                    score += target.segments.count + target.queryItems.count
                }
                return score
            }
        }
    }

    private static func check(_ error: HTTPRequestError) {
        precondition((400..<600).contains(error.status.code), "refused with status \(error.status.code)")
        precondition(!error.message.isEmpty, "refused with status \(error.status.code) and no message")
    }
}
