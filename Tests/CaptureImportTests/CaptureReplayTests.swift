import BLEParsing
import BlueZSimulator
import Foundation
import Testing
import TestSupport

/// Every committed capture, imported and replayed through the simulator into
/// the real client, repository and device-list presenter (`replayReadings`):
/// the decoded readings are the ones its published vectors promise
/// (fixtures/captures/README.md lists each source).
@Suite(.serialized, .timeLimit(.minutes(2))) struct CaptureReplayTests {
    func replay(_ file: String) async throws -> [String: [[Reading]]] {
        let (_, result) = try importFixture(file)
        let scenario = try simulatorScenario(result)
        let devices = try await replayReadings(scenario: scenario, speed: .max)
        return Dictionary(devices.map { ($0.address, $0.readings) }, uniquingKeysWith: { a, _ in a })
    }

    func value(_ readings: [Reading], _ kind: ReadingKind) -> Double? {
        for r in readings where r.kind == kind { if case let .number(v) = r.value { return v } }
        return nil
    }

    @Test func bthomeAndPvvxMonitorCapture() async throws {
        let devices = try await replay("bthome-pvvx-monitor.btsnoop")
        // BTHome v2 (bthome-ble test_bthome_temperature_humidity): 25.06 °C, 50.55 %; then 1008.83 hPa.
        let bthome = try #require(devices["A4:C1:38:8D:18:B2"], "\(devices.keys.sorted())")
        #expect(bthome.contains { value($0, .temperature) == 25.06 && value($0, .humidity) == 50.55 }, "\(bthome)")
        #expect(bthome.contains { value($0, .pressure) == 1008.83 }, "\(bthome)")
        // pvvx custom format (Theengs cgg1_pvvx_1, then _2): 23.51 °C / 60.58 %, then 23.45 °C, in that order.
        let pvvx = try #require(devices["58:2D:34:12:33:DC"], "\(devices.keys.sorted())")
        let temperatures = pvvx.compactMap { value($0, .temperature) }
        #expect(temperatures == [23.51, 23.45], "\(pvvx)")
        #expect(value(pvvx[0], .humidity) == 60.58)
    }

    @Test func xiaomiUnencapsulatedCapture() async throws {
        let devices = try await replay("xiaomi-h1.btsnoop")
        // MiBeacon LYWSDCGQ (xiaomi-ble test_Xiaomi_LYWSDCGQ): 18 °C, 66.1 %, battery 59 %.
        let sensor = try #require(devices["58:2D:34:3B:2E:BF"], "\(devices.keys.sorted())")
        #expect(sensor.contains { value($0, .temperature) == 18 && value($0, .humidity) == 66.1 }, "\(sensor)")
        #expect(sensor.contains { value($0, .battery) == 59 }, "\(sensor)")
    }
}
