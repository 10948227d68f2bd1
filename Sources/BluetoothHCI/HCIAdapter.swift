internal import CBluetooth
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Device flags from `hci_dev_info.flags` (bit numbers from the `HCI_UP`… enum in
/// `<bluetooth/hci.h>`).
public struct HCIDeviceFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let up = HCIDeviceFlags(rawValue: 1 << 0)
    public static let initializing = HCIDeviceFlags(rawValue: 1 << 1)
    public static let running = HCIDeviceFlags(rawValue: 1 << 2)
    public static let pageScan = HCIDeviceFlags(rawValue: 1 << 3)
    public static let inquiryScan = HCIDeviceFlags(rawValue: 1 << 4)
    public static let authentication = HCIDeviceFlags(rawValue: 1 << 5)
    public static let encryption = HCIDeviceFlags(rawValue: 1 << 6)
    public static let inquiry = HCIDeviceFlags(rawValue: 1 << 7)
    public static let raw = HCIDeviceFlags(rawValue: 1 << 8)

    /// Names of the set flags in hciconfig's vocabulary ("UP", "RUNNING", "PSCAN", …).
    public var names: [String] {
        let table: [(HCIDeviceFlags, String)] = [
            (.up, "UP"), (.initializing, "INIT"), (.running, "RUNNING"), (.pageScan, "PSCAN"),
            (.inquiryScan, "ISCAN"), (.authentication, "AUTH"), (.encryption, "ENCRYPT"),
            (.inquiry, "INQUIRY"), (.raw, "RAW"),
        ]
        return table.compactMap { contains($0.0) ? $0.1 : nil }
    }
}

/// The transport a controller is attached by (low nibble of `hci_dev_info.type`).
public struct HCIBusType: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public var description: String {
        switch rawValue {
        case 0: return "Virtual"
        case 1: return "USB"
        case 2: return "PCCARD"
        case 3: return "UART"
        case 4: return "RS232"
        case 5: return "PCI"
        case 6: return "SDIO"
        case 7: return "SPI"
        case 8: return "I2C"
        case 9: return "SMD"
        case 10: return "VIRTIO"
        default: return "bus \(rawValue)"
        }
    }
}

/// Controller kind (bits 4-5 of `hci_dev_info.type`): primary (BR/EDR/LE) or AMP.
public enum HCIControllerType: Sendable, Hashable, CustomStringConvertible {
    case primary
    case amp
    case other(UInt8)

    init(raw: UInt8) {
        switch raw {
        case 0: self = .primary
        case 1: self = .amp
        default: self = .other(raw)
        }
    }

    public var description: String {
        switch self {
        case .primary: return "Primary"
        case .amp: return "AMP"
        case .other(let v): return "type \(v)"
        }
    }
}

/// Controller version from HCI_Read_Local_Version_Information.
public struct HCIVersionInfo: Sendable, Hashable {
    public let hciVersion: UInt8
    public let hciRevision: UInt16
    public let lmpVersion: UInt8
    public let lmpSubversion: UInt16
    /// Company identifier (Bluetooth SIG assigned number).
    public let manufacturer: UInt16

    public init(hciVersion: UInt8, hciRevision: UInt16, lmpVersion: UInt8, lmpSubversion: UInt16, manufacturer: UInt16) {
        self.hciVersion = hciVersion
        self.hciRevision = hciRevision
        self.lmpVersion = lmpVersion
        self.lmpSubversion = lmpSubversion
        self.manufacturer = manufacturer
    }

    /// Core specification version for an HCI/LMP version number (Bluetooth Assigned
    /// Numbers, "Core Specification Version"): 0 → 1.0b … 9 → 5.0 … 13 → 5.4, 14 → 6.0.
    public static func coreSpecificationName(_ version: UInt8) -> String? {
        let names = ["1.0b", "1.1", "1.2", "2.0", "2.1", "3.0", "4.0", "4.1", "4.2", "5.0", "5.1", "5.2", "5.3", "5.4", "6.0"]
        return Int(version) < names.count ? names[Int(version)] : nil
    }

