import Testing
import TestSupport
import Vocabulary
@testable import BLEParsing

typealias L = FieldLayout

private func bytes(_ hex: String) -> [UInt8] { (try? Hex.bytes(hex)) ?? [] }

@Suite("Layout language (profiles)")
struct LayoutTests {
    @Test("a RuuviTag RAWv2 layout gives the built-in decoder's readings")
    func ruuviEquivalence() throws {
        let layout = try #require(FieldLayout.ruuviRAWv2)
        // Ruuvi's format 5 test vector: the same readings, bit for bit.
        let vector = bytes("0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F")
        #expect(layout.readings(try layout.decode(vector)) == (try Ruuvi.decode(vector).readings))
        // Random frames without "not available" sentinels (a profile has none): the same kinds, units
        // and labels, values equal to the decoder's last decimal (acceleration is g × 9.80665 there and
        // raw × 0.00980665 here: a tie at the sixth decimal may round either way).
        var rng = SeededGenerator(seed: 0x5255_5656)
        for _ in 0..<2000 {
            var frame = (0..<24).map { _ in UInt8.random(in: 0...255, using: &rng) }
            frame[0] = 5
            if frame[1] == 0x80, frame[2] == 0 { frame[2] = 1 }
            for k in [3, 5, 16] where frame[k] == 0xFF && frame[k + 1] == 0xFF { frame[k + 1] = 0 }
            for k in [7, 9, 11] where frame[k] == 0x80 && frame[k + 1] == 0 { frame[k + 1] = 1 }
            if frame[13] == 0xFF, frame[14] >= 0xE0 { frame[13] = 0 }
            if frame[14] & 0x1F == 0x1F { frame[14] &= 0xE0 }
            if frame[15] == 0xFF { frame[15] = 0 }
            let builtIn = try Ruuvi.decode(frame).readings
            let profile = layout.readings(try layout.decode(frame))
            #expect(profile.count == builtIn.count, "\(Hex.string(frame))")
            for (p, b) in zip(profile, builtIn) {
                #expect(p.kind == b.kind && p.unit == b.unit && p.label == b.label)
                #expect(abs((p.value.number ?? .nan) - (b.value.number ?? 0)) <= 1.000001e-6, "\(p) vs \(b) in \(Hex.string(frame))")
            }
        }
    }

