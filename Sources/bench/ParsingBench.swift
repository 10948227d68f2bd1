import BLEParsing
import Foundation
#if canImport(Glibc)
import Glibc
import Vocabulary
#endif

/// `bench parsing`: per-format decode cost of BLEParsing in ns per payload.
///
/// The corpus is every vector in fixtures/vectors/{adv,gatt} that decodes
/// successfully (error vectors are left out), grouped by format. Each group
/// is decoded in passes for about `--min-time` seconds per round, 5 rounds,
/// with a monotonic clock; the median round gives ns/payload. What a
/// "payload" costs is the whole entry point: bytes (+ UUID/company id, MAC,
/// bindkey) in, model with its readings out (including AES-CCM for
/// encrypted formats). `typical_advertisement` starts from raw AD bytes:
/// AD structure parse, detector, payload decoder, readings.
///
/// The advertisement models build their `fields` tree only when it is read
/// (the GATT values build it eagerly); by default the loop reads only the
/// readings. `--with-fields` also reads `fields` of every model, i.e. adds
/// what a consumer pays when it wants the field tree too (JSON output).
///
///     bench parsing [--json] [--iterations N] [--min-time S] [--fixtures DIR] [--with-fields]
///                   [--only FORMAT,...] [--export-corpus FILE] [--groups FILE]
///
/// `--export-corpus FILE` writes the corpus (the same payloads, with their
/// format group and corpus index) as JSON for scripts/bench-parsing's Python
/// side; `--groups FILE` measures named subsets of that corpus instead of the
/// formats (`{"name": [index, ...]}`).
enum ParsingBench {
    enum Input {
        case serviceData(BluetoothUUID, [UInt8])
        case switchBot(service: [UInt8], manufacturer: [UInt8])
        case manufacturer(UInt16, [UInt8], name: String?)
        case raw([UInt8])
        case gatt(BluetoothUUID, [UInt8], PresentationFormat?)
        /// Decoded by a profile's layout (``FieldLayout/ruuviRAWv2``), readings included.
        case layout([UInt8])
    }

    struct Payload {
        var format: String
        var name: String
        var input: Input
        var mac: BluetoothAddress?
        var bindkey: [UInt8]?
    }

    /// A payload and the same payload as JSON for the Python side (kept apart so
    /// the measured loop touches only `Payload`).
    struct Entry {
        var payload: Payload
        var export: [String: Any]
    }

    struct Options {
        var json = false
        var iterations: Int? = nil
        var minTime = 0.1
        var fixtures: String? = nil
        var only: Set<String>? = nil
        var exportPath: String? = nil
        var groupsPath: String? = nil
        var withFields = false
    }

    // MARK: Entry

