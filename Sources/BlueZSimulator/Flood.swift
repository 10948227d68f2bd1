import DBus
import ScenarioFormat

extension BlueZSimulator {
    /// The manufacturer data (company 0x0499) of change `k` of a flood: a
    /// valid RuuviTag data format 5 frame (the ruuvi-sensor-protocols
    /// vector) with a new temperature and measurement sequence each time, so
    /// decoders see a real reading change. Change k goes to device k mod n.
    public static func floodManufacturerData(change k: Int) -> [UInt8] {
        var data: [UInt8] = [0x05, 0x12, 0xFC, 0x53, 0x94, 0xC3, 0x7C, 0x00, 0x04, 0xFF, 0xFC, 0x04, 0x0C,
                             0xAC, 0x36, 0x42, 0x00, 0xCD, 0xCB, 0xB8, 0x33, 0x4C, 0x88, 0x4F]
        let temperature = UInt16(k % 8000)
        data[1] = UInt8(temperature >> 8)
        data[2] = UInt8(truncatingIfNeeded: temperature)
        data[16] = UInt8(truncatingIfNeeded: k >> 8)
        data[17] = UInt8(truncatingIfNeeded: k)
        return data
    }

    /// Benchmark support: `count` advertisement changes (RSSI and a
    /// RuuviTag-shaped ManufacturerData) spread round-robin over the
    /// scenario's devices, through the same path as timeline advertisements,
    /// as fast as the bus takes them. Devices are only reported while a
    /// client discovers, as with bluetoothd.
    ///
    /// Every 1 000 changes it waits for a round trip to the bus, so the
    /// flood cannot queue more than that in this process.
    ///
    /// `perSecond`: paced at that rate (the schedule is kept from the start,
    /// so a late wake-up is caught up, not added); nil: as fast as possible.
    ///
    /// A flood goes on from the change the one before it ended at, device
    /// and frame: with more devices than changes per flood, a flood that
    /// started again at change 0 sent its first devices the frames they
    /// already had (bluetoothd signals nothing for those, and a benchmark's
    /// second round at 10 000 devices published none of its changes).
    public func floodAdvertisements(count: Int, perSecond: Double? = nil) async {
        guard !devices.isEmpty, count > 0 else { return }
        let start = ContinuousClock.now
        let first = floodChangesSent
        for k in 0..<count {
            if let perSecond, perSecond > 0, k % 10 == 0 {
                try? await Task.sleep(until: start + .seconds(Double(k) / perSecond), clock: .continuous)
            }
            let change = first &+ k
            let i = change % devices.count
            let event = AdvertisementEvent(at: 0, rssi: Int16(-40 - (change % 51)),
                                           manufacturerData: [0x0499: Self.floodManufacturerData(change: change)])
            await applyAdvertisement(device: i, event)
            floodChangesSent = change &+ 1
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
