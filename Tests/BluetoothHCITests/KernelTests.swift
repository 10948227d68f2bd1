import Testing
@testable import BluetoothHCI
#if canImport(Glibc)
import Glibc
#endif

/// What this machine's kernel says when asked directly, without the module under test.
private func directProbe() -> Int32? {
    // 31 = AF_BLUETOOTH, 1 = BTPROTO_HCI (linux/socket.h, bluetooth.h).
    let fd = socket(31, Int32(SOCK_RAW.rawValue), 1)
    if fd >= 0 {
        close(fd)
        return nil
    }
    return errno
}

@Suite struct KernelSupportTests {
    @Test func probeMatchesTheKernelsOwnAnswer() {
        let direct = directProbe()
        do {
            try BluetoothKernel.checkSupport()
            #expect(direct == nil, "module says supported, direct socket() failed with \(direct ?? 0)")
        } catch {
            #expect(error.systemCallError?.code == direct)
            #expect(error.systemCallError?.call == "socket(AF_BLUETOOTH, SOCK_RAW|SOCK_CLOEXEC, BTPROTO_HCI)")
            switch direct {
            case EAFNOSUPPORT?:
                guard case .kernelUnsupported(let call) = error else {
                    Issue.record("EAFNOSUPPORT must map to .kernelUnsupported, got \(error)")
                    return
                }
                #expect(call.errnoName == "EAFNOSUPPORT")
                #expect(error.description.hasPrefix("The kernel has no Bluetooth support: socket(AF_BLUETOOTH"))
                #expect(error.description.contains("Address family not supported by protocol"))
            case EPERM?, EACCES?:
                guard case .permissionDenied = error else {
                    Issue.record("EPERM/EACCES must map to .permissionDenied, got \(error)")
                    return
                }
            default:
                guard case .systemCall = error else {
                    Issue.record("other errno must map to .systemCall, got \(error)")
                    return
                }
            }
        }
    }

    @Test func adapterListingAgreesWithKernelSupport() {
        let direct = directProbe()
        do {
            let adapters = try BluetoothKernel.adapters(readVersion: false)
            #expect(direct == nil)
            for adapter in adapters {
                #expect(adapter.name.hasPrefix("hci"))
                #expect(adapter.name == "hci\(adapter.index)")
                #expect(adapter.address.count == 17)
                #expect(adapter.version == nil)  // not requested
            }
        } catch {
            // Listing failed: only acceptable when the socket itself cannot be opened,
            // and then with the same classification as the support probe.
            #expect(direct != nil)
            #expect(error.systemCallError?.code == direct)
            if direct == EAFNOSUPPORT {
                #expect(error == .kernelUnsupported(SystemCallError(
                    call: "socket(AF_BLUETOOTH, SOCK_RAW|SOCK_CLOEXEC, BTPROTO_HCI)", code: EAFNOSUPPORT)))
            }
        }
    }

    @Test func errnoClassification() {
        let call = "socket(x)"
        #expect(HCIError.classify(SystemCallError(call: call, code: EAFNOSUPPORT))
                == .kernelUnsupported(SystemCallError(call: call, code: EAFNOSUPPORT)))
        #expect(HCIError.classify(SystemCallError(call: call, code: EPERM))
                == .permissionDenied(SystemCallError(call: call, code: EPERM)))
        #expect(HCIError.classify(SystemCallError(call: call, code: EACCES))
                == .permissionDenied(SystemCallError(call: call, code: EACCES)))
        #expect(HCIError.classify(SystemCallError(call: call, code: ENOMEM))
                == .systemCall(SystemCallError(call: call, code: ENOMEM)))
    }

    @Test func systemCallErrorText() {
        let error = SystemCallError(call: "ioctl(HCIGETDEVLIST)", code: ENODEV)
        #expect(error.errnoName == "ENODEV")
        #expect(error.message == "No such device")
        #expect(error.description == "ioctl(HCIGETDEVLIST) failed with ENODEV (No such device)")
        #expect(SystemCallError(call: "x", code: 4000).errnoName == "errno 4000")
    }

    @Test func eintrIsRetried() {
        var attempts = 0
        let result = retryingEINTR { () -> Int32 in
            attempts += 1
            if attempts < 3 {
                errno = EINTR
                return -1
            }
            return 7
        }
        #expect(result == .success(7))
        #expect(attempts == 3)
    }

    @Test func otherErrorsAreNotRetried() {
        var attempts = 0
        let result = retryingEINTR { () -> Int32 in
            attempts += 1
            errno = EAFNOSUPPORT
            return -1
        }
        #expect(result == .failure(ErrnoCode(value: EAFNOSUPPORT)))
        #expect(attempts == 1)
    }

    @Test func hciIoctlRequestNumbers() {
        // _IOR('H', 210, int) and _IOR('H', 211, int) from <bluetooth/hci.h>.
        #if arch(powerpc64) || arch(powerpc64le)
        #expect(IOControl.getDeviceList == 0x400448D2)
        #expect(IOControl.getDeviceInfo == 0x400448D3)
        #else
        #expect(IOControl.getDeviceList == 0x800448D2)
        #expect(IOControl.getDeviceInfo == 0x800448D3)
        #endif
    }
}

