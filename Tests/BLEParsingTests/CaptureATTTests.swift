import Testing

@testable import BLEParsing

/// L2CAP reassembly (Core v5.4 Vol 3 Part A §3.1, §7.2; Vol 4 Part E §5.4.2)
/// and ATT PDUs (Vol 3 Part F §3.4) from literal bytes.
@Suite("Capture: L2CAP and ATT")
struct CaptureATTTests {
    static let key = L2CAPReassembler.Key(controller: 0, handle: 0x40, direction: .received)

    static func acl(_ bytes: [UInt8]) -> ACLPacket {
        (try? ACLPacket.decode(bytes[...])) ?? ACLPacket(handle: 0, packetBoundary: 0, broadcast: 0, data: [])
    }

    // MARK: L2CAP

    @Test func singleFragmentFrame() {
        var r = L2CAPReassembler()
        // ACL handle 0x0040 PB 0b10, 7 bytes: L2CAP length 3, CID 0x0004, ATT Read Request handle 0x0003.
        let out = r.add(Self.acl([0x40, 0x20, 0x07, 0x00, 0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00]), key: Self.key)
        #expect(out.frame == L2CAPFrame(channel: 0x0004, payload: [0x0A, 0x03, 0x00]))
        #expect(out.dropped.isEmpty)
        #expect(r.pendingCount == 0)
    }

    @Test func startAndContinuationFragments() {
        var r = L2CAPReassembler()
        // L2CAP length 6 on CID 4 (Read Response "ABCDE"), split 6 + 4 bytes.
        let first = r.add(Self.acl([0x40, 0x20, 0x06, 0x00, 0x06, 0x00, 0x04, 0x00, 0x0B, 0x41]), key: Self.key)
        #expect(first.frame == nil)
        #expect(r.pendingCount == 1)
        let second = r.add(Self.acl([0x40, 0x10, 0x04, 0x00, 0x42, 0x43, 0x44, 0x45]), key: Self.key)
        #expect(second.frame == L2CAPFrame(channel: 4, payload: [0x0B, 0x41, 0x42, 0x43, 0x44, 0x45]))
        #expect(r.pendingCount == 0)
    }

    @Test func basicHeaderSplitAcrossFragments() {
        var r = L2CAPReassembler()
        #expect(r.add(Self.acl([0x40, 0x20, 0x02, 0x00, 0x01, 0x00]), key: Self.key).frame == nil)
        let out = r.add(Self.acl([0x40, 0x10, 0x03, 0x00, 0x04, 0x00, 0x1E]), key: Self.key)
        #expect(out.frame == L2CAPFrame(channel: 4, payload: [0x1E]))
    }

    @Test func directionsAndHandlesReassembleSeparately() {
        var r = L2CAPReassembler()
        let sent = L2CAPReassembler.Key(controller: 0, handle: 0x40, direction: .sent)
        _ = r.add(Self.acl([0x40, 0x20, 0x05, 0x00, 0x02, 0x00, 0x04, 0x00, 0x0B]), key: Self.key)
        let other = r.add(Self.acl([0x40, 0x00, 0x07, 0x00, 0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00]), key: sent)
        #expect(other.frame?.payload == [0x0A, 0x03, 0x00])
        let done = r.add(Self.acl([0x40, 0x10, 0x01, 0x00, 0x07]), key: Self.key)
        #expect(done.frame?.payload == [0x0B, 0x07])
    }

    @Test func continuationWithoutStartIsDropped() {
        var r = L2CAPReassembler()
        let out = r.add(Self.acl([0x40, 0x10, 0x02, 0x00, 0xAA, 0xBB]), key: Self.key)
        #expect(out.frame == nil)
        #expect(out.dropped == ["L2CAP continuation without a start"])
    }

    @Test func newStartAbandonsTheOpenFrame() {
        var r = L2CAPReassembler()
        _ = r.add(Self.acl([0x40, 0x20, 0x05, 0x00, 0x09, 0x00, 0x04, 0x00, 0x0B]), key: Self.key)
        let out = r.add(Self.acl([0x40, 0x20, 0x05, 0x00, 0x01, 0x00, 0x04, 0x00, 0x13]), key: Self.key)
        #expect(out.dropped == ["L2CAP frame left incomplete"])
        #expect(out.frame == L2CAPFrame(channel: 4, payload: [0x13]))
    }

    @Test func overrunIsDropped() {
        var r = L2CAPReassembler()
        let out = r.add(Self.acl([0x40, 0x20, 0x06, 0x00, 0x01, 0x00, 0x04, 0x00, 0x13, 0x00]), key: Self.key)
        #expect(out.frame == nil)
        #expect(out.dropped == ["L2CAP frame longer than its length field"])
        #expect(r.pendingCount == 0)
    }

    @Test func resetForgetsAConnection() {
        var r = L2CAPReassembler()
        _ = r.add(Self.acl([0x40, 0x20, 0x05, 0x00, 0x09, 0x00, 0x04, 0x00, 0x0B]), key: Self.key)
        r.reset(controller: 0, handle: 0x40)
        #expect(r.pendingCount == 0)
    }