    static func run(_ arguments: [String]) -> Int32 {
        var options = Options()
        var i = 0
        func value() -> String? {
            guard i + 1 < arguments.count else { return nil }
            i += 1
            return arguments[i]
        }
        while i < arguments.count {
            switch arguments[i] {
            case "--json": options.json = true
            case "--with-fields": options.withFields = true
            case "--groups":
                guard let p = value() else { return usage("--groups needs a file") }
                options.groupsPath = p
            case "--iterations":
                guard let n = value().flatMap({ Int($0) }), n > 0 else { return usage("--iterations needs a positive number") }
                options.iterations = n
            case "--min-time":
                guard let s = value().flatMap({ Double($0) }), s > 0 else { return usage("--min-time needs seconds > 0") }
                options.minTime = s
            case "--fixtures":
                guard let d = value() else { return usage("--fixtures needs a directory") }
                options.fixtures = d
            case "--only":
                guard let list = value() else { return usage("--only needs FORMAT[,FORMAT...]") }
                options.only = Set(list.split(separator: ",").map(String.init))
            case "--export-corpus":
                guard let p = value() else { return usage("--export-corpus needs a file") }
                options.exportPath = p
            default:
                return usage("unknown argument \(arguments[i])")
            }
            i += 1
        }
        guard let root = fixturesDirectory(options.fixtures) else {
            writeError("bench parsing: fixtures/vectors not found; run from the package root or pass --fixtures DIR")
            return 66
        }
        let corpus: [Entry]
        do {
            corpus = try loadCorpus(root)
        } catch {
            writeError("bench parsing: cannot load the corpus from \(root): \(error)")
            return 66
        }
        if let path = options.exportPath {
            do {
                let objects = corpus.enumerated().map { i, e in e.export.merging(["index": i]) { a, _ in a } }
                let data = try JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys])
                try data.write(to: URL(fileURLWithPath: path))
            } catch {
                writeError("bench parsing: cannot write \(path): \(error)")
                return 73
            }
            writeError("bench parsing: wrote \(corpus.count) payloads to \(path)")
            return 0
        }
        if let groupsPath = options.groupsPath {
            // Named subsets of the exported corpus (by index), measured like the format groups,
            // so a comparison can use exactly the payloads another decoder handled.
            let named: [String: [Int]]
            do {
                let data = try Data(contentsOf: URL(fileURLWithPath: groupsPath))
                guard let object = try JSONSerialization.jsonObject(with: data) as? [String: [Int]] else {
                    return usage("--groups file must be a JSON object {\"name\": [index, ...]}")
                }
                named = object
            } catch {
                writeError("bench parsing: cannot read \(groupsPath): \(error)")
                return 66
            }
            for name in named.keys.sorted() {
                guard let indices = named[name], !indices.isEmpty,
                      indices.allSatisfy({ corpus.indices.contains($0) }) else {
                    return usage("group \(name) is empty or has an index outside 0..<\(corpus.count)")
                }
                let (ns, passes) = measure(indices.map { corpus[$0].payload }, options)
                var line = "{\"bench\":\"parsing-group\",\"group\":"
                JSON.writeString(name, into: &line)
                line += ",\"payloads\":\(indices.count),\"ns_per_payload\":\(fixed(ns, 2)),\"passes\":\(passes)}"
                printFlushed(line)
            }
            return 0
        }
        // The layout language next to the built-in decoder, on the same RuuviTag RAWv2 payloads
        // (not in the exported corpus: no Python decoder reads profiles).
        let profiled = corpus.compactMap { e -> Payload? in
            guard e.payload.format == "ruuvi_v5", case let .manufacturer(_, data, _) = e.payload.input else { return nil }
            return Payload(format: "profile_ruuvi_v5", name: e.payload.name, input: .layout(data), mac: nil, bindkey: nil)
        }
        var groups: [(String, [Payload])] = []
        for p in corpus.map(\.payload) + profiled {
            if let only = options.only, !only.contains(p.format) { continue }
            if let k = groups.firstIndex(where: { $0.0 == p.format }) { groups[k].1.append(p) } else { groups.append((p.format, [p])) }
        }
        if groups.isEmpty { return usage("no payloads selected") }

        var rows: [(format: String, count: Int, ns: Double, passes: Int)] = []
        for (format, payloads) in groups {
            let (ns, passes) = measure(payloads, options)
            rows.append((format, payloads.count, ns, passes))
        }
        if !options.json {
            printFlushed("BLEParsing decode cost (median of 5 rounds, monotonic clock; ns per payload)")
            printFlushed(pad("format", 26) + pad("payloads", 9, right: true) + pad("ns/payload", 12, right: true)
                         + pad("passes/round", 14, right: true))
            for r in rows {
                printFlushed(pad(r.format, 26) + pad("\(r.count)", 9, right: true) + pad(fixed(r.ns, 1), 12, right: true)
                             + pad("\(r.passes)", 14, right: true))
            }
        }
        for r in rows {
            var line = "{\"bench\":\"parsing\",\"format\":"
            JSON.writeString(r.format, into: &line)
            line += ",\"payloads\":\(r.count),\"ns_per_payload\":\(fixed(r.ns, 2)),\"passes\":\(r.passes)}"
            printFlushed(line)
        }
        return 0
    }

    static func usage(_ message: String) -> Int32 {
        writeError("bench parsing: \(message)\nusage: bench parsing [--json] [--iterations N] [--min-time S] [--fixtures DIR] [--with-fields] [--only FORMAT,...] [--export-corpus FILE] [--groups FILE]")
        return 64
    }

    // MARK: Measuring

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// Result size of one decode (readings, plus fields when `withFields`), so
    /// the optimiser cannot drop the work.
    @inline(never)
    static func decode(_ p: Payload, withFields: Bool) -> Int {
        switch p.input {
        case let .serviceData(uuid, data):
            do {
                let m = try AdvertisementDecoder.decodeServiceData(uuid: uuid, data: data, mac: p.mac, bindkey: p.bindkey)
                return m.readings.count &+ (withFields ? m.fields.count : 0)
            } catch { return -1 }
        case let .switchBot(service, manufacturer):
            let adv = Advertisement(address: p.mac, manufacturerData: [ManufacturerData(companyID: 0x0969, data: manufacturer)],
                                    serviceData: [ServiceData(uuid: BluetoothUUID(uuid16: 0xFD3D), data: service)])
            return readingCount(AdvertisementDecoder.decode(adv, bindkey: p.bindkey), withFields: withFields)
        case let .manufacturer(company, data, name):
            do {
                let m = try AdvertisementDecoder.decodeManufacturerData(companyID: company, data: data, name: name, mac: p.mac)
                return m.readings.count &+ (withFields ? m.fields.count : 0)
            } catch { return -1 }
        case let .raw(bytes):
            return readingCount(AdvertisementDecoder.decodeRawAdvertisement(bytes: bytes, address: p.mac, bindkey: p.bindkey),
                                withFields: withFields)
        case let .gatt(uuid, value, format):
            do {
                let v = try GATTDecoder.decode(characteristic: uuid, value: value, presentationFormat: format)
                return v.readings.count &+ (withFields ? v.fields.count : 0)
            } catch { return -1 }
        case let .layout(data):
            // As a gateway decodes a profile's advertisement: a model with its readings, fields on demand.
            guard let (profile, field) = ruuviProfile, let m = try? profile.decodeAdvertisement(field, data) else { return -1 }
            return m.readings.count &+ (withFields ? m.fields.count : 0)
        }
    }

    static let ruuviProfile: (DeviceProfile, DeviceProfile.AdvertisementField)? = FieldLayout.ruuviRAWv2.map { layout in
        let field = DeviceProfile.AdvertisementField(source: .manufacturer(0x0499), prefix: [5], layout: layout)
        return (DeviceProfile(name: "ruuvi_v5", match: .init(manufacturer: 0x0499), advertisement: [field]), field)
    }

    static func readingCount(_ results: [Result<AdvertisementModel, DecodeError>], withFields: Bool) -> Int {
        var n = 0
        for r in results {
            switch r {
            case let .success(m): n &+= m.readings.count &+ 1 &+ (withFields ? m.fields.count : 0)
            case .failure: n &-= 1
            }
        }
        return n
    }

    /// One round: `passes` passes over `payloads`; returns elapsed ns.
    @inline(never)
    static func round(_ payloads: [Payload], passes: Int, withFields: Bool, sink: inout Int) -> UInt64 {
        let start = now()
        for _ in 0..<passes {
            for p in payloads { sink &+= decode(p, withFields: withFields) }
        }
        return now() - start
    }

    static func measure(_ payloads: [Payload], _ options: Options) -> (Double, Int) {
        var sink = 0
        var passes = options.iterations ?? 1
        if options.iterations == nil {
            // Calibrate: grow until a round takes ~1/4 of the target, then scale.
            _ = round(payloads, passes: 1, withFields: options.withFields, sink: &sink)
            while true {
                let t = round(payloads, passes: passes, withFields: options.withFields, sink: &sink)
                if Double(t) >= options.minTime * 0.25e9 || passes >= 1 << 30 {
                    passes = max(1, Int(Double(passes) * options.minTime * 1e9 / Double(max(t, 1))))
                    break
                }
                passes *= 2
            }
        }
        var samples: [Double] = []
        for _ in 0..<5 {
            let t = round(payloads, passes: passes, withFields: options.withFields, sink: &sink)
            samples.append(Double(t) / Double(passes * payloads.count))
        }
        if sink == Int.min { printFlushed("") }  // keeps `sink` alive
        samples.sort()
        return (samples[2], passes)
    }

    // MARK: Corpus

    static func fixturesDirectory(_ given: String?) -> String? {
        var candidates: [String] = []
        if let given { candidates.append(given) } else {
            candidates.append(FileManager.default.currentDirectoryPath + "/fixtures/vectors")
            var url = URL(fileURLWithPath: #filePath)
            for _ in 0..<3 { url.deleteLastPathComponent() }
            candidates.append(url.path + "/fixtures/vectors")
        }
        return candidates.first { FileManager.default.fileExists(atPath: $0 + "/adv") }
    }

    struct CorpusError: Error, CustomStringConvertible {
        var description: String
    }

    static func loadJSON(_ path: String) throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw CorpusError(description: "\(path) is not a JSON object")
        }
        return object
    }

    /// Format group of an advertisement vector (by file and payload shape).
    static func group(file: String, data: [UInt8], uuid: UInt16?) -> String {
        switch file {
        case "bthome_v2": return (data.first ?? 0) & 0x01 != 0 ? "bthome_v2_encrypted" : "bthome_v2_plain"
        case "bthome_v1": return uuid == 0x181E ? "bthome_v1_encrypted" : "bthome_v1_plain"
        case "xiaomi_mibeacon": return (data.first ?? 0) & 0x08 != 0 ? "xiaomi_encrypted" : "xiaomi_plain"
        case "ruuvi": return data.first == 5 ? "ruuvi_v5" : "ruuvi_v3"
        default: return file
        }
    }

    static func loadCorpus(_ root: String) throws -> [Entry] {
        var out: [Entry] = []
        let advFiles = ["bthome_v2", "bthome_v1", "xiaomi_mibeacon", "atc_pvvx", "ruuvi", "ibeacon", "eddystone",
                        "govee", "inkbird", "qingping", "switchbot", "detector"]
        for file in advFiles {
            let object = try loadJSON("\(root)/adv/\(file).json")
            for vector in object["vectors"] as? [[String: Any]] ?? [] where vector["expect"] != nil {
                guard let input = vector["input"] as? [String: Any] else { continue }
                let name = vector["name"] as? String ?? "?"
                let data = try (input["data"] as? String).map { try parseHex($0) } ?? []
                let macText = (input["mac"] ?? input["address"]) as? String
                let mac = try macText.map { try BluetoothAddress($0) }
                let key = try (input["bindkey"] as? String).map { try parseHex($0) }
                var export: [String: Any] = ["name": name]
                if let macText { export["mac"] = macText }
                if let key { export["bindkey"] = hexString(bytes: key) }
                let payload: Payload
                if let raw = input["raw"] as? String {
                    // Realistic advertisements only: a recognised payload, no malformed structures.
                    let bytes = try parseHex(raw)
                    let results = AdvertisementDecoder.decodeRawAdvertisement(bytes: bytes, address: mac, bindkey: key)
                    guard results.count >= 2, results.allSatisfy({ if case .success = $0 { true } else { false } }) else { continue }
                    export["raw"] = hexString(bytes: bytes)
                    payload = Payload(format: "typical_advertisement", name: name, input: .raw(bytes), mac: mac, bindkey: key)
                } else if let uuidText = input["service_uuid"] as? String {
                    let uuid = try BluetoothUUID(parsing: uuidText)
                    export["service_uuid"] = uuid.shortString
                    export["data"] = hexString(bytes: data)
                    if let mfr = input["manufacturer_data"] as? String {
                        let mfrBytes = try parseHex(mfr)
                        export["manufacturer_data"] = hexString(bytes: mfrBytes)
                        export["company_id"] = 0x0969
                        payload = Payload(format: group(file: file, data: data, uuid: uuid.uuid16), name: name,
                                          input: .switchBot(service: data, manufacturer: mfrBytes), mac: mac, bindkey: key)
                    } else {
                        payload = Payload(format: group(file: file, data: data, uuid: uuid.uuid16), name: name,
                                          input: .serviceData(uuid, data), mac: mac, bindkey: key)
                    }
                } else if let companyText = input["company_id"] as? String {
                    let digits = companyText.hasPrefix("0x") ? String(companyText.dropFirst(2)) : companyText
                    guard let company = UInt16(digits, radix: companyText.hasPrefix("0x") ? 16 : 10) else {
                        throw CorpusError(description: "\(file):\(name): bad company_id \(companyText)")
                    }
                    let localName = input["name"] as? String
                    export["company_id"] = Int(company)
                    export["data"] = hexString(bytes: data)
                    if let localName { export["local_name"] = localName }
                    payload = Payload(format: group(file: file, data: data, uuid: nil), name: name,
                                      input: .manufacturer(company, data, name: localName), mac: mac, bindkey: nil)
                } else {
                    continue
                }
                guard decode(payload, withFields: true) >= 0 else { continue }
                export["format"] = payload.format
                out.append(Entry(payload: payload, export: export))
            }
        }
        let gattDir = root + "/gatt"
        let files = try FileManager.default.contentsOfDirectory(atPath: gattDir).filter { $0.hasSuffix(".json") }.sorted()
        for file in files {
            let object = try loadJSON("\(gattDir)/\(file)")
            guard let uuidText = object["characteristic"] as? String else { continue }
            let uuid = try BluetoothUUID(parsing: uuidText)
            for vector in object["vectors"] as? [[String: Any]] ?? [] where vector["expect"] != nil {
                guard let hex = vector["hex"] as? String else { continue }
                let value = try parseHex(hex)
                let pf = try (vector["presentation_format"] as? String).map { try PresentationFormat(bytes: try parseHex($0)) }
                let format = uuid.uuid16 == 0x2A37 ? "gatt_heart_rate" : "gatt_other"
                let name = vector["description"] as? String ?? "?"
                let p = Payload(format: format, name: name, input: .gatt(uuid, value, pf), mac: nil, bindkey: nil)
                guard decode(p, withFields: true) >= 0 else { continue }
                var export: [String: Any] = ["format": format, "name": name, "characteristic": uuid.shortString,
                                             "data": hexString(bytes: value)]
                if let pfText = vector["presentation_format"] as? String { export["presentation_format"] = pfText }
                out.append(Entry(payload: p, export: export))
            }
        }
        return out
    }

    // MARK: Text

    static func fixed(_ v: Double, _ decimals: Int) -> String {
        var p = 1.0
        for _ in 0..<decimals { p *= 10 }
        let n = Int64((v * p).rounded())
        let whole = n / Int64(p)
        let frac = n % Int64(p)
        if decimals == 0 { return "\(whole)" }
        var f = "\(abs(frac))"
        while f.count < decimals { f = "0" + f }
        return "\(whole).\(f)"
    }

    static func pad(_ s: String, _ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - s.count))
        return right ? fill + s : s + fill
    }
}
