import BLEParsing
import BlueZ
import Foundation
import Vocabulary

/// Sets a device's clock (docs/PROFILES.md, "Time sync"): finds the way it
/// takes the time (``ClockProtocol``) in its GATT tree, reads its time before
/// (the drift), writes the host's, and reads it again. The device must be
/// connected with its services resolved. The CLI's `timesync` and the
/// gateway's daily sync both run this.
public enum ClockSync {
    public struct Outcome: Sendable, Equatable {
        public var clock: ClockProtocol
        /// Device time − host time, in seconds, before and after the write (nil: not readable).
        public var driftBefore: Double?
        public var driftAfter: Double?
        public var written: [UInt8]
    }

    /// `clock`: the protocol to use; nil: the first one the device offers.
    public static func run(client: BlueZClient, device id: DeviceID, clock wanted: ClockProtocol? = nil,
                           now: @Sendable () -> Date = { Date() }) async throws(DomainError) -> Outcome {
        let snapshot = client.mirror.snapshot()
        let offered = snapshot.gattTree(of: id).flatMap { entry in
            entry.characteristics.compactMap { c, _ -> (service: BluetoothUUID, characteristic: BluetoothUUID, GATTCharacteristic)? in
                guard let s = try? BluetoothUUID(parsing: entry.service.uuid), let u = try? BluetoothUUID(parsing: c.uuid) else { return nil }
                return (s, u, c)
            }
        }
        guard !offered.isEmpty else {
            throw DomainError("\(id.address) offers no GATT services with a clock this program sets (are its services resolved?)")
        }
        let pairs = offered.map { (service: $0.service, characteristic: $0.characteristic) }
        let clock: ClockProtocol
        if let wanted {
            guard pairs.contains(where: { $0.service == wanted.service && $0.characteristic == wanted.characteristic }) else {
                throw DomainError("\(id.address) has no \(wanted.label) (characteristic \(wanted.characteristic.string) in service \(wanted.service.string))")
            }
            clock = wanted
        } else {
            guard let found = ClockProtocol.detect(in: pairs) else {
                throw DomainError("\(id.address) offers no clock this program sets (\(ClockProtocol.allCases.map(\.label).joined(separator: ", ")))")
            }
            clock = found
        }
        guard let target = offered.first(where: { $0.service == clock.service && $0.characteristic == clock.characteristic })?.2 else {
            throw DomainError("\(id.address): \(clock.label) characteristic vanished")
        }
        func drift() async -> Double? {
            guard clock.readable, target.canRead else { return nil }
            guard let value = try? await client.readValue(target.id) else { return nil }
            let host = now()
            let offset = TimeZone.current.secondsFromGMT(for: host)
            guard let device = try? clock.decode(value, utcOffset: offset) else { return nil }
            return device - host.timeIntervalSince1970
        }
        let before = await drift()
        let host = now()
        let seconds = host.timeIntervalSince1970
        let whole = seconds.rounded(.down)
        guard let bytes = clock.encode(seconds: Int64(whole), fraction: seconds - whole,
                                       utcOffset: TimeZone.current.secondsFromGMT(for: host)) else {
            throw DomainError("the host's time \(host) cannot be written as \(clock.label) time")
        }
        do {
            try await client.writeValue(target.id, bytes, type: clock.withResponse ? .request : .command)
        } catch {
            throw DomainError("setting the time of \(id.address) (\(clock.label)) failed: \(error.description)", cause: error)
        }
        let after = await drift()
        return Outcome(clock: clock, driftBefore: before, driftAfter: after, written: bytes)
    }
}
