import Foundation

/// A temporary directory tree standing in for /sys; removed by `remove()`.
struct TempTree {
    let root: String

    init() throws {
        let base = FileManager.default.temporaryDirectory.path
        root = base + "/hci-sysfs-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }

    func write(_ relativePath: String, _ contents: String) throws {
        let path = root + "/" + relativePath
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: URL(fileURLWithPath: path))
    }

    func makeDirectory(_ relativePath: String) throws {
        try FileManager.default.createDirectory(atPath: root + "/" + relativePath, withIntermediateDirectories: true)
    }

    /// An rfkill entry as the kernel lays it out: type, name, soft, hard (each newline-terminated).
    func rfkill(_ id: String, type: String, name: String, soft: String, hard: String) throws {
        try write("class/rfkill/\(id)/type", type + "\n")
        try write("class/rfkill/\(id)/name", name + "\n")
        try write("class/rfkill/\(id)/soft", soft + "\n")
        try write("class/rfkill/\(id)/hard", hard + "\n")
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: root)
    }
}