    @Test("encode(decode(b)) == b for valid bytes of every kind of field")
    func roundTrip() throws {
        let layout = try L(fields: [
            .init(name: "u8", offset: 0, encoding: .unsigned(bytes: 1, .little)),
            .init(name: "s16be", offset: 1, encoding: .signed(bytes: 2, .big)),
            .init(name: "u24", offset: 3, encoding: .unsigned(bytes: 3, .little), scale: 0.01, decimals: 2),
            .init(name: "flags_low", offset: 6, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 0, width: 3), values: [1: "on", 2: "auto"]),
            .init(name: "flag_high", offset: 6, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 7, width: 1)),
            .init(name: "nibble", offset: 6, encoding: .signed(bytes: 1, .little), bits: .init(shift: 3, width: 4)),
            .init(name: "f16", offset: 7, encoding: .float(bytes: 2, .little)),
            .init(name: "f32", offset: 9, encoding: .float(bytes: 4, .big)),
            .init(name: "f64", offset: 13, encoding: .float(bytes: 8, .little)),
            .init(name: "s64", offset: 21, encoding: .signed(bytes: 8, .little)),
            .init(name: "u64", offset: 29, encoding: .unsigned(bytes: 8, .big)),
            .init(name: "name", offset: 37, encoding: .string(bytes: 6)),
            .init(name: "triple", offset: 43, encoding: .signed(bytes: 2, .little), scale: 0.5, add: -10, count: .fixed(3), decimals: 1),
            .init(name: "samples", offset: 49, encoding: .unsigned(bytes: 2, .little), count: .rest),
        ])
        var rng = SeededGenerator(seed: 0x1A_E0)
        var checked = 0
        for round in 0..<3000 {
            var b = (0..<(49 + 2 * (round % 5))).map { _ in UInt8.random(in: 0...255, using: &rng) }
            // Valid: no NaN floats, text padded with zeros.
            if b[8] & 0x7C == 0x7C { b[8] &= 0x83 }
            if b[9] & 0x7F == 0x7F, b[10] & 0x80 != 0 { b[9] &= 0x3F }
            if b[20] & 0x7F == 0x7F, b[19] & 0xF0 == 0xF0 { b[20] &= 0x3F }
            let textLength = Int(b[37] % 7)
            for k in 0..<6 { b[37 + k] = k < textLength ? UInt8(ascii: "a") + UInt8(k) : 0 }
            let decoded = try layout.decode(b)
            let values = Dictionary(uniqueKeysWithValues: decoded.map { ($0.name, $0.value) })
            let encoded = try layout.encode(values)
            #expect(encoded == b, "round \(round): \(Hex.string(b)) -> \(Hex.string(encoded))")
            checked += 1
        }
        #expect(checked == 3000)
    }

    @Test("the readings-only path gives decode's readings, and fails where decode fails")
    func readingsOnlyPathAgrees() throws {
        let layout = try L(fields: [
            .init(name: "mode", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 0, width: 2),
                  values: [0: "off", 1: "heat"], reading: .button),
            .init(name: "alarm", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 2, width: 1), reading: .problem),
            .init(name: "delta", offset: 0, encoding: .signed(bytes: 1, .little), bits: .init(shift: 3, width: 5), reading: .count, label: "delta"),
            .init(name: "t", offset: 1, encoding: .signed(bytes: 2, .big), scale: 0.01, add: -5, reading: .temperature, decimals: 2),
            .init(name: "p", offset: 3, encoding: .float(bytes: 4, .little), reading: .pressure, unit: "Pa"),
            .init(name: "label", offset: 7, encoding: .string(bytes: 4)),
            .init(name: "h", offset: 11, encoding: .float(bytes: 2, .big), reading: .humidity),
            .init(name: "probes", offset: 13, encoding: .unsigned(bytes: 2, .little), scale: 0.1, count: .fixed(2),
                  reading: .temperature, label: "probe", decimals: 1),
            .init(name: "tail", offset: 17, encoding: .unsigned(bytes: 1, .little), count: .rest, reading: .count),
        ])
        var rng = SeededGenerator(seed: 0xFA57)
        var agreed = 0, failedBoth = 0
        for round in 0..<4000 {
            var b = (0..<(15 + round % 6)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            // Every other round, text that is UTF-8 (random bytes rarely are).
            if round % 2 == 0 { for k in 7..<11 { b[k] = UInt8(ascii: "a") + b[k] % 26 } }
            let slow: Result<[Reading], DecodeError> = Result { () throws(DecodeError) in try layout.readings(layout.decode(b)) }
            let fast: Result<[Reading], DecodeError> = Result { () throws(DecodeError) in try layout.readings(of: b) }
            switch (slow, fast) {
            case let (.success(x), .success(y)):
                #expect(x == y, "\(Hex.string(b))")
                agreed += 1
            case let (.failure(x), .failure(y)):
                #expect(x == y, "\(Hex.string(b))")
                failedBoth += 1
            default:
                Issue.record("\(Hex.string(b)): decode \(slow), readings(of:) \(fast)")
            }
        }
        // Both outcomes were exercised: short data and invalid text fail, the rest decode.
        #expect(agreed > 500 && failedBoth > 500, "\(agreed) agreed, \(failedBoth) failed both")
    }

    @Test("bit fields share an integer; values are placed and read back in their bits")
    func bitFields() throws {
        let layout = try L(fields: [
            .init(name: "mode", offset: 0, encoding: .unsigned(bytes: 2, .little), bits: .init(shift: 0, width: 4), values: [3: "eco"]),
            .init(name: "level", offset: 0, encoding: .unsigned(bytes: 2, .little), bits: .init(shift: 4, width: 10), reading: .count),
            .init(name: "alarm", offset: 0, encoding: .unsigned(bytes: 2, .little), bits: .init(shift: 15, width: 1), reading: .problem),
        ])
        let b = try layout.encode(["mode": .text("eco"), "level": .unsigned(700), "alarm": .unsigned(1)])
        // 3 | 700 << 4 | 1 << 15 = 0xABC3, little-endian.
        #expect(b == [0xC3, 0xAB])
        let decoded = try layout.decode(b)
        #expect(decoded.map(\.value) == [.text("eco"), .unsigned(700), .unsigned(1)])
        #expect(layout.readings(decoded) == [Reading(.count, 700), Reading(.problem, true)])
    }

    @Test("a value that does not fit its field is refused, naming the field and its range")
    func encodeRange() throws {
        let layout = try L(fields: [
            .init(name: "level", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 0, width: 4)),
            .init(name: "t", offset: 1, encoding: .signed(bytes: 2, .little), scale: 0.01, reading: .temperature, decimals: 2),
            .init(name: "mode", offset: 3, encoding: .unsigned(bytes: 1, .little), values: [0: "off", 1: "on"]),
        ])
        func problem(_ values: [String: L.Value]) -> String? {
            do { _ = try layout.encode(values); return nil } catch { return error.description }
        }
        let ok: [String: L.Value] = ["level": .unsigned(15), "t": .number(-12.5), "mode": .text("on")]
        #expect(problem(ok) == nil)
        #expect(try layout.encode(ok) == [0x0F, 0x1E, 0xFB, 0x01])
        #expect(problem(ok.merging(["level": .unsigned(16)]) { $1 }) == "field \"level\": 16 does not fit 4 bits: 0…15")
        #expect(problem(ok.merging(["t": .number(400)]) { $1 })?.contains("field \"t\": 40000 does not fit 16 bits: -32768...32767") == true)
        #expect(problem(ok.merging(["mode": .text("auto")]) { $1 }) == "field \"mode\": \"auto\" is not one of its values (off, on)")
        #expect(problem(["level": .unsigned(1), "t": .number(1)]) == "field \"mode\": no value given")
        #expect(problem(ok.merging(["t": .text("warm")]) { $1 }) == "field \"t\": expected a number")
    }

    @Test("bad layouts are refused with the field and the reason", arguments: [
        ([.init(name: "huge", offset: 0, encoding: .string(bytes: 65_535), count: .fixed(4096))], "past the 65536 bytes"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 2, .little)),
          L.Field(name: "b", offset: 1, encoding: .unsigned(bytes: 1, .little))], "field \"b\": overlaps field \"a\" (bytes 0…1)"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 0, width: 4)),
          L.Field(name: "b", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 3, width: 2))], "field \"b\": overlaps field \"a\""),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 1, .little), bits: .init(shift: 6, width: 4))], "bits 6…9 are outside its 8-bit integer"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 9, .little))], "an integer is 1 to 8 bytes, not 9"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 8, .little), scale: 0.1)], "a scaled integer is at most 6 bytes"),
        ([L.Field(name: "a", offset: 0, encoding: .float(bytes: 4, .little), values: [1: "x"])], "values (an enumeration) apply to integers only"),
        ([L.Field(name: "a", offset: 0, encoding: .float(bytes: 3, .little))], "a float is 2, 4 or 8 bytes, not 3"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 1, .little)),
          L.Field(name: "a", offset: 1, encoding: .unsigned(bytes: 1, .little))], "field \"a\": a second field with this name"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 1, .little), count: .rest),
          L.Field(name: "b", offset: 1, encoding: .unsigned(bytes: 1, .little))], "it runs to the end of the data, so it must come after every other field"),
        ([L.Field(name: "a", offset: 0, encoding: .signed(bytes: 2, .little), scale: 0.005, decimals: 2)], "2 decimals are too few for a scale of 0.005"),
        ([L.Field(name: "a", offset: 0, encoding: .unsigned(bytes: 1, .little), scale: 0)], "scale must be a finite non-zero number"),
    ])
    func badLayouts(_ fields: [L.Field], _ message: String) {
        do {
            _ = try L(fields: fields)
            Issue.record("accepted: \(message)")
        } catch {
            #expect(error.description.contains(message), "\(error.description)")
        }
    }

    @Test("data shorter or longer than the layout, or not whole elements, is a decode error naming it")
    func decodeErrors() throws {
        let layout = try L(fields: [
            .init(name: "a", offset: 0, encoding: .unsigned(bytes: 2, .little)),
            .init(name: "rest", offset: 2, encoding: .unsigned(bytes: 2, .little), count: .rest),
        ])
        #expect(throws: DecodeError.self) { try layout.decode([1]) }
        do { _ = try layout.decode([1, 2, 3]) } catch { #expect(error.description.contains("whole 2-byte elements of rest")) }
        #expect(try layout.decode([1, 0, 2, 0, 3, 0]).last?.value == .list([.unsigned(2), .unsigned(3)]))
        let fixed = try L(fields: [.init(name: "a", offset: 0, encoding: .unsigned(bytes: 1, .little))])
        #expect(throws: DecodeError.self) { try fixed.decode([1, 2]) }
        let text = try L(fields: [.init(name: "s", offset: 0, encoding: .string(bytes: nil))])
        #expect(throws: DecodeError.self) { try text.decode([0xC3, 0x28]) }  // not UTF-8
        #expect(try text.decode(Array("Grow".utf8)).first?.value == .text("Grow"))
    }

    @Test("half-precision floats read and write exactly")
    func halfFloats() {
        for (bits, value) in [(UInt16(0x3C00), 1.0), (0xC000, -2.0), (0x7BFF, 65504.0), (0x0001, 0x1p-24), (0x0400, 0x1p-14), (0x8000, -0.0),
                              (0x7C00, Double.infinity), (0x3555, 0.333251953125)] {
            #expect(FieldLayout.halfToDouble(bits) == value)
            #expect(FieldLayout.doubleToHalf(value) == bits)
        }
        #expect(FieldLayout.doubleToHalf(0.1) == nil)
        #expect(FieldLayout.doubleToHalf(70000) == nil)
    }
}

