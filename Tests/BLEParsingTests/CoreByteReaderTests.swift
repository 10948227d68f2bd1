import Testing

@testable import BLEParsing
import Vocabulary

@Suite("ByteReader")
struct CoreByteReaderTests {
    @Test func littleEndianIntegers() throws {
        var r = ByteReader([0x01, 0x34, 0x12, 0xFE, 0xFF, 0x56, 0x34, 0x12, 0xFF, 0xFF, 0xFF], context: "t")
        #expect(try r.u8() == 0x01)
        #expect(try r.u16() == 0x1234)
        #expect(try r.i16() == -2)
        #expect(try r.u24() == 0x123456)
        #expect(try r.i24() == -1)
        #expect(r.isAtEnd)
        #expect(r.offset == 11)
    }

    @Test func widerIntegers() throws {
        let bytes: [UInt8] = [0x78, 0x56, 0x34, 0x12, 0xFF, 0xFF, 0xFF, 0x7F, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06]
        var r = ByteReader(bytes, context: "t")
        #expect(try r.u32() == 0x1234_5678)
        #expect(try r.i32() == Int32.max)
        #expect(try r.u48() == 0x0605_0403_0201)
        var r2 = ByteReader([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0, 0, 0, 0, 0, 0, 0x80], context: "t")
        #expect(try r2.i64() == -1)
        #expect(try r2.u64() == 0x8000_0000_0000_0001)
        var r3 = ByteReader([0x80, 0x7F, 0xFE, 0xFF, 0xFF], context: "t")
        #expect(try r3.i8() == -128)
        #expect(try r3.i8() == 127)
        #expect(try r3.int(size: 3) == -2)
    }

    @Test func bigEndian() throws {
        var r = ByteReader([0x12, 0x34, 0xFF, 0xFE, 0x01, 0x02, 0x03, 0x01, 0x02, 0x03, 0x04, 0x80, 0x00, 0x00, 0x00], context: "t")
        #expect(try r.u16BE() == 0x1234)
        #expect(try r.i16BE() == -2)
        #expect(try r.u24BE() == 0x010203)
        #expect(try r.u32BE() == 0x0102_0304)
        #expect(try r.i32BE() == Int32.min)
    }

    @Test func sliceOffsetsAreRelative() throws {
        let whole: [UInt8] = [0xAA, 0xBB, 0x01, 0x02]
        var r = ByteReader(whole[2...], context: "slice")
        #expect(try r.u16() == 0x0201)
        #expect(r.offset == 2)
        var r2 = ByteReader(whole[2...], context: "slice")
        _ = try r2.u8()
        #expect(throws: DecodeError.truncated(context: "slice", offset: 1, needed: 2, available: 1, what: "a uint16 value")) {
            try r2.u16()
        }
    }

    @Test func truncationMessage() {
        var r = ByteReader([0x01, 0x48], context: "heart rate measurement")
        _ = try? r.u8()
        do {
            _ = try r.u16()
            Issue.record("expected an error")
        } catch {
            #expect(error.kind == .truncated)
            #expect(error.offset == 1)
            #expect(error.description == "heart rate measurement: need 2 bytes for a uint16 value at offset 1, have 1")
        }
        var r2 = ByteReader([], context: "battery level")
        #expect(throws: DecodeError.self) { try r2.u8("battery level") }
        do {
            _ = try r2.u8("battery level")
        } catch {
            #expect(error.description == "battery level: need 1 byte for battery level (uint8) at offset 0, have 0")
        }
    }

    @Test func failedReadDoesNotAdvance() throws {
        var r = ByteReader([0x01, 0x02, 0x03], context: "t")
        #expect(throws: DecodeError.self) { try r.u32() }
        #expect(r.offset == 0)
        #expect(try r.u24() == 0x030201)
    }

    @Test func bytesRestSkipPeek() throws {
        var r = ByteReader([1, 2, 3, 4, 5], context: "t")
        #expect(r.peek() == 1)
        #expect(Array(try r.bytes(2)) == [1, 2])
        try r.skip(1)
        #expect(r.remaining == 2)
        #expect(Array(r.rest()) == [4, 5])
        #expect(r.peek() == nil)
        #expect(Array(r.rest()).isEmpty)
        #expect(throws: DecodeError.self) { try r.bytes(1) }
        #expect(throws: DecodeError.self) { try r.skip(1) }
    }

    @Test func expectEnd() throws {
        var r = ByteReader([1, 2], context: "x")
        _ = try r.u8()
        #expect(throws: DecodeError.trailingBytes(context: "x", offset: 1, extra: 1)) { try r.expectEnd() }
        _ = try r.u8()
        try r.expectEnd()
    }

    @Test func strings() throws {
        var r = ByteReader(Array("héllo".utf8) + [0, 0], context: "s")
        #expect(try r.utf8Rest() == "héllo")
        var r2 = ByteReader([0x61, 0x62, 0x63], context: "s")
        #expect(try r2.utf8(2) == "ab")
        var bad = ByteReader([0xC3, 0x28], context: "s")
        #expect(throws: DecodeError.self) { try bad.utf8Rest() }
    }

    @Test func ieee754() throws {
        var r = ByteReader([0x00, 0x00, 0xC0, 0x3F, 0x3F, 0xC0, 0x00, 0x00, 0x00, 0x3C, 0x00, 0xBC], context: "f")
        #expect(try r.f32() == 1.5)
        #expect(try r.f32BE() == 1.5)
        #expect(try r.f16() == 1.0)
        #expect(try r.f16() == -1.0)
        #expect(halfToFloat(0x7C00) == .infinity)
        #expect(halfToFloat(0x0001) == Float(5.960464477539063e-08))
        #expect(halfToFloat(0x7E00).isNaN)
    }

    @Test func bluetoothTypes() throws {
        var r = ByteReader([0x0D, 0x18, 0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA], context: "t")
        #expect(try r.uuid16() == BluetoothUUID(uuid16: 0x180D))
        #expect(try r.address().description == "AA:BB:CC:DD:EE:FF")
    }

    @Test func invalidIntegerSize() {
        var r = ByteReader([1, 2, 3], context: "t")
        #expect(throws: DecodeError.self) { try r.uint(size: 9) }
        #expect(throws: DecodeError.self) { try r.int(size: 0) }
    }
}

