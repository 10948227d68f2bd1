internal import CDBus
/// One argument of an exported method or signal (for introspection).
public struct DBusArgument: Sendable, Hashable {
    public var name: String
    public var type: DBusType
    public init(_ name: String, _ type: DBusType) {
        self.name = name
        self.type = type
    }
}

/// A method call as seen by an exported method's handler.
public struct DBusMethodCall: Sendable {
    public let message: DBusMessage
    public var arguments: [DBusValue] { message.body }
    public var sender: String? { message.sender }
    public var path: ObjectPath { message.path ?? .root }

    public func argument<T: DBusRepresentable>(_ index: Int, as type: T.Type = T.self) throws(DBusError) -> T {
        do {
            return try message.argument(index, as: type)
        } catch {
            throw .remote(name: DBusErrorName.invalidArgs, message: "\(error)")
        }
    }
}

public typealias DBusMethodHandler = @Sendable (DBusMethodCall) async throws -> [DBusValue]

public struct DBusMethodDescription: Sendable {
    public var name: String
    public var inputs: [DBusArgument]
    public var outputs: [DBusArgument]
    public var handler: DBusMethodHandler

    public init(_ name: String, inputs: [DBusArgument] = [], outputs: [DBusArgument] = [], handler: @escaping DBusMethodHandler) {
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.handler = handler
    }

    var inputSignature: String { inputs.map(\.type.signature).joined() }
}

public struct DBusSignalDescription: Sendable {
    public var name: String
    public var arguments: [DBusArgument]
    public init(_ name: String, arguments: [DBusArgument] = []) {
        self.name = name
        self.arguments = arguments
    }
}

public struct DBusPropertyDescription: Sendable {
    public enum Access: String, Sendable {
        case read, write, readwrite
        var readable: Bool { self != .write }
        var writable: Bool { self != .read }
    }

    /// What PropertiesChanged says when the value changes (the
    /// `org.freedesktop.DBus.Property.EmitsChangedSignal` annotation).
    public enum EmitsChange: String, Sendable {
        case yes = "true", invalidates, const, no = "false"
    }

    /// Called before a remote `Set` is applied; throw to refuse it (a thrown
    /// ``DBusError/remote(name:message:)`` becomes the error reply).
    public typealias Setter = @Sendable (DBusValue) async throws -> Void

    public var name: String
    public var type: DBusType
    public var access: Access
    public var emitsChange: EmitsChange
    public var setter: Setter?

    public init(_ name: String, _ type: DBusType, access: Access = .read, emitsChange: EmitsChange = .yes, setter: Setter? = nil) {
        self.name = name
        self.type = type
        self.access = access
        self.emitsChange = emitsChange
        self.setter = setter
    }
}

/// An interface to export: its methods, signals and properties.
public struct DBusInterfaceDescription: Sendable {
    public var name: String
    public var methods: [DBusMethodDescription]
    public var signals: [DBusSignalDescription]
    public var properties: [DBusPropertyDescription]

    public init(_ name: String, methods: [DBusMethodDescription] = [], signals: [DBusSignalDescription] = [],
                properties: [DBusPropertyDescription] = []) {
        self.name = name
        self.methods = methods
        self.signals = signals
        self.properties = properties
    }
}

/// An interface together with the initial values of its properties.
public struct DBusExportedInterface: Sendable {
    public var description: DBusInterfaceDescription
    public var values: [String: DBusValue]
    public init(_ description: DBusInterfaceDescription, values: [String: DBusValue] = [:]) {
        self.description = description
        self.values = values
    }
}

enum StandardInterface {
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let properties = "org.freedesktop.DBus.Properties"
    static let peer = "org.freedesktop.DBus.Peer"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
}

/// The exported object tree of one connection. Loop thread only.
struct ExportRegistry {
    final class Object {
        var interfaces: [String: DBusInterfaceDescription] = [:]
        var order: [String] = []
        var values: [String: [String: DBusValue]] = [:]
        var owner: UInt64
        init(owner: UInt64) { self.owner = owner }
    }

