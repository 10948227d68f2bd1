import Testing

@testable import BLEParsing

@Suite("Assigned numbers")
struct AssignedNumbersTests {
    @Test func uuids() {
        #expect(AssignedNumbers.serviceName(0x180D) == "Heart Rate")
        #expect(AssignedNumbers.serviceName(0x181A) == "Environmental Sensing")
        #expect(AssignedNumbers.characteristicName(0x2A37) == "Heart Rate Measurement")
        #expect(AssignedNumbers.characteristicName(0x2B8C) == "CO2 Concentration")
        #expect(AssignedNumbers.descriptorName(0x2902) == "Client Characteristic Configuration")
        #expect(AssignedNumbers.serviceName(0xFE95) == "Xiaomi Inc.")
        #expect(AssignedNumbers.memberName(0xFCD2) != nil)
        #expect(AssignedNumbers.characteristicName(0x0001) == nil)
        #expect(AssignedNumbers.name(for: BluetoothUUID(uuid16: 0x2A19)) == "Battery Level")
        #expect(AssignedNumbers.name(for: BluetoothUUID(high: 1, low: 2)) == nil)
        #expect(AssignedNumbers.unitName(0x272F) == "Celsius temperature (degree Celsius)")
    }

    @Test func companies() {
        #expect(AssignedNumbers.companyName(0x004C) == "Apple, Inc.")
        #expect(AssignedNumbers.companyName(0x0059) == "Nordic Semiconductor ASA")
        #expect(AssignedNumbers.companyName(0x0006) == "Microsoft")
        #expect(AssignedNumbers.companyName(0xFFFF) == nil)
    }

    @Test func appearance() {
        let hr = AssignedNumbers.appearance(0x0341)
        #expect(hr.category == "Heart Rate Sensor")
        #expect(hr.subcategory == "Heart Rate Belt")
        let generic = AssignedNumbers.appearance(0x0040)
        #expect(generic.category == "Phone")
        #expect(generic.subcategory == nil)
        #expect(AssignedNumbers.appearance(0xFFC0).category == nil)
    }

    @Test func generatedFileHasProvenanceHeader() throws {
        // The header names its source and date; checked so a hand edit or a
        // regeneration without provenance is caught.
        let path = String(#filePath.dropLast("Tests/BLEParsingTests/AssignedNumbersTests.swift".count))
            + "Sources/BLEParsing/AssignedNumbers/AssignedNumbers+Generated.swift"
        let head = try readPrefix(path, bytes: 600)
        #expect(head.contains("GENERATED FILE"))
        #expect(head.contains("Source: "))
        #expect(head.contains("Generated: "))
    }
}

import Foundation
import Vocabulary

private func readPrefix(_ path: String, bytes: Int) throws -> String {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return String(decoding: data.prefix(bytes), as: UTF8.self)
}
