import BLEParsing
@testable import BlueZSimulator
@testable import ScenarioFormat
import Testing
import TestSupport

/// The simulated mcumgr server as a pure state machine (requests in,
/// answers out), and the scenario key that describes it.
@Suite struct SMPServerTests {
    static let oldHash = [UInt8](repeating: 0xAA, count: 32)

    func request(_ server: inout SMPServerState, _ op: SMP.Op, _ command: SMP.Command, _ body: CBOR = .map([])) -> CBOR {
        let answer = server.respond(to: SMP.Message(op, command, sequence: 9, body: body))
        #expect(answer.header.sequence == 9 && answer.header.op == op.response && answer.header.group == command.group)
        return answer.body
    }

    func image(version: (UInt8, UInt8), size: Int = 600) -> (bytes: [UInt8], hash: [UInt8]) {
        let image = MCUbootTestImage.make(size: size, version: (version.0, version.1, 0, 0))
        return (image.bytes, image.hash)
    }

    func upload(_ server: inout SMPServerState, _ bytes: [UInt8], chunk: Int = 256) -> CBOR {
        var last = CBOR.map([])
        var off = 0
        while off < bytes.count {
            let n = min(chunk, bytes.count - off)
            var members: [(String, CBOR)] = off == 0 ? [("image", .int(0)), ("len", .int(bytes.count))] : []
            members += [("off", .int(off)), ("data", .bytes(Array(bytes[off..<off + n])))]
            last = request(&server, .write, .imageUpload, .object(members))
            guard let next = last["off"]?.int else { return last }
            off = next
        }
        return last
    }

    @Test func uploadTestBootConfirm() {
        var server = SMPServerState(running: "1.0.0", hash: Self.oldHash)
        let (bytes, hash) = image(version: (2, 1))
        #expect(upload(&server, bytes)["off"]?.int == bytes.count)
        #expect(server.slots[1]?.version == "2.1.0" && server.slots[1]?.hash == hash)
        // Testing the running image is refused; testing the new one marks it pending.
        #expect(request(&server, .write, .imageState, .object([("hash", .bytes(Self.oldHash)), ("confirm", .bool(false))]))["rc"]?.int == 3)
        _ = request(&server, .write, .imageState, .object([("hash", .bytes(hash)), ("confirm", .bool(false))]))
        #expect(server.slots[1]?.pending == true)
        _ = request(&server, .write, .reset)
        #expect(server.resetRequested)
        server.boot()
        #expect(server.slots[0]?.version == "2.1.0" && server.slots[0]?.active == true && server.slots[0]?.confirmed == false)
        #expect(server.slots[1]?.version == "1.0.0" && server.slots[1]?.confirmed == true)
        _ = request(&server, .write, .imageState, .object([("confirm", .bool(true))]))
        #expect(server.slots[0]?.confirmed == true && server.slots[1]?.confirmed == false)
        server.boot()
        #expect(server.slots[0]?.version == "2.1.0", "a confirmed image stays")
    }

    @Test func anUnconfirmedTestImageIsRevertedAndAPermanentOneIsNot() {
        var server = SMPServerState(running: "1.0.0", hash: Self.oldHash)
        let (bytes, hash) = image(version: (3, 0))
        _ = upload(&server, bytes)
        _ = request(&server, .write, .imageState, .object([("hash", .bytes(hash)), ("confirm", .bool(false))]))
        server.boot()
        #expect(server.slots[0]?.version == "3.0.0")
        server.boot()
        #expect(server.slots[0]?.version == "1.0.0" && server.slots[0]?.confirmed == true && server.slots[1]?.version == "3.0.0")

        _ = request(&server, .write, .imageState, .object([("hash", .bytes(hash)), ("confirm", .bool(true))]))
        #expect(server.slots[1]?.permanent == true)
        server.boot()
        #expect(server.slots[0]?.version == "3.0.0" && server.slots[0]?.confirmed == true)
        server.boot()
        #expect(server.slots[0]?.version == "3.0.0")
    }

