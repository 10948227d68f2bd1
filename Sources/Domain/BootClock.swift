import Foundation

/// Seconds since the machine booted, suspended time included
/// (`CLOCK_BOOTTIME`). Unlike the wall clock it does not jump when NTP or an
/// operator sets the time, so durations measured with it — how long ago a
/// device was heard — stay true across such a jump. A Raspberry Pi without a
/// real-time clock boots with `fake-hwclock`'s time and is corrected minutes
/// later, often by days.
public enum BootClock {
    public static func seconds() -> TimeInterval {
        var t = timespec()
        // Cannot fail for CLOCK_BOOTTIME on Linux ≥ 2.6.39 with a valid pointer.
        _ = clock_gettime(CLOCK_BOOTTIME, &t)
        return TimeInterval(t.tv_sec) + TimeInterval(t.tv_nsec) / 1e9
    }
}
