import Vocabulary
/// Names from the Bluetooth SIG Assigned Numbers document.
///
/// The tables live in `AssignedNumbers+Generated.swift`, produced by
/// `scripts/gen-assigned-numbers` from the SIG's public YAML files; this file
/// is the stable public API over them.
public enum AssignedNumbers {
    /// Service name for a SIG 16-bit service UUID, falling back to the
    /// member-UUID table (0xFCxx-0xFExx, e.g. 0xFE95 "Xiaomi Inc.").
    public static func serviceName(_ uuid: UInt16) -> String? {
        if let s = generatedServiceName(uuid) { return "\(s)" }
        if let s = generatedMemberServiceName(uuid) { return "\(s)" }
        return nil
    }

    public static func characteristicName(_ uuid: UInt16) -> String? {
        generatedCharacteristicName(uuid).map { "\($0)" }
    }

    public static func descriptorName(_ uuid: UInt16) -> String? {
        generatedDescriptorName(uuid).map { "\($0)" }
    }

    /// Member the 16-bit UUID is assigned to (member_uuids.yaml).
    public static func memberName(_ uuid: UInt16) -> String? {
        generatedMemberServiceName(uuid).map { "\($0)" }
    }

    /// Company name for a company identifier (manufacturer specific data).
    public static func companyName(_ id: UInt16) -> String? {
        generatedCompanyName(id).map { "\($0)" }
    }

    /// Unit name for a unit UUID (0x27xx), e.g. "thermodynamic temperature (degree Celsius)".
    public static func unitName(_ uuid: UInt16) -> String? {
        generatedUnitName(uuid).map { "\($0)" }
    }

    /// Name of a service, characteristic or descriptor by UUID (16-bit SIG UUIDs only).
    public static func name(for uuid: BluetoothUUID) -> String? {
        guard let short = uuid.uuid16 else { return nil }
        return characteristicName(short) ?? serviceName(short) ?? descriptorName(short)
    }

    /// The category (upper 10 bits) and subcategory (lower 6 bits) names of
    /// an Appearance value. `subcategory` is nil for "generic" (0) and unknown
    /// subcategories; `category` is nil for unassigned categories.
    public static func appearance(_ value: UInt16) -> (category: String?, subcategory: String?) {
        let category = generatedAppearanceCategoryName(value >> 6).map { "\($0)" }
        let sub = generatedAppearanceSubcategoryName(value).map { "\($0)" }
        return (category, sub)
    }
}
