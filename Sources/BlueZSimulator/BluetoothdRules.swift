import ScenarioFormat
// What bluetoothd accepts in method arguments, where that is narrower than
// what our own files accept, and which properties each version has.
import ScenarioFormat

/// A UUID in a D-Bus method argument (SetDiscoveryFilter, service data
/// keys of a registered advertisement, …) as bluetoothd reads it: 4 or 8 hex
/// digits (optionally after "0x") or the 36-character form, in BlueZ's
/// lower-case 128-bit form; nil when bluetoothd would reject it. Narrower
/// than `BluetoothUUID(parsing:)` on purpose (no 32 digits without dashes):
/// the simulator must not accept what bluetoothd refuses. Scenario files are
/// ours and read UUIDs through the shared vocabulary instead.
func normalizeUUID(_ text: String) -> String? {
    var t = text.lowercased()
    if t.hasPrefix("0x") { t.removeFirst(2) }
    let hex = Set("0123456789abcdef")
    if (t.count == 4 || t.count == 8) && t.allSatisfy({ hex.contains($0) }) {
        let padded = String(repeating: "0", count: 8 - t.count) + t
        return padded + "-0000-1000-8000-00805f9b34fb"
    }
    let parts = t.split(separator: "-", omittingEmptySubsequences: false)
    guard parts.map(\.count) == [8, 4, 4, 4, 12], parts.allSatisfy({ $0.allSatisfy { hex.contains($0) } }) else { return nil }
    return t
}

extension BluetoothdVersion {
    /// Whether `property` of `interface` exists on this daemon (`experimental`:
    /// started with `--experimental`).
    public func has(_ interface: String, _ property: String, experimental: Bool) -> Bool {
        switch (interface, property) {
        case (BlueZ.adapter, "PowerState"): return experimental
        case (BlueZ.adapter, "Connectable"), (BlueZ.adapter, "Manufacturer"), (BlueZ.adapter, "Version"): return self == .latest
        case (BlueZ.device, "AdvertisingFlags"): return experimental || self == .latest
        case (BlueZ.gattService, "Handle"), (BlueZ.gattCharacteristic, "Handle"),
             (BlueZ.gattDescriptor, "Handle"), (BlueZ.gattDescriptor, "Flags"): return self == .latest
        default: return true
        }
    }
}