@Suite("IEEE 11073 SFLOAT and FLOAT")
struct CoreMedicalFloatTests {
    @Test func sfloatFinite() throws {
        // 0xF16C: exponent -1, mantissa 0x16C = 364 -> 36.4
        var r = ByteReader([0x6C, 0xF1], context: "t")
        let v = try r.sfloat()
        #expect(v == .finite(mantissa: 364, exponent: -1))
        #expect(v.doubleValue == 36.4)
        // 0x0FFF: exponent 0, mantissa -1
        #expect(MedicalFloat(sfloat: 0x0FFF).doubleValue == -1)
        // 0x7800: exponent 7, mantissa -2048
        #expect(MedicalFloat(sfloat: 0x7800) == .finite(mantissa: -2048, exponent: 7))
        #expect(MedicalFloat(sfloat: 0x7800).doubleValue == -2.048e10)
        // 0x8001: exponent -8, mantissa 1
        #expect(MedicalFloat(sfloat: 0x8001).doubleValue == 1e-8)
        #expect(MedicalFloat(sfloat: 0x0000).doubleValue == 0)
    }

    @Test func sfloatSpecials() {
        #expect(MedicalFloat(sfloat: 0x07FF) == .nan)
        #expect(MedicalFloat(sfloat: 0x0800) == .nres)
        #expect(MedicalFloat(sfloat: 0x07FE) == .positiveInfinity)
        #expect(MedicalFloat(sfloat: 0x0802) == .negativeInfinity)
        #expect(MedicalFloat(sfloat: 0x0801) == .reserved)
        #expect(MedicalFloat(sfloat: 0x07FF).doubleValue == nil)
        #expect(MedicalFloat(sfloat: 0x07FE).doubleValue == .infinity)
        #expect(MedicalFloat(sfloat: 0x0802).doubleValue == -.infinity)
        #expect(MedicalFloat(sfloat: 0x0800).specialName == "nres")
        // the same mantissa bits with a non-zero exponent are ordinary numbers
        #expect(MedicalFloat(sfloat: 0x17FF) == .finite(mantissa: 2047, exponent: 1))
        #expect(MedicalFloat(sfloat: 0xF800) == .finite(mantissa: -2048, exponent: -1))
    }

    @Test func floatFiniteAndSpecials() throws {
        var r = ByteReader([0x6C, 0x01, 0x00, 0xFF], context: "t")
        #expect(try r.medfloat32() == .finite(mantissa: 364, exponent: -1))
        #expect(MedicalFloat(float: 0x00FF_FFFF) == .finite(mantissa: -1, exponent: 0))
        #expect(MedicalFloat(float: 0x0280_0000) == .finite(mantissa: -8_388_608, exponent: 2))
        #expect(MedicalFloat(float: 0xFE00_0E42).doubleValue == 36.5)
        #expect(MedicalFloat(float: 0x007F_FFFF) == .nan)
        #expect(MedicalFloat(float: 0x0080_0000) == .nres)
        #expect(MedicalFloat(float: 0x007F_FFFE) == .positiveInfinity)
        #expect(MedicalFloat(float: 0x0080_0002) == .negativeInfinity)
        #expect(MedicalFloat(float: 0x0080_0001) == .reserved)
        #expect(MedicalFloat(float: 0x0080_0001).fieldValue == .string("reserved"))
    }

    @Test func truncatedFloat() {
        var r = ByteReader([0x6C, 0x01, 0x00], context: "temperature measurement")
        do {
            _ = try r.medfloat32("temperature")
            Issue.record("expected an error")
        } catch {
            #expect(error.description == "temperature measurement: need 4 bytes for temperature (FLOAT) at offset 0, have 3")
        }
    }

    @Test func decimalScalingIsCorrectlyRounded() {
        #expect(scaledDecimal(364, exponent: -1) == 36.4)
        #expect(scaledDecimal(2148, exponent: -2) == 21.48)
        #expect(scaledDecimal(-1234, exponent: -2) == -12.34)
        #expect(scaledDecimal(5, exponent: 3) == 5000)
        #expect(scaledDecimal(1, exponent: -30) == 1e-30)
        #expect(scaled(340, binaryExponent: -10) == 0.33203125)
        #expect(scaled(3, decimalExponent: 1, binaryExponent: 1) == 60)
    }
}
