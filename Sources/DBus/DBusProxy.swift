/// A remote object seen through one interface: calls and properties
/// without repeating destination, path and interface each time.
public struct DBusProxy: Sendable {
    public let connection: DBusConnection
    public let destination: String
    public let path: ObjectPath
    public let interface: String

    public init(connection: DBusConnection, destination: String, path: ObjectPath, interface: String) {
        self.connection = connection
        self.destination = destination
        self.path = path
        self.interface = interface
    }

    /// Calls `member` and returns the reply's arguments.
    @discardableResult
    public func call(_ member: String, _ arguments: [DBusValue] = [], timeout: Duration = .seconds(25)) async throws -> [DBusValue] {
        try await connection.call(destination: destination, path: path, interface: interface, member: member,
                                  arguments: arguments, timeout: timeout).body
    }

    /// Reads one property (org.freedesktop.DBus.Properties.Get).
    public func property(_ name: String) async throws -> DBusValue {
        let reply = try await connection.call(destination: destination, path: path, interface: StandardInterface.properties,
                                              member: "Get", arguments: [.string(interface), .string(name)])
        return try reply.argument(0, as: DBusValue.self)
    }

    /// Reads one property as `T`.
    public func property<T: DBusRepresentable>(_ name: String, as _: T.Type = T.self) async throws -> T {
        let value = try await property(name)
        do {
            return try T(dbusValue: value)
        } catch {
            throw DBusError.typeMismatch(expected: T.dbusType.signature, actual: value.type.signature, context: "property \(interface).\(name)")
        }
    }

    /// Reads all properties (GetAll).
    public func allProperties() async throws -> [String: DBusValue] {
        let reply = try await connection.call(destination: destination, path: path, interface: StandardInterface.properties,
                                              member: "GetAll", arguments: [.string(interface)])
        return try reply.argument(0)
    }

    /// Writes one property (Set).
    public func setProperty(_ name: String, _ value: DBusValue) async throws {
        _ = try await connection.call(destination: destination, path: path, interface: StandardInterface.properties,
                                      member: "Set", arguments: [.string(interface), .string(name), .variant(value)])
    }

    /// The object's introspection XML.
    public func introspect() async throws -> String {
        try await connection.call(destination: destination, path: path, interface: StandardInterface.introspectable,
                                  member: "Introspect").argument(0)
    }
}

extension DBusConnection {
    /// `GetManagedObjects` of the ObjectManager at `path` on `destination`,
    /// decoded as object path → interface → property → value.
    public func managedObjects(destination: String, path: ObjectPath = .root) async throws -> [ObjectPath: [String: [String: DBusValue]]] {
        let reply = try await call(destination: destination, path: path, interface: StandardInterface.objectManager,
                                   member: "GetManagedObjects")
        return try reply.argument(0)
    }
}
