import Dispatch
import Testing
@testable import BLEParsing
import Vocabulary

/// SplitMix64: small, seeded, reproducible.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// CPU-heavy test bodies (thousands of decodes in a debug build) run here,
/// one at a time, on a thread of their own. Run on the cooperative pool (two
/// threads on 2 cores), the parameterised cases held both threads for
/// seconds at the start of the suite, and every async test meanwhile (time
/// limits, simulator timelines, HTTP timeouts) stalled and now and then
/// failed; `Task.yield()` in the loops did not help, the yielded slices queue
/// behind each other. Bodies return what the test then checks: `#expect`
/// belongs to the test's task.
enum HeavyWork {
    private static let queue = DispatchQueue(label: "blecompanion.tests.heavy")
    static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in queue.async { continuation.resume(returning: body()) } }
    }
}

@Suite("Advertisement decoders never trap")
struct AdvPropertyTests {
    typealias Decoder = @Sendable ([UInt8]) throws(DecodeError) -> AdvertisementModel

    static let mac: BluetoothAddress = BluetoothAddress(value: 0x5448_E68F_80A5)
    static let key: [UInt8] = (try? parseHex("231d39c1d7cc1ab1aee224cd096db932")) ?? []
    static let pvvxKey: [UInt8] = (try? parseHex("00112233445566778899aabbccddeeff")) ?? []
    static let xiaomiKey: [UInt8] = (try? parseHex("814aac74c4f17b6c1581e1ab87816b99")) ?? []

    static let decoders: [(String, Decoder)] = [
        ("bthome_v2", { d throws(DecodeError) in try BTHome.decodeV2(d) }),
        ("bthome_v2_key", { d throws(DecodeError) in try BTHome.decodeV2(d, mac: mac, bindkey: key) }),
        ("bthome_v1", { d throws(DecodeError) in try BTHome.decodeV1(d, uuid: 0x181C) }),
        ("bthome_v1_enc", { d throws(DecodeError) in try BTHome.decodeV1(d, uuid: 0x181E, mac: mac, bindkey: key) }),
        ("mibeacon", { d throws(DecodeError) in try MiBeacon.decode(d, mac: mac) }),
        ("mibeacon_key", { d throws(DecodeError) in try MiBeacon.decode(d, mac: mac, bindkey: xiaomiKey) }),
        ("atc", { d throws(DecodeError) in try ATCThermometer.decode(d) }),
        ("atc_key", { d throws(DecodeError) in
            try ATCThermometer.decode(d, mac: BluetoothAddress(value: 0xA4C1_3889_DF88), bindkey: pvvxKey) }),
        ("ruuvi", { d throws(DecodeError) in try Ruuvi.decode(d) }),
        ("ibeacon", { d throws(DecodeError) in try IBeacon.decode(d) }),
        ("eddystone", { d throws(DecodeError) in try Eddystone.decode(d) }),
        ("govee_ec88", { d throws(DecodeError) in try Govee.decode(companyID: 0xEC88, data: d) }),
        ("govee_0001", { d throws(DecodeError) in try Govee.decode(companyID: 0x0001, data: d) }),
        ("govee_8801", { d throws(DecodeError) in try Govee.decode(companyID: 0x8801, data: d) }),
        ("inkbird_sps", { d throws(DecodeError) in try Inkbird.decode(companyID: 0x1234, data: d, name: "sps") }),
        ("inkbird_tps", { d throws(DecodeError) in try Inkbird.decode(companyID: 0xFFFF, data: d, name: "tps") }),
        ("inkbird_bbq", { d throws(DecodeError) in try Inkbird.decode(companyID: 0x0000, data: d, name: "iBBQ") }),
        ("inkbird_2449", { d throws(DecodeError) in try Inkbird.decode(companyID: 0x2449, data: d, name: nil) }),
        ("qingping", { d throws(DecodeError) in try Qingping.decode(d) }),
        ("switchbot_sd", { d throws(DecodeError) in try SwitchBot.decode(serviceData: d, manufacturerData: nil) }),
        ("switchbot_mfr", { d throws(DecodeError) in try SwitchBot.decode(serviceData: nil, manufacturerData: d) }),
        ("ad_parse", { d throws(DecodeError) in try AdvertisingData.parse(d).model }),
    ]

