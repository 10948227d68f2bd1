import BLEParsing
import BlueZ

/// What passive scanning has to match to hear every advertisement the
/// parsing module decodes: the one list of advertisement-monitor patterns
/// for "everything decodable" (``decodable(serviceDataUUIDs:companyIDs:localNamePrefixes:)``).
///
/// A monitor pattern compares bytes at a fixed place of one AD structure
/// (see `AdvertisementPattern`), so each format is named by what sits at
/// the start of its data: the 16-bit service-data UUID (AD type 0x16) or
/// the company id (AD type 0xFF), both little-endian, or the start of the
/// Complete Local Name (AD type 0x09) for devices identified only by name.
///
/// Passive scanning sends no scan requests, so it never sees scan
/// responses: a device that puts its sensor data (or the name matched
/// here) only in its scan response stays invisible to it, whatever the
/// patterns. Active scanning (discovery) has no such gap.
public enum PassiveScanPatterns {
    /// Service data UUIDs the decoders read, with what sends them.
    public static let serviceDataUUIDs: [UInt16: String] = {
        var uuids: [UInt16: String] = [
            BTHome.uuidV2: "BTHome v2 (0xFCD2)",
            BTHome.uuidV1: "BTHome v1 (0x181C)",
            BTHome.uuidV1Encrypted: "BTHome v1, encrypted (0x181E)",
            MiBeacon.uuid: "Xiaomi MiBeacon (0xFE95)",
            ATCThermometer.uuid: "pvvx / ATC thermometer firmware (0x181A, Environmental Sensing)",
            Eddystone.uuid: "Eddystone (0xFEAA)",
            Qingping.uuid: "Qingping (0xFDCD)",
        ]
        // 0xFD3D, and 0x0D00 on old firmware.
        for uuid in SwitchBot.serviceUUIDs { uuids[uuid] = "SwitchBot (0x\(String(uuid, radix: 16, uppercase: true)))" }
        return uuids
    }()

    /// Company ids (manufacturer data) the decoders read, with what sends them.
    public static let companyIDs: [UInt16: String] = {
        var ids: [UInt16: String] = [
            Ruuvi.companyID: "Ruuvi (0x0499)",
            IBeacon.companyID: "Apple, for iBeacon (0x004C)",
            SwitchBot.companyID: "SwitchBot (0x0969)",
            // Inkbird IBS-TH2/ITH models with a fixed company id; the others
            // put the temperature where the company id belongs (see names).
            0x2449: "Inkbird, fixed-id models (0x2449)",
        ]
        for id in Govee.companyIDs { ids[id] = "Govee thermometers (0x\(String(id, radix: 16, uppercase: true)))" }
        return ids
    }()

    /// Local-name starts for devices recognised only by name (compared as
    /// bytes: case matters, so the spelling the devices use).
    public static let localNamePrefixes: [String: String] = [
        "sps": "Inkbird IBS-TH1 (temperature in the company-id field)",
        "tps": "Inkbird IBS-TH2 (temperature in the company-id field)",
        "iBBQ": "Inkbird BBQ thermometers",
        "xBBQ": "Inkbird BBQ thermometers (rebranded)",
    ]

    /// Patterns for everything decodable, plus `serviceDataUUIDs`,
    /// `companyIDs` and `localNamePrefixes` given (formats a caller decodes
    /// itself). The registration splits them into monitors of at most 16
    /// patterns (the kernel's limit).
    public static func decodable(serviceDataUUIDs extraUUIDs: Set<UInt16> = [], companyIDs extraCompanies: Set<UInt16> = [],
                                 localNamePrefixes extraNames: Set<String> = []) -> [AdvertisementPattern] {
        AdvertisementPattern.matching(serviceDataUUIDs: Set(serviceDataUUIDs.keys).union(extraUUIDs),
                                      companyIDs: Set(companyIDs.keys).union(extraCompanies),
                                      localNamePrefixes: Array(Set(localNamePrefixes.keys).union(extraNames)))
    }
}
