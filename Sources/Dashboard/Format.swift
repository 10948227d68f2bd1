import BLEParsing
import Domain
import Foundation
import Vocabulary

/// Text for values, shared by every screen (pure).
public enum Format {
    /// 21.4, 45, 1013.6: at most `decimals` decimals, no trailing zeros.
    public static func number(_ v: Double, decimals: Int = 2) -> String {
        guard v.isFinite else { return "–" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        // Digits by integer arithmetic (no Foundation formatter: the list
        // shows a few readings per visible row on every frame). The scaled
        // value rounds as "%.Nf" rounds the exact one, except when it lands
        // exactly on a half (the product may have rounded onto it from
        // either side): that case goes to the formatter.
        if (0...6).contains(decimals) {
            var scale: Int64 = 1
            for _ in 0..<decimals { scale *= 10 }
            let product = abs(v) * Double(scale)
            if product < 1e15, product - product.rounded(.down) != 0.5 {
                let n = Int64(product.rounded())
                var s = v < 0 && n != 0 ? "-" : ""
                s += String(n / scale)
                var fraction = n % scale, width = decimals
                while width > 0, fraction % 10 == 0 { fraction /= 10; width -= 1 }
                if width > 0 {
                    let digits = String(fraction)
                    s += "." + String(repeating: "0", count: width - digits.count) + digits
                }
                return s
            }
        }
        var s = String(format: "%.\(decimals)f", v)
        while s.contains("."), s.hasSuffix("0") { s.removeLast() }
        if s.hasSuffix(".") { s.removeLast() }
        return s == "-0" ? "0" : s
    }

    public static func reading(_ r: Reading, decimals: Int = 2) -> String {
        switch r.value {
        case let .number(v):
            guard let unit = r.unit, !unit.isEmpty else { return number(v, decimals: decimals) }
            return number(v, decimals: decimals) + " " + unit
        case let .bool(b): return "\(r.kind.rawValue.replacingOccurrences(of: "_", with: " ")) \(b ? "yes" : "no")"
        case let .text(t): return t
        }
    }

    /// Kinds that say little at a glance (counters, radio details, raw axes).
    static let minor: Set<ReadingKind> = [.battery, .count, .txPower, .signalStrength, .voltage, .acceleration, .angularVelocity, .timestamp]

    /// The readings worth a glance in a list row: up to `limit` numeric ones,
    /// battery and counters left out (battery has its own column).
    public static func headline(_ readings: [Reading], limit: Int = 3) -> String {
        var text = "", shown = 0
        for r in readings where shown < limit && !minor.contains(r.kind) && r.value.number != nil {
            if shown > 0 { text += " " }
            text += reading(r, decimals: 1)
            shown += 1
        }
        return text
    }

    public static func battery(_ readings: [Reading]) -> String? {
        readings.first { $0.kind == .battery }?.value.number.map { "\(Int($0.rounded()))%" }
    }

    /// "now", "12s", "3m", "2h", "5d" since `date`.
    public static func age(_ date: Date?, now: Date) -> String {
        guard let date else { return "—" }
        let s = Int(now.timeIntervalSince(date).rounded(.down))
        if s < 2 { return "now" }
        if s < 60 { return "\(s)s" }
        if s < 3_600 { return "\(s / 60)m" }
        if s < 86_400 { return "\(s / 3_600)h" }
        return "\(s / 86_400)d"
    }

    /// Four bars for a signal strength.
    public static func signalBars(_ rssi: Int16?) -> (bars: String, level: Int) {
        guard let rssi else { return ("    ", 0) }
        let level = rssi >= -60 ? 4 : rssi >= -70 ? 3 : rssi >= -80 ? 2 : rssi >= -90 ? 1 : 0
        return (bars[level], level)
    }

    /// The bars for each level, made once (a row draws them every frame).
    private static let bars: [String] = (0...4).map { level in
        let glyphs: [Character] = ["▂", "▄", "▆", "█"]
        return String((0..<4).map { $0 < level ? glyphs[$0] : "·" })
    }

    /// ▁▂▃▄▅▆▇█ for `values`, scaled between their minimum and maximum,
    /// resampled to at most `width` columns (averaging).
    public static func sparkline(_ values: [Double], width: Int) -> String {
        let finite = values.filter(\.isFinite)
        guard !finite.isEmpty, width > 0 else { return "" }
        var samples = finite
        if samples.count > width {
            samples = (0..<width).map { i in
                let from = i * finite.count / width, to = max(from + 1, (i + 1) * finite.count / width)
                let slice = finite[from..<to]
                return slice.reduce(0, +) / Double(slice.count)
            }
        }
        let lo = samples.min() ?? 0, hi = samples.max() ?? 0
        let blocks: [Character] = ["▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]
        return String(samples.map { v in
            hi > lo ? blocks[min(7, Int(((v - lo) / (hi - lo) * 7).rounded()))] : blocks[3]
        })
    }


    public static func decoded(_ d: DecodedValue?) -> String? {
        switch d {
        case nil, .unknown?: return nil
        case let .readings(r)?: return r.map { reading($0) }.joined(separator: ", ")
        case let .fields(values, order)?: return order.compactMap { k in values[k].map { "\(k.replacingOccurrences(of: "_", with: " ")) \($0)" } }.joined(separator: ", ")
        case let .undecodable(why)?: return "✗ \(why)"
        }
    }

    /// "180d" for SIG base UUIDs, else the full UUID.
    public static func shortUUID(_ uuid: String) -> String { BluetoothUUID.short(uuid) }

    /// A size for people: "812 B", "256.0 KiB", "1.2 MiB".
    public static func bytes(_ n: Int) -> String {
        if n < 1024 { return "\(n) B" }
        if n < 1 << 20 { return String(format: "%.1f KiB", Double(n) / 1024) }
        return String(format: "%.1f MiB", Double(n) / 1_048_576)
    }

    /// "14:03:07" in `timeZone`.
    public static func clock(_ date: Date, timeZone: TimeZone) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let c = calendar.dateComponents([.hour, .minute, .second], from: date)
        return String(format: "%02d:%02d:%02d", c.hour ?? 0, c.minute ?? 0, c.second ?? 0)
    }

    public static func duration(_ d: Duration) -> String {
        let seconds = Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
        return seconds < 10 ? number(seconds, decimals: 1) + " s" : "\(Int(seconds.rounded())) s"
    }

    public static func connection(_ status: ConnectionStatus) -> String {
        switch status {
        case .idle: return "watched"
        case .waitingForDevice: return "waiting for the device"
        case let .connecting(attempt): return attempt > 1 ? "connecting (attempt \(attempt))" : "connecting"
        case .connected: return "connected"
        case let .retrying(attempt, delay, reason): return "retry in \(duration(delay)) (attempt \(attempt)): \(reason)"
        }
    }
}
