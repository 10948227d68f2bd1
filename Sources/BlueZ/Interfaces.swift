import DBus

/// bluetoothd's D-Bus names (doc/org.bluez.*.rst in the BlueZ tree).
public enum BlueZInterface {
    public static let service = "org.bluez"
    public static let adapter = "org.bluez.Adapter1"
    public static let device = "org.bluez.Device1"
    public static let gattService = "org.bluez.GattService1"
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    public static let gattDescriptor = "org.bluez.GattDescriptor1"
    public static let battery = "org.bluez.Battery1"
    public static let agentManager = "org.bluez.AgentManager1"
    public static let agent = "org.bluez.Agent1"
    /// On each adapter object (bluetoothd's experimental interfaces; passive scanning).
    public static let advertisementMonitorManager = "org.bluez.AdvertisementMonitorManager1"
    /// Exported by the client below the root it registers.
    public static let advertisementMonitor = "org.bluez.AdvertisementMonitor1"
    public static let properties = "org.freedesktop.DBus.Properties"
    public static let introspectable = "org.freedesktop.DBus.Introspectable"
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    /// Where AgentManager1 lives.
    public static let managerPath: ObjectPath = "/org/bluez"
}