    @Test func theDeviceSaysWhereAnUploadGoesOn() {
        var server = SMPServerState(running: "1.0.0", hash: Self.oldHash)
        let (bytes, _) = image(version: (2, 0))
        let sha = [UInt8](repeating: 5, count: 32)
        let first: [(String, CBOR)] = [("image", .int(0)), ("len", .int(bytes.count)), ("sha", .bytes(sha)), ("off", .int(0)),
                                       ("data", .bytes(Array(bytes[0..<100])))]
        #expect(request(&server, .write, .imageUpload, .object(first))["off"]?.int == 100)
        // A chunk at the wrong offset is answered with the right one, and not taken.
        #expect(request(&server, .write, .imageUpload, .object([("off", .int(300)), ("data", .bytes([1, 2, 3]))]))["off"]?.int == 100)
        // The same image again from 0 (same sha): the device carries on.
        #expect(request(&server, .write, .imageUpload, .object(first))["off"]?.int == 100)
        // Another image from 0: a new upload.
        var other = first
        other[2] = ("sha", .bytes([UInt8](repeating: 6, count: 32)))
        #expect(request(&server, .write, .imageUpload, .object(other))["off"]?.int == 100)
        // Not an MCUboot image: refused at the first chunk.
        let junk: [(String, CBOR)] = [("image", .int(0)), ("len", .int(50)), ("off", .int(0)), ("data", .bytes([UInt8](repeating: 0, count: 50)))]
        #expect(request(&server, .write, .imageUpload, .object(junk))["rc"]?.int == 3)
        // Unknown commands: not supported.
        #expect(server.respond(to: SMP.Message(header: SMP.Header(op: .read, length: 1, group: 63, sequence: 1, command: 0), body: .map([]))).body["rc"]?.int == 8)
    }

    @Test func faults() {
        var spec = SMPSpec()
        spec.busyChunks = 2
        spec.badHash = true
        spec.disconnectAfterBytes = 300
        var server = SMPServerState(spec)
        let (bytes, _) = image(version: (2, 0))
        let start: [(String, CBOR)] = [("image", .int(0)), ("len", .int(bytes.count)), ("off", .int(0)), ("data", .bytes(Array(bytes[0..<256])))]
        #expect(request(&server, .write, .imageUpload, .object(start))["rc"]?.int == 10)
        #expect(request(&server, .write, .imageUpload, .object(start))["rc"]?.int == 10)
        #expect(request(&server, .write, .imageUpload, .object(start))["off"]?.int == 256)
        #expect(!server.disconnectRequested)
        #expect(request(&server, .write, .imageUpload, .object([("off", .int(256)), ("data", .bytes(Array(bytes[256..<512])))]))["off"]?.int == 512)
        #expect(server.disconnectRequested, "past 300 bytes the link drops (once)")
        server.disconnectRequested = false
        let rest = request(&server, .write, .imageUpload, .object([("off", .int(512)), ("data", .bytes(Array(bytes[512...])))]))
        #expect(rest["rc"]?.int == 9, "a bad hash: corrupt")
        #expect(server.slots[1] == nil && !server.disconnectRequested)
        // The running image's hash comes from its version when the scenario gives none.
        #expect(server.slots[0]?.hash == McubootImage.digest("SHA256", Array("1.0.0".utf8)[...]))
    }

