/// Keeps a signal subscription alive; releasing it removes the subscriber
/// (and the bus match rule once no subscriber of that rule is left).
final class SubscriptionToken: Sendable {
    let core: ConnectionCore
    let sink: BufferedSignalSink
    init(core: ConnectionCore, sink: BufferedSignalSink) {
        self.core = core
        self.sink = sink
    }
    deinit {
        let core = self.core
        let id = sink.id
        sink.finish(nil)
        core.execute { core.removeSinkOnLoop(id: id) }
    }
}

/// The signals matching one rule, in arrival order.
///
/// Overflow policy: each stream buffers up to its capacity; when the
/// consumer falls that far behind, the oldest buffered signal is dropped and
/// ``droppedCount`` grows, so memory stays bounded and the consumer can tell
/// (a state mirror then resynchronises). The stream ends with
/// ``DBusError/disconnected`` when the connection is lost, and ends
/// normally when the task iterating it is cancelled.
public struct DBusSignalStream: AsyncSequence, Sendable {
    public typealias Element = DBusMessage
    let token: SubscriptionToken
    public let rule: DBusMatchRule

    /// Signals discarded so far because the consumer fell behind.
    public var droppedCount: Int { token.sink.buffer.droppedCount }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let token: SubscriptionToken
        public mutating func next() async throws -> DBusMessage? {
            try await token.sink.buffer.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(token: token) }

    /// Ends the subscription now rather than when the last copy is released.
    public func cancel() { token.sink.finish(nil) }
}

final class OwnerToken: Sendable {
    let core: ConnectionCore
    let name: String
    let id: UInt64
    let buffer: AsyncBuffer<String?>
    init(core: ConnectionCore, name: String, id: UInt64, buffer: AsyncBuffer<String?>) {
        self.core = core
        self.name = name
        self.id = id
        self.buffer = buffer
    }
    deinit {
        let core = self.core, name = self.name, id = self.id
        buffer.finish()
        core.execute { core.removeOwnerWatcherOnLoop(name, id: id) }
    }
}

/// Owners of one bus name over time: the current owner first, then each
/// change (`nil` means nobody owns the name, e.g. bluetoothd has exited).
public struct DBusNameOwnerStream: AsyncSequence, Sendable {
    public typealias Element = String?
    let token: OwnerToken

    public struct AsyncIterator: AsyncIteratorProtocol {
        let token: OwnerToken
        public mutating func next() async throws -> String?? {
            try await token.buffer.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(token: token) }
}

/// Keeps an exported object on the bus. Releasing it unexports the object.
public final class DBusObjectRegistration: Sendable {
    let core: ConnectionCore
    public let path: ObjectPath
    let owner: UInt64

    init(core: ConnectionCore, path: ObjectPath, owner: UInt64) {
        self.core = core
        self.path = path
        self.owner = owner
    }

    deinit { unexport() }

    /// Removes the object (InterfacesRemoved for all its interfaces).
    public func unexport() {
        let core = self.core, path = self.path, owner = self.owner
        core.execute {
            guard core.exports.objects[path]?.owner == owner else { return }
            core.removeInterfacesOnLoop(path: path, nil)
        }
    }

    /// Changes property values; emits one PropertiesChanged for those that
    /// really changed (as each property's EmitsChangedSignal says).
    public func setProperties(_ interface: String, _ changes: [String: DBusValue]) {
        let core = self.core, path = self.path
        core.execute { core.setPropertiesOnLoop(path: path, interface: interface, changes) }
    }

    public func setProperty(_ interface: String, _ name: String, _ value: DBusValue) {
        setProperties(interface, [name: value])
    }

    /// Removes property values (Get then fails, GetAll leaves them out) and
    /// announces them in PropertiesChanged's invalidated list — how BlueZ
    /// drops a device's RSSI when discovery stops. Names without a value are
    /// ignored.
    public func removeProperties(_ interface: String, _ names: [String]) {
        let core = self.core, path = self.path
        core.execute { core.removePropertiesOnLoop(path: path, interface: interface, names) }
    }

    /// Reads the current value of a property.
    public func property(_ interface: String, _ name: String) async -> DBusValue? {
        let core = self.core, path = self.path
        return await withCheckedContinuation { (c: CheckedContinuation<DBusValue?, Never>) in
            if !core.execute({ c.resume(returning: core.exports.objects[path]?.values[interface]?[name]) }) {
                c.resume(returning: nil)
            }
        }
    }

    /// Adds interfaces to the object (InterfacesAdded).
    public func addInterfaces(_ interfaces: [DBusExportedInterface]) {
        let core = self.core, path = self.path, owner = self.owner
        core.execute { core.addInterfacesOnLoop(path: path, owner: owner, interfaces) }
    }

    /// Removes some interfaces (InterfacesRemoved).
    public func removeInterfaces(_ names: [String]) {
        let core = self.core, path = self.path
        core.execute { core.removeInterfacesOnLoop(path: path, names) }
    }

    /// Emits a signal from this object.
    public func emit(_ interface: String, _ member: String, _ arguments: [DBusValue] = []) {
        let core = self.core, path = self.path
        core.execute { core.emitOnLoop(path: path, interface: interface, member: member, body: arguments) }
    }
}

/// Keeps an ObjectManager served. Releasing it stops serving it.
public final class DBusObjectManagerRegistration: Sendable {
    let core: ConnectionCore
    public let path: ObjectPath
    let owner: UInt64
    init(core: ConnectionCore, path: ObjectPath, owner: UInt64) {
        self.core = core
        self.path = path
        self.owner = owner
    }
    deinit {
        let core = self.core, path = self.path, owner = self.owner
        core.execute {
            if core.exports.managers[path]?.owner == owner { core.exports.managers[path] = nil }
        }
    }
}

/// Keeps a signal handler installed; releasing it (or ``remove()``) removes it.
public final class DBusSignalHandlerRegistration: Sendable {
    let core: ConnectionCore
    let id: UInt64
    init(core: ConnectionCore, id: UInt64) {
        self.core = core
        self.id = id
    }
    public func remove() {
        let core = self.core, id = self.id
        core.execute { core.removeSinkOnLoop(id: id) }
    }
    deinit { remove() }
}

/// What a ``DBusConnection/addLoopDeadline(next:due:)`` source answers.
struct LoopDeadlineSource: Sendable {
    let next: @Sendable () -> ContinuousClock.Instant?
    let due: @Sendable () -> Void
}

/// A deadline the connection's I/O thread keeps (see
/// ``DBusConnection/addLoopDeadline(next:due:)``). Releasing it removes it.
public final class DBusLoopDeadline: Sendable {
    let core: ConnectionCore
    let id: UInt64
    init(core: ConnectionCore, id: UInt64) {
        self.core = core
        self.id = id
    }
    /// The source's deadline may be earlier now: the I/O thread asks again
    /// before it waits (wakes it if it waits now). Not needed when the
    /// change was made on the I/O thread, in a signal handler.
    public func changed() { core.execute {} }
    public func remove() {
        let core = self.core, id = self.id
        core.execute { core.removeLoopDeadlineOnLoop(id: id) }
    }
    deinit { remove() }
}