    /// e.g. "Bluetooth 5.0 (HCI 0x09, revision 0x1234)".
    public var summary: String {
        let name = HCIVersionInfo.coreSpecificationName(hciVersion).map { "Bluetooth \($0)" } ?? "unknown core version"
        return "\(name) (HCI 0x\(hex(hciVersion)), revision 0x\(hex(hciRevision)), manufacturer \(manufacturer))"
    }

    private func hex<T: BinaryInteger>(_ v: T) -> String { String(v, radix: 16, uppercase: true) }
}

/// One local Bluetooth controller as the kernel reports it (`HCIGETDEVINFO`).
public struct HCIAdapter: Sendable, Hashable {
    /// Device index: the N in hciN.
    public let index: UInt16
    /// Kernel name, e.g. "hci0".
    public let name: String
    /// Public device address, "AA:BB:CC:DD:EE:FF" (00:00:00:00:00:00 until the controller was up once).
    public let address: String
    public let flags: HCIDeviceFlags
    public let bus: HCIBusType
    public let controllerType: HCIControllerType
    public let aclMTU: UInt16
    public let aclPackets: UInt16
    public let scoMTU: UInt16
    public let scoPackets: UInt16
    /// Local version, read only for adapters that are up; nil otherwise or when the read failed.
    public let version: HCIVersionInfo?
    /// Why `version` is nil although the adapter is up (e.g. a timeout), if known.
    public let versionError: String?

    public var isUp: Bool { flags.contains(.up) }
    public var isRunning: Bool { flags.contains(.running) }
    public var pageScan: Bool { flags.contains(.pageScan) }
    public var inquiryScan: Bool { flags.contains(.inquiryScan) }

    public init(index: UInt16, name: String, address: String, flags: HCIDeviceFlags, bus: HCIBusType,
                controllerType: HCIControllerType, aclMTU: UInt16, aclPackets: UInt16, scoMTU: UInt16,
                scoPackets: UInt16, version: HCIVersionInfo?, versionError: String?) {
        self.index = index
        self.name = name
        self.address = address
        self.flags = flags
        self.bus = bus
        self.controllerType = controllerType
        self.aclMTU = aclMTU
        self.aclPackets = aclPackets
        self.scoMTU = scoMTU
        self.scoPackets = scoPackets
        self.version = version
        self.versionError = versionError
    }

    /// Formats a little-endian `bdaddr_t` (as stored by the kernel) most significant byte first.
    public static func formatAddress(littleEndian bytes: [UInt8]) -> String {
        bytes.reversed().map { byte in
            let s = String(byte, radix: 16, uppercase: true)
            return s.count == 1 ? "0" + s : s
        }.joined(separator: ":")
    }

    /// Splits `hci_dev_info.type` into bus (bits 0-3) and controller type (bits 4-5).
    static func decodeType(_ type: UInt8) -> (HCIBusType, HCIControllerType) {
        (HCIBusType(rawValue: type & 0x0F), HCIControllerType(raw: (type & 0x30) >> 4))
    }
}

