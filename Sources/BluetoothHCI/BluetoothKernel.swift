internal import CBluetooth
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Kernel-level facts about Bluetooth on this host.
public enum BluetoothKernel {
    /// The call the support probe makes, as reported in errors.
    public static let probeCallDescription = "socket(AF_BLUETOOTH, SOCK_RAW|SOCK_CLOEXEC, BTPROTO_HCI)"

    /// Checks that the kernel lets this process open a raw HCI socket
    /// (`socket(AF_BLUETOOTH, SOCK_RAW|SOCK_CLOEXEC, BTPROTO_HCI)`); the socket is closed again.
    ///
    /// Throws `.kernelUnsupported` for `EAFNOSUPPORT`, `.permissionDenied` for
    /// `EPERM`/`EACCES`, `.systemCall` otherwise.
    public static func checkSupport() throws(HCIError) {
        let socket = try HCIControlSocket.open()
        socket.close()
    }

    /// Whether the `bluetooth` core module is loaded or built in, judged from
    /// `<sysfsRoot>/module/bluetooth`. `/sys/module` is not network-namespaced, so inside a
    /// container it still reflects the host kernel: present here while `checkSupport` fails
    /// with `EAFNOSUPPORT` points at a network namespace rather than a missing module.
    public static func coreModulePresent(sysfsRoot: String = "/sys") -> Bool {
        POSIXFile.isDirectory(sysfsRoot + "/module/bluetooth")
    }
}

/// An open `AF_BLUETOOTH`/`BTPROTO_HCI` raw socket that is not bound to a device;
/// used for device-list ioctls.
final class HCIControlSocket {
    private(set) var fd: Int32

    private init(fd: Int32) { self.fd = fd }

    static func open() throws(HCIError) -> HCIControlSocket {
        let type = Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let result = retryingEINTR { Glibc.socket(AF_BLUETOOTH, type, BTPROTO_HCI) }
        switch result {
        case .success(let fd):
            return HCIControlSocket(fd: fd)
        case .failure(let code):
            throw HCIError.classify(SystemCallError(call: BluetoothKernel.probeCallDescription, code: code))
        }
    }

    /// `ioctl(fd, request, argument)` with EINTR retries; `name` is used in errors.
    func ioctl(_ request: UInt, _ argument: UnsafeMutableRawPointer, name: String) throws(HCIError) {
        let fd = self.fd
        let result = retryingEINTR { Glibc.ioctl(fd, request, argument) }
        if case .failure(let code) = result {
            throw HCIError.classify(SystemCallError(call: "ioctl(\(name))", code: code))
        }
    }

    func close() {
        guard fd >= 0 else { return }
        closeDescriptor(fd)
        fd = -1
    }

    deinit { close() }
}

/// Linux `_IOR(type, nr, size)` request numbers. `<bluetooth/hci.h>` defines the HCI
/// requests with the `_IOR` macro, which Swift cannot import.
enum IOControl {
    static func read(type: UInt8, number: UInt8, size: Int) -> UInt {
        #if arch(powerpc64) || arch(powerpc64le) || arch(powerpc)
        // powerpc: 3 direction bits at 29, 13 size bits, _IOC_READ = 2.
        let directionShift: UInt = 29
        #else
        // asm-generic (x86, arm, arm64, riscv, s390x): 2 direction bits at 30, _IOC_READ = 2.
        let directionShift: UInt = 30
        #endif
        return (UInt(2) << directionShift) | (UInt(size) << 16) | (UInt(type) << 8) | UInt(number)
    }

    /// `HCIGETDEVLIST = _IOR('H', 210, int)`
    static let getDeviceList = read(type: UInt8(ascii: "H"), number: 210, size: MemoryLayout<Int32>.size)
    /// `HCIGETDEVINFO = _IOR('H', 211, int)`
    static let getDeviceInfo = read(type: UInt8(ascii: "H"), number: 211, size: MemoryLayout<Int32>.size)
}
