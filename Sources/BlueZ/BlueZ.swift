/// A typed client for bluetoothd's D-Bus API (org.bluez).
public enum BlueZ {
    public static let serviceName = "org.bluez"
}
