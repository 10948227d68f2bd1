import Bounds
import Testing

@Suite struct BoundsTests {
    static let hostile: [Double] = [1e16, 1e19, 1e20, -1e20, .infinity, -.infinity, .nan, .greatestFiniteMagnitude, -5, 315_576_000.5]

    @Test func intervalsRefuseWhatWouldTrapAndNameTheValue() {
        for value in Self.hostile {
            guard case let .failure(problem) = Bounds.interval(value) else {
                Issue.record("\(value) accepted as an interval")
                continue
            }
            #expect(problem.description.hasPrefix("expected a number of seconds"), "\(problem)")
        }
        #expect(Bounds.interval(0) == .success(0))
        #expect(Bounds.interval(0, exclusive: true) != .success(0))
        #expect(Bounds.interval(315_576_000) == .success(315_576_000), "10 years is the documented maximum")
        #expect(Bounds.interval(2.5, minimum: 1) == .success(2.5))
        if case let .failure(problem) = Bounds.interval(1e16) {
            #expect(problem.description == "expected a number of seconds ≥ 0 and at most 315576000 (10 years), got 1e+16")
        }
        if case let .failure(problem) = Bounds.interval(-5, minimum: 0, exclusive: true) {
            #expect(problem.description == "expected a number of seconds > 0, got -5")
        }
    }

    @Test func unixTimesStayWithinFourDigitYears() {
        for value in Self.hostile + [253_402_300_800, -1] where !(0...253_402_300_799).contains(value) {
            if case .success = Bounds.unixTime(value) { Issue.record("\(value) accepted as a time") }
        }
        #expect(Bounds.unixTime(0) == .success(0))
        #expect(Bounds.unixTime(1_795_000_000) == .success(1_795_000_000))
        #expect(Bounds.unixTime(253_402_300_799) == .success(253_402_300_799))
    }

    @Test func internalConversionsClampInsteadOfTrapping() {
        #expect(Bounds.duration(seconds: .nan) == .zero)
        #expect(Bounds.duration(seconds: -3) == .zero)
        #expect(Bounds.duration(seconds: .infinity) == .seconds(315_576_000))
        #expect(Bounds.duration(seconds: 1e300) == .seconds(315_576_000))
        #expect(Bounds.duration(seconds: 1.5) == .milliseconds(1500))
        #expect(Bounds.wholeUnixSeconds(1e20) == 253_402_300_799)
        #expect(Bounds.wholeUnixSeconds(.nan) == 0)
        #expect(Bounds.wholeUnixSeconds(-1e20) == 0)
        #expect(Bounds.wholeUnixSeconds(1_795_000_000.9) == 1_795_000_000)
    }
}
