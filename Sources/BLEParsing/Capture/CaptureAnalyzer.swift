import Vocabulary
/// Folds btsnoop records into a ``CaptureTimeline``.
///
///     let timeline = try CaptureAnalyzer.analyze(bytes)          // whole file
///
///     var analyzer = CaptureAnalyzer(datalink: reader.datalink)  // or record by record
///     while let record = try reader.next() { analyzer.add(record) }
///     let timeline = analyzer.finish()
///
/// A long capture can be read without holding its advertisements: with
/// `keepsAdvertisements: false` they are handed out by
/// ``takeAdvertisements()`` as they are read instead of being kept in each
/// device's ``CapturedDevice/advertisements`` (`import-btsnoop` folds them
/// as it goes, so its memory does not grow with the capture).
///
/// Only the file framing can fail (``CaptureError``). Inside a well-framed
/// record nothing is fatal: packets the importer does not use are counted in
/// ``CaptureTimeline/unknownPackets``, malformed ones are listed in
/// ``CaptureTimeline/malformedPackets`` with their record.
///
/// Devices are the advertisers (LE Advertising Report 0x3E/0x02, LE Extended
/// Advertising Report 0x3E/0x0D) and the peers of LE connections (LE
/// (Enhanced) Connection Complete). Attribute protocol traffic on CID 0x0004
/// is read as a GATT client on our side talking to the remote server:
/// requests we sent are paired with the responses we received on the same
/// connection (ATT allows one outstanding request per direction, Vol 3 Part F
/// §3.3.2); the remote side's requests and our answers (a local GATT server)
/// are counted, not modelled.
public struct CaptureAnalyzer: Sendable {
    /// Malformed packets kept with their details (all are counted).
    public static let maxIssues = 1000

    public private(set) var timeline: CaptureTimeline

    struct ConnectionKey: Hashable, Sendable {
        var controller: UInt16
        var handle: UInt16
    }

    struct RequestKey: Hashable, Sendable {
        var connection: ConnectionKey
        /// Who sent the request.
        var direction: HCIDirection
    }

    struct FragmentKey: Hashable, Sendable {
        var controller: UInt16
        var address: BluetoothAddress
        var addressType: CaptureAddressType
        var sid: UInt8?
        var scanResponse: Bool
    }

    struct Fragments: Sendable {
        var timestamp: Int64
        var record: Int
        var data: [UInt8]
    }

    struct GATTBuilder: Sendable {
        /// Service start handle → (end handle, UUID, primary).
        var services: [UInt16: (end: UInt16, uuid: BluetoothUUID, primary: Bool)] = [:]
        /// Declaration handle → declaration.
        var characteristics: [UInt16: CharacteristicDeclaration] = [:]
        /// Handle → type, from Find Information Responses.
        var information: [UInt16: BluetoothUUID] = [:]
    }

    private var deviceIndex: [BluetoothAddress: Int] = [:]
    private var connections: [ConnectionKey: Int] = [:]
    private var reassembler = L2CAPReassembler()
    private var pending: [RequestKey: ATTPDU] = [:]
    /// The last read value event per connection (to join Read Blob parts).
    private var lastRead: [ConnectionKey: Int] = [:]
    private var fragments: [FragmentKey: Fragments] = [:]
    private var gatt: [Int: GATTBuilder] = [:]

    /// Whether advertisements go into the timeline's devices or out through
    /// ``takeAdvertisements()``.
    public let keepsAdvertisements: Bool
    private var outgoing: [CapturedAdvertisement] = []

    public init(datalink: BtsnoopDatalink, keepsAdvertisements: Bool = true) {
        timeline = CaptureTimeline(datalink: datalink)
        self.keepsAdvertisements = keepsAdvertisements
    }

    /// The advertisements read since the last call, in the order they were
    /// read (extended advertising joined from its fragments comes when its
    /// last fragment does); empty when the analyzer keeps them. Their
    /// devices are in the timeline already.
    public mutating func takeAdvertisements() -> [CapturedAdvertisement] {
        defer { outgoing.removeAll(keepingCapacity: true) }
        return outgoing
    }

