import Bounds
import ArgumentParser
import BLEParsing
import BluetoothHCI
import Foundation

/// `blecompanion capture --out FILE.btsnoop`: the kernel's HCI monitor
/// channel to a btsnoop file (datalink 2001), like `btmon -w`. Stops after
/// `--duration` or on SIGINT/SIGTERM, with every packet read so far written.
struct CaptureCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "capture",
        abstract: "Record every HCI packet of every controller to a btsnoop file, like `btmon -w`.",
        discussion: """
            Reads the kernel's HCI monitor channel (needs a kernel with Bluetooth and CAP_NET_RAW, e.g. \
            root) and writes btsnoop with the Linux monitor datalink (2001), which btmon, Wireshark and \
            `blecompanion import-btsnoop` read. Stops after --duration, or on Ctrl-C / SIGTERM; packets \
            are written as they arrive, so nothing read is lost.

            EXIT STATUS
              0  capture written
              1  the output file could not be written
              69 no HCI monitor here: the kernel has no Bluetooth support (EAFNOSUPPORT), or the process \
            lacks CAP_NET_RAW (EPERM); the message says which
            """)

    @Option(help: ArgumentHelp("The btsnoop file to write.", valueName: "file"))
    var out: String
    @Option(parsing: .unconditional, help: "Stop after this many seconds (default: until Ctrl-C or SIGTERM).")
    var duration: Double?

    func validate() throws {
        try checkSeconds(duration, "--duration")
    }

    func run() async throws {
        // Caught from here on (kept until the reader is running), so that a
        // SIGINT or SIGTERM at any moment leaves a closed, readable file.
        StopSignals.install()
        let monitor: HCIMonitor
        do { monitor = try HCIMonitor() } catch {
            switch error {
            case .kernelUnsupported:
                printError("capture: this kernel has no Bluetooth support, so there is no HCI monitor to read (\(error.description)). "
                           + "On a host with Bluetooth, load the module (`modprobe bluetooth`); in a container, the host's kernel decides. "
                           + "`blecompanion doctor` tells more.")
            case .permissionDenied:
                printError("capture: reading the HCI monitor needs CAP_NET_RAW (\(error.description)): run as root, "
                           + "or grant it with `sudo setcap cap_net_raw+ep $(command -v blecompanion)`.")
            default:
                printError("capture: cannot open the HCI monitor: \(error.description)")
            }
            throw ExitCode(69)
        }
        guard FileManager.default.createFile(atPath: out, contents: Data(BtsnoopWriter.header(datalink: .linuxMonitor))),
              let handle = FileHandle(forWritingAtPath: out) else {
            printError("capture: cannot write \(out): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        handle.seekToEndOfFile()

        // Signals and the duration stop the reader; it then returns nil. A
        // signal caught since `run()` began is kept by ``StopSignals`` and
        // stops it at once.
        let signalled = Task {
            if await StopSignals.wait() != nil { monitor.stop() }
        }
        defer { signalled.cancel() }
        let timer = duration.map { seconds in
            Task {
                try? await Task.sleep(for: Bounds.duration(seconds: seconds))
                monitor.stop()
            }
        }
        defer { timer?.cancel() }

        let result: Result<Int, HCIError> = await withCheckedContinuation { continuation in
            // Blocking reads on a thread of their own.
            Thread {
                var count = 0
                do throws(HCIError) {
                    while let packet = try monitor.next() {
                        let flags = BtsnoopWriter.monitorFlags(opcode: packet.opcode, index: packet.index)
                        handle.write(Data(BtsnoopWriter.record(packet.data, flags: flags, unixMicroseconds: packet.unixMicroseconds)))
                        count += 1
                    }
                    continuation.resume(returning: .success(count))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }.start()
        }
        handle.synchronizeFile()
        handle.closeFile()
        switch result {
        case let .success(count):
            printError("capture: \(count) packet\(count == 1 ? "" : "s") written to \(out)")
        case let .failure(error):
            printError("capture: reading stopped: \(error.description); \(out) holds what was read before")
            throw ExitCode(1)
        }
    }
}
