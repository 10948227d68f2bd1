import Testing

@testable import BLEParsing
import Vocabulary

@Suite("GATTDecoder API")
struct GATTDecoderTests {
    @Test func supportedList() {
        let uuids = GATTDecoder.supportedUUIDs
        #expect(uuids.count >= 55)
        #expect(uuids.contains(BluetoothUUID(uuid16: 0x2A37)))
        #expect(uuids.contains(BluetoothUUID(uuid16: 0x2904)))
        #expect(uuids == uuids.sorted())
        #expect(GATTDecoder.isSupported(0x2A63))
        #expect(!GATTDecoder.isSupported(0x2A99))
        #expect(GATTDecoder.modelName(for: 0x2A1C) == "temperature_measurement")
    }

    @Test func unknownWithoutPresentationFormatIsUnsupported() {
        do {
            _ = try GATTDecoder.decode(characteristic: 0x2A99, value: [1])
            Issue.record("expected unsupported")
        } catch {
            #expect(error.kind == .unsupported)
            #expect(error.description.contains("2a99"))
            #expect(error.description.contains("Database Change Increment"))
        }
    }

    @Test func dedicatedDecoderWinsOverPresentationFormat() throws {
        let pf = PresentationFormat(format: 0x04, unit: 0x27AD)
        let v = try GATTDecoder.decode(characteristic: 0x2A19, value: [0x2C], presentationFormat: pf)
        #expect(v.modelName == "battery_level")
        #expect(v.readings == [Reading(.battery, 44)])
    }

    @Test func genericModelNameFromAssignedNumbers() throws {
        // Voltage 0x2B18 has no dedicated decoder; its SIG name becomes the model name.
        let pf = PresentationFormat(format: 0x06, exponent: -2, unit: 0x2728)
        let v = try GATTDecoder.decode(characteristic: 0x2B18, value: [0xE2, 0x04], presentationFormat: pf)
        #expect(v.modelName == "voltage")
        #expect(v.readings == [Reading(.voltage, 12.5, unit: "V")])
    }

    @Test func sliceInput() throws {
        let buffer: [UInt8] = [0xFF, 0x06, 0x48]
        let v = try GATTDecoder.decode(characteristic: 0x2A37, value: buffer[1...])
        #expect(v.readings == [Reading(.heartRate, 72)])
    }

    @Test func descriptorEntryPoint() throws {
        let v = try GATTDecoder.decode(descriptor: 0x2902, value: [0x01, 0x00])
        #expect(v.field("notifications") == .bool(true))
    }

    @Test func presentationFormatParsing() throws {
        let pf = try PresentationFormat(bytes: [0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00])
        #expect(pf.format == 0x0E)
        #expect(pf.exponent == -2)
        #expect(pf.unit == 0x272F)
        #expect(pf.formatName == "sint16")
        #expect(pf.unitSymbol == "°C")
        #expect(pf.readingKind == .temperature)
        #expect(throws: DecodeError.self) { try PresentationFormat(bytes: [0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00, 0x00]) }
    }

    @Test func jsonOfHeartRate() throws {
        let v = try GATTDecoder.decode(characteristic: 0x2A37, value: [0x10, 0x48, 0x00, 0x04])
        #expect(v.jsonString == #"{"format":"gatt","model":"heart_rate_measurement","readings":[{"kind":"heart_rate","value":72,"unit":"bpm"},{"kind":"duration","value":1,"unit":"s","label":"rr_interval"}],"fields":{"flags":16,"heart_rate_bpm":72,"sensor_contact_supported":false,"rr_intervals_s":[1]}}"#)
    }
}