    /// The capture has ended: extended advertising fragments that never
    /// completed become advertisements as they are (counted as incomplete),
    /// for ``takeAdvertisements()`` or the timeline. ``finish()`` does it too.
    public mutating func endOfCapture() {
        for (key, f) in fragments.sorted(by: { $0.value.record < $1.value.record }) {
            count("extended advertising data left incomplete")
            let report = LEAdvertisingReport(format: .extended, eventType: 0x40, addressType: key.addressType, address: key.address,
                                             data: f.data, rssi: nil, sid: key.sid)
            add(report, timestamp: f.timestamp, record: f.record)
        }
        fragments = [:]
    }

    /// Reads a whole btsnoop file.
    public static func analyze(_ bytes: [UInt8]) throws(CaptureError) -> CaptureTimeline {
        var reader = try BtsnoopReader(bytes)
        var analyzer = CaptureAnalyzer(datalink: reader.datalink)
        while let record = try reader.next() { analyzer.add(record) }
        return analyzer.finish()
    }

    // MARK: Records

    public mutating func add(_ record: BtsnoopRecord) {
        timeline.recordCount += 1
        if timeline.firstTimestamp == nil { timeline.firstTimestamp = record.timestamp }
        timeline.lastTimestamp = record.timestamp
        timeline.droppedPackets = record.cumulativeDrops
        if record.isTruncated { timeline.truncatedRecords += 1 }
        do {
            let frame = try CaptureFrame.decode(record, datalink: timeline.datalink)
            try handle(frame, record)
        } catch {
            issue(record, error)
        }
    }

    private mutating func issue(_ record: BtsnoopRecord, _ error: DecodeError) {
        timeline.malformedCount += 1
        if timeline.malformedPackets.count < CaptureAnalyzer.maxIssues {
            timeline.malformedPackets.append(CaptureIssue(record: record.number, offset: record.offset, error: error))
        }
    }

    private mutating func count(_ kind: String) {
        timeline.unknownPackets[kind, default: 0] += 1
    }

    private mutating func handle(_ frame: CaptureFrame, _ record: BtsnoopRecord) throws(DecodeError) {
        switch frame.packet {
        case let .event(code, parameters):
            try event(HCIEvent.decode(code: code, parameters: parameters), controller: frame.controller, record)
        case let .acl(packet, direction):
            acl(packet, direction: direction, controller: frame.controller, record)
        case let .newIndex(_, _, address, name):
            timeline.controllers.removeAll { $0.index == frame.controller }
            timeline.controllers.append(CapturedController(index: frame.controller, address: address, name: name))
        case let .indexInfo(address, _):
            if !timeline.controllers.contains(where: { $0.index == frame.controller }) {
                timeline.controllers.append(CapturedController(index: frame.controller, address: address, name: ""))
            }
        case .command, .sco, .iso, .monitor, .unknownType:
            count(frame.packet.kindName)
        }
    }

    // MARK: HCI events

    static let eventNames: [UInt8: String] = [
        0x03: "Connection Complete", 0x05: "Disconnection Complete", 0x08: "Encryption Change",
        0x0C: "Read Remote Version Information Complete", 0x0E: "Command Complete", 0x0F: "Command Status",
        0x13: "Number Of Completed Packets", 0x30: "Encryption Key Refresh Complete", 0x3E: "LE Meta", 0xFF: "Vendor",
    ]

    private mutating func event(_ event: HCIEvent, controller: UInt16, _ record: BtsnoopRecord) {
        switch event {
        case let .advertisingReports(reports):
            for r in reports { advertisement(r, controller: controller, record) }
        case let .extendedAdvertisingReports(reports):
            for r in reports { extendedAdvertisement(r, controller: controller, record) }
        case let .connectionComplete(c):
            guard c.status == 0 else {
                count("HCI LE Connection Complete (failed)")
                return
            }
            let i = device(c.peerAddress, c.peerAddressType)
            let key = ConnectionKey(controller: controller, handle: c.handle)
            closeConnection(key, at: record.timestamp)
            connections[key] = i
            timeline.devices[i].connections.append(
                CapturedConnection(controller: controller, handle: c.handle, connected: record.timestamp, disconnected: nil, role: c.role))
        case let .disconnectionComplete(status, handle, _):
            guard status == 0 else {
                count("HCI Disconnection Complete (failed)")
                return
            }
            let key = ConnectionKey(controller: controller, handle: handle)
            if connections[key] == nil { count("HCI Disconnection Complete for an unknown connection") }
            closeConnection(key, at: record.timestamp)
        case let .other(code, subevent):
            let name = CaptureAnalyzer.eventNames[code].map { " " + $0 } ?? ""
            if let subevent {
                count("HCI event " + hexString(code) + name + " subevent " + hexString(subevent))
            } else {
                count("HCI event " + hexString(code) + name)
            }
        }
    }

