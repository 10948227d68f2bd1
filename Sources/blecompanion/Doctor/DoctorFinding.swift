/// How serious a finding is.
enum DoctorStatus: String, Codable, Sendable, CaseIterable {
    /// Works as needed.
    case ok
    /// Not broken, but worth knowing (may limit features or hint at a later failure).
    case warning
    /// Bluetooth will not work until this is fixed; makes `doctor` exit with status 1.
    case problem
    /// The check could not run because an earlier problem makes it meaningless; `detail` says which.
    case skipped

    /// Order in the human report: problems first.
    var reportRank: Int {
        switch self {
        case .problem: return 0
        case .warning: return 1
        case .skipped: return 2
        case .ok: return 3
        }
    }
}

/// One result of a doctor check.
struct DoctorFinding: Codable, Sendable, Equatable {
    /// Stable check identifier: "kernel", "sysfs", "adapters", "adapter.hci0", "rfkill",
    /// "rfkill.rfkill0", "bluetoothd", "dbus…".
    var id: String
    var status: DoctorStatus
    /// One line, stating the fact.
    var summary: String
    /// Evidence and explanation (may span lines).
    var detail: String?
    /// What the user should do; present for problems and warnings that have a fix.
    var remedy: String?

    init(id: String, status: DoctorStatus, summary: String, detail: String? = nil, remedy: String? = nil) {
        self.id = id
        self.status = status
        self.summary = summary
        self.detail = detail
        self.remedy = remedy
    }

    private enum CodingKeys: String, CodingKey { case id, status, summary, detail, remedy }

    // Always emit every key (null when absent) so JSON consumers see a fixed shape.
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(status, forKey: .status)
        try c.encode(summary, forKey: .summary)
        try c.encode(detail, forKey: .detail)
        try c.encode(remedy, forKey: .remedy)
    }
}
