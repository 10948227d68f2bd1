import Vocabulary

/// Devices whose clock the host sets (docs/PROFILES.md, "Time sync"): the
/// time written for a moment, and the moment a value read back says, for
/// each way of doing it. Pure: the caller gives the host's time and UTC
/// offset; no clock is read here.
///
/// - Current Time Service (service 0x1805, characteristic 0x2A2B, Exact
///   Time 256 + Adjust Reason, 10 bytes, *local* time): year uint16, month,
///   day, hours, minutes, seconds, day of week (1 = Monday … 7 = Sunday),
///   fractions of 1/256 s, adjust reason (bit 0: manual update). Written with
///   response.
/// - Xiaomi LYWSD02-style clocks (service ebe0ccb0-7a0a-4b0c-8a1a-6ff2997da3a6,
///   characteristic ebe0ccb7-…): Unix time uint32 LE (UTC) and the UTC
///   offset in whole hours, sint8. Read back in the same form; written without
///   response.
/// - pvvx/ATC custom thermometer firmware (service 0x1F10, characteristic
///   0x1F1F): command 0x23 and Unix time uint32 LE; written without response;
///   the time cannot be read back.
public enum ClockProtocol: String, CaseIterable, Sendable, Equatable {
    case currentTime = "cts"
    case lywsd02
    case pvvx

    public var service: BluetoothUUID {
        switch self {
        case .currentTime: return BluetoothUUID(uuid16: 0x1805)
        case .lywsd02: return Self.lywsd02Service
        case .pvvx: return BluetoothUUID(uuid16: 0x1F10)
        }
    }

    public var characteristic: BluetoothUUID {
        switch self {
        case .currentTime: return BluetoothUUID(uuid16: 0x2A2B)
        case .lywsd02: return Self.lywsd02Time
        case .pvvx: return BluetoothUUID(uuid16: 0x1F1F)
        }
    }

    static let lywsd02Service = BluetoothUUID(high: 0xEBE0_CCB0_7A0A_4B0C, low: 0x8A1A_6FF2_997D_A3A6)
    static let lywsd02Time = BluetoothUUID(high: 0xEBE0_CCB7_7A0A_4B0C, low: 0x8A1A_6FF2_997D_A3A6)

    public var withResponse: Bool { self == .currentTime }

    /// Whether the device's time can be read back (the drift measured).
    public var readable: Bool { self != .pvvx }

    public var label: String {
        switch self {
        case .currentTime: return "Current Time Service"
        case .lywsd02: return "LYWSD02-style clock"
        case .pvvx: return "pvvx custom firmware"
        }
    }

    /// The first protocol whose characteristic the device offers, by the
    /// (service, characteristic) UUID pairs of its GATT tree.
    public static func detect(in characteristics: [(service: BluetoothUUID, characteristic: BluetoothUUID)]) -> ClockProtocol? {
        allCases.first { p in characteristics.contains { $0.service == p.service && $0.characteristic == p.characteristic } }
    }

    /// The bytes that set the clock to `seconds` since the Unix epoch (UTC),
    /// `fraction` of a second later; `utcOffset`: the host's offset from UTC
    /// in seconds (local time = UTC + offset). nil when the protocol cannot
    /// carry that moment (years outside 1582…9999 for CTS, times outside
    /// 0…2³²−1 s for the Unix-time clocks).
    public func encode(seconds: Int64, fraction: Double = 0, utcOffset: Int) -> [UInt8]? {
        switch self {
        case .currentTime:
            let local = seconds + Int64(utcOffset)
            let c = CivilTime(secondsSinceEpoch: local)
            guard (1582...9999).contains(c.year) else { return nil }
            let f = UInt8(clamping: Int(max(0, min(0.999, fraction)) * 256))
            return [UInt8(truncatingIfNeeded: c.year), UInt8(truncatingIfNeeded: c.year >> 8), UInt8(c.month), UInt8(c.day),
                    UInt8(c.hour), UInt8(c.minute), UInt8(c.second), UInt8(c.weekday), f, 0x01]
        case .lywsd02:
            guard let t = UInt32(exactly: seconds) else { return nil }
            let hours = Int8(clamping: utcOffset / 3600)
            return Self.le32(t) + [UInt8(bitPattern: hours)]
        case .pvvx:
            guard let t = UInt32(exactly: seconds) else { return nil }
            return [0x23] + Self.le32(t)
        }
    }

    /// The moment a value read from the device says, in seconds since the
    /// Unix epoch (UTC; CTS's local time made UTC with `utcOffset`).
    public func decode(_ value: [UInt8], utcOffset: Int) throws(DecodeError) -> Double {
        var r = ByteReader(value, context: label)
        switch self {
        case .currentTime:
            let year = try r.u16("year")
            let month = try r.u8("month"), day = try r.u8("day")
            let hour = try r.u8("hours"), minute = try r.u8("minutes"), second = try r.u8("seconds")
            _ = try r.u8("day of week")
            let fraction = try r.u8("fractions256")
            // Adjust Reason may follow (the 10-byte Current Time); Exact Time 256 alone is 9.
            if r.remaining > 0 { _ = try r.u8("adjust reason") }
            guard (1582...9999).contains(Int(year)), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60 else {
                throw DecodeError.invalidValue(context: label, offset: 0, expected: "a date and time",
                                               found: "\(year)-\(month)-\(day) \(hour):\(minute):\(second)")
            }
            let local = CivilTime.seconds(year: Int(year), month: Int(month), day: Int(day), hour: Int(hour), minute: Int(minute), second: Int(second))
            return Double(local - Int64(utcOffset)) + Double(fraction) / 256
        case .lywsd02:
            let t = try r.u32("unix time")
            if r.remaining > 0 { _ = try r.i8("UTC offset") }
            return Double(t)
        case .pvvx:
            throw DecodeError(kind: .unsupported, context: label, offset: nil, expected: "a readable clock",
                              found: "pvvx firmware does not report its time")
        }
    }

    static func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: v >> (8 * UInt32($0))) } }
}

/// A proleptic Gregorian date and time from seconds since the Unix epoch,
/// and back (the days-from-civil arithmetic of the Gregorian calendar's 400-year cycle).
struct CivilTime: Equatable {
    var year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int
    /// 1 = Monday … 7 = Sunday (as the Day of Week characteristic counts).
    var weekday: Int

    init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, weekday: Int) {
        (self.year, self.month, self.day, self.hour, self.minute, self.second, self.weekday) = (year, month, day, hour, minute, second, weekday)
    }

    init(secondsSinceEpoch t: Int64) {
        let days = Int(t >= 0 ? t / 86_400 : (t - 86_399) / 86_400)
        let rest = Int(t - Int64(days) * 86_400)
        hour = rest / 3600
        minute = rest % 3600 / 60
        second = rest % 60
        // 1970-01-01 was a Thursday (4).
        weekday = ((days % 7) + 7 + 3) % 7 + 1
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        day = doy - (153 * mp + 2) / 5 + 1
        month = mp < 10 ? mp + 3 : mp - 9
        year = yoe + era * 400 + (month <= 2 ? 1 : 0)
    }

    static func seconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }
}
