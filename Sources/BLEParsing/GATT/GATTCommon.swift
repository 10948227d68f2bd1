/// Shared sub-structures of the GATT Specification Supplement.
enum GATTCommon {
    /// Date Time (7 bytes: uint16 year, uint8 month, day, hours, minutes,
    /// seconds). A fully known date becomes "YYYY-MM-DDTHH:MM:SS"; a date with
    /// unknown (0) year/month/day becomes an object with those members.
    static func dateTime(_ r: inout ByteReader, _ field: String = "date time") throws(DecodeError) -> FieldValue {
        let start = r.offset
        try r.require(7, for: "\(field) (7-byte Date Time)")
        let year = try r.u16("year")
        let month = try r.u8("month")
        let day = try r.u8("day")
        let hours = try r.u8("hours")
        let minutes = try r.u8("minutes")
        let seconds = try r.u8("seconds")
        if year != 0 && (year < 1582 || year > 9999) {
            throw r.invalid(expected: "\(field) year 1582...9999 or 0 (unknown)", found: "\(year)", at: start)
        }
        if month > 12 { throw r.invalid(expected: "\(field) month 1...12 or 0 (unknown)", found: "\(month)", at: start + 2) }
        if day > 31 { throw r.invalid(expected: "\(field) day 1...31 or 0 (unknown)", found: "\(day)", at: start + 3) }
        if hours > 23 { throw r.invalid(expected: "\(field) hours 0...23", found: "\(hours)", at: start + 4) }
        if minutes > 59 { throw r.invalid(expected: "\(field) minutes 0...59", found: "\(minutes)", at: start + 5) }
        if seconds > 59 { throw r.invalid(expected: "\(field) seconds 0...59", found: "\(seconds)", at: start + 6) }
        if year != 0 && month != 0 && day != 0 {
            // "YYYY-MM-DDTHH:MM:SS" built from digits (no intermediate strings).
            var out = [UInt8](repeating: 0, count: 19)
            func put(_ v: Int, _ at: Int, _ width: Int) {
                var v = v
                for i in stride(from: at + width - 1, through: at, by: -1) {
                    out[i] = UInt8(ascii: "0") + UInt8(v % 10)
                    v /= 10
                }
            }
            put(Int(year), 0, 4); out[4] = UInt8(ascii: "-")
            put(Int(month), 5, 2); out[7] = UInt8(ascii: "-")
            put(Int(day), 8, 2); out[10] = UInt8(ascii: "T")
            put(Int(hours), 11, 2); out[13] = UInt8(ascii: ":")
            put(Int(minutes), 14, 2); out[16] = UInt8(ascii: ":")
            put(Int(seconds), 17, 2)
            return .string(String(decoding: out, as: UTF8.self))
        }
        return .nested([
            ("year", year == 0 ? .null : .int(Int(year))),
            ("month", month == 0 ? .null : .int(Int(month))),
            ("day", day == 0 ? .null : .int(Int(day))),
            ("hours", .int(Int(hours))), ("minutes", .int(Int(minutes))), ("seconds", .int(Int(seconds))),
        ])
    }

    /// Day of Week: 0 unknown, 1 Monday ... 7 Sunday.
    static func dayOfWeek(_ v: UInt8) -> FieldValue {
        let names = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
        if v == 0 { return .null }
        if v <= 7 { return .string(names[Int(v) - 1]) }
        return .string("reserved_\(v)")
    }

    /// The names of the set bits of `value`, using `names[bit]` (nil = reserved, skipped).
    static func setBits(_ value: UInt64, _ names: [String?]) -> FieldValue {
        var out: [FieldValue] = []
        for (bit, name) in names.enumerated() where value & (1 << UInt64(bit)) != 0 {
            if let name { out.append(.string(name)) }
        }
        return .list(out)
    }

    /// An enumeration value embedded in a measurement.
    static func enumName(_ v: Int, _ names: [Int: String]) -> FieldValue {
        .string(names[v] ?? "reserved_\(v)")
    }
}

extension UInt16 {
    @inline(__always) func bit(_ n: Int) -> Bool { self & (1 << UInt16(n)) != 0 }
}
extension UInt8 {
    @inline(__always) func bit(_ n: Int) -> Bool { self & (1 << UInt8(n)) != 0 }
}
extension UInt32 {
    @inline(__always) func bit(_ n: Int) -> Bool { self & (1 << UInt32(n)) != 0 }
}
