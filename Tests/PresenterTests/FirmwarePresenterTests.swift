import BLEParsing
import BlueZ
import Domain
import Foundation
import Locking
@testable import Presenters
import Testing
import TestSupport
import Vocabulary

@Suite(.timeLimit(.minutes(1))) struct FirmwarePresenterTests {
    let device = DeviceID(adapter: AdapterID(path: "/org/bluez/hci0"), address: BluetoothAddress(value: 0xD05EED000001))

    @Test func chooseUploadTestAndReset() async throws {
        let service = FakeFirmwareService()
        let presenter = FirmwarePresenter(device: device, service: service)
        presenter.send(.refreshRequested)
        #expect(await waitFor(presenter) { $0.slots.value?.count == 1 })
        let image = MCUbootTestImage.make(size: 9_000, version: (2, 0, 0, 0))
        presenter.send(.imageChosen(name: "app.bin", bytes: image.bytes))
        #expect(await waitFor(presenter) { $0.image?.version == "2.0.0" && $0.image?.hash == image.hash && $0.imageProblem == nil })
        let seen = Lock<[Int]>([])
        let recorder = Task {
            for await s in presenter.states() {
                if case let .uploading(p) = s.job { seen.withLock { $0.append(p.acknowledged) } }
                if case .finished = s.job { return }
            }
        }
        presenter.send(.uploadRequested(mark: .test, reset: true))
        #expect(await waitFor(presenter) {
            if case let .finished(text) = $0.job { return text.contains("boots once on the next reset") && text.contains("restarting") }
            return false
        }, "\(presenter.state.job)")
        await recorder.value
        #expect(seen.withLock { $0 }.last == image.bytes.count, "progress reached the end")
        #expect(presenter.state.slots.value?.first { $0.slot == 1 }?.pending == true)
        #expect(presenter.state.lastUpload?.bytes == image.bytes.count)
        #expect(service.memory.withLock { $0.calls } == ["slots", "upload 9072", "mark \(Hex.string(image.hash)) false", "reset"])
    }

    @Test func aBadImageIsRefusedBeforeAnything() async throws {
        let service = FakeFirmwareService()
        let presenter = FirmwarePresenter(device: device, service: service)
        var bytes = MCUbootTestImage.make(size: 500, version: (1, 0, 0, 0)).bytes
        bytes[40] ^= 0xFF
        presenter.send(.imageChosen(name: "bad.bin", bytes: bytes))
        #expect(await waitFor(presenter) { $0.imageProblem?.contains("does not match its contents") == true })
        presenter.send(.imageChosen(name: "notes.txt", bytes: Array("hello".utf8)))
        #expect(await waitFor(presenter) { $0.image == nil && $0.imageProblem?.contains("notes.txt") == true })
        presenter.send(.uploadRequested(mark: .none, reset: false))
        #expect(await waitFor(presenter) { if case .failed = $0.job { return true }; return false })
        #expect(!service.memory.withLock { $0.calls }.contains { $0.hasPrefix("upload") })
    }

    @Test func cancelStopsTheUploadAndSaysWhereItWas() async throws {
        let service = FakeFirmwareService(stepDelay: .milliseconds(20))
        let presenter = FirmwarePresenter(device: device, service: service)
        presenter.send(.imageChosen(name: "big.bin", bytes: MCUbootTestImage.make(size: 200_000, version: (3, 0, 0, 0)).bytes))
        presenter.send(.uploadRequested(mark: .none, reset: false))
        #expect(await waitFor(presenter) { if case let .uploading(p) = $0.job { return p.acknowledged >= 3000 }; return false })
        presenter.send(.cancelRequested)
        #expect(await waitFor(presenter) { if case let .cancelled(at, total) = $0.job { return at >= 3000 && at < total }; return false })
        // The work really stopped: no further progress and no mark or reset.
        try await Task.sleep(for: .milliseconds(100))
        #expect(!presenter.state.job.isRunning)
        if case .cancelled = presenter.state.job {} else { Issue.record("still \(presenter.state.job)") }
        #expect(service.memory.withLock { $0.calls }.allSatisfy { !$0.hasPrefix("mark") && $0 != "reset" })
    }

    @Test func provisioningSaysTheOutcomeAndKeepsNoPassword() async throws {
        let service = FakeFirmwareService()
        let presenter = FirmwarePresenter(device: device, service: service)
        presenter.send(.provisionRequested(ssid: "HomeNet", password: Array("wrong".utf8)))
        #expect(await waitFor(presenter) { if case let .failed(t) = $0.job { return t.contains("unable to connect") }; return false })
        presenter.send(.provisionRequested(ssid: "HomeNet", password: Array("right".utf8)))
        #expect(await waitFor(presenter) { if case let .finished(t) = $0.job { return t.contains("http://10.0.0.9/") }; return false })
        #expect(!"\(presenter.state)".contains("right") && !"\(presenter.state)".contains("wrong"))
        presenter.send(.provisionRequested(ssid: String(repeating: "x", count: 40), password: []))
        #expect(await waitFor(presenter) { if case let .failed(t) = $0.job { return t.contains("1 to 32 bytes") }; return false })
    }

    @Test func testWithoutAHashTakesTheSecondarySlotAndNeedsOne() async throws {
        let service = FakeFirmwareService()
        let presenter = FirmwarePresenter(device: device, service: service)
        presenter.send(.refreshRequested)
        #expect(await waitFor(presenter) { $0.slots.value != nil })
        presenter.send(.testRequested(hash: nil))
        #expect(await waitFor(presenter) { if case let .failed(t) = $0.job { return t.contains("secondary slot is empty") }; return false })
        presenter.send(.confirmRequested(hash: nil))
        #expect(await waitFor(presenter) { if case let .finished(t) = $0.job { return t.contains("running image is confirmed") }; return false })
        #expect(service.memory.withLock { $0.calls }.last == "mark running true")
    }
}