@Suite struct AdapterDecodingTests {
    @Test func addressIsPrintedMostSignificantByteFirst() {
        // bdaddr_t stores the address little-endian: 00:1A:7D:DA:71:13 is {0x13,0x71,0xDA,0x7D,0x1A,0x00}.
        #expect(HCIAdapter.formatAddress(littleEndian: [0x13, 0x71, 0xDA, 0x7D, 0x1A, 0x00]) == "00:1A:7D:DA:71:13")
    }

    @Test func typeSplitsIntoBusAndControllerType() {
        let (usb, primary) = HCIAdapter.decodeType(0x01)
        #expect(usb.description == "USB")
        #expect(primary == .primary)
        let (uart, amp) = HCIAdapter.decodeType(0x13)
        #expect(uart.description == "UART")
        #expect(amp == .amp)
        #expect(HCIAdapter.decodeType(0x0F).0.description == "bus 15")
    }

    @Test func flagNames() {
        let flags = HCIDeviceFlags(rawValue: 0b1_0001_1101)  // UP RUNNING PSCAN ISCAN RAW
        #expect(flags.names == ["UP", "RUNNING", "PSCAN", "ISCAN", "RAW"])
        #expect(flags.contains(.up))
        #expect(!flags.contains(.initializing))
        #expect(HCIDeviceFlags(rawValue: 0).names.isEmpty)
    }

    @Test func coreVersionNames() {
        #expect(HCIVersionInfo.coreSpecificationName(0) == "1.0b")
        #expect(HCIVersionInfo.coreSpecificationName(6) == "4.0")
        #expect(HCIVersionInfo.coreSpecificationName(9) == "5.0")
        #expect(HCIVersionInfo.coreSpecificationName(13) == "5.4")
        #expect(HCIVersionInfo.coreSpecificationName(200) == nil)
        let info = HCIVersionInfo(hciVersion: 9, hciRevision: 0x100, lmpVersion: 9, lmpSubversion: 1, manufacturer: 2)
        #expect(info.summary.hasPrefix("Bluetooth 5.0 (HCI 0x9"))
    }

    @Test func adapterStateAccessors() {
        let up = HCIAdapter(index: 0, name: "hci0", address: "00:11:22:33:44:55", flags: [.up, .running, .pageScan],
                            bus: HCIBusType(rawValue: 1), controllerType: .primary, aclMTU: 1021, aclPackets: 8,
                            scoMTU: 64, scoPackets: 1, version: nil, versionError: nil)
        #expect(up.isUp && up.isRunning && up.pageScan && !up.inquiryScan)
    }
}
