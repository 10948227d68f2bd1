import Foundation
import Testing

@testable import BLEParsing
import Vocabulary

/// Deterministic pseudo-random payloads into every GATT decoder: each one
/// must either decode or throw a `DecodeError` whose offset lies inside the
/// payload — never trap — and every success must serialise to valid JSON.
@Suite("GATT robustness")
struct GATTRobustnessTests {

    @Test("random payloads never trap", arguments: GATTDecoder.supportedUUIDs)
    func randomPayloads(_ uuid: BluetoothUUID) throws {
        var rng = SeededGenerator(seed: UInt64(uuid.uuid16 ?? 0))
        var successes = 0
        var failures = 0
        for _ in 0..<400 {
            let length = Int(rng.next() % 40)
            var bytes = [UInt8](repeating: 0, count: length)
            for i in 0..<length { bytes[i] = UInt8(truncatingIfNeeded: rng.next()) }
            let result = Result { () throws(DecodeError) -> GATTValue in
                try GATTDecoder.decode(characteristic: uuid, value: bytes)
            }
            switch result {
            case let .success(value):
                successes += 1
                let parsed = try JSONSerialization.jsonObject(with: Data(value.jsonString.utf8))
                #expect(parsed is [String: Any], "\(uuid.shortString): \(value.jsonString)")
            case let .failure(error):
                failures += 1
                #expect(error.offset.map { $0 >= 0 && $0 <= length } ?? true, "\(uuid.shortString) \(hexString(bytes: bytes)): \(error)")
                #expect(error.description.hasPrefix(error.context + ": "))
                #expect(error.kind != .unsupported, "\(uuid.shortString) is supported")
            }
        }
        #expect(successes + failures == 400)
    }

    @Test("random payloads through every presentation format")
    func randomPresentationFormats() throws {
        var rng = SeededGenerator(seed: 42)
        let custom = try BluetoothUUID(parsing: "e95d9250-251d-470a-a062-fa1922dfa9a8")
        var decoded = 0
        for format in UInt8(1)...0x1C {
            for _ in 0..<50 {
                let pf = PresentationFormat(
                    format: format, exponent: Int8(truncatingIfNeeded: rng.next() % 7) - 3, unit: 0x2700 + UInt16(rng.next() % 0xCA))
                let length = Int(rng.next() % 20)
                let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                if let value = try? GATTDecoder.decode(characteristic: custom, value: bytes, presentationFormat: pf) {
                    decoded += 1
                    #expect(value.field("value") != nil)
                    _ = try JSONSerialization.jsonObject(with: Data(value.jsonString.utf8))
                }
            }
        }
        #expect(decoded > 50)
    }
}
