import Vocabulary
/// What a capture shows about each remote device: advertisements over time,
/// the GATT layout a client discovered, and the values it read or was sent.
/// Built by ``CaptureAnalyzer`` from btsnoop records.
public struct CaptureTimeline: Equatable, Sendable {
    public var datalink: BtsnoopDatalink
    /// Number of records in the file.
    public var recordCount: Int
    /// Timestamp of the first record (microseconds since 0 AD); times in the
    /// timeline are relative to it with ``seconds(_:)``.
    public var firstTimestamp: Int64?
    /// Timestamp of the last record.
    public var lastTimestamp: Int64?
    /// Records whose included length is below their original length.
    public var truncatedRecords: Int
    /// The last record's cumulative drop count (packets the capturer lost).
    public var droppedPackets: UInt32
    /// Controllers announced by the Linux monitor (index → address, name).
    public var controllers: [CapturedController]
    /// Remote devices, in the order they first appear.
    public var devices: [CapturedDevice]
    /// Packets the importer does not use, counted by kind ("HCI event 0x0e",
    /// "ATT Exchange MTU Request (0x02)", "L2CAP CID 0x0006", …).
    public var unknownPackets: [String: Int]
    /// Packets that were present but malformed (first ``CaptureAnalyzer/maxIssues`` kept).
    public var malformedPackets: [CaptureIssue]
    /// All malformed packets, also those beyond the kept list.
    public var malformedCount: Int

    public init(datalink: BtsnoopDatalink) {
        self.datalink = datalink
        recordCount = 0
        truncatedRecords = 0
        droppedPackets = 0
        controllers = []
        devices = []
        unknownPackets = [:]
        malformedPackets = []
        malformedCount = 0
    }

    /// Seconds from the first record to `timestamp` (never negative).
    public func seconds(_ timestamp: Int64) -> Double {
        Double(microseconds(timestamp)) / 1_000_000
    }

    /// Microseconds from the first record to `timestamp` (never negative;
    /// timestamps are whatever the file says, so the difference saturates).
    public func microseconds(_ timestamp: Int64) -> Int64 {
        guard let first = firstTimestamp else { return 0 }
        return CaptureTimeline.elapsed(from: first, to: timestamp)
    }

    /// `to - from`, at least 0 and at most Int64.max.
    public static func elapsed(from: Int64, to: Int64) -> Int64 {
        guard to > from else { return 0 }
        let (d, overflow) = to.subtractingReportingOverflow(from)
        return overflow ? Int64.max : d
    }

    public func device(_ address: BluetoothAddress) -> CapturedDevice? {
        devices.first { $0.address == address }
    }
}

/// A controller of the capturing host (Linux monitor New Index / Index Info).
public struct CapturedController: Equatable, Sendable {
    public var index: UInt16
    public var address: BluetoothAddress
    public var name: String

    public init(index: UInt16, address: BluetoothAddress, name: String) {
        self.index = index
        self.address = address
        self.name = name
    }
}

/// A malformed packet: where it is and what the decoder said.
public struct CaptureIssue: Equatable, Sendable, CustomStringConvertible {
    /// 1-based record number.
    public var record: Int
    /// Byte offset of the record in the file.
    public var offset: Int
    public var error: DecodeError

    public var description: String { "record \(record) (byte offset \(offset)): \(error)" }
}

/// One advertising report of a device, at a time.
public struct CapturedAdvertisement: Equatable, Sendable {
    /// Microseconds since 0 AD.
    public var timestamp: Int64
    public var record: Int
    public var report: LEAdvertisingReport

    public var address: BluetoothAddress { report.address }
    public var addressType: CaptureAddressType { report.addressType }
    public var rssi: Int8? { report.rssi }
    /// The AD structures (advertising data or scan response data).
    public var data: [UInt8] { report.data }
    public var format: LEAdvertisingReport.Format { report.format }

    public init(timestamp: Int64, record: Int, report: LEAdvertisingReport) {
        self.timestamp = timestamp
        self.record = record
        self.report = report
    }
}

/// What kind of value event.
public enum CapturedValueKind: String, Equatable, Sendable {
    /// Read Response / Read Blob Response / Read By Type Response to our read.
    case read
    case notification
    case indication
    /// Our Write Request.
    case write
    /// Our Write Command (or Signed Write Command).
    case writeCommand = "write_command"
}

/// A value that went over the air for an attribute handle.
public struct CapturedValueEvent: Equatable, Sendable {
    public var timestamp: Int64
    public var record: Int
    public var handle: UInt16
    public var value: [UInt8]
    public var kind: CapturedValueKind
    /// For read blob parts that could not be joined to the read before them.
    public var offset: UInt16