    private mutating func closeConnection(_ key: ConnectionKey, at timestamp: Int64) {
        if let i = connections[key], let c = timeline.devices[i].connections.lastIndex(where: {
            $0.controller == key.controller && $0.handle == key.handle && $0.disconnected == nil
        }) {
            timeline.devices[i].connections[c].disconnected = timestamp
        }
        connections[key] = nil
        reassembler.reset(controller: key.controller, handle: key.handle)
        pending[RequestKey(connection: key, direction: .sent)] = nil
        pending[RequestKey(connection: key, direction: .received)] = nil
        lastRead[key] = nil
    }

    /// Index of the device with `address`, created on first sight.
    private mutating func device(_ address: BluetoothAddress, _ type: CaptureAddressType) -> Int {
        if let i = deviceIndex[address] { return i }
        timeline.devices.append(CapturedDevice(address: address, addressType: type))
        deviceIndex[address] = timeline.devices.count - 1
        return timeline.devices.count - 1
    }

    private mutating func advertisement(_ report: LEAdvertisingReport, controller: UInt16, _ record: BtsnoopRecord) {
        add(report, timestamp: record.timestamp, record: record.number)
    }

    private mutating func add(_ report: LEAdvertisingReport, timestamp: Int64, record: Int) {
        guard report.addressType != .anonymous else {
            count("anonymous advertisement")
            return
        }
        let i = device(report.address, report.addressType)
        let advertisement = CapturedAdvertisement(timestamp: timestamp, record: record, report: report)
        if keepsAdvertisements {
            timeline.devices[i].advertisements.append(advertisement)
        } else {
            outgoing.append(advertisement)
        }
    }

    /// Extended reports may split one advertisement's data over several
    /// reports ("incomplete, more data to come" … "complete"/"truncated",
    /// same address, SID and PHYs; §7.7.65.13): they are joined into one.
    private mutating func extendedAdvertisement(_ report: LEAdvertisingReport, controller: UInt16, _ record: BtsnoopRecord) {
        let key = FragmentKey(controller: controller, address: report.address, addressType: report.addressType, sid: report.sid,
                              scanResponse: report.isScanResponse)
        if report.dataStatus == .incompleteMoreToCome {
            if var f = fragments[key] {
                f.data += report.data
                fragments[key] = f
            } else {
                fragments[key] = Fragments(timestamp: record.timestamp, record: record.number, data: report.data)
            }
            return
        }
        guard let f = fragments.removeValue(forKey: key) else {
            add(report, timestamp: record.timestamp, record: record.number)
            return
        }
        var joined = report
        joined.data = f.data + report.data
        add(joined, timestamp: f.timestamp, record: f.record)
    }

    // MARK: ACL, L2CAP

    private mutating func acl(_ packet: ACLPacket, direction: HCIDirection, controller: UInt16, _ record: BtsnoopRecord) {
        let key = ConnectionKey(controller: controller, handle: packet.handle)
        guard let i = connections[key] else {
            count("ACL data on a connection without LE Connection Complete")
            return
        }
        let out = reassembler.add(packet, key: .init(controller: controller, handle: packet.handle, direction: direction))
        for reason in out.dropped { count(reason) }
        guard let frame = out.frame else { return }
        guard frame.channel == L2CAPFrame.attChannel else {
            count("L2CAP CID " + hexString(frame.channel))
            return
        }
        do {
            let pdu = try ATTPDU.decode(frame.payload)
            att(pdu, direction: direction, connection: key, device: i, record)
        } catch {
            issue(record, error)
        }
    }

