// A tiny router: method + path pattern → handler.

/// Routes requests by method and path. Patterns are paths whose segments are
/// literals or `:name` parameters ("/devices/:address/readings"); the values
/// land in `HTTPRequest.pathParameters`, percent-decoded. Where several
/// patterns match, literal segments win over parameters (the leftmost
/// difference decides). HEAD is served by GET routes (the server drops the body).
/// Unknown paths get 404, known paths with another method 405 with `Allow`;
/// both as `{"error": …}`.
public struct Router: Sendable {
    private enum Segment: Sendable {
        case literal(String)
        case parameter(String)
    }

    private struct Route: Sendable {
        let method: String
        let segments: [Segment]
        let handler: HTTPServer.Handler
    }

    private var routes: [Route] = []

    public init() {}

    public mutating func get(_ pattern: String, _ handler: @escaping HTTPServer.Handler) {
        add(method: "GET", pattern, handler)
    }

    public mutating func post(_ pattern: String, _ handler: @escaping HTTPServer.Handler) {
        add(method: "POST", pattern, handler)
    }

    public mutating func put(_ pattern: String, _ handler: @escaping HTTPServer.Handler) {
        add(method: "PUT", pattern, handler)
    }

    public mutating func delete(_ pattern: String, _ handler: @escaping HTTPServer.Handler) {
        add(method: "DELETE", pattern, handler)
    }

    public mutating func add(method: String, _ pattern: String, _ handler: @escaping HTTPServer.Handler) {
        let segments: [Segment] = pattern.split(separator: "/").map { part in
            part.hasPrefix(":") ? .parameter(String(part.dropFirst())) : .literal(String(part))
        }
        routes.append(Route(method: method, segments: segments, handler: handler))
    }

    /// The handler to give `HTTPServer.start`.
    public var handler: HTTPServer.Handler {
        let router = self
        return { await router.handle($0) }
    }

    public func handle(_ request: HTTPRequest) async -> HTTPResponse {
        var matches: [(route: Route, parameters: [String: String])] = []
        for route in routes {
            if let parameters = match(route.segments, request.pathSegments) { matches.append((route, parameters)) }
        }
        guard !matches.isEmpty else {
            return .problem(status: .notFound, "not found: \(request.path)")
        }
        let method = request.method == "HEAD" ? "GET" : request.method
        let candidates = matches.filter { $0.route.method == method || $0.route.method == request.method }
        guard let best = candidates.max(by: { specificity($0.route) < specificity($1.route) }) else {
            var allowed: [String] = []
            for match in matches where !allowed.contains(match.route.method) {
                allowed.append(match.route.method)
                if match.route.method == "GET" && !allowed.contains("HEAD") { allowed.append("HEAD") }
            }
            let list = allowed.joined(separator: ", ")
            var response = HTTPResponse.problem(status: .methodNotAllowed, "method \(request.method) not allowed for \(request.path) (allowed: \(list))")
            response.headers.add("Allow", list)
            return response
        }
        var routed = request
        routed.pathParameters = best.parameters
        return await best.route.handler(routed)
    }

    private func match(_ pattern: [Segment], _ segments: [String]) -> [String: String]? {
        guard pattern.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (part, segment) in zip(pattern, segments) {
            switch part {
            case .literal(let literal): guard literal == segment else { return nil }
            case .parameter(let name): parameters[name] = segment
            }
        }
        return parameters
    }

    /// Compared lexicographically: a literal where the other has a parameter wins.
    private func specificity(_ route: Route) -> Specificity {
        Specificity(literals: route.segments.map { if case .literal = $0 { true } else { false } })
    }

    private struct Specificity: Comparable {
        let literals: [Bool]
        static func < (a: Specificity, b: Specificity) -> Bool {
            for (x, y) in zip(a.literals, b.literals) where x != y { return !x }
            return false
        }
    }
}
