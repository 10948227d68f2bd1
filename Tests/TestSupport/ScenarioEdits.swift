import ScenarioFormat

extension Scenario {
    /// Moves the moment `address` stops advertising (its `present: false`
    /// event) to `seconds` after the simulator started. Fixture times count
    /// from the start; a test that must see a device advertise before it stops
    /// gives it more time here than a loaded machine could take to get there.
    /// Does nothing to a device without such an event (the test then fails
    /// on what it waits for, naming the device).
    public mutating func stopAdvertising(_ address: String, at seconds: Double) {
        for d in devices.indices where devices[d].address == address {
            guard var timeline = devices[d].advertising else { continue }
            for e in timeline.events.indices where timeline.events[e].present == false {
                timeline.events[e].at = seconds
            }
            timeline.events.sort { $0.at < $1.at }
            devices[d].advertising = timeline
        }
    }
}
