/// Current Time Service, Device Information Service and GAP characteristics.
enum TimeDecoders {
    /// Date Time (0x2A08).
    static func dateTime(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        b.field("date_time", try GATTCommon.dateTime(&r))
    }

    /// Day Date Time (0x2A0A): Date Time + Day of Week.
    static func dayDateTime(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        b.field("date_time", try GATTCommon.dateTime(&r))
        b.field("day_of_week", GATTCommon.dayOfWeek(try r.u8("day of week")))
    }

    /// Current Time (0x2A2B): Exact Time 256 (Day Date Time + Fractions256)
    /// + Adjust Reason.
    static func currentTime(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        b.field("date_time", try GATTCommon.dateTime(&r))
        b.field("day_of_week", GATTCommon.dayOfWeek(try r.u8("day of week")))
        let fractions = try r.u8("fractions256")
        b.field("fractions256", int: fractions)
        let reason = try r.u8("adjust reason")
        b.field("adjust_reason", int: reason)
        b.field(
            "adjust_reasons",
            GATTCommon.setBits(UInt64(reason), ["manual_time_update", "external_reference_time_update", "change_of_time_zone", "change_of_dst"]))
    }
}

enum DeviceDecoders {
    /// Any UTF-8 string characteristic (Device Name and the DIS strings).
    static func string(_ field: String) -> GATTDecoder.Decode {
        { (r: inout ByteReader, b: inout GATTBuilder) throws(DecodeError) in
            b.field(field, try r.utf8Rest())
        }
    }

    /// System ID (0x2A23): uint40 Manufacturer Identifier + uint24 OUI.
    static func systemID(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let manufacturer = try r.uint(size: 5, "manufacturer identifier")
        let oui = try r.u24("organizationally unique identifier")
        b.field("manufacturer_identifier", int: manufacturer)
        b.field("oui", hexString(oui, digits: 6))
        // EUI-64: OUI (most significant) followed by the manufacturer identifier.
        let eui = UInt64(oui) << 40 | manufacturer
        b.field("eui64", hexString(eui, digits: 16))
    }

    /// PnP ID (0x2A50): vendor ID source, vendor ID, product ID, product version.
    static func pnpID(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let source = try r.u8("vendor ID source")
        let vendor = try r.u16("vendor ID")
        let product = try r.u16("product ID")
        let version = try r.u16("product version")
        switch source {
        case 1: b.field("vendor_id_source", "bluetooth_sig")
        case 2: b.field("vendor_id_source", "usb_if")
        default: throw r.reserved("vendor ID source (1 = Bluetooth SIG, 2 = USB-IF)", found: "\(source)", at: 0)
        }
        b.field("vendor_id", int: vendor)
        if source == 1, let name = AssignedNumbers.companyName(vendor) { b.field("vendor_name", name) }
        b.field("product_id", int: product)
        b.field("product_version", int: version)
        // Device ID profile convention 0xJJMN -> "JJ.M.N".
        b.field("product_version_string", "\(version >> 8).\((version >> 4) & 0xF).\(version & 0xF)")
    }

    /// Appearance (0x2A01): 10-bit category, 6-bit subcategory.
    static func appearance(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u16("appearance")
        let names = AssignedNumbers.appearance(v)
        b.field("appearance", int: v)
        b.field("category", int: v >> 6)
        b.field("subcategory", int: v & 0x3F)
        b.field("category_name", names.category.map { .string($0) } ?? .null)
        b.field("subcategory_name", names.subcategory.map { .string($0) } ?? .null)
    }

    /// Tx Power Level (0x2A07): sint8 dBm, -100...20.
    static func txPowerLevel(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.i8("tx power")
        if v < -100 || v > 20 { throw r.reserved("tx power level (-100...20 dBm)", found: "\(v)", at: 0) }
        b.field("tx_power_dbm", int: v)
        b.reading(Reading(.txPower, Double(v)))
    }

    /// Battery Level (0x2A19): uint8 0...100 %.
    static func batteryLevel(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u8("battery level")
        if v > 100 { throw r.reserved("battery level (0...100 %)", found: "\(v)", at: 0) }
        b.field("battery_percent", int: v)
        b.reading(Reading(.battery, Double(v)))
    }
}

enum DescriptorDecoders {
    /// Characteristic Extended Properties (0x2900).
    static func extendedProperties(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u16("extended properties")
        b.field("value", int: v)
        b.field("reliable_write", v.bit(0))
        b.field("writable_auxiliaries", v.bit(1))
    }

    /// Characteristic User Description (0x2901).
    static func userDescription(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        b.field("description", try r.utf8Rest())
    }

    /// Client Characteristic Configuration (0x2902).
    static func clientConfiguration(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u16("client characteristic configuration")
        b.field("value", int: v)
        b.field("notifications", v.bit(0))
        b.field("indications", v.bit(1))
    }

    /// Server Characteristic Configuration (0x2903).
    static func serverConfiguration(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let v = try r.u16("server characteristic configuration")
        b.field("value", int: v)
        b.field("broadcasts", v.bit(0))
    }

    /// Characteristic Presentation Format (0x2904).
    static func presentationFormat(_ r: inout ByteReader, _ b: inout GATTBuilder) throws(DecodeError) {
        let pf = try PresentationFormat(reading: &r)
        b.fields += pf.fields
    }
}