    /// Valid payloads (from the vector files) to mutate, per decoder name.
    static let seeds: [String: [String]] = [
        "bthome_v2": ["4002ca0903bf13", "4002ca0902cf0902cf0803b71803b717015d", "44530c48656c6c6f20576f726c6421",
                      "40f00100f100010204f2000106", "42b2188d38c1a404138a01"],
        "bthome_v2_key": ["41a47266c95f730011223378237214", "43a5808fe64854f196c06ffb4900112233f08ecbde"],
        "bthome_v1": ["2302ca090303bf13", "4306fe70", "a5505d396164", "033c0103"],
        "bthome_v1_enc": ["fba435e4d3c312fb0011223357d90a99"],
        "mibeacon": ["50305b05034c94b438c1a40d10041001ea01", "71205d01015d01008d7cc40d081001400910025702",
                     "7022db006fc16fddf9810009002005c60d630d51"],
        "mibeacon_key": ["5858480b685f12342d585a0b1841e2aa000e00a4964fb5"],
        "atc": ["582d341233dc00e03e490b2c2e", "dc3312342d582f09aa173d0b4b7c05"],
        "atc_key": ["231fd26de8d48e9b22cd42"],
        "ruuvi": ["0512FC5394C37C0004FFFC040CAC364200CDCBB8334C884F", "03291A1ECE1EFC18F94202CA0B53"],
        "ibeacon": ["0215426c7565436861726d426561636f6e730efe1355c5"],
        "eddystone": ["00e800112233445566778899aabbccddeeff0000", "10ee03676f6f2e676c2f53367a543650",
                      "20000bb81980000003e800008ca0", "30f40102030405060708"],
        "govee_ec88": ["000341c26400", "00e609bc126402", "00ba0af90f63020101"],
        "govee_0001": ["010103465464", "010103c730640000", "010101002af7640003"],
        "govee_8801": ["ec0001010a0aa40664"],
        "inkbird_sps": ["c71200c83d5606"],
        "inkbird_tps": ["000000c66e0d06"],
        "inkbird_bbq": ["000030e2837db5020401fa000401fa00"],
        "inkbird_2449": ["07110098d80013026401900400000000"],
        "qingping": ["880ed6888fe6485401040301160212040200020013022502", "4812cdd560342d580804012d01000f01b7"],
        "switchbot_sd": ["5400e4069835", "64406405007500f812", "7300e2006601"],
        "switchbot_mfr": ["d7c17d5deb43de03069835"],
        "ad_parse": ["0201060B094449592D73656E736F720A16D2FC4002C40903BF13"],
    ]

    /// Checks the contract for one input: a model whose JSON renders, or a
    /// typed error whose offset lies inside the input.
    static func probe(_ decode: Decoder, _ input: [UInt8]) -> Bool {
        do {
            let m = try decode(input)
            return !m.jsonString.isEmpty && !m.formatName.isEmpty
        } catch {
            if let o = error.offset { return o >= 0 && o <= input.count }
            return !error.description.isEmpty
        }
    }

    static func mutate(_ base: [UInt8], _ rng: inout SeededGenerator) -> [UInt8] {
        var b = base
        switch rng.next() % 5 {
        case 0 where !b.isEmpty:  // flip a bit
            let i = Int(rng.next() % UInt64(b.count)); b[i] ^= UInt8(1 << (rng.next() % 8))
        case 1 where !b.isEmpty:  // truncate
            b = Array(b.prefix(Int(rng.next() % UInt64(b.count))))
        case 2:  // extend
            for _ in 0..<(1 + rng.next() % 4) { b.append(UInt8(truncatingIfNeeded: rng.next())) }
        case 3 where !b.isEmpty:  // replace a byte
            let i = Int(rng.next() % UInt64(b.count)); b[i] = UInt8(truncatingIfNeeded: rng.next())
        default:  // several random bytes
            for _ in 0..<3 where !b.isEmpty {
                let i = Int(rng.next() % UInt64(b.count)); b[i] = UInt8(truncatingIfNeeded: rng.next())
            }
        }
        return b
    }

    @Test("random byte strings (0...64 bytes) decode or throw DecodeError", arguments: decoders.map(\.0))
    func random(_ name: String) async {
        guard let decode = Self.decoders.first(where: { $0.0 == name })?.1 else {
            Issue.record("no decoder \(name)"); return
        }
        let (bad, decoded) = await HeavyWork.run { Self.random(decode, name) }
        #expect(bad == 0, "\(name): \(bad) inputs broke the contract")
        #expect(decoded >= 0)
    }

