import Foundation
import Testing
import BlueZ
@testable import Domain
import Vocabulary

@Suite struct SettingsTests {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blecompanion-settings-\(UUID().uuidString)")

    @Test func roundTripWithBindkeysOwnerOnly() throws {
        defer { try? FileManager.default.removeItem(at: dir) }
        let ruuvi = try BluetoothAddress("CB:B8:33:4C:88:4F")
        let key = (0..<16).map { UInt8($0 * 17) }
        do {
            let store = try SettingsStore(directory: dir)
            #expect(store.current == Settings())
            try store.update {
                $0.watched = [ruuvi]
                $0.adapter = "hci1"
                $0.bindkeys[ruuvi] = key
            }
        }
        let keysFile = dir.appendingPathComponent("bindkeys.json").path
        let attributes = try FileManager.default.attributesOfItem(atPath: keysFile)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        // The bindkey is not in settings.json.
        let main = try String(contentsOf: dir.appendingPathComponent("settings.json"), encoding: .utf8)
        #expect(!main.contains("00112233") && main.contains("CB:B8:33:4C:88:4F"))
        let reopened = try SettingsStore(directory: dir)
        #expect(reopened.current == Settings(watched: [ruuvi], adapter: "hci1", bindkeys: [ruuvi: key]))
        #expect(FileManager.default.fileExists(atPath: keysFile))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["bindkeys.json", "settings.json"])
    }

    @Test func badFilesSayWhatIsWrong() throws {
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let main = dir.appendingPathComponent("settings.json")
        try Data(#"{"watched": ["not-an-address"]}"#.utf8).write(to: main)
        #expect(throws: DomainError.self) { try SettingsStore(directory: dir) }
        do { _ = try SettingsStore(directory: dir) } catch {
            #expect(error.description.hasPrefix("\(main.path) is not valid settings: .watched[0]"), "\(error)")
        }
        try Data(#"{"watched": []}"#.utf8).write(to: main)
        let keys = dir.appendingPathComponent("bindkeys.json")
        try Data(#"{"CB:B8:33:4C:88:4F": "00112233"}"#.utf8).write(to: keys)
        chmod(keys.path, 0o600)
        do { _ = try SettingsStore(directory: dir); Issue.record("short bindkey accepted") } catch {
            #expect(error.description == "\(keys.path): the bindkey of CB:B8:33:4C:88:4F must be 32 hex digits (16 bytes)")
        }
        try Data(#"{"CB:B8:33:4C:88:4F": "00112233445566778899aabbccddeeff"}"#.utf8).write(to: keys)
        chmod(keys.path, 0o644)
        do { _ = try SettingsStore(directory: dir); Issue.record("world-readable bindkeys accepted") } catch {
            #expect(error.description.contains("is readable by other users (mode 644); run `chmod 600"))
        }
        chmod(keys.path, 0o600)
        #expect(try SettingsStore(directory: dir).current.bindkeys.count == 1)
    }

    @Test func stateDirectoryFollowsXDG() throws {
        #expect(try SettingsStore.defaultDirectory(override: "/srv/ble").path == "/srv/ble")
        #expect(try SettingsStore.defaultDirectory(environment: ["XDG_STATE_HOME": "/x/state", "HOME": "/home/u"]).path == "/x/state/blecompanion")
        #expect(try SettingsStore.defaultDirectory(environment: ["HOME": "/home/u"]).path == "/home/u/.local/state/blecompanion")
        #expect(throws: DomainError.self) { try SettingsStore.defaultDirectory(environment: [:]) }
    }
}
