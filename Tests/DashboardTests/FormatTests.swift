import Foundation
import Testing
@testable import Dashboard

/// `Format.number` writes digits itself (no Foundation formatter per row and
/// frame); it must say what "%.Nf" with trailing zeros removed says, except
/// that a negative value that rounds to zero is "0", not "-0". (The
/// formatter version also cut an integer's zeros with no decimals:
/// 78250.3 was "7825".)
@Suite struct FormatTests {
    static func reference(_ v: Double, _ decimals: Int) -> String {
        guard v.isFinite else { return "–" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        var s = String(format: "%.\(decimals)f", v)
        while s.contains("."), s.hasSuffix("0") { s.removeLast() }
        if s.hasSuffix(".") { s.removeLast() }
        return s == "-0" ? "0" : s
    }

    @Test func numbersMatchPrintfWithTrailingZerosRemoved() {
        var generator = SystemRandomNumberGenerator()
        var values: [Double] = [0.15, 0.25, 0.35, 1.005, 2.675, 21.45, -0.05, -0.04, -0.5, 0.5, 1e14 + 0.5, 123456.789,
                                -40.25, 1013.65, 0.000_4, -0.000_4, 9.995, 99.95, .nan, .infinity, -.infinity, 1e20 + 1]
        for k in -3_000...3_000 { values.append(Double(k) / 100 + 0.005) }
        for _ in 0..<20_000 { values.append(Double.random(in: -100_000...100_000, using: &generator)) }
        for v in values {
            for decimals in 0...3 {
                #expect(Format.number(v, decimals: decimals) == Self.reference(v, decimals), "\(v) with \(decimals) decimals")
            }
        }
    }

    @Test func headlineShowsUpToThreeNumericMajorReadings() {
        #expect(Format.headline([
            .init(.battery, 90, unit: "%"), .init(.temperature, 21.46, unit: "°C"), .init(.humidity, 45, unit: "%"),
            .init(.pressure, 1013.62, unit: "hPa"), .init(.co2, 800, unit: "ppm"),
        ]) == "21.5 °C 45 % 1013.6 hPa")
        #expect(Format.headline([.init(.temperature, 20, unit: "")]) == "20")
        #expect(Format.headline([]) == "")
    }
}
