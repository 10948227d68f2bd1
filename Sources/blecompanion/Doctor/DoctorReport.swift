import Foundation

/// The full doctor result and its two renderings.
struct DoctorReport: Sendable, Encodable {
    var findings: [DoctorFinding]

    /// True when no finding is a problem (exit status 0).
    var ok: Bool { !findings.contains { $0.status == .problem } }

    private enum CodingKeys: String, CodingKey { case ok, findings }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(ok, forKey: .ok)
        try c.encode(findings, forKey: .findings)
    }

    /// `{"ok": bool, "findings": [...]}` with findings in check order.
    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(self)
        return String(decoding: data, as: UTF8.self)
    }

    /// Human report: problems first (each with its remedy), then warnings, skipped, ok.
    func text(colour: Bool) -> String {
        let style = TextStyle(enabled: colour)
        let ordered = findings.enumerated().sorted {
            ($0.element.status.reportRank, $0.offset) < ($1.element.status.reportRank, $1.offset)
        }.map(\.element)

        var lines = [style.bold("Bluetooth doctor: can this host use Bluetooth?"), ""]
        for finding in ordered {
            let (mark, word) = DoctorReport.mark(finding.status)
            let head = style.paint("\(mark) \(word)", for: finding.status)
            lines.append("\(head) [\(finding.id)] \(finding.summary)")
            if let detail = finding.detail, !detail.isEmpty {
                for line in detail.split(separator: "\n", omittingEmptySubsequences: false) {
                    lines.append("      " + style.dim(String(line)))
                }
            }
            if let remedy = finding.remedy, !remedy.isEmpty, finding.status != .ok {
                let remedyLines = remedy.split(separator: "\n").map(String.init)
                for (i, line) in remedyLines.enumerated() {
                    lines.append((i == 0 ? "      Fix: " : "           ") + line)
                }
            }
        }
        lines.append("")
        let count = { (status: DoctorStatus) in findings.filter { $0.status == status }.count }
        let plural = { (n: Int, word: String) in "\(n) \(word)\(n == 1 ? "" : "s")" }
        let tally = [plural(count(.problem), "problem"), plural(count(.warning), "warning"),
                     "\(count(.skipped)) skipped", "\(count(.ok)) ok"].joined(separator: ", ")
        if ok {
            lines.append(style.paint("Result: \(tally). No problem found.", for: .ok))
        } else {
            lines.append(style.paint("Result: \(tally). Bluetooth will not work until the problems above are fixed.",
                                     for: .problem))
        }
        return lines.joined(separator: "\n")
    }

    static func mark(_ status: DoctorStatus) -> (String, String) {
        switch status {
        case .problem: return ("✗", "PROBLEM")
        case .warning: return ("!", "WARNING")
        case .skipped: return ("-", "SKIPPED")
        case .ok: return ("✓", "OK     ")
        }
    }
}

/// ANSI styling that collapses to plain text when disabled.
struct TextStyle {
    var enabled: Bool

    func paint(_ s: String, for status: DoctorStatus) -> String {
        switch status {
        case .problem: return sgr("1;31", s)
        case .warning: return sgr("33", s)
        case .skipped: return sgr("2", s)
        case .ok: return sgr("32", s)
        }
    }

    func bold(_ s: String) -> String { sgr("1", s) }
    func dim(_ s: String) -> String { sgr("2", s) }

    private func sgr(_ code: String, _ s: String) -> String {
        enabled ? "\u{1B}[\(code)m\(s)\u{1B}[0m" : s
    }

    /// Colour only for a terminal, and not when NO_COLOR is set to a non-empty value
    /// (https://no-color.org) or TERM is "dumb".
    static func shouldColour(isTTY: Bool, environment: [String: String]) -> Bool {
        guard isTTY else { return false }
        if let noColor = environment["NO_COLOR"], !noColor.isEmpty { return false }
        if environment["TERM"] == "dumb" { return false }
        return true
    }
}
