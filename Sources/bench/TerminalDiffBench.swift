import TerminalUI
#if canImport(Glibc)
import Glibc
#endif

/// `bench terminal-diff`: what the renderer's diff saves, at 200×60, in one run.
///
///     bench terminal-diff [--json] [--color-mode none|ansi16|indexed256|truecolor] [--min-time S]
///
/// The frame is a dashboard-like screen (boxes, a styled header, a 50-row
/// device table with colored RSSI, a status line). Three cases, each timed
/// as `Renderer.frame` only (the buffers are built beforehand):
///   - full_repaint: the whole screen after `invalidate()` (first frame, resize, SIGCONT);
///   - rssi_change: one row's 4-character RSSI text differs from the last frame;
///   - identical: the same frame again (diffing 12,000 cells, 0 bytes out).
/// Each case is warmed up, then run in passes of about `--min-time` seconds,
/// 7 rounds; the median round gives ns/frame. Ratios are to full_repaint.
enum TerminalDiffBench {
    static let width = 200, height = 60

    static func run(_ arguments: [String]) -> Int32 {
        var json = false
        var mode = ColorMode.truecolor
        var minTime = 0.05
        var i = 0
        while i < arguments.count {
            switch arguments[i] {
            case "--json":
                json = true
            case "--color-mode":
                i += 1
                switch i < arguments.count ? arguments[i] : "" {
                case "none": mode = .none
                case "ansi16": mode = .ansi16
                case "indexed256": mode = .indexed256
                case "truecolor": mode = .truecolor
                default: return usage("--color-mode needs none, ansi16, indexed256 or truecolor")
                }
            case "--min-time":
                i += 1
                guard i < arguments.count, let s = Double(arguments[i]), s > 0 else { return usage("--min-time needs seconds > 0") }
                minTime = s
            default:
                return usage("unknown argument \(arguments[i])")
            }
            i += 1
        }

        let a = screen(rssiOfRow7: "-67 ")
        let b = screen(rssiOfRow7: "-71 ")

        // (a) Full repaint.
        var full = Renderer(colorMode: mode)
        let fullBytes = full.frame(a).count
        let fullNs = measure(minTime) {
            full.invalidate()
            return full.frame(a).count
        }
        // (b) One RSSI changes: alternate between the two screens. Reported
        // bytes are the steady state (cursor and style already known), the
        // same as what is timed.
        var change = Renderer(colorMode: mode)
        _ = change.frame(a)
        _ = change.frame(b)
        var flip = false
        let changeNs = measure(minTime) {
            flip.toggle()
            return change.frame(flip ? a : b).count
        }
        // The other screen than the last one drawn, twice.
        let changeBytes = change.frame(flip ? b : a).count
        let changeBytesAfter = change.frame(flip ? a : b).count
        // (c) Identical frames.
        var same = Renderer(colorMode: mode)
        _ = same.frame(a)
        let sameBytes = same.frame(a).count
        let sameNs = measure(minTime) { same.frame(a).count }

        guard changeBytes > 0, changeBytes == changeBytesAfter, sameBytes == 0 else {
            writeError("bench terminal-diff: unexpected output sizes (change \(changeBytes)/\(changeBytesAfter), identical \(sameBytes))")
            return 70
        }

        let rows: [(name: String, bytes: Int, ns: Double)] = [
            ("full_repaint", fullBytes, fullNs),
            ("rssi_change", changeBytes, changeNs),
            ("identical", sameBytes, sameNs),
        ]
        let modeName = "\(mode)"
        if !json {
            printFlushed("TerminalUI renderer at \(width)x\(height), \(modeName) (median of 7 rounds, monotonic clock; ratios to full_repaint)")
            printFlushed(ParsingBench.pad("case", 16) + ParsingBench.pad("bytes/frame", 13, right: true)
                         + ParsingBench.pad("ratio", 10, right: true) + ParsingBench.pad("us/frame", 11, right: true)
                         + ParsingBench.pad("ratio", 10, right: true))
            for r in rows {
                printFlushed(ParsingBench.pad(r.name, 16) + ParsingBench.pad("\(r.bytes)", 13, right: true)
                             + ParsingBench.pad(ParsingBench.fixed(Double(r.bytes) / Double(fullBytes), 4), 10, right: true)
                             + ParsingBench.pad(ParsingBench.fixed(r.ns / 1000, 1), 11, right: true)
                             + ParsingBench.pad(ParsingBench.fixed(r.ns / fullNs, 3), 10, right: true))
            }
        }
        for r in rows {
            printFlushed("{\"bench\":\"terminal-diff\",\"case\":\"\(r.name)\",\"width\":\(width),\"height\":\(height),"
                         + "\"color_mode\":\"\(modeName)\",\"bytes_per_frame\":\(r.bytes),"
                         + "\"bytes_ratio\":\(ParsingBench.fixed(Double(r.bytes) / Double(fullBytes), 6)),"
                         + "\"ns_per_frame\":\(ParsingBench.fixed(r.ns, 0)),\"time_ratio\":\(ParsingBench.fixed(r.ns / fullNs, 4))}")
        }
        return 0
    }

