import DBus

extension BlueZSimulator {
    /// Benchmark support: `count` advertisement changes (RSSI and a
    /// RuuviTag-shaped ManufacturerData) spread round-robin over the
    /// scenario's devices, through the same path as timeline advertisements,
    /// as fast as the bus takes them. Devices are only reported while a
    /// client discovers, as with bluetoothd.
    ///
    /// Every 1 000 changes it waits for a round trip to the bus, so the
    /// flood cannot queue more than that in this process.
    public func floodAdvertisements(count: Int) async {
        guard !devices.isEmpty, count > 0 else { return }
        for k in 0..<count {
            let i = k % devices.count
            var data = [UInt8](repeating: 0, count: 24)
            data[0] = 0x05
            data[1] = UInt8(truncatingIfNeeded: k >> 8)
            data[2] = UInt8(truncatingIfNeeded: k)
            for j in 3..<24 { data[j] = UInt8(truncatingIfNeeded: (k &* 31) &+ j) }
            let event = AdvertisementEvent(at: 0, rssi: Int16(-40 - (k % 51)), manufacturerData: [0x0499: data])
            await applyAdvertisement(device: i, event)
            if k % 1000 == 999, let connection {
                _ = try? await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                               interface: "org.freedesktop.DBus", member: "GetId")
            }
        }
        if let connection {
            _ = try? await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                           interface: "org.freedesktop.DBus", member: "GetId")
        }
    }
}