extension BluetoothKernel {
    /// Lists local controllers with `HCIGETDEVLIST` then `HCIGETDEVINFO` for each.
    ///
    /// - Parameter readVersion: for adapters that are up, also send
    ///   HCI_Read_Local_Version_Information (`hci_read_local_version`, 1 s timeout).
    /// - Throws: `HCIError` naming the failing call (`.kernelUnsupported` when the kernel
    ///   has no Bluetooth). An adapter that disappears between the two calls is skipped.
    public static func adapters(readVersion: Bool = true) throws(HCIError) -> [HCIAdapter] {
        let socket = try HCIControlSocket.open()
        defer { socket.close() }

        let capacity = Int(HCI_MAX_DEV)
        let requestStride = MemoryLayout<hci_dev_req>.stride
        let requestAlignment = MemoryLayout<hci_dev_req>.alignment
        // struct hci_dev_list_req { uint16_t dev_num; struct hci_dev_req dev_req[]; }
        let headerSize = (MemoryLayout<UInt16>.size + requestAlignment - 1) / requestAlignment * requestAlignment
        let byteCount = headerSize + capacity * requestStride
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: max(requestAlignment, 4))
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0, count: byteCount)
        buffer.storeBytes(of: UInt16(capacity), as: UInt16.self)

        try socket.ioctl(IOControl.getDeviceList, buffer, name: "HCIGETDEVLIST")

        let reported = Int(buffer.load(as: UInt16.self))
        guard reported <= capacity else {
            throw HCIError.malformedDeviceList(reported: reported, capacity: capacity)
        }
        var ids: [UInt16] = []
        for i in 0..<reported {
            let request = buffer.load(fromByteOffset: headerSize + i * requestStride, as: hci_dev_req.self)
            ids.append(request.dev_id)
        }

        var adapters: [HCIAdapter] = []
        for id in ids {
            var info = hci_dev_info()
            info.dev_id = id
            do {
                try withUnsafeMutableBytes(of: &info) { (raw) throws(HCIError) in
                    guard let base = raw.baseAddress else { return }
                    try socket.ioctl(IOControl.getDeviceInfo, base, name: "HCIGETDEVINFO hci\(id)")
                }
            } catch {
                if error.systemCallError?.code == ENODEV { continue }  // unplugged meanwhile
                throw error
            }
            adapters.append(makeAdapter(info, readVersion: readVersion))
        }
        return adapters
    }

    private static func makeAdapter(_ info: hci_dev_info, readVersion: Bool) -> HCIAdapter {
        let name = withUnsafeBytes(of: info.name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        let addressBytes = withUnsafeBytes(of: info.bdaddr) { Array($0.prefix(6)) }
        let flags = HCIDeviceFlags(rawValue: info.flags)
        let (bus, controllerType) = HCIAdapter.decodeType(info.type)

        var version: HCIVersionInfo?
        var versionError: String?
        if readVersion && flags.contains(.up) {
            switch readLocalVersion(deviceID: Int32(info.dev_id)) {
            case .success(let v): version = v
            case .failure(let e): versionError = e.description
            }
        }
        return HCIAdapter(
            index: info.dev_id, name: name.isEmpty ? "hci\(info.dev_id)" : name,
            address: HCIAdapter.formatAddress(littleEndian: addressBytes), flags: flags, bus: bus,
            controllerType: controllerType, aclMTU: info.acl_mtu, aclPackets: info.acl_pkts,
            scoMTU: info.sco_mtu, scoPackets: info.sco_pkts, version: version, versionError: versionError)
    }

    /// HCI_Read_Local_Version_Information through libbluetooth on a socket bound to the device.
    static func readLocalVersion(deviceID: Int32) -> Result<HCIVersionInfo, SystemCallError> {
        let opened = retryingEINTR { hci_open_dev(deviceID) }
        let dd: Int32
        switch opened {
        case .success(let value): dd = value
        case .failure(let code): return .failure(SystemCallError(call: "hci_open_dev(hci\(deviceID))", code: code))
        }
        defer { _ = hci_close_dev(dd) }
        var version = hci_version()
        let read = retryingEINTR { hci_read_local_version(dd, &version, 1000) }
        if case .failure(let code) = read {
            return .failure(SystemCallError(call: "hci_read_local_version(hci\(deviceID))", code: code))
        }
        return .success(HCIVersionInfo(
            hciVersion: version.hci_ver, hciRevision: version.hci_rev, lmpVersion: version.lmp_ver,
            lmpSubversion: version.lmp_subver, manufacturer: version.manufacturer))
    }
}