    // MARK: ATT

    private mutating func att(_ pdu: ATTPDU, direction: HCIDirection, connection: ConnectionKey, device i: Int, _ record: BtsnoopRecord) {
        let name = ATTPDU.name(of: pdu.opcode)
        if pdu.isRequest {
            pending[RequestKey(connection: connection, direction: direction)] = pdu
            guard direction == .sent else { return }
            switch pdu {
            case let .writeRequest(handle, value): self.value(i, handle, value, .write, record)
            default: break
            }
            return
        }
        switch pdu {
        case let .writeCommand(handle, value), let .signedWriteCommand(handle, value):
            if direction == .sent { self.value(i, handle, value, .writeCommand, record) } else { count(name + " from the remote client") }
            return
        case let .handleValueNotification(handle, value):
            if direction == .received { self.value(i, handle, value, .notification, record) } else { count(name + " from the local server") }
            return
        case let .handleValueIndication(handle, value):
            if direction == .received { self.value(i, handle, value, .indication, record) } else { count(name + " from the local server") }
            return
        case let .multipleHandleValueNotification(entries):
            if direction == .received {
                for e in entries { self.value(i, e.handle, e.value, .notification, record) }
            } else {
                count(name + " from the local server")
            }
            return
        case .handleValueConfirmation, .other:
            count(name)
            return
        default:
            break
        }
        // A response: it answers the request the other side sent.
        let requester: HCIDirection = direction == .received ? .sent : .received
        let key = RequestKey(connection: connection, direction: requester)
        guard let request = pending.removeValue(forKey: key) else {
            count(name + " without a request")
            return
        }
        if case let .exchangeMTURequest(client) = request, case let .exchangeMTUResponse(server) = pdu {
            timeline.devices[i].mtu = min(client, server)
            return
        }
        guard direction == .received else {
            count(name + " from the local server")
            return
        }
        response(pdu, to: request, connection: connection, device: i, record)
    }

    private mutating func response(_ pdu: ATTPDU, to request: ATTPDU, connection: ConnectionKey, device i: Int, _ record: BtsnoopRecord) {
        switch (request, pdu) {
        case let (_, .errorResponse(opcode, handle, error)):
            timeline.devices[i].attErrors.append(CapturedATTError(timestamp: record.timestamp, record: record.number,
                                                                  requestOpcode: opcode, handle: handle, error: error))
        case let (.readRequest(handle), .readResponse(value)):
            self.value(i, handle, value, .read, record)
            lastRead[connection] = timeline.devices[i].values.count - 1
        case let (.readBlobRequest(handle, offset), .readBlobResponse(value)):
            if let e = lastRead[connection], timeline.devices[i].values[e].handle == handle,
               timeline.devices[i].values[e].value.count == Int(offset) {
                timeline.devices[i].values[e].value += value
            } else {
                self.value(i, handle, value, .read, record, offset: offset)
                lastRead[connection] = timeline.devices[i].values.count - 1
            }
        case let (.readByGroupTypeRequest(_, _, type), .readByGroupTypeResponse(groups)):
            guard let primary = CaptureAnalyzer.serviceKind(type) else {
                count("ATT Read By Group Type Response for type " + type.shortString)
                return
            }
            for g in groups {
                guard let uuid = BluetoothUUID(littleEndianBytes: g.value), g.value.count != 4 else {
                    issue(record, DecodeError.invalidValue(context: "ATT Read By Group Type Response", offset: nil,
                                                           expected: "a 2- or 16-byte service UUID", found: "\(g.value.count) bytes"))
                    continue
                }
                gatt[i, default: GATTBuilder()].services[g.handle] = (g.endHandle, uuid, primary)
            }
        case let (.findByTypeValueRequest(_, _, type, value), .findByTypeValueResponse(ranges)):
            guard let primary = CaptureAnalyzer.serviceKind(BluetoothUUID(uuid16: type)),
                  value.count == 2 || value.count == 16, let uuid = BluetoothUUID(littleEndianBytes: value) else {
                count("ATT Find By Type Value Response for type " + hexString(type))
                return
            }
            for range in ranges { gatt[i, default: GATTBuilder()].services[range.lowerBound] = (range.upperBound, uuid, primary) }
        case let (.readByTypeRequest(_, _, type), .readByTypeResponse(entries)):
            if type == BluetoothUUID(uuid16: 0x2803) {
                for e in entries {
                    do {
                        gatt[i, default: GATTBuilder()].characteristics[e.handle] = try CharacteristicDeclaration.decode(e.value)
                    } catch {
                        issue(record, error)
                    }
                }
            } else if type == BluetoothUUID(uuid16: 0x2802) {
                count("ATT Read By Type Response for included services")
            } else {
                // Read Using Characteristic UUID: values of that type.
                for e in entries { self.value(i, e.handle, e.value, .read, record) }
            }
        case let (.findInformationRequest, .findInformationResponse(entries)):
            for e in entries { gatt[i, default: GATTBuilder()].information[e.handle] = e.uuid }
        case (.writeRequest, .writeResponse):
            break
        default:
            count(ATTPDU.name(of: pdu.opcode) + " not matching its request " + ATTPDU.name(of: request.opcode))
        }
    }

