/// Why a Bluetooth HCI operation failed.
public enum HCIError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kernel refused the address family: `EAFNOSUPPORT`. Either the kernel has no
    /// Bluetooth support (module not loaded / not built), or the caller is in a network
    /// namespace other than the host's initial one (Bluetooth sockets exist only there).
    case kernelUnsupported(SystemCallError)
    /// The call was refused for permission reasons (`EPERM` / `EACCES`), typically a
    /// sandbox (seccomp, AppArmor/SELinux, snap/flatpak confinement) or missing capability.
    case permissionDenied(SystemCallError)
    /// Any other failed call.
    case systemCall(SystemCallError)
    /// The kernel reported more devices than the buffer it was given can hold.
    case malformedDeviceList(reported: Int, capacity: Int)

    /// The failed call, when the error came from one.
    public var systemCallError: SystemCallError? {
        switch self {
        case .kernelUnsupported(let e), .permissionDenied(let e), .systemCall(let e): return e
        case .malformedDeviceList: return nil
        }
    }

    public var description: String {
        switch self {
        case .kernelUnsupported(let e):
            return "The kernel has no Bluetooth support: \(e)"
        case .permissionDenied(let e):
            return "Permission denied for Bluetooth: \(e)"
        case .systemCall(let e):
            return e.description
        case .malformedDeviceList(let reported, let capacity):
            return "ioctl(HCIGETDEVLIST) reported \(reported) devices but the request held only \(capacity)"
        }
    }

    /// Classifies a failed call by errno.
    static func classify(_ error: SystemCallError) -> HCIError {
        switch error.code {
        case EAFNOSUPPORT: return .kernelUnsupported(error)
        case EPERM, EACCES: return .permissionDenied(error)
        default: return .systemCall(error)
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
