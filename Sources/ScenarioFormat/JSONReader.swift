/// A small JSON reader that remembers where every value starts, so that
/// scenario errors can name the line and the JSON path of the bad value.
public struct JSONNode: Sendable {
    public enum Value: Sendable {
        case null
        case bool(Bool)
        case number(Double, text: String)
        case string(String)
        case array([JSONNode])
        /// Members in file order (duplicate keys are rejected by the reader).
        case object([(key: String, value: JSONNode)])
    }

    public var value: Value
    /// 1-based line where the value starts.
    public var line: Int
    /// JSON path of the value, e.g. `devices[2].gatt[0].uuid`.
    public var path: String

    public var typeName: String {
        switch value {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// The member named `key` of an object node.
    public subscript(key: String) -> JSONNode? {
        guard case let .object(members) = value else { return nil }
        return members.first { $0.key == key }?.value
    }
}

/// A syntax error in a JSON document.
public struct JSONSyntaxError: Error, Sendable, CustomStringConvertible {
    public var line: Int
    public var column: Int
    public var message: String
    public var description: String { "line \(line), column \(column): \(message)" }
}

/// Parses JSON text into ``JSONNode`` trees with positions.
public struct JSONReader {
    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var lineStart = 0
    private var depth = 0
    private static let maxDepth = 64

    public static func parse(_ text: String) throws(JSONSyntaxError) -> JSONNode {
        var reader = JSONReader(bytes: Array(text.utf8))
        // A UTF-8 byte order mark is allowed before the document.
        if reader.bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            reader.index = 3
            reader.lineStart = 3
        }
        reader.skipWhitespace()
        let node = try reader.parseValue(path: "")
        reader.skipWhitespace()
        guard reader.index == reader.bytes.count else { throw reader.error("unexpected text after the end of the document") }
        return node
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func error(_ message: String) -> JSONSyntaxError {
        JSONSyntaxError(line: line, column: index - lineStart + 1, message: message)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0D: index += 1
            case 0x0A:
                index += 1
                line += 1
                lineStart = index
            default: return
            }
        }
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func expect(_ literal: String) throws(JSONSyntaxError) {
        for b in literal.utf8 {
            guard current == b else { throw error("invalid literal (expected \(literal))") }
            index += 1
        }
    }

    private mutating func parseValue(path: String) throws(JSONSyntaxError) -> JSONNode {
        let startLine = line
        guard let c = current else { throw error("unexpected end of document") }
        switch c {
        case UInt8(ascii: "{"):
            return JSONNode(value: try parseObject(path: path), line: startLine, path: path)
        case UInt8(ascii: "["):
            return JSONNode(value: try parseArray(path: path), line: startLine, path: path)
        case UInt8(ascii: "\""):
            return JSONNode(value: .string(try parseString()), line: startLine, path: path)
        case UInt8(ascii: "t"):
            try expect("true")
            return JSONNode(value: .bool(true), line: startLine, path: path)
        case UInt8(ascii: "f"):
            try expect("false")
            return JSONNode(value: .bool(false), line: startLine, path: path)
        case UInt8(ascii: "n"):
            try expect("null")
            return JSONNode(value: .null, line: startLine, path: path)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return JSONNode(value: try parseNumber(), line: startLine, path: path)
        default:
            throw error("unexpected character '\(Character(Unicode.Scalar(c)))'")
        }
    }

    private mutating func enter() throws(JSONSyntaxError) {
        depth += 1
        if depth > Self.maxDepth { throw error("nesting deeper than \(Self.maxDepth) levels") }
    }

    private mutating func parseObject(path: String) throws(JSONSyntaxError) -> JSONNode.Value {
        try enter()
        defer { depth -= 1 }
        index += 1
        var members: [(key: String, value: JSONNode)] = []
        skipWhitespace()
        if current == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw error("expected a member name in double quotes") }
            let key = try parseString()
            if members.contains(where: { $0.key == key }) { throw error("duplicate member \"\(key)\"") }
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw error("expected ':' after member name \"\(key)\"") }
            index += 1
            skipWhitespace()
            let childPath = path.isEmpty ? key : "\(path).\(key)"
            members.append((key, try parseValue(path: childPath)))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"): index += 1; return .object(members)
            default: throw error("expected ',' or '}' in object")
            }
        }
    }

    private mutating func parseArray(path: String) throws(JSONSyntaxError) -> JSONNode.Value {
        try enter()
        defer { depth -= 1 }
        index += 1
        var items: [JSONNode] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") { index += 1; return .array(items) }
        while true {
            skipWhitespace()
            items.append(try parseValue(path: "\(path)[\(items.count)]"))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"): index += 1; return .array(items)
            default: throw error("expected ',' or ']' in array")
            }
        }
    }

    private mutating func parseHex4() throws(JSONSyntaxError) -> UInt32 {
        var v: UInt32 = 0
        for _ in 0..<4 {
            guard let c = current else { throw error("unterminated \\u escape") }
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw error("invalid \\u escape")
            }
            v = v * 16 + d
            index += 1
        }
        return v
    }

    private mutating func parseString() throws(JSONSyntaxError) -> String {
        index += 1
        var out: [UInt8] = []
        while true {
            guard let c = current else { throw error("unterminated string") }
            index += 1
            switch c {
            case UInt8(ascii: "\""):
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let e = current else { throw error("unterminated string") }
                index += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard current == UInt8(ascii: "\\") else { throw error("unpaired surrogate in \\u escape") }
                        index += 1
                        guard current == UInt8(ascii: "u") else { throw error("unpaired surrogate in \\u escape") }
                        index += 1
                        let low = try parseHex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("unpaired surrogate in \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                    out += Array(String(Character(u)).utf8)
                default:
                    throw error("invalid escape '\\\(Character(Unicode.Scalar(e)))'")
                }
            case 0x0A:
                throw error("newline inside a string")
            default:
                if c < 0x20 { throw error("control character inside a string") }
                out.append(c)
            }
        }
    }

    private mutating func parseNumber() throws(JSONSyntaxError) -> JSONNode.Value {
        let start = index
        if current == UInt8(ascii: "-") { index += 1 }
        func digits(_ r: inout JSONReader) -> Int {
            var n = 0
            while let c = r.current, c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { r.index += 1; n += 1 }
            return n
        }
        guard digits(&self) > 0 else { throw error("invalid number") }
        if current == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw error("invalid number: digits expected after '.'") }
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw error("invalid number: digits expected in exponent") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let v = Double(text) else { throw error("invalid number \(text)") }
        return .number(v, text: text)
    }
}