    @Test func theScenarioKeyAddsTheService() throws {
        let s = try Scenario.parse("""
            { "devices": [ { "address": "D0:00:00:00:00:01", "smp": { "version": "1.2.3.4", "bufferSize": 512, "faults": { "busyChunks": 1 } } } ] }
            """)
        let d = try #require(s.devices.first)
        #expect(d.smp?.version == "1.2.3.4" && d.smp?.bufferSize == 512 && d.smp?.busyChunks == 1)
        #expect(d.gatt.first?.uuid == "8d53dc1d-1db7-4cd3-868b-8a527460aa84")
        #expect(d.gatt.first?.characteristics.first?.flags == ["write-without-response", "notify"])
        for (text, message) in [
            (#"{ "version": "1.2" }"#, "an image version is major.minor.revision"),
            (#"{ "hash": "00" }"#, "an image hash is 32 bytes"),
            (#"{ "bufferSize": 10 }"#, "bufferSize"),
            (#"{ "faults": { "dropAt": 5 } }"#, "unknown member \"dropAt\""),
        ] {
            #expect(throws: ScenarioError.self) { try Scenario.parse(#"{ "devices": [ { "address": "D0:00:00:00:00:01", "smp": \#(text) } ] }"#) }
            do { _ = try Scenario.parse(#"{ "devices": [ { "address": "D0:00:00:00:00:01", "smp": \#(text) } ] }"#) } catch {
                #expect(error.description.contains(message), "\(error.description)")
            }
        }
    }
}

/// The simulated Improv server: frames in, what it does out.
@Suite struct ImprovServerTests {
    func spec(_ state: UInt8) -> ImprovSpec {
        var s = ImprovSpec()
        s.state = state
        s.networks = ["HomeNet": "secret pw"]
        s.url = "http://10.0.0.5/"
        return s
    }

    @Test func provisioningSucceedsWithTheRightPasswordOnly() throws {
        var server = ImprovServerState(spec(2))
        let wrong = try #require(Improv.RPC.wifiSettings(ssid: Array("HomeNet".utf8), password: Array("nope".utf8)).bytes)
        #expect(server.written(wrong) == .provisioning(ssid: Array("HomeNet".utf8), password: Array("nope".utf8)))
        #expect(server.state == .provisioning)
        #expect(server.joined(ssid: Array("HomeNet".utf8), password: Array("nope".utf8)) == nil)
        #expect(server.state == .authorized)
        let right = try #require(Improv.RPC.wifiSettings(ssid: Array("HomeNet".utf8), password: Array("secret pw".utf8)).bytes)
        _ = server.written(right)
        let joined = server.joined(ssid: Array("HomeNet".utf8), password: Array("secret pw".utf8))
        let result = try #require(joined)
        #expect(try Improv.RPC.parse(result) == Improv.RPC(command: 1, strings: [Array("http://10.0.0.5/".utf8)]))
        #expect(server.state == .provisioned)
    }

    @Test func errors() throws {
        var server = ImprovServerState(spec(1))
        let settings = try #require(Improv.RPC.wifiSettings(ssid: Array("HomeNet".utf8), password: Array("secret pw".utf8)).bytes)
        #expect(server.written(settings) == .error(.notAuthorized))
        #expect(server.written([0x01, 0x00, 0x00]) == .error(.invalidRPC), "bad checksum")
        #expect(server.written(try #require(Improv.RPC(command: 9).bytes)) == .error(.unknownCommand))
        #expect(server.written(try #require(Improv.RPC(command: 2).bytes)) == .identify)
        #expect(server.identified == 1)
    }

    @Test func theScenarioKeyAddsServiceAndAdvertisement() throws {
        let s = try Scenario.parse("""
            { "devices": [ { "address": "E0:00:00:00:00:01", "improv": { "state": "authorizationRequired", "networks": { "Net": "pw" } } } ] }
            """)
        let d = try #require(s.devices.first)
        #expect(d.improv?.state == 1 && d.improv?.networks == ["Net": "pw"])
        #expect(d.gatt.first?.uuid == Improv.service.string && d.gatt.first?.characteristics.count == 5)
        #expect(d.uuids.contains(Improv.service.string))
        #expect(d.serviceData[Improv.serviceDataUUID.string] == [1, 1, 0, 0, 0, 0])
        #expect(throws: ScenarioError.self) {
            try Scenario.parse(#"{ "devices": [ { "address": "E0:00:00:00:00:01", "improv": { "state": "ready" } } ] }"#)
        }
    }
}