    static func usage(_ message: String) -> Int32 {
        writeError("bench terminal-diff: \(message)\nusage: bench terminal-diff [--json] [--color-mode none|ansi16|indexed256|truecolor] [--min-time S]")
        return 64
    }

    /// A dashboard-like screen; row 7 of the table has the given RSSI text.
    static func screen(rssiOfRow7 rssi: String) -> Buffer {
        var b = Buffer(width: width, height: height)
        let border = Style(foreground: .gray)
        let title = Style(foreground: .brightCyan, bold: true)
        b.fill(Rect(x: 0, y: 0, width: width, height: 1), style: Style(foreground: .black, background: .cyan))
        b.put(" BLE Companion — hci0 powered, scanning", x: 0, y: 0, style: Style(foreground: .black, background: .cyan, bold: true))
        b.box(Rect(x: 0, y: 1, width: 140, height: height - 2), title: "Devices", style: border, titleStyle: title)
        b.box(Rect(x: 140, y: 1, width: 60, height: height - 2), title: "Detail", style: border, titleStyle: title)
        let header = Style(bold: true, underline: true)
        b.put("Name", x: 2, y: 2, width: 28, style: header, pad: true)
        b.put("Address", x: 31, y: 2, width: 18, style: header, pad: true)
        b.put("RSSI", x: 50, y: 2, width: 5, style: header, pad: true)
        b.put("Readings", x: 56, y: 2, width: 80, style: header, pad: true)
        for row in 0..<50 {
            let y = 3 + row
            let rssiText = row == 7 ? rssi : "-\(40 + (row * 7) % 50) "
            let strong = (row * 7) % 50 < 25
            b.put(row % 5 == 0 ? "温湿度计 \(row)" : "Sensor \(row) (ATC_\(String(row * 2731, radix: 16)))", x: 2, y: y, width: 28)
            b.put("A4:C1:38:\(format2(row)):\(format2(row * 3)):\(format2(row * 5))", x: 31, y: y,
                  style: Style(foreground: .gray))
            b.put(rssiText, x: 50, y: y, width: 5, style: Style(foreground: strong ? .green : .rgb(255, 170, 0)))
            b.put("21.\(row % 10) °C  \(40 + row % 30) %  battery \(100 - row) %", x: 56, y: y, width: 80)
        }
        b.put("Heart Strap", x: 142, y: 2, style: title)
        for k in 0..<20 { b.put("Characteristic \(k): 0x\(String(k * 4099, radix: 16))", x: 142, y: 4 + k, width: 56) }
        b.fill(Rect(x: 0, y: height - 1, width: width, height: 1), style: Style(reverse: true))
        b.put(" q quit  / filter  enter details  ↑↓ select", x: 0, y: height - 1, style: Style(reverse: true))
        return b
    }

    static func format2(_ n: Int) -> String {
        let s = String(n % 256, radix: 16, uppercase: true)
        return s.count < 2 ? "0" + s : s
    }

    // MARK: Measuring

    /// Median ns per call of `body` over 7 rounds of about `minTime` seconds each (after a warm-up).
    static func measure(_ minTime: Double, _ body: () -> Int) -> Double {
        var sink = 0
        func round(_ passes: Int) -> UInt64 {
            let start = ParsingBench.now()
            for _ in 0..<passes { sink &+= body() }
            return ParsingBench.now() - start
        }
        // Warm-up and calibration: double until a round takes a quarter of the target.
        var passes = 1
        while true {
            let t = round(passes)
            if Double(t) >= minTime * 0.25e9 || passes >= 1 << 24 {
                passes = max(1, Int(Double(passes) * minTime * 1e9 / Double(max(t, 1))))
                break
            }
            passes *= 2
        }
        var samples: [Double] = []
        for _ in 0..<7 { samples.append(Double(round(passes)) / Double(passes)) }
        if sink == Int.min { printFlushed("") }  // keeps `sink` alive
        samples.sort()
        return samples[3]
    }
}
