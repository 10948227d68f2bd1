import Testing
import Vocabulary
@testable import BLEParsing

@Suite("Clocks the host sets (time sync)")
struct ClockTests {
    @Test("LYWSD02 time: Unix time and the UTC offset in hours, read back as written")
    func lywsd02() throws {
        // bluetooth-clocks' documented example: dd bc b9 63 00 is 2023-01-07 18:41:33 UTC.
        #expect(try ClockProtocol.lywsd02.decode([0xDD, 0xBC, 0xB9, 0x63, 0x00], utcOffset: 3600) == 1_673_116_893)
        #expect(ClockProtocol.lywsd02.encode(seconds: 1_673_116_893, utcOffset: 3600) == [0xDD, 0xBC, 0xB9, 0x63, 0x01])
        #expect(ClockProtocol.lywsd02.encode(seconds: 1_673_116_893, utcOffset: -5 * 3600) == [0xDD, 0xBC, 0xB9, 0x63, 0xFB])
        #expect(ClockProtocol.lywsd02.encode(seconds: -1, utcOffset: 0) == nil)
        #expect(throws: DecodeError.self) { try ClockProtocol.lywsd02.decode([0xDD, 0xBC], utcOffset: 0) }
    }

    @Test("Current Time: local date and time, weekday, fractions and adjust reason; decoded back to UTC")
    func currentTime() throws {
        // 2023-01-07 18:41:33.5 UTC at UTC+1 is 19:41:33 local, a Saturday (6).
        let bytes = try #require(ClockProtocol.currentTime.encode(seconds: 1_673_116_893, fraction: 0.5, utcOffset: 3600))
        #expect(bytes == [0xE7, 0x07, 1, 7, 19, 41, 33, 6, 128, 0x01])
        #expect(try ClockProtocol.currentTime.decode(bytes, utcOffset: 3600) == 1_673_116_893.5)
        // Exact Time 256 without the adjust reason (9 bytes) reads too.
        #expect(try ClockProtocol.currentTime.decode(Array(bytes.prefix(9)), utcOffset: 3600) == 1_673_116_893.5)
        #expect(throws: DecodeError.self) { try ClockProtocol.currentTime.decode([0xE7, 0x07, 13, 7, 19, 41, 33, 6, 0, 0], utcOffset: 0) }
        #expect(ClockProtocol.currentTime.encode(seconds: -20_000_000_000, utcOffset: 0) == nil)  // before 1582
    }

    @Test("pvvx: command 0x23 and Unix time, not readable")
    func pvvx() {
        #expect(ClockProtocol.pvvx.encode(seconds: 1_673_116_893, utcOffset: 7200) == [0x23, 0xDD, 0xBC, 0xB9, 0x63])
        #expect(!ClockProtocol.pvvx.readable && !ClockProtocol.pvvx.withResponse && ClockProtocol.currentTime.withResponse)
        #expect(throws: DecodeError.self) { try ClockProtocol.pvvx.decode([0x23, 0, 0, 0, 0], utcOffset: 0) }
    }

    @Test("the civil calendar: known dates, leap days, weekdays, and every day of 1900…2200 round trips")
    func civil() {
        #expect(CivilTime(secondsSinceEpoch: 0) == CivilTime(year: 1970, month: 1, day: 1, hour: 0, minute: 0, second: 0, weekday: 4))
        #expect(CivilTime(secondsSinceEpoch: 951_782_400) == CivilTime(year: 2000, month: 2, day: 29, hour: 0, minute: 0, second: 0, weekday: 2))
        #expect(CivilTime(secondsSinceEpoch: -1) == CivilTime(year: 1969, month: 12, day: 31, hour: 23, minute: 59, second: 59, weekday: 3))
        var day = CivilTime.seconds(year: 1900, month: 1, day: 1, hour: 0, minute: 0, second: 0)
        var weekday = CivilTime(secondsSinceEpoch: day).weekday
        #expect(weekday == 1)  // 1900-01-01 was a Monday
        let end = CivilTime.seconds(year: 2200, month: 12, day: 31, hour: 0, minute: 0, second: 0)
        var checked = 0
        while day <= end {
            let c = CivilTime(secondsSinceEpoch: day + 45_296)  // 12:34:56
            #expect(CivilTime.seconds(year: c.year, month: c.month, day: c.day, hour: c.hour, minute: c.minute, second: c.second) == day + 45_296)
            #expect(c.weekday == weekday && c.hour == 12 && c.minute == 34 && c.second == 56)
            weekday = weekday % 7 + 1
            day += 86_400
            checked += 1
        }
        #expect(checked == 109_938)  // Python: (date(2200, 12, 31) - date(1900, 1, 1)).days + 1
    }

    @Test("the protocol is found by its service and characteristic")
    func detect() {
        let lywsd = ClockProtocol.lywsd02
        #expect(ClockProtocol.detect(in: [(BluetoothUUID(uuid16: 0x180F), BluetoothUUID(uuid16: 0x2A19)), (lywsd.service, lywsd.characteristic)]) == .lywsd02)
        #expect(ClockProtocol.detect(in: [(BluetoothUUID(uuid16: 0x1805), BluetoothUUID(uuid16: 0x2A0F))]) == nil)
        #expect(lywsd.service.string == "ebe0ccb0-7a0a-4b0c-8a1a-6ff2997da3a6")
    }
}