    // MARK: ATT PDUs

    @Test func readByGroupTypeResponse() throws {
        // Length 6: (0x0001..0x0007, 0x1800), (0x0008..0x000F, 0x180D).
        let pdu = try ATTPDU.decode([0x11, 0x06, 0x01, 0x00, 0x07, 0x00, 0x00, 0x18, 0x08, 0x00, 0x0F, 0x00, 0x0D, 0x18])
        #expect(pdu == .readByGroupTypeResponse([ATTGroup(handle: 1, endHandle: 7, value: [0x00, 0x18]),
                                                 ATTGroup(handle: 8, endHandle: 15, value: [0x0D, 0x18])]))
    }

    @Test func readByGroupTypeRequestAndReadByTypeRequest() throws {
        #expect(try ATTPDU.decode([0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
            == .readByGroupTypeRequest(start: 1, end: 0xFFFF, type: 0x2800))
        #expect(try ATTPDU.decode([0x08, 0x08, 0x00, 0x0F, 0x00, 0x03, 0x28]) == .readByTypeRequest(start: 8, end: 15, type: 0x2803))
        #expect(throws: DecodeError.self) { try ATTPDU.decode([0x08, 0x08, 0x00, 0x0F, 0x00, 0x03]) }
    }

    @Test func readByTypeResponseWithCharacteristicDeclarations() throws {
        // Length 7: handle 0x0009 → properties 0x10 (notify), value handle 0x000A, UUID 0x2A37;
        //           handle 0x000C → properties 0x02 (read), value handle 0x000D, UUID 0x2A38.
        let pdu = try ATTPDU.decode([0x09, 0x07, 0x09, 0x00, 0x10, 0x0A, 0x00, 0x37, 0x2A, 0x0C, 0x00, 0x02, 0x0D, 0x00, 0x38, 0x2A])
        guard case let .readByTypeResponse(entries) = pdu else { Issue.record("got \(pdu)"); return }
        #expect(entries.map(\.handle) == [0x09, 0x0C])
        let hr = try CharacteristicDeclaration.decode(entries[0].value)
        #expect(hr == CharacteristicDeclaration(properties: 0x10, valueHandle: 0x0A, uuid: 0x2A37))
        #expect(CharacteristicDeclaration.flagNames(hr.properties) == ["notify"])
        #expect(try CharacteristicDeclaration.decode(entries[1].value).uuid == 0x2A38)
    }

    @Test func characteristicDeclarationWith128BitUUID() throws {
        // Nordic UART RX 6e400002-b5a3-f393-e0a9-e50e24dcca9e, little-endian on air.
        let value: [UInt8] = [0x0C, 0x10, 0x00, 0x9E, 0xCA, 0xDC, 0x24, 0x0E, 0xE5, 0xA9, 0xE0, 0x93, 0xF3, 0xA3, 0xB5, 0x02, 0x00, 0x40, 0x6E]
        let pdu = try ATTPDU.decode([0x09, 0x15, 0x0F, 0x00] + value)
        guard case let .readByTypeResponse(entries) = pdu else { Issue.record("got \(pdu)"); return }
        let d = try CharacteristicDeclaration.decode(entries[0].value)
        #expect(d.uuid.string == "6e400002-b5a3-f393-e0a9-e50e24dcca9e")
        #expect(d.valueHandle == 0x0010)
        #expect(CharacteristicDeclaration.flagNames(d.properties) == ["write-without-response", "write"])
        #expect(throws: DecodeError.self) { try CharacteristicDeclaration.decode([0x02, 0x03, 0x00, 0x00]) }
    }

    @Test func readByTypeResponseWithAPartialEntryIsTruncated() {
        #expect(throws: DecodeError.truncated(context: "ATT PDU", offset: 11, needed: 5, available: 2, what: "Attribute_Value")) {
            try ATTPDU.decode([0x09, 0x07, 0x09, 0x00, 0x10, 0x0A, 0x00, 0x37, 0x2A, 0x0C, 0x00, 0x02, 0x0D])
        }
    }

    @Test func findInformationResponses() throws {
        // Format 0x01: handle 0x000B → 0x2902 (CCCD).
        #expect(try ATTPDU.decode([0x05, 0x01, 0x0B, 0x00, 0x02, 0x29])
            == .findInformationResponse([ATTHandleUUID(handle: 0x0B, uuid: 0x2902)]))
        // Format 0x02: 128-bit UUID.
        let pdu = try ATTPDU.decode([0x05, 0x02, 0x20, 0x00] + (0..<16).map { UInt8($0) })
        guard case let .findInformationResponse(entries) = pdu else { Issue.record("got \(pdu)"); return }
        #expect(entries.first?.uuid.string == "0f0e0d0c-0b0a-0908-0706-050403020100")
        #expect(throws: DecodeError.invalidValue(context: "ATT PDU", offset: 1, expected: "Format 0x01 (16-bit UUIDs) or 0x02 (128-bit)",
                                                 found: "0x03")) {
            try ATTPDU.decode([0x05, 0x03, 0x0B, 0x00, 0x02, 0x29])
        }
    }

    @Test func findByTypeValue() throws {
        // Find the primary service 0x180D: type 0x2800, value 0x180D.
        #expect(try ATTPDU.decode([0x06, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28, 0x0D, 0x18])
            == .findByTypeValueRequest(start: 1, end: 0xFFFF, type: 0x2800, value: [0x0D, 0x18]))
        #expect(try ATTPDU.decode([0x07, 0x08, 0x00, 0x0F, 0x00]) == .findByTypeValueResponse([8...15]))
        #expect(throws: DecodeError.self) { try ATTPDU.decode([0x07, 0x08, 0x00, 0x07, 0x00]) }
    }

    @Test func readsWritesAndValues() throws {
        #expect(try ATTPDU.decode([0x0A, 0x0D, 0x00]) == .readRequest(handle: 0x0D))
        #expect(try ATTPDU.decode([0x0B, 0x01]) == .readResponse(value: [0x01]))
        #expect(try ATTPDU.decode([0x0B]) == .readResponse(value: []))
        #expect(try ATTPDU.decode([0x0C, 0x03, 0x00, 0x16, 0x00]) == .readBlobRequest(handle: 3, offset: 22))
        #expect(try ATTPDU.decode([0x0D, 0x41]) == .readBlobResponse(value: [0x41]))
        #expect(try ATTPDU.decode([0x12, 0x0B, 0x00, 0x01, 0x00]) == .writeRequest(handle: 0x0B, value: [0x01, 0x00]))
        #expect(try ATTPDU.decode([0x13]) == .writeResponse)
        #expect(try ATTPDU.decode([0x52, 0x0F, 0x00, 0x01]) == .writeCommand(handle: 0x0F, value: [0x01]))
        // Heart Rate Measurement 0x16 0x48 0x54 0x01 0xEC 0x02 (flags, 72 bpm, RR 340, 748).
        #expect(try ATTPDU.decode([0x1B, 0x0A, 0x00, 0x16, 0x48, 0x54, 0x01, 0xEC, 0x02])
            == .handleValueNotification(handle: 0x0A, value: [0x16, 0x48, 0x54, 0x01, 0xEC, 0x02]))
        #expect(try ATTPDU.decode([0x1D, 0x12, 0x00, 0x57]) == .handleValueIndication(handle: 0x12, value: [0x57]))
        #expect(try ATTPDU.decode([0x1E]) == .handleValueConfirmation)
    }

    @Test func signedWriteDropsTheSignature() throws {
        let signature = [UInt8](repeating: 0xEE, count: 12)
        #expect(try ATTPDU.decode([0xD2, 0x0F, 0x00, 0x01, 0x02] + signature) == .signedWriteCommand(handle: 0x0F, value: [0x01, 0x02]))
        #expect(throws: DecodeError.self) { try ATTPDU.decode([0xD2, 0x0F, 0x00, 0x01]) }
    }

    @Test func multipleHandleValueNotification() throws {
        #expect(try ATTPDU.decode([0x23, 0x0A, 0x00, 0x02, 0x00, 0x00, 0xAA, 0x12, 0x00, 0x01, 0x00, 0x57])
            == .multipleHandleValueNotification([ATTHandleValue(handle: 0x0A, value: [0x00, 0xAA]), ATTHandleValue(handle: 0x12, value: [0x57])]))
    }

    @Test func errorResponseAndMTU() throws {
        // Read By Group Type Request on 0x0014 failed: Attribute Not Found (0x0A).
        #expect(try ATTPDU.decode([0x01, 0x10, 0x14, 0x00, 0x0A]) == .errorResponse(requestOpcode: 0x10, handle: 0x14, error: 0x0A))
        #expect(try ATTPDU.decode([0x02, 0x05, 0x02]) == .exchangeMTURequest(mtu: 517))
        #expect(try ATTPDU.decode([0x03, 0xF7, 0x00]) == .exchangeMTUResponse(mtu: 247))
        #expect(throws: DecodeError.trailingBytes(context: "ATT PDU", offset: 3, extra: 1)) { try ATTPDU.decode([0x03, 0xF7, 0x00, 0x00]) }
    }

    @Test func otherOpcodesAndNames() throws {
        #expect(try ATTPDU.decode([0x16, 0x01, 0x00]) == .other(opcode: 0x16))
        #expect(ATTPDU.name(of: 0x1B) == "ATT Handle Value Notification (0x1b)")
        #expect(ATTPDU.name(of: 0x7F) == "ATT opcode (0x7f)")
        #expect(throws: DecodeError.self) { try ATTPDU.decode([]) }
        #expect(ATTPDU.readRequest(handle: 1).isRequest)
        #expect(!ATTPDU.readResponse(value: []).isRequest)
    }
}
