import Foundation

/// Every problem found in a configuration file, in file order.
///
/// `description` has one line per problem, like
/// `gateway.yaml:14: mqtt.port: expected an integer 1…65535, got "18830x"`.
public struct GatewayConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Problem: Sendable, Equatable, CustomStringConvertible {
        /// 1-based line in the file; `nil` when the problem is not at a place in it
        /// (the file cannot be read at all).
        public var line: Int?
        /// Dotted key path such as `mqtt.tls.ca_file` or `devices.watch[0].address`;
        /// empty for problems of the file as a whole (YAML syntax, top level).
        public var key: String
        public var message: String

        public init(line: Int?, key: String, message: String) {
            self.line = line
            self.key = key
            self.message = message
        }

        /// `line: key: message`, leaving out what is missing.
        public var description: String {
            var parts: [String] = []
            if let line { parts.append(String(line)) }
            if !key.isEmpty { parts.append(key) }
            parts.append(message)
            return parts.joined(separator: ": ")
        }
    }

    /// The file as the caller named it (the path given to `load`, or `parse`'s `file`).
    public var file: String
    public var problems: [Problem]

    public init(file: String, problems: [Problem]) {
        self.file = file
        self.problems = problems
    }

    /// One line per problem: `file:line: key: message`.
    public var description: String {
        problems.map { problem in
            var location = file
            if let line = problem.line { location += ":\(line)" }
            let key = problem.key.isEmpty ? "" : "\(problem.key): "
            return "\(location): \(key)\(problem.message)"
        }.joined(separator: "\n")
    }
}

extension GatewayConfigError: LocalizedError {
    public var errorDescription: String? { description }
}
