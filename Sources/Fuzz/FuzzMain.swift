// libFuzzer entry point for the harnesses in Harnesses.swift.
//
// Fuzzing build (scripts/fuzz-all):
//   swift build -c release --sanitize=fuzzer -Xswiftc -DBLECOMPANION_FUZZ --product fuzz
// compiles out the replay main below; libFuzzer's main() drives
// LLVMFuzzerTestOneInput, which runs the harness named by FUZZ_HARNESS.
//
// Normal build: a corpus replayer (also what a crash is reproduced with):
//   fuzz HARNESS FILE|DIR...
//   fuzz seeds HARNESS DIR      writes the generated seeds (Seeds.swift)
#if canImport(Glibc)
import Glibc
#endif

/// The harness of this fuzzing process, from FUZZ_HARNESS (read once).
nonisolated(unsafe) private var selected: Harness? = nil

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    if selected == nil {
        let name = getenv("FUZZ_HARNESS").map { String(cString: $0) } ?? ""
        guard let harness = Harness(rawValue: name) else {
            writeLine("fuzz: set FUZZ_HARNESS to one of \(Harness.allCases.map(\.rawValue).joined(separator: ", "))", fd: 2)
            exit(64)
        }
        selected = harness
    }
    let bytes: [UInt8] = if let data, size > 0 { Array(UnsafeBufferPointer(start: data, count: size)) } else { [] }
    _ = selected?.run(bytes)
    return 0
}

#if !BLECOMPANION_FUZZ
@main
enum FuzzReplay {
    static func main() {
        let args = Array(CommandLine.arguments.dropFirst())
        if args.first == "seeds" {
            guard args.count == 3, let harness = Harness(rawValue: args[1]) else {
                writeLine("usage: fuzz seeds HARNESS DIR", fd: 2)
                exit(64)
            }
            let seeds = Seeds.inputs(for: harness)
            for (i, seed) in seeds.enumerated() {
                let path = args[2] + "/generated-\(i)"
                guard let f = fopen(path, "wb") else {
                    writeLine("fuzz: cannot write \(path)", fd: 2)
                    exit(73)
                }
                _ = seed.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
                fclose(f)
            }
            writeLine("wrote \(seeds.count) generated seeds for \(harness.rawValue)", fd: 1)
            return
        }
        guard let name = args.first, let harness = Harness(rawValue: name), args.count >= 2 else {
            writeLine("usage: fuzz HARNESS FILE|DIR...   (harnesses: \(Harness.allCases.map(\.rawValue).joined(separator: ", ")); "
                      + "replays inputs; scripts/fuzz-all fuzzes)", fd: 2)
            exit(64)
        }
        var count = 0
        var checksum = 0
        for path in args.dropFirst() {
            for file in files(at: path) {
                guard let bytes = readFile(file) else {
                    // A running fuzzer replaces corpus files as it shrinks them.
                    if errno == ENOENT { continue }
                    writeLine("fuzz: cannot read \(file): \(String(cString: strerror(errno)))", fd: 2)
                    exit(66)
                }
                checksum &+= harness.run(bytes)
                count += 1
            }
        }
        writeLine("replayed \(count) inputs through \(harness.rawValue) (checksum \(checksum))", fd: 1)
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
        guard let f = fopen(path, "rb") else { return nil }
        defer { fclose(f) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&chunk, 1, chunk.count, f)
            if n > 0 { out += chunk[0..<n] }
            if n < chunk.count { return ferror(f) == 0 ? out : nil }
        }
    }
}
#endif

func writeLine(_ text: String, fd: Int32) {
    let line = Array((text + "\n").utf8)
    _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
}
