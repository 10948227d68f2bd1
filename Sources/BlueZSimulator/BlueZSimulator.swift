/// An `org.bluez` service on a D-Bus bus, driven by scenario files: what
/// stands in for bluetoothd on machines without a Bluetooth radio.
public enum BlueZSimulatorInfo {
    public static let serviceName = "org.bluez"
}
