import BLEParsing
import BlueZ
import BlueZSimulator
import DBus
@testable import Domain
import Foundation
import Locking
import ScenarioFormat
import Testing
import TestSupport
import Vocabulary

/// The SMP client (``SMPSession``, ``FirmwareUpload``) over the real BlueZ
/// client against the simulator's mcumgr server (fixtures/scenarios/
/// test-firmware.json) on a private dbus-daemon: the whole update — upload,
/// test, reset into the new image, confirm — and what goes wrong on the way.
@Suite(.serialized, .timeLimit(.minutes(2))) struct FirmwareUpdateIntegrationTests {
    static let adapter = AdapterID(path: "/org/bluez/hci0")
    static func device(_ n: Int) -> DeviceID {
        DeviceID(adapter: adapter, address: (try? BluetoothAddress("D0:5E:ED:00:00:0\(n)")) ?? BluetoothAddress(value: 0))
    }

    /// A session factory for `device` that waits until bluetoothd knows it (discovery is on).
    static func connector(_ sim: Simulated, _ device: DeviceID) -> FirmwareUpload.Connect {
        let client = sim.client
        return { () async throws(DomainError) -> SMPSession in
            do { try await client.mirror.wait(for: "\(device.address)", timeout: .seconds(10)) { $0.devices[device] != nil } } catch {
                throw DomainError("\(device.address) not seen: \(error)")
            }
            return try await SMPSession.open(client: client, device: device, connectTimeout: .seconds(20), timeout: .seconds(10))
        }
    }

    static func start() async throws -> (Simulated, DiscoverySession) {
        let sim = try await Simulated.start("test-firmware.json")
        do {
            let discovery = try await sim.client.discover(adapter: adapter)
            return (sim, discovery)
        } catch {
            sim.bus.stop()
            throw error
        }
    }

    @Test func echoParametersAndTheRunningImage() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let session = try await Self.connector(sim, Self.device(1))()
        #expect(try await session.echo("ping 1") == "ping 1")
        let parameters = try await session.parameters()
        #expect(parameters?.bufferSize == 2475 && parameters?.bufferCount == 4)
        let slots = try await session.imageState()
        #expect(slots.count == 1)
        #expect(slots.first?.version == "1.0.0" && slots.first?.active == true && slots.first?.confirmed == true)
        // The scenario gives no hash: the simulator derives it from the version.
        #expect(slots.first?.hash == McubootImage.digest("SHA256", Array("1.0.0".utf8)[...]))
        await session.close()
    }

    @Test func uploadTestResetIntoTheNewImageAndConfirmIt() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let image = MCUbootTestImage.make(size: 100_000, version: (3, 1, 4, 15))
        let steps = Lock<[UploadProgress]>([])
        let outcome = try await FirmwareUpload.run(image.bytes, connect: Self.connector(sim, Self.device(1))) { p in
            steps.withLock { $0.append(p) }
        }
        #expect(outcome.bytes == image.bytes.count && outcome.reconnects == 0 && outcome.resumedFrom == nil)
        #expect(outcome.window == 4, "the device buffers 4 requests; the default window is 4")
        #expect(outcome.slot?.slot == 1 && outcome.slot?.version == "3.1.4.15" && outcome.slot?.hash == image.hash)
        let seen = steps.withLock { $0 }
        #expect(seen.last?.acknowledged == image.bytes.count)
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.acknowledged <= $1.acknowledged }, "progress only goes forward")
        #expect(seen.count > 10, "a 100 kB image in chunks of at most 2475 bytes reports progress often: \(seen.count)")

        var session = try await Self.connector(sim, Self.device(1))()
        let marked = try await session.setImageState(hash: image.hash, confirm: false)
        #expect(marked.first { $0.slot == 1 }?.pending == true)
        #expect(marked.first { $0.slot == 1 }?.permanent == false)
        try await session.reset()
        // The device drops the link after answering, and boots into the test image.
        try await sim.client.mirror.wait(for: "the reset to drop the link", timeout: .seconds(5)) { $0.devices[Self.device(1)]?.connected == false }
        await session.close()
        session = try await Self.connector(sim, Self.device(1))()
        let booted = try await session.imageState()
        #expect(booted.first { $0.slot == 0 }?.version == "3.1.4.15")
        #expect(booted.first { $0.slot == 0 }?.active == true && booted.first { $0.slot == 0 }?.confirmed == false)
        #expect(booted.first { $0.slot == 1 }?.version == "1.0.0" && booted.first { $0.slot == 1 }?.confirmed == true,
                "the old image stays in slot 1 as the one MCUboot reverts to")
        let confirmed = try await session.setImageState(hash: nil, confirm: true)
        #expect(confirmed.first { $0.slot == 0 }?.confirmed == true)
        #expect(confirmed.first { $0.slot == 1 }?.confirmed == false)
        await session.close()
    }

    @Test func aTestImageThatIsNotConfirmedIsRevertedOnTheNextReset() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let image = MCUbootTestImage.make(size: 5_000, version: (2, 0, 0, 0))
        _ = try await FirmwareUpload.run(image.bytes, connect: Self.connector(sim, Self.device(1)))
        for _ in 0..<2 {
            let session = try await Self.connector(sim, Self.device(1))()
            if try await session.imageState().contains(where: { $0.slot == 1 && $0.hash == image.hash && !$0.pending }) {
                _ = try await session.setImageState(hash: image.hash, confirm: false)
            }
            try await session.reset()
            try await sim.client.mirror.wait(for: "the reset", timeout: .seconds(5)) { $0.devices[Self.device(1)]?.connected == false }
            await session.close()
        }
        let session = try await Self.connector(sim, Self.device(1))()
        let slots = try await session.imageState()
        #expect(slots.first { $0.slot == 0 }?.version == "1.0.0" && slots.first { $0.slot == 0 }?.confirmed == true)
        #expect(slots.first { $0.slot == 1 }?.version == "2.0.0")
        await session.close()
    }

    @Test func anUploadResumesAfterTheLinkDropsMidway() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let image = MCUbootTestImage.make(size: 120_000, version: (1, 1, 0, 0))
        let outcome = try await FirmwareUpload.run(image.bytes, connect: Self.connector(sim, Self.device(2)))
        #expect(outcome.reconnects == 1)
        // The device dropped the link once it had 40 000 bytes: it went on from what it had kept.
        let resumed = try #require(outcome.resumedFrom)
        #expect(resumed >= 40_000 && resumed < 50_000, "resumed from \(resumed)")
        #expect(outcome.slot?.hash == image.hash)
    }

    @Test func aBusyDeviceIsWaitedOutAndSmallBuffersGiveSmallChunks() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let image = MCUbootTestImage.make(size: 20_000, version: (2, 2, 0, 0))
        let outcome = try await FirmwareUpload.run(image.bytes, connect: Self.connector(sim, Self.device(3)))
        #expect(outcome.busy == 3)
        #expect(outcome.chunk > 400 && outcome.chunk < 512, "a request fits the device's 512-byte buffer: \(outcome.chunk) data bytes")
        #expect(outcome.slot?.hash == image.hash)
    }

    @Test func aCorruptImageIsRefusedAndTheRunningOneStays() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let image = MCUbootTestImage.make(size: 8_000, version: (9, 0, 0, 0))
        await #expect { _ = try await FirmwareUpload.run(image.bytes, connect: Self.connector(sim, Self.device(4))) } throws: { error in
            "\(error)".contains("corrupt")
        }
        let session = try await Self.connector(sim, Self.device(4))()
        let slots = try await session.imageState()
        #expect(slots.count == 1 && slots.first?.version == "1.0.0" && slots.first?.active == true)
        await session.close()
    }

    @Test func somethingThatIsNotAnImageIsRefusedAtTheFirstChunk() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        await #expect { _ = try await FirmwareUpload.run([UInt8](repeating: 0x55, count: 4_000), connect: Self.connector(sim, Self.device(1))) } throws: { error in
            "\(error)".contains("refused the image") && "\(error)".contains("invalid value")
        }
    }

    @Test func aCancelledUploadLeavesTheDeviceRunningItsImageAndResumesLater() async throws {
        let (sim, discovery) = try await Self.start()
        defer { sim.bus.stop() }
        _ = discovery
        let image = MCUbootTestImage.make(size: 200_000, version: (4, 0, 0, 0))
        let connect = Self.connector(sim, Self.device(1))
        let reached = Lock(0)
        let task = Task {
            try await FirmwareUpload.run(image.bytes, connect: connect) { p in
                reached.withLock { $0 = p.acknowledged }
                // Cancelled from inside once a third is there (the progress is reported on the upload's task).
                if p.acknowledged > 60_000 { withUnsafeCurrentTask { $0?.cancel() } }
            }
        }
        await #expect { _ = try await task.value } throws: { error in "\(error)".contains("stopped at byte") }
        #expect(reached.withLock { $0 } > 60_000 && reached.withLock { $0 } < 80_000)
        let session = try await connect()
        let slots = try await session.imageState()
        #expect(slots.first { $0.slot == 0 }?.version == "1.0.0" && slots.first { $0.slot == 0 }?.active == true)
        #expect(!slots.contains { $0.slot == 1 }, "a half upload is not an image")
        await session.close()
        let outcome = try await FirmwareUpload.run(image.bytes, connect: connect)
        let resumed = try #require(outcome.resumedFrom)
        #expect(resumed > 60_000 && resumed < image.bytes.count)
        #expect(outcome.slot?.hash == image.hash)
    }

    @Test func aDeviceWithoutSMPIsNamedAsSuch() async throws {
        let sim = try await Simulated.start("test-basic.json")
        defer { sim.bus.stop() }
        let discovery = try await sim.client.discover(adapter: Self.adapter)
        _ = discovery
        let strap = DeviceID(adapter: Self.adapter, address: try BluetoothAddress("A4:C1:38:00:00:02"))
        try await sim.client.mirror.wait(for: "strap", timeout: .seconds(5)) { $0.devices[strap] != nil }
        await #expect { _ = try await SMPSession.open(client: sim.client, device: strap) } throws: { error in
            "\(error)".contains("has no SMP service")
        }
    }

    @Test func aRequestFitsTheBufferWhateverTheOffset() {
        let file = [UInt8](repeating: 7, count: 300_000)
        let sha = [UInt8](repeating: 1, count: 32)
        for limit in [128, 200, 255, 256, 257, 280, 512, 2475, 4096] {
            for offset in [0, 1, 23, 24, 255, 256, 65_535, 65_536, 299_000] {
                let n = FirmwareUpload.dataBytes(limit: limit, offset: offset, total: file.count, sha: sha, image: 0)
                let request = SMP.Message(.write, .imageUpload, sequence: 0, body: FirmwareUpload.body(file, offset: offset, count: n, sha: sha, image: 0))
                #expect(request.bytes.count <= limit, "limit \(limit) offset \(offset): \(request.bytes.count) bytes")
                #expect(request.bytes.count >= limit - 2 || offset + n == file.count, "limit \(limit) offset \(offset): only \(request.bytes.count) bytes used")
            }
        }
    }
}
