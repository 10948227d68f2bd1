// libFuzzer target over every BLEParsing entry point (see FuzzHarness).
//
// Normal build (`swift build --product parsing-fuzz`): a corpus replayer.
//   parsing-fuzz FILE|DIR...   runs every file (directories: every file inside, not recursive)
//   through the harness once and prints how many inputs ran. A crash is a crash here too.
//
// Fuzzing build (see scripts/fuzz-parsing):
//   swift build -c release -sanitize=fuzzer -Xswiftc -DPARSING_FUZZ --product parsing-fuzz
// compiles out the Swift entry point, so libFuzzer's own main() drives
// LLVMFuzzerTestOneInput and the binary accepts the usual libFuzzer flags
// (-runs=N, -max_len=N, corpus directories, ...).
#if canImport(Glibc)
import Glibc
#endif
import BLEParsing

@_cdecl("LLVMFuzzerTestOneInput")
public func parsingFuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes: [UInt8] = if let data, size > 0 { Array(UnsafeBufferPointer(start: data, count: size)) } else { [] }
    FuzzHarness.run(bytes)
    return 0
}

#if !PARSING_FUZZ
@main
enum ParsingFuzzReplay {
    static func main() {
        let paths = Array(CommandLine.arguments.dropFirst())
        if paths.isEmpty || paths.contains("-h") || paths.contains("--help") {
            writeLine("usage: parsing-fuzz FILE|DIR...   (replays inputs; build with -sanitize=fuzzer -Xswiftc -DPARSING_FUZZ to fuzz)", fd: 2)
            exit(paths.isEmpty ? 64 : 0)
        }
        var count = 0
        var checksum = 0
        for path in paths {
            for file in files(at: path) {
                guard let bytes = readFile(file) else {
                    // A running fuzzer replaces corpus files as it shrinks them.
                    if errno == ENOENT { continue }
                    writeLine("parsing-fuzz: cannot read \(file): \(String(cString: strerror(errno)))", fd: 2)
                    exit(66)
                }
                checksum &+= FuzzHarness.run(bytes)
                count += 1
            }
        }
        writeLine("replayed \(count) inputs (checksum \(checksum))", fd: 1)
    }

    /// `path` itself, or the regular files directly inside it when it is a directory.
    static func files(at path: String) -> [String] {
        guard let dir = opendir(path) else { return [path] }
        defer { closedir(dir) }
        var out: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeMutablePointer(to: &entry.pointee.d_name) { field in
                // In place, up to its NUL: the record can end before the
                // field's 256 bytes do (copying the whole field read past
                // the end of readdir's buffer; AddressSanitizer caught it).
                field.withMemoryRebound(to: CChar.self, capacity: MemoryLayout.size(ofValue: field.pointee)) { String(cString: $0) }
            }
            if name == "." || name == ".." { continue }
            out.append(path + "/" + name)
        }
        return out.sorted()
    }

    static func readFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { return nil }
            if n == 0 { return out }
            out += chunk[0..<n]
        }
    }

    static func writeLine(_ text: String, fd: Int32) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
#endif
