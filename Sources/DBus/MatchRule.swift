/// A D-Bus match rule (specification: "Match Rules"), used both to ask the
/// bus daemon for signals and to route received signals to subscribers
/// inside this process.
public struct DBusMatchRule: Sendable, Hashable, CustomStringConvertible {
    public var type: DBusMessage.Kind?
    public var sender: String?
    public var interface: String?
    public var member: String?
    public var path: ObjectPath?
    public var pathNamespace: ObjectPath?
    public var destination: String?
    /// `argN='value'`: the N-th argument is a string equal to value.
    public var arguments: [Int: String]
    /// `argNpath='value'`: path-prefix matching on the N-th argument.
    public var argumentPaths: [Int: String]
    /// `arg0namespace='value'`: the first argument is a bus or interface
    /// name equal to value or below it.
    public var arg0Namespace: String?

    public init(
        type: DBusMessage.Kind? = .signal, sender: String? = nil, interface: String? = nil,
        member: String? = nil, path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil,
        destination: String? = nil, arguments: [Int: String] = [:], argumentPaths: [Int: String] = [:],
        arg0Namespace: String? = nil
    ) {
        self.type = type
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.destination = destination
        self.arguments = arguments
        self.argumentPaths = argumentPaths
        self.arg0Namespace = arg0Namespace
    }

    /// Validates names and argument indices.
    public func validate() throws(DBusError) {
        if let sender { try NameValidation.validateBusName(sender) }
        if let interface { try NameValidation.validateInterface(interface) }
        if let member { try NameValidation.validateMember(member) }
        if let destination { try NameValidation.validateBusName(destination) }
        if path != nil && pathNamespace != nil {
            throw .invalidMatchRule(description, reason: "path and path_namespace cannot both be given")
        }
        for index in arguments.keys where !(0...63).contains(index) {
            throw .invalidMatchRule(description, reason: "arg\(index) is outside 0...63")
        }
        for index in argumentPaths.keys where !(0...63).contains(index) {
            throw .invalidMatchRule(description, reason: "arg\(index)path is outside 0...63")
        }
        if description.utf8.count > 1024 {
            throw .invalidMatchRule(description, reason: "longer than 1024 bytes")
        }
    }

    /// The rule in the daemon's string syntax, keys in a fixed order so that
    /// equal rules produce equal strings (subscriptions are shared by it).
    public var description: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String) {
            parts.append("\(key)='\(value.replacingApostrophes())'")
        }
        if let type {
            switch type {
            case .signal: add("type", "signal")
            case .methodCall: add("type", "method_call")
            case .methodReturn: add("type", "method_return")
            case .error: add("type", "error")
            }
        }
        if let sender { add("sender", sender) }
        if let interface { add("interface", interface) }
        if let member { add("member", member) }
        if let path { add("path", path.rawValue) }
        if let pathNamespace { add("path_namespace", pathNamespace.rawValue) }
        if let destination { add("destination", destination) }
        for (index, value) in arguments.sorted(by: { $0.key < $1.key }) { add("arg\(index)", value) }
        for (index, value) in argumentPaths.sorted(by: { $0.key < $1.key }) { add("arg\(index)path", value) }
        if let arg0Namespace { add("arg0namespace", arg0Namespace) }
        return parts.joined(separator: ",")
    }

    /// Whether `message` matches this rule. `ownerOf` maps a well-known
    /// sender name to its current unique owner.
    func matches(_ message: DBusMessage, ownerOf: (String) -> String?) -> Bool {
        if let type, message.kind != type { return false }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let path, message.path != path { return false }
        if let pathNamespace {
            guard let p = message.path, p.isDescendant(ofOrEqualTo: pathNamespace) else { return false }
        }
        if let destination, message.destination != destination { return false }
        if let sender {
            guard let actual = message.sender else { return false }
            if actual != sender {
                if sender.hasPrefix(":") { return false }
                guard let owner = ownerOf(sender), owner == actual else { return false }
            }
        }
        for (index, value) in arguments {
            guard index < message.body.count, case let .string(s) = message.body[index], s == value else { return false }
        }
        for (index, value) in argumentPaths {
            guard index < message.body.count, let s = message.body[index].pathLikeString else { return false }
            let ok = s == value
                || (value.hasSuffix("/") && s.hasPrefix(value))
                || (s.hasSuffix("/") && value.hasPrefix(s))
            if !ok { return false }
        }
        if let ns = arg0Namespace {
            guard let first = message.body.first, case let .string(s) = first,
                  s == ns || s.hasPrefix(ns + ".") else { return false }
        }
        return true
    }

    /// Whether matching needs the message's arguments.
    var needsArguments: Bool {
        !arguments.isEmpty || !argumentPaths.isEmpty || arg0Namespace != nil
    }

    /// The well-known (non-unique, non-daemon) sender name, if any, which
    /// needs owner tracking for in-process matching.
    var wellKnownSender: String? {
        guard let sender, !sender.hasPrefix(":"), sender != "org.freedesktop.DBus" else { return nil }
        return sender
    }
}

extension DBusValue {
    fileprivate var pathLikeString: String? {
        switch self {
        case let .string(s): return s
        case let .objectPath(p): return p.rawValue
        default: return nil
        }
    }
}

extension String {
    /// Match-rule quoting: an apostrophe is written as '\''.
    fileprivate func replacingApostrophes() -> String {
        guard contains("'") else { return self }
        var out = ""
        for ch in self {
            if ch == "'" { out += "'\\''" } else { out.append(ch) }
        }
        return out
    }
}