    /// How many of 4000 random inputs broke the contract, and how many decoded.
    static func random(_ decode: Decoder, _ name: String) -> (bad: Int, decoded: Int) {
        var rng = SeededGenerator(seed: 0xAD0 ^ UInt64(name.utf8.count) &* 0x1_0000_0001)
        var bad = 0
        var decoded = 0
        for _ in 0..<4000 {
            let n = Int(rng.next() % 65)
            var input = [UInt8](repeating: 0, count: n)
            for i in 0..<n { input[i] = UInt8(truncatingIfNeeded: rng.next()) }
            // Steer a share of inputs to the decoder's leading bytes so deeper paths run.
            if let seed = Self.seeds[name]?.first.flatMap({ try? parseHex($0) }), n > 2, rng.next() % 2 == 0 {
                for i in 0..<min(2, seed.count) { input[i] = seed[i] }
            }
            if !Self.probe(decode, input) { bad += 1 }
            if (try? decode(input)) != nil { decoded += 1 }
        }
        return (bad, decoded)
    }

    @Test("mutations of valid payloads decode or throw DecodeError", arguments: decoders.map(\.0))
    func mutations(_ name: String) async throws {
        guard let decode = Self.decoders.first(where: { $0.0 == name })?.1 else {
            Issue.record("no decoder \(name)"); return
        }
        let seeds = (Self.seeds[name] ?? []).compactMap { try? parseHex($0) }
        #expect(!seeds.isEmpty)
        // The unmutated seeds decode.
        for s in seeds { #expect((try? decode(s)) != nil, "\(name) seed \(hexString(bytes: s)) should decode") }
        guard !seeds.isEmpty else { return }
        let bad = await HeavyWork.run {
            var rng = SeededGenerator(seed: 0x5EED_0000 &+ UInt64(name.utf8.count))
            var bad = 0
            for i in 0..<3000 {
                var b = seeds[i % seeds.count]
                for _ in 0..<(1 + rng.next() % 3) { b = Self.mutate(b, &rng) }
                if !Self.probe(decode, b) { bad += 1 }
            }
            return bad
        }
        #expect(bad == 0)
    }

    @Test("the detector survives random advertisements")
    func detector() async {
        let (total, emptyRaw) = await HeavyWork.run { Self.detectorRun() }
        #expect(emptyRaw == 0, "raw advertisements that gave no result")
        #expect(total > 0)
    }

    static func detectorRun() -> (total: Int, emptyRaw: Int) {
        var rng = SeededGenerator(seed: 42)
        var emptyRaw = 0
        let uuids: [UInt16] = [0xFCD2, 0x181C, 0x181E, 0xFE95, 0x181A, 0xFEAA, 0xFDCD, 0xFD3D, 0x0D00, 0x180F]
        let companies: [UInt16] = [0x0499, 0x004C, 0xEC88, 0x0001, 0x8801, 0x0969, 0x2449, 0x1234]
        let names: [String?] = [nil, "sps", "tps", "iBBQ", "xBBQ", "GVH5075_1234", "ATC_123456"]
        var total = 0
        for _ in 0..<3000 {
            func randomBytes() -> [UInt8] {
                (0..<Int(rng.next() % 30)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            }
            let adv = Advertisement(
                address: rng.next() % 2 == 0 ? BluetoothAddress(value: rng.next() & 0xFFFF_FFFF_FFFF) : nil,
                localName: names[Int(rng.next() % UInt64(names.count))],
                manufacturerData: [ManufacturerData(companyID: companies[Int(rng.next() % UInt64(companies.count))],
                                                    data: randomBytes())],
                serviceData: [ServiceData(uuid: BluetoothUUID(uuid16: uuids[Int(rng.next() % UInt64(uuids.count))]),
                                          data: randomBytes())])
            let results = AdvertisementDecoder.decode(adv, bindkey: rng.next() % 2 == 0 ? Self.key : nil)
            total += results.count
            var raw = [UInt8]()
            for _ in 0..<Int(rng.next() % 40) { raw.append(UInt8(truncatingIfNeeded: rng.next())) }
            let rawResults = AdvertisementDecoder.decodeRawAdvertisement(bytes: raw)
            if rawResults.isEmpty { emptyRaw += 1 }
        }
        return (total, emptyRaw)
    }
}
