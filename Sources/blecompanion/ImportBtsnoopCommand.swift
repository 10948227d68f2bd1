import ArgumentParser
import BLEParsing
import BlueZSimulator
import CaptureImport
import Foundation
import ScenarioFormat

/// `blecompanion import-btsnoop FILE --out SCENARIO`: a btsnoop capture
/// (btmon -w, Android HCI snoop log) as a simulator scenario. Parsing is
/// BLEParsing's CaptureAnalyzer, the mapping CaptureImport's
/// ScenarioImporter; this file reads, writes and reports.
struct ImportBtsnoopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import-btsnoop",
        abstract: "Turn a btsnoop capture into a simulator scenario (docs/SCENARIOS.md).",
        discussion: """
            Reads files written by `btmon -w` (datalink 2001, Linux monitor), Android's HCI snoop log \
            (1002, H4) and unencapsulated HCI captures (1001). LE advertising reports (legacy and \
            extended) become each device's advertisement timeline, with times counted from the first \
            record; a GATT layout discovered over ATT becomes the device's GATT database, with the values \
            read and the notifications received as a notification timeline. Replay the result with \
            `blecompanion simulate SCENARIO`.

            Packets the importer does not use are counted and listed, never fatal. A file that is not \
            btsnoop, uses another datalink, or is truncated or corrupt is an error naming the record \
            (numbered from 1, as btmon and Wireshark do) and the byte offset.

            EXIT STATUS
              0  scenario written
              1  the capture could not be read (the reason is on standard error) or the output not written
              70 the scenario produced would not load in the simulator: larger than its 16 MiB limit \
            (import a shorter capture), or invalid (a bug; please report it)
            """
    )

    @Argument(help: ArgumentHelp("The capture file.", valueName: "file"))
    var file: String

    @Option(help: ArgumentHelp("Where to write the scenario JSON.", valueName: "scenario"))
    var out: String

    @Option(help: "The scenario's name (default: the capture's file name without extension).")
    var name: String?

    @Flag(help: "Print nothing on success.")
    var quiet = false

    func run() throws {
        let sourceName = URL(fileURLWithPath: file).lastPathComponent
        // A capture is a regular file; anything else gets a clear word before
        // Foundation's ("You don't have permission" for a FIFO as root).
        var input = stat()
        guard stat(file, &input) == 0 else {
            printError("import-btsnoop: cannot read \(file): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        switch input.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR:
            printError("import-btsnoop: \(file) is a directory; give a capture file (btmon -w FILE)")
            throw ExitCode(1)
        default:
            printError("import-btsnoop: \(file) is not a regular file (a FIFO, socket or device); give a capture file (btmon -w FILE)")
            throw ExitCode(1)
        }
        // --out must not be the capture itself (it would be replaced).
        var output = stat()
        if stat(out, &output) == 0, output.st_dev == input.st_dev, output.st_ino == input.st_ino {
            printError("import-btsnoop: --out \(out) is the capture itself; write the scenario to another file")
            throw ExitCode(1)
        }
        let scenarioName = name ?? (sourceName as NSString).deletingPathExtension
        // Read a block at a time and folded as it goes: memory is the
        // scenario being built (at most the simulator's limit), not the
        // capture. A larger scenario is refused as soon as it is certain.
        let options = ScenarioImporter.Options(name: scenarioName, sourceName: sourceName, sizeLimit: Scenario.maximumFileBytes)
        let result: ScenarioImporter.Result
        do {
            result = try Self.importCapture(at: file, options: options)
        } catch let error as CaptureReadError {
            printError("import-btsnoop: \(error.message)")
            throw ExitCode(1)
        }
        let outName = URL(fileURLWithPath: out).lastPathComponent
        guard !result.exceedsSizeLimit, let text = result.scenario.text(limit: Scenario.maximumFileBytes) else {
            printError("import-btsnoop: the scenario would be larger than the \(Scenario.maximumFileBytes >> 20) MiB the simulator loads; nothing written. Import a shorter capture (e.g. cut it with editcap -r, or record less with btmon).")
            throw ExitCode(70)
        }
        do {
            _ = try Scenario.parse(text, fileName: outName)
        } catch {
            printError("import-btsnoop: the scenario produced does not load: \(error)")
            throw ExitCode(70)
        }
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: out), options: .atomic)
        } catch {
            printError("import-btsnoop: cannot write \(out): \((error as NSError).localizedDescription)")
            throw ExitCode(1)
        }
        guard !quiet else { return }
        printLine("Imported \(sourceName) → \(out)")
        for line in result.summary.lines { printLine(line) }
    }

    struct CaptureReadError: Error {
        let message: String
    }

    /// Reads the capture at `path` in 256 KiB blocks into a
    /// ``StreamingImport``, stopping early once the scenario cannot fit
    /// `options.sizeLimit`.
    static func importCapture(at path: String, options: ScenarioImporter.Options) throws -> ScenarioImporter.Result {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw CaptureReadError(message: "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var importer = StreamingImport(options: options)
        var block = [UInt8](repeating: 0, count: 256 * 1024)
        do {
            while true {
                let n = block.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw CaptureReadError(message: "cannot read \(path): \(String(cString: strerror(errno)))")
                }
                if n == 0 { break }
                guard try importer.append(block[0..<n]) else { break }
            }
            return try importer.finish()
        } catch let error as CaptureError {
            throw CaptureReadError(message: "\(path): \(error)")
        }
    }
}
