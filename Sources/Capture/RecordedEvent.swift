import DBus

/// What the recorder saw on the bus, in arrival order, with monotonic time
/// stamps (seconds since the recording started). The input of
/// ``ScenarioBuilder``: a recording can be rebuilt, or built in a test,
/// without a bus.
public struct RecordedEvent: Sendable, Equatable {
    public enum Change: Sendable, Equatable {
        /// A full enumeration (GetManagedObjects): the tree at the start, or
        /// the tree of a bluetoothd that came back.
        case tree([ObjectPath: [String: [String: DBusValue]]])
        /// `org.bluez` lost its owner: bluetoothd stopped.
        case serviceLost
        case interfacesAdded(ObjectPath, [String: [String: DBusValue]])
        case interfacesRemoved(ObjectPath, [String])
        case propertiesChanged(ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String])
    }

    /// Seconds since the recording started (monotonic clock).
    public var at: Double
    public var change: Change

    public init(at: Double, _ change: Change) {
        self.at = at
        self.change = change
    }
}
