import Testing
@testable import BluetoothHCI
#if canImport(Glibc)
import Glibc
#endif

@Suite struct RFKillTests {
    @Test func softBlockedBluetoothSwitch() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.rfkill("rfkill0", type: "bluetooth", name: "hci0", soft: "1", hard: "0")
        let state = try RFKill.read(sysfsRoot: tree.root)
        #expect(state.classDirectoryExists)
        #expect(state.bluetoothSwitches == [
            RFKillSwitch(id: "rfkill0", name: "hci0", type: "bluetooth", softBlocked: true, hardBlocked: false),
        ])
        #expect(state.bluetoothSwitches.first?.isBlocked == true)
    }

    @Test func hardBlockedBluetoothSwitch() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.rfkill("rfkill3", type: "bluetooth", name: "hci1", soft: "0", hard: "1")
        let state = try RFKill.read(sysfsRoot: tree.root)
        let item = try #require(state.bluetoothSwitches.first)
        #expect(item.hardBlocked)
        #expect(!item.softBlocked)
        #expect(item.isBlocked)
        #expect(item.name == "hci1")
    }

    @Test func unblockedSwitchIsNotBlocked() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.rfkill("rfkill0", type: "bluetooth", name: "hci0", soft: "0", hard: "0")
        let state = try RFKill.read(sysfsRoot: tree.root)
        #expect(state.bluetoothSwitches.count == 1)
        #expect(state.bluetoothSwitches.first?.isBlocked == false)
    }

    @Test func nonBluetoothEntriesAreIgnoredEvenWhenBroken() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.rfkill("rfkill0", type: "wlan", name: "phy0", soft: "1", hard: "0")
        // A broken wwan entry must not fail the Bluetooth read: its block state is never parsed.
        try tree.rfkill("rfkill1", type: "wwan", name: "modem", soft: "maybe", hard: "")
        try tree.rfkill("rfkill2", type: "bluetooth", name: "hci0", soft: "0", hard: "0")
        // Not an rfkill entry at all.
        try tree.makeDirectory("class/rfkill/other")
        let state = try RFKill.read(sysfsRoot: tree.root)
        #expect(state.bluetoothSwitches.map(\.id) == ["rfkill2"])
    }

    @Test func switchesAreInNaturalOrder() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.rfkill("rfkill10", type: "bluetooth", name: "hci1", soft: "0", hard: "0")
        try tree.rfkill("rfkill2", type: "bluetooth", name: "hci0", soft: "1", hard: "0")
        let state = try RFKill.read(sysfsRoot: tree.root)
        #expect(state.bluetoothSwitches.map(\.id) == ["rfkill2", "rfkill10"])
    }

    @Test func malformedSoftValueIsAClearError() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.rfkill("rfkill0", type: "bluetooth", name: "hci0", soft: "yes", hard: "0")
        let expectedPath = tree.root + "/class/rfkill/rfkill0/soft"
        #expect(throws: RFKillError.malformed(path: expectedPath, contents: "yes", expected: "0 or 1")) {
            try RFKill.read(sysfsRoot: tree.root)
        }
        do {
            _ = try RFKill.read(sysfsRoot: tree.root)
            Issue.record("expected an error")
        } catch {
            #expect(error.description.contains(expectedPath))
            #expect(error.description.contains("\"yes\""))
        }
    }

    @Test func missingHardFileNamesThePathAndErrno() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.write("class/rfkill/rfkill0/type", "bluetooth\n")
        try tree.write("class/rfkill/rfkill0/name", "hci0\n")
        try tree.write("class/rfkill/rfkill0/soft", "0\n")
        let path = tree.root + "/class/rfkill/rfkill0/hard"
        #expect(throws: RFKillError.unreadable(SystemCallError(call: "open(\(path))", code: ENOENT))) {
            try RFKill.read(sysfsRoot: tree.root)
        }
        let description = RFKillError.unreadable(SystemCallError(call: "open(\(path))", code: ENOENT)).description
        #expect(description.contains("ENOENT"))
        #expect(description.contains(path))
    }

    @Test func missingRFKillClassIsReportedNotThrown() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        let state = try RFKill.read(sysfsRoot: tree.root)
        #expect(!state.classDirectoryExists)
        #expect(state.bluetoothSwitches.isEmpty)
    }

    @Test func valuesWithoutTrailingNewlineParse() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        try tree.write("class/rfkill/rfkill0/type", "bluetooth")
        try tree.write("class/rfkill/rfkill0/name", "hci0")
        try tree.write("class/rfkill/rfkill0/soft", "1")
        try tree.write("class/rfkill/rfkill0/hard", "1")
        let item = try #require(try RFKill.read(sysfsRoot: tree.root).bluetoothSwitches.first)
        #expect(item.softBlocked && item.hardBlocked)
    }
}

@Suite struct SysfsTests {
    @Test func bluetoothClassDirectoryListing() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        #expect(BluetoothSysfs.classEntries(sysfsRoot: tree.root) == nil)
        try tree.makeDirectory("class/bluetooth/hci0")
        try tree.makeDirectory("class/bluetooth/hci0:64")
        #expect(BluetoothSysfs.classEntries(sysfsRoot: tree.root) == .success(["hci0", "hci0:64"]))
    }

    @Test func coreModulePresence() throws {
        let tree = try TempTree()
        defer { tree.remove() }
        #expect(!BluetoothKernel.coreModulePresent(sysfsRoot: tree.root))
        try tree.makeDirectory("module/bluetooth")
        #expect(BluetoothKernel.coreModulePresent(sysfsRoot: tree.root))
    }
}