    /// 0x2800 → primary, 0x2801 → secondary, else nil.
    static func serviceKind(_ type: BluetoothUUID) -> Bool? {
        switch type.uuid16 {
        case 0x2800: return true
        case 0x2801: return false
        default: return nil
        }
    }

    private mutating func value(_ i: Int, _ handle: UInt16, _ value: [UInt8], _ kind: CapturedValueKind, _ record: BtsnoopRecord,
                                offset: UInt16 = 0) {
        timeline.devices[i].values.append(CapturedValueEvent(timestamp: record.timestamp, record: record.number, handle: handle,
                                                             value: value, kind: kind, offset: offset))
    }

    // MARK: Finish

    /// The timeline, with extended advertising fragments that never completed
    /// added as they are and each device's GATT layout assembled.
    public func finish() -> CaptureTimeline {
        var copy = self
        copy.endOfCapture()
        for (i, builder) in copy.gatt {
            let (services, unplaced) = CaptureAnalyzer.layout(builder)
            copy.timeline.devices[i].services = services
            copy.timeline.devices[i].unplacedCharacteristics = unplaced
        }
        return copy.timeline
    }

    /// Services in handle order; each characteristic in the service whose
    /// range holds its declaration; each descriptor (a Find Information
    /// handle that is no declaration or value) under the characteristic
    /// before it (Vol 3 Part G §3: a characteristic's descriptors follow its
    /// value, up to the next declaration or the service end).
    static func layout(_ b: GATTBuilder) -> ([CapturedService], [CapturedCharacteristic]) {
        var services = b.services.sorted { $0.key < $1.key }.map {
            CapturedService(handle: $0.key, endHandle: $0.value.end, uuid: $0.value.uuid, primary: $0.value.primary, characteristics: [])
        }
        let declarations = b.characteristics.sorted { $0.key < $1.key }
        let declarationTypes: Set<BluetoothUUID> = [0x2800, 0x2801, 0x2802, 0x2803]
        let structural = Set(declarations.map(\.key)).union(declarations.map(\.value.valueHandle)).union(services.map(\.handle))
        var unplaced: [CapturedCharacteristic] = []
        for (n, (handle, d)) in declarations.enumerated() {
            let owner = services.lastIndex { $0.handle < handle && handle <= $0.endHandle }
            var end = owner.map { services[$0].endHandle } ?? 0xFFFF
            if n + 1 < declarations.count { end = min(end, declarations[n + 1].key - 1) }
            var c = CapturedCharacteristic(handle: handle, properties: d.properties, valueHandle: d.valueHandle, uuid: d.uuid,
                                           descriptors: [])
            if d.valueHandle < end {
                for (h, uuid) in b.information.sorted(by: { $0.key < $1.key })
                where h > d.valueHandle && h <= end && !structural.contains(h) && !declarationTypes.contains(uuid) {
                    c.descriptors.append(CapturedDescriptor(handle: h, uuid: uuid))
                }
            }
            if let owner {
                services[owner].characteristics.append(c)
            } else {
                unplaced.append(c)
            }
        }
        return (services, unplaced)
    }
}
