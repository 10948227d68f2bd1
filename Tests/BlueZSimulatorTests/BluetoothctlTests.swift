import DBus
import Foundation
import Testing
@testable import BlueZSimulator

/// Debian's bluetoothctl (bluez 5.66 here) against the simulator: the
/// simulator must be faithful enough that a real client works unchanged.
@Suite(.serialized, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/bluetoothctl")))
struct BluetoothctlTests {
    @Test func passiveScanningWithBluetoothctlsMonitor() async throws {
        try await withSimulator(try loadScenario("test-passive.json")) { bus, _, _ in
            let session = try await bluetoothctl([], bus: bus, script: [
                "sleep 0.5",
                "menu monitor",
                "get-supported-info",
                "add-or-pattern 0 22 d2fc",
                // The sensor's service-data change follows within a second;
                // a loaded machine (a full-suite run) needed more than 1.5 s.
                "sleep 4",
                "back",
                "devices",
                "quit",
            ])
            let out = session.output
            // bluetoothctl registers its monitor application as soon as it sees the manager...
            #expect(out.contains("AdvertisementMonitor path registered"), "\(out)")
            #expect(out.contains("Supported Moniter Types: or_patterns"), "\(out)")
            // ...and its pattern (0x16 service data, UUID 0xFCD2 little-endian) finds the BTHome sensor without discovery.
            #expect(out.contains("Advertisement Monitor 0 added"), "\(out)")
            #expect(out.contains("[NEW] Device A4:C1:38:8D:18:B2 SBHT-003C"), "\(out)")
            #expect(out.contains("[CHG] Device A4:C1:38:8D:18:B2 ServiceData Key: 0000fcd2-0000-1000-8000-00805f9b34fb"), "\(out)")
            #expect(!out.contains("Discovering: yes"), "\(out)")
            for other in ["CB:B8:33:4C:88:4F", "A4:C1:38:5A:1B:2C", "C4:7C:8D:6A:3E:01", "E4:5F:01:AA:10:01"] {
                #expect(!out.contains("Device \(other)"), "\(other) matches no pattern")
            }
        }
    }

    @Test func listShowAndScan() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { bus, _, _ in
            let list = try await bluetoothctl(["list"], bus: bus)
            #expect(list.status == 0)
            #expect(list.output.contains("Controller 00:1A:7D:DA:71:13 sim-host [default]"))

            let show = try await bluetoothctl(["show"], bus: bus)
            #expect(show.output.contains("Powered: yes"))
            #expect(show.output.contains("Discovering: no"))
            #expect(show.output.contains("Roles: central"))

            let scan = try await bluetoothctl(["--timeout", "3", "scan", "on"], bus: bus)
            #expect(scan.output.contains("Discovery started"))
            #expect(scan.output.contains("[NEW] Device C0:FE:00:00:00:01 Ruuvi 0001"))
            #expect(scan.output.contains("[NEW] Device A4:C1:38:00:00:02 Heart Strap"))
            #expect(scan.output.contains("Device C0:FE:00:00:00:01 RSSI: -70") || scan.output.contains("Device C0:FE:00:00:00:01 RSSI: -55"))

            // Devices stay for the temporary timeout (2 s) after bluetoothctl left.
            let devices = try await bluetoothctl(["devices"], bus: bus)
            #expect(devices.output.contains("Device A4:C1:38:00:00:02 Heart Strap"))

            let info = try await bluetoothctl(["info", "C0:FE:00:00:00:01"], bus: bus)
            #expect(info.output.contains("Device C0:FE:00:00:00:01 (random)"))
            #expect(info.output.contains("Name: Ruuvi 0001"))
            #expect(info.output.contains("ManufacturerData Key: 0x0499"))
            // Discovery ended with bluetoothctl: RSSI and TxPower were invalidated, as bluetoothd does.
            #expect(!info.output.contains("TxPower:") && !info.output.contains("RSSI:"), "\(info.output)")
        }
    }

    @Test func connectGattMenuAndPair() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { bus, _, client in
            // Discovery by another client keeps the devices around.
            try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })

            let connect = try await bluetoothctl(["connect", "A4:C1:38:00:00:02"], bus: bus)
            #expect(connect.output.contains("Connection successful"))
            // Connect answers at link-up; the GATT objects and ServicesResolved
            // follow. The next session starts once they are there: started
            // meanwhile, bluetoothctl can miss the objects added while it
            // enumerates (seen in CI: list-attributes empty, "No attribute
            // selected"), as it would on a real adapter.
            #expect(try await eventually {
                try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)]?["org.bluez.Device1"]?["ServicesResolved"]
                    == .boolean(true)
            })

            let session = try await bluetoothctl([], bus: bus, script: [
                "sleep 0.5",
                "info A4:C1:38:00:00:02",
                "menu gatt",
                "list-attributes A4:C1:38:00:00:02",
                "select-attribute 00002a38-0000-1000-8000-00805f9b34fb",
                "read",
                "sleep 0.3",
                "select-attribute /org/bluez/hci0/dev_A4_C1_38_00_00_02/service000a/char0010",
                "write \"0x02\"",
                "sleep 0.3",
                "select-attribute /org/bluez/hci0/dev_A4_C1_38_00_00_02/service000a/char000b",
                "notify on",
                "sleep 0.8",
                "notify off",
                "sleep 0.2",
                "back",
                "pair A4:C1:38:00:00:02",
                "sleep 0.5",
                "yes",
                "sleep 0.5",
                "quit",
            ])
            let out = session.output
            #expect(out.contains("Connected: yes"))
            #expect(out.contains("Battery Percentage: 0x57 (87)"))
            #expect(out.contains("/org/bluez/hci0/dev_A4_C1_38_00_00_02/service000a/char000b"))
            #expect(out.contains("Heart Rate Measurement"))
            #expect(out.contains("Body Sensor Location"))
            #expect(out.contains("Client Characteristic Configuration"))
            #expect(out.contains("Attempting to read /org/bluez/hci0/dev_A4_C1_38_00_00_02/service000a/char000e"))
            #expect(out.contains("Attempting to write /org/bluez/hci0/dev_A4_C1_38_00_00_02/service000a/char0010"))
            #expect(out.contains("Notify started"))
            #expect(out.contains("00 4a"))
            #expect(out.contains("Notify stopped"))
            #expect(out.contains("Confirm passkey 123456"))
            #expect(out.contains("Pairing successful"))
            let device = try proxy(client, heart, "org.bluez.Device1")
            #expect(try await device.property("Paired") == .boolean(true))

            let disconnect = try await bluetoothctl(["disconnect", "A4:C1:38:00:00:02"], bus: bus)
            #expect(disconnect.output.contains("Successful disconnected"))
            // Connected=false follows bluetoothd's reply.
            #expect(try await eventually { try await device.property("Connected") == .boolean(false) })
        }
    }

    @Test func connectFailureIsReported() async throws {
        try await withSimulator(try loadScenario("test-faults.json")) { bus, _, client in
            try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")["/org/bluez/hci0/dev_F0_00_00_00_00_01"] != nil })
            let r = try await bluetoothctl(["connect", "F0:00:00:00:00:01"], bus: bus)
            #expect(r.output.contains("Failed to connect: org.bluez.Error.Failed le-connection-abort-by-local"))
        }
    }

    @Test func adapterSettingsPasskeyPairingAndRemove() async throws {
        try await withSimulator(try loadScenario("test-faults.json")) { bus, _, client in
            let adapter = try proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1")
            try await adapter.call("StartDiscovery")
            let lock = "/org/bluez/hci0/dev_F0_00_00_00_00_02"
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(lock)] != nil })
            let session = try await bluetoothctl([], bus: bus, script: [
                "sleep 0.5",
                "system-alias LabBench",
                "sleep 0.3",
                "reset-alias",
                "sleep 0.3",
                "pair F0:00:00:00:00:02",
                "sleep 0.8",
                "654321",
                "sleep 0.8",
                "trust F0:00:00:00:00:02",
                "sleep 0.3",
                "devices Paired",
                "remove F0:00:00:00:00:02",
                "sleep 0.3",
                "power off",
                "sleep 0.3",
                "quit",
            ])
            let out = session.output
            #expect(out.contains("Controller 00:1A:7D:DA:71:13 Alias: LabBench"))
            #expect(out.contains("Controller 00:1A:7D:DA:71:13 Alias: blecompanion-sim"))
            #expect(out.contains("Enter passkey (number in 0-999999)"))
            #expect(out.contains("Pairing successful"))
            #expect(out.contains("Changing F0:00:00:00:00:02 trust succeeded"))
            #expect(out.contains("Device F0:00:00:00:00:02 Keypad Lock"))
            #expect(out.contains("Device has been removed"))
            #expect(out.contains("Changing power off succeeded"))
            #expect(try await adapter.property("Powered") == .boolean(false))
            #expect(try await adapter.property("Alias") == .string("blecompanion-sim"))
            #expect(try await client.managedObjects(destination: "org.bluez")[try ObjectPath(lock)] == nil)
            let refused = try await bluetoothctl(["--timeout", "2", "scan", "on"], bus: bus)
            #expect(refused.output.contains("Failed to start discovery: org.bluez.Error.NotReady"))
        }
    }

    @Test func acquireNotifyAndDroppedLink() async throws {
        try await withSimulator(try loadScenario("test-basic.json")) { bus, _, client in
            try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")[try ObjectPath(heart)] != nil })
            let session = try await bluetoothctl([], bus: bus, script: [
                "sleep 0.5",
                "connect A4:C1:38:00:00:02",
                "sleep 0.8",
                "menu gatt",
                "select-attribute /org/bluez/hci0/dev_A4_C1_38_00_00_02/service000a/char000b",
                "acquire-notify",
                "sleep 1",
                "release-notify",
                "sleep 0.3",
                "quit",
            ])
            let out = session.output
            #expect(out.contains("AcquireNotify success: fd"))
            #expect(out.contains("MTU 247"))
            #expect(out.contains("NotifyAcquired: yes"))
            #expect(out.contains("00 4a"))
            #expect(out.contains("NotifyAcquired: no"))
        }
    }

    @Test func flakyDeviceDropsTheLink() async throws {
        try await withSimulator(try loadScenario("test-faults.json")) { bus, _, client in
            try await proxy(client, "/org/bluez/hci0", "org.bluez.Adapter1").call("StartDiscovery")
            #expect(try await eventually { try await client.managedObjects(destination: "org.bluez")["/org/bluez/hci0/dev_F0_00_00_00_00_01"] != nil })
            let session = try await bluetoothctl([], bus: bus, script: [
                "sleep 0.5",
                "connect F0:00:00:00:00:01",
                "sleep 0.6",
                "connect F0:00:00:00:00:01",
                "sleep 0.6",
                "connect F0:00:00:00:00:01",
                "sleep 1.2",
                "quit",
            ])
            let out = session.output
            #expect(out.components(separatedBy: "Failed to connect: org.bluez.Error.Failed le-connection-abort-by-local").count == 3)
            #expect(out.contains("Connection successful"))
            #expect(out.contains("Device F0:00:00:00:00:01 Connected: yes"))
            #expect(out.contains("Device F0:00:00:00:00:01 Connected: no"))
        }
    }
}