    public init(timestamp: Int64, record: Int, handle: UInt16, value: [UInt8], kind: CapturedValueKind, offset: UInt16 = 0) {
        self.timestamp = timestamp
        self.record = record
        self.handle = handle
        self.value = value
        self.kind = kind
        self.offset = offset
    }
}

/// An ATT Error Response the remote server sent us.
public struct CapturedATTError: Equatable, Sendable {
    public var timestamp: Int64
    public var record: Int
    public var requestOpcode: UInt8
    public var handle: UInt16
    public var error: UInt8

    public init(timestamp: Int64, record: Int, requestOpcode: UInt8, handle: UInt16, error: UInt8) {
        self.timestamp = timestamp
        self.record = record
        self.requestOpcode = requestOpcode
        self.handle = handle
        self.error = error
    }
}

/// A connection to the device (LE Connection Complete .. Disconnection Complete).
public struct CapturedConnection: Equatable, Sendable {
    public var controller: UInt16
    public var handle: UInt16
    public var connected: Int64
    public var disconnected: Int64?
    /// 0x00: we were central; 0x01: peripheral.
    public var role: UInt8

    public init(controller: UInt16, handle: UInt16, connected: Int64, disconnected: Int64?, role: UInt8) {
        self.controller = controller
        self.handle = handle
        self.connected = connected
        self.disconnected = disconnected
        self.role = role
    }
}

public struct CapturedDescriptor: Equatable, Sendable {
    public var handle: UInt16
    public var uuid: BluetoothUUID

    public init(handle: UInt16, uuid: BluetoothUUID) {
        self.handle = handle
        self.uuid = uuid
    }
}

public struct CapturedCharacteristic: Equatable, Sendable {
    /// Handle of the characteristic declaration (0x2803).
    public var handle: UInt16
    public var properties: UInt8
    public var valueHandle: UInt16
    public var uuid: BluetoothUUID
    public var descriptors: [CapturedDescriptor]

    /// BlueZ flag names of ``properties``.
    public var flags: [String] { CharacteristicDeclaration.flagNames(properties) }

    public init(handle: UInt16, properties: UInt8, valueHandle: UInt16, uuid: BluetoothUUID, descriptors: [CapturedDescriptor]) {
        self.handle = handle
        self.properties = properties
        self.valueHandle = valueHandle
        self.uuid = uuid
        self.descriptors = descriptors
    }
}

public struct CapturedService: Equatable, Sendable {
    public var handle: UInt16
    public var endHandle: UInt16
    public var uuid: BluetoothUUID
    public var primary: Bool
    public var characteristics: [CapturedCharacteristic]

    public init(handle: UInt16, endHandle: UInt16, uuid: BluetoothUUID, primary: Bool, characteristics: [CapturedCharacteristic]) {
        self.handle = handle
        self.endHandle = endHandle
        self.uuid = uuid
        self.primary = primary
        self.characteristics = characteristics
    }
}

/// Everything the capture shows about one remote device.
public struct CapturedDevice: Equatable, Sendable {
    public var address: BluetoothAddress
    public var addressType: CaptureAddressType
    /// In the order they were complete: an extended advertisement split
    /// over several reports comes where its last part was (with its first
    /// part's time and record), so a capture read as it arrives gives the
    /// same order as one read whole.
    public var advertisements: [CapturedAdvertisement]
    public var connections: [CapturedConnection]
    /// The GATT layout discovered by a client on our side, in handle order.
    public var services: [CapturedService]
    /// Characteristic declarations outside every discovered service.
    public var unplacedCharacteristics: [CapturedCharacteristic]
    /// Reads, notifications, indications and our writes, in capture order.
    public var values: [CapturedValueEvent]
    public var attErrors: [CapturedATTError]
    /// The ATT MTU both sides agreed on (Exchange MTU), if seen.
    public var mtu: UInt16?

    public init(address: BluetoothAddress, addressType: CaptureAddressType) {
        self.address = address
        self.addressType = addressType
        advertisements = []
        connections = []
        services = []
        unplacedCharacteristics = []
        values = []
        attErrors = []
    }

    /// The characteristic whose value handle is `handle`.
    public func characteristic(valueHandle handle: UInt16) -> CapturedCharacteristic? {
        for s in services {
            if let c = s.characteristics.first(where: { $0.valueHandle == handle }) { return c }
        }
        return nil
    }
}