    struct Manager {
        var includeStandardInterfaces: Bool
        var owner: UInt64
    }

    var objects: [ObjectPath: Object] = [:]
    var managers: [ObjectPath: Manager] = [:]

    mutating func failAll() {
        objects.removeAll()
        managers.removeAll()
    }

    /// The nearest ObjectManager strictly above `path`.
    func manager(for path: ObjectPath) -> (ObjectPath, Manager)? {
        var p = path.parent
        while let current = p {
            if let m = managers[current] { return (current, m) }
            p = current.parent
        }
        return nil
    }

    func propertiesForManager(_ object: Object, interfaces: [String], includeStandard: Bool) -> DBusValue {
        var entries: [DBusDictEntry] = []
        if includeStandard {
            entries.append(DBusDictEntry(.string(StandardInterface.introspectable), .propertyMap([:])))
            entries.append(DBusDictEntry(.string(StandardInterface.properties), .propertyMap([:])))
        }
        for name in interfaces {
            guard let iface = object.interfaces[name] else { continue }
            entries.append(DBusDictEntry(.string(name), readableValues(object, iface)))
        }
        return .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), entries)
    }

    func readableValues(_ object: Object, _ iface: DBusInterfaceDescription) -> DBusValue {
        let values = object.values[iface.name] ?? [:]
        var entries: [DBusDictEntry] = []
        for p in iface.properties where p.access.readable {
            if let v = values[p.name] { entries.append(DBusDictEntry(.string(p.name), .variant(v))) }
        }
        return .dictionary(key: .string, value: .variant, entries)
    }

    func managedObjects(below root: ObjectPath, includeStandard: Bool) -> DBusValue {
        var entries: [DBusDictEntry] = []
        for (path, object) in objects.sorted(by: { $0.key < $1.key }) where path.isStrictDescendant(of: root) {
            entries.append(DBusDictEntry(.objectPath(path), propertiesForManager(object, interfaces: object.order, includeStandard: includeStandard)))
        }
        return .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), entries)
    }

    /// Names of the direct children of `path` in the exported tree.
    func children(of path: ObjectPath) -> [String] {
        var names = Set<String>()
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        for candidate in objects.keys.map(\.rawValue) + managers.keys.map(\.rawValue) where candidate.hasPrefix(prefix) && candidate != path.rawValue {
            let rest = candidate.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    func introspect(_ path: ObjectPath) -> String {
        var xml = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect"><arg name="xml_data" type="s" direction="out"/></method>
          </interface>
          <interface name="org.freedesktop.DBus.Peer">
            <method name="Ping"/>
            <method name="GetMachineId"><arg name="machine_uuid" type="s" direction="out"/></method>
          </interface>

        """
        if let object = objects[path] {
            xml += """
              <interface name="org.freedesktop.DBus.Properties">
                <method name="Get"><arg name="interface_name" type="s" direction="in"/><arg name="property_name" type="s" direction="in"/><arg name="value" type="v" direction="out"/></method>
                <method name="GetAll"><arg name="interface_name" type="s" direction="in"/><arg name="props" type="a{sv}" direction="out"/></method>
                <method name="Set"><arg name="interface_name" type="s" direction="in"/><arg name="property_name" type="s" direction="in"/><arg name="value" type="v" direction="in"/></method>
                <signal name="PropertiesChanged"><arg name="interface_name" type="s"/><arg name="changed_properties" type="a{sv}"/><arg name="invalidated_properties" type="as"/></signal>
              </interface>

            """
            for name in object.order {
                guard let iface = object.interfaces[name] else { continue }
                xml += "  <interface name=\"\(xmlEscape(iface.name))\">\n"
                for m in iface.methods {
                    xml += "    <method name=\"\(xmlEscape(m.name))\">"
                    for a in m.inputs { xml += "<arg name=\"\(xmlEscape(a.name))\" type=\"\(xmlEscape(a.type.signature))\" direction=\"in\"/>" }
                    for a in m.outputs { xml += "<arg name=\"\(xmlEscape(a.name))\" type=\"\(xmlEscape(a.type.signature))\" direction=\"out\"/>" }
                    xml += "</method>\n"
                }
                for s in iface.signals {
                    xml += "    <signal name=\"\(xmlEscape(s.name))\">"
                    for a in s.arguments { xml += "<arg name=\"\(xmlEscape(a.name))\" type=\"\(xmlEscape(a.type.signature))\"/>" }
                    xml += "</signal>\n"
                }
                for p in iface.properties {
                    xml += "    <property name=\"\(xmlEscape(p.name))\" type=\"\(xmlEscape(p.type.signature))\" access=\"\(p.access.rawValue)\">"
                    if p.emitsChange != .yes {
                        xml += "<annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(p.emitsChange.rawValue)\"/>"
                    }
                    xml += "</property>\n"
                }
                xml += "  </interface>\n"
            }
        }
        if managers[path] != nil {
            xml += """
              <interface name="org.freedesktop.DBus.ObjectManager">
                <method name="GetManagedObjects"><arg name="objects" type="a{oa{sa{sv}}}" direction="out"/></method>
                <signal name="InterfacesAdded"><arg name="object" type="o"/><arg name="interfaces" type="a{sa{sv}}"/></signal>
                <signal name="InterfacesRemoved"><arg name="object" type="o"/><arg name="interfaces" type="as"/></signal>
              </interface>

            """
        }
        for child in children(of: path) { xml += "  <node name=\"\(xmlEscape(child))\"/>\n" }
        xml += "</node>\n"
        return xml
    }

    private func xmlEscape(_ s: String) -> String {
        var out = ""
        for ch in s {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(ch)
            }
        }
        return out
    }

    // MARK: Method calls

    func handleCall(_ message: DBusMessage, core: ConnectionCore) {
        let path = message.path ?? .root
        let member = message.member ?? ""
        let iface = message.interface

        func reply(_ result: Result<[DBusValue], DBusError>) {
            core.replyOnLoop(to: message, result)
        }

        // Every D-Bus peer answers org.freedesktop.DBus.Peer (libdbus did
        // this for us when it read the socket).
        if iface == StandardInterface.peer {
            switch member {
            case "Ping": return reply(.success([]))
            case "GetMachineId":
                guard let raw = dbus_get_local_machine_id() else {
                    return reply(.failure(.remote(name: DBusErrorName.failed, message: "This machine has no machine id")))
                }
                let id = String(cString: raw)
                dbus_free(raw)
                return reply(.success([.string(id)]))
            default:
                return reply(.failure(.remote(name: DBusErrorName.unknownMethod, message: "No such method \(member) in \(StandardInterface.peer)")))
            }
        }
        if iface == StandardInterface.introspectable || (iface == nil && member == "Introspect") {
            guard member == "Introspect" else { return reply(.failure(.remote(name: DBusErrorName.unknownMethod, message: "No such method \(member)"))) }
            let known = objects[path] != nil || managers[path] != nil || !children(of: path).isEmpty
            guard known else { return reply(.failure(.remote(name: DBusErrorName.unknownObject, message: "No such object \(path)"))) }
            return reply(.success([.string(introspect(path))]))
        }
        if iface == StandardInterface.objectManager || (iface == nil && member == "GetManagedObjects") {
            guard let m = managers[path] else {
                return reply(.failure(.remote(name: DBusErrorName.unknownInterface, message: "No ObjectManager at \(path)")))
            }
            guard member == "GetManagedObjects" else { return reply(.failure(.remote(name: DBusErrorName.unknownMethod, message: "No such method \(member)"))) }
            return reply(.success([managedObjects(below: path, includeStandard: m.includeStandardInterfaces)]))
        }
        guard let object = objects[path] else {
            return reply(.failure(.remote(name: DBusErrorName.unknownObject, message: "No such object \(path)")))
        }
        if iface == StandardInterface.properties {
            return handleProperties(message, object: object, core: core)
        }
        // Find the method: by interface, or by member alone when no interface is given.
        var found: DBusMethodDescription?
        if let iface {
            guard let description = object.interfaces[iface] else {
                return reply(.failure(.remote(name: DBusErrorName.unknownInterface, message: "No such interface \(iface) at \(path)")))
            }
            found = description.methods.first { $0.name == member }
        } else {
            for name in object.order {
                if let m = object.interfaces[name]?.methods.first(where: { $0.name == member }) { found = m; break }
            }
        }
        guard let method = found else {
            return reply(.failure(.remote(name: DBusErrorName.unknownMethod, message: "No such method \(member) in \(iface ?? "any interface") at \(path)")))
        }
        guard message.signature.rawValue == method.inputSignature else {
            return reply(.failure(.remote(name: DBusErrorName.invalidArgs,
                                          message: "\(member) expects arguments \"\(method.inputSignature)\", got \"\(message.signature)\"")))
        }
        let handler = method.handler
        let outputs = method.outputs.map(\.type)
        let call = DBusMethodCall(message: message)
        Task {
            let result: Result<[DBusValue], DBusError>
            do {
                let values = try await handler(call)
                if values.map(\.type) != outputs {
                    result = .failure(.remote(name: DBusErrorName.failed,
                                              message: "handler for \(member) returned \"\(DBusSignature(values.map(\.type)))\" instead of \"\(DBusSignature(outputs))\""))
                } else {
                    result = .success(values)
                }
            } catch let error as DBusError {
                result = .failure(error)
            } catch {
                result = .failure(.remote(name: DBusErrorName.failed, message: "\(error)"))
            }
            core.execute { core.replyOnLoop(to: message, result) }
        }
    }

    /// The specification lets Get and Set name no interface (""): the
    /// property is then looked up in all of the object's interfaces, and
    /// used when exactly one has it.
    private func resolveInterface(_ requested: String, property: String, in object: Object) -> String {
        guard requested.isEmpty else { return requested }
        let owners = object.order.filter { name in
            object.interfaces[name]?.properties.contains { $0.name == property } == true
        }
        return owners.count == 1 ? owners[0] : requested
    }

    private func handleProperties(_ message: DBusMessage, object: Object, core: ConnectionCore) {
        func reply(_ result: Result<[DBusValue], DBusError>) { core.replyOnLoop(to: message, result) }
        func fail(_ name: String, _ text: String) { reply(.failure(.remote(name: name, message: text))) }
        let member = message.member ?? ""
        switch (member, message.signature.rawValue) {
        case ("Get", "ss"):
            guard case let .string(requested) = message.body[0], case let .string(prop) = message.body[1] else { return }
            let ifaceName = resolveInterface(requested, property: prop, in: object)
            guard let iface = object.interfaces[ifaceName] else { return fail(DBusErrorName.unknownInterface, "No such interface \(ifaceName)") }
            guard let p = iface.properties.first(where: { $0.name == prop }), p.access.readable,
                  let value = object.values[ifaceName]?[prop] else {
                return fail(DBusErrorName.unknownProperty, "No such property \(prop) in \(ifaceName)")
            }
            reply(.success([.variant(value)]))
        case ("GetAll", "s"):
            guard case let .string(ifaceName) = message.body[0] else { return }
            guard let iface = object.interfaces[ifaceName] else { return fail(DBusErrorName.unknownInterface, "No such interface \(ifaceName)") }
            reply(.success([readableValues(object, iface)]))
        case ("Set", "ssv"):
            guard case let .string(requested) = message.body[0], case let .string(prop) = message.body[1],
                  case let .variant(value) = message.body[2] else { return }
            let ifaceName = resolveInterface(requested, property: prop, in: object)
            guard let iface = object.interfaces[ifaceName] else { return fail(DBusErrorName.unknownInterface, "No such interface \(ifaceName)") }
            guard let p = iface.properties.first(where: { $0.name == prop }) else {
                return fail(DBusErrorName.unknownProperty, "No such property \(prop) in \(ifaceName)")
            }
            guard p.access.writable else { return fail(DBusErrorName.propertyReadOnly, "Property \(prop) is read-only") }
            guard value.type == p.type else {
                return fail(DBusErrorName.invalidArgs, "Property \(prop) has type \(p.type), got \(value.type)")
            }
            let path = message.path ?? .root
            let setter = p.setter
            Task {
                var outcome: Result<[DBusValue], DBusError> = .success([])
                if let setter {
                    do { try await setter(value) } catch let e as DBusError { outcome = .failure(e) } catch {
                        outcome = .failure(.remote(name: DBusErrorName.failed, message: "\(error)"))
                    }
                }
                let final = outcome
                core.execute {
                    if case .success = final {
                        core.setPropertiesOnLoop(path: path, interface: ifaceName, [prop: value])
                    }
                    core.replyOnLoop(to: message, final)
                }
            }
        case ("Get", _), ("GetAll", _), ("Set", _):
            fail(DBusErrorName.invalidArgs, "Wrong arguments \"\(message.signature)\" for \(member)")
        default:
            fail(DBusErrorName.unknownMethod, "No such method \(member) in \(StandardInterface.properties)")
        }
    }
}

extension ConnectionCore {
    func replyOnLoop(to call: DBusMessage, _ result: Result<[DBusValue], DBusError>) {
        assertOnLoop()
        guard !call.flags.contains(.noReplyExpected) else { return }
        sendReplyOnLoop(to: call, result)
    }

    /// A slow service (``DBusConnection/delayReplies(by:)``): the call is
    /// handled `replyDelayNanoseconds` after it came, not answered late with
    /// what was true when it came. A real bluetoothd that is slow answers
    /// with the state of when it answers, so a reply never carries a state
    /// older than a signal sent before it. Every call waits the same time,
    /// so taking the oldest held call when a timer ends keeps their order.
    func holdCall(_ message: DBusMessage) {
        assertOnLoop()
        guard delayedCalls.count < Self.maximumDelayedCalls else {
            return replyOnLoop(to: message, .failure(.remote(name: DBusErrorName.limitsExceeded,
                                                             message: "Too many calls waiting for an answer")))
        }
        delayedCalls.append(message)
        let delay = replyDelayNanoseconds
        Task { [self] in
            try? await Task.sleep(nanoseconds: delay)
            _ = execute { [self] in
                guard let call = delayedCalls.popFirst() else { return }
                exports.handleCall(call, core: self)
            }
        }
    }

    private func sendReplyOnLoop(to call: DBusMessage, _ result: Result<[DBusValue], DBusError>) {
        assertOnLoop()
        let reply: DBusMessage
        switch result {
        case let .success(values):
            reply = DBusMessage(kind: .methodReturn, replySerial: call.serial, destination: call.sender, body: values)
        case let .failure(error):
            let name: String
            let text: String
            if case let .remote(n, m) = error {
                name = (try? NameValidation.validateErrorName(n)) != nil ? n : DBusErrorName.failed
                text = m
            } else {
                name = DBusErrorName.failed
                text = "\(error)"
            }
            reply = DBusMessage(kind: .error, replySerial: call.serial, errorName: name, destination: call.sender, body: [.string(text)])
        }
        do {
            sendOnLoop(CMessage(pointer: try LibDBusCodec.makeCMessage(reply)))
        } catch {
            let fallback = DBusMessage(kind: .error, replySerial: call.serial, errorName: DBusErrorName.failed,
                                       destination: call.sender, body: [.string("reply could not be encoded: \(error)")])
            if let c = try? LibDBusCodec.makeCMessage(fallback) { sendOnLoop(CMessage(pointer: c)) }
        }
    }

    func emitOnLoop(path: ObjectPath, interface: String, member: String, body: [DBusValue], destination: String? = nil) {
        assertOnLoop()
        var msg = DBusMessage(kind: .signal, path: path, interface: interface, member: member, body: body)
        msg.destination = destination
        if let c = try? LibDBusCodec.makeCMessage(msg) { sendOnLoop(CMessage(pointer: c)) }
    }

    func setPropertiesOnLoop(path: ObjectPath, interface: String, _ changes: [String: DBusValue]) {
        assertOnLoop()
        guard let object = exports.objects[path], let iface = object.interfaces[interface] else { return }
        var changed: [DBusDictEntry] = []
        var invalidated: [DBusValue] = []
        for (name, value) in changes.sorted(by: { $0.key < $1.key }) {
            guard let p = iface.properties.first(where: { $0.name == name }) else { continue }
            let old = object.values[interface]?[name]
            if old == value { continue }
            object.values[interface, default: [:]][name] = value
            switch p.emitsChange {
            case .yes: changed.append(DBusDictEntry(.string(name), .variant(value)))
            case .invalidates: invalidated.append(.string(name))
            case .const, .no: break
            }
        }
        guard !changed.isEmpty || !invalidated.isEmpty else { return }
        emitOnLoop(path: path, interface: StandardInterface.properties, member: "PropertiesChanged", body: [
            .string(interface),
            .dictionary(key: .string, value: .variant, changed),
            .array(.string, invalidated),
        ])
    }

    func removePropertiesOnLoop(path: ObjectPath, interface: String, _ names: [String]) {
        assertOnLoop()
        guard let object = exports.objects[path], let iface = object.interfaces[interface] else { return }
        var invalidated: [DBusValue] = []
        for name in Set(names).sorted() {
            guard object.values[interface]?[name] != nil else { continue }
            object.values[interface]?[name] = nil
            if let p = iface.properties.first(where: { $0.name == name }), p.emitsChange == .yes || p.emitsChange == .invalidates {
                invalidated.append(.string(name))
            }
        }
        guard !invalidated.isEmpty else { return }
        emitOnLoop(path: path, interface: StandardInterface.properties, member: "PropertiesChanged", body: [
            .string(interface),
            .dictionary(key: .string, value: .variant, []),
            .array(.string, invalidated),
        ])
    }

    func addInterfacesOnLoop(path: ObjectPath, owner: UInt64, _ interfaces: [DBusExportedInterface]) {
        assertOnLoop()
        let object = exports.objects[path] ?? ExportRegistry.Object(owner: owner)
        exports.objects[path] = object
        var added: [String] = []
        for i in interfaces {
            let name = i.description.name
            if object.interfaces[name] == nil { object.order.append(name) }
            object.interfaces[name] = i.description
            object.values[name] = i.values
            added.append(name)
        }
        if let (managerPath, manager) = exports.manager(for: path), !added.isEmpty {
            emitOnLoop(path: managerPath, interface: StandardInterface.objectManager, member: "InterfacesAdded", body: [
                .objectPath(path),
                exports.propertiesForManager(object, interfaces: added, includeStandard: manager.includeStandardInterfaces && object.order.count == added.count),
            ])
        }
    }

    func removeInterfacesOnLoop(path: ObjectPath, _ names: [String]?) {
        assertOnLoop()
        guard let object = exports.objects[path] else { return }
        let removing = names ?? object.order
        var removed: [String] = []
        for name in removing where object.interfaces[name] != nil {
            object.interfaces[name] = nil
            object.values[name] = nil
            object.order.removeAll { $0 == name }
            removed.append(name)
        }
        var announced = removed
        if object.order.isEmpty {
            exports.objects[path] = nil
        }
        if let (managerPath, manager) = exports.manager(for: path), !removed.isEmpty {
            if manager.includeStandardInterfaces && object.order.isEmpty {
                announced = [StandardInterface.introspectable, StandardInterface.properties] + removed
            }
            emitOnLoop(path: managerPath, interface: StandardInterface.objectManager, member: "InterfacesRemoved", body: [
                .objectPath(path), .array(.string, announced.map { .string($0) }),
            ])
        }
    }
}
