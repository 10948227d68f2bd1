import Vocabulary
/// The decoded form of one advertisement payload (service data, manufacturer
/// data or a whole advertisement), shared by every advertisement format.
///
/// `fields` follow the payload's byte layout; `readings` project the
/// measurements onto the shared ``ReadingKind`` vocabulary. When a payload
/// carries several readings of the same kind and label (BTHome repeats
/// objects, multi-probe thermometers), the readings get positional labels
/// "1", "2", ... (or "<label>_1", ...), in payload order.
public struct AdvertisementModel: DecodedModel, Sendable {
    public var formatName: String
    public var modelName: String
    public var readings: [Reading]

    /// Where `fields` come from: built by the decoder, or derived on demand.
    ///
    /// Most callers want only the readings, so the payload decoders and the
    /// AD structure summary defer their field trees: `fields` is built from
    /// the retained input each time it is read (no caching; a model read
    /// once, e.g. for JSON output, pays once). Setting or mutating `fields`
    /// stores the built value.
    enum FieldSource: Sendable {
        case built([(String, FieldValue)])
        indirect case adStructures(AdvertisingData)
        /// The raw AD bytes the model was decoded from; the summary is parsed again when read.
        case adBytes([UInt8])
        /// A decoder's field builder over the values it already parsed.
        case deferred(@Sendable () -> [(String, FieldValue)])
    }

    var fieldSource: FieldSource

    public var fields: [(String, FieldValue)] {
        get {
            switch fieldSource {
            case let .built(f): return f
            case let .adStructures(ad): return ad.summaryFields
            case let .adBytes(bytes): return AdvertisingData.parsePartial(bytes).0.summaryFields
            case let .deferred(build): return build()
            }
        }
        set { fieldSource = .built(newValue) }
        _modify {
            var f = fields
            fieldSource = .built([])
            defer { fieldSource = .built(f) }
            yield &f
        }
    }

    public init(formatName: String, modelName: String, readings: [Reading], fields: [(String, FieldValue)]) {
        self.formatName = formatName
        self.modelName = modelName
        self.readings = AdvertisementModel.numberRepeated(readings)
        self.fieldSource = .built(fields)
    }

    /// A model whose `fields` are built by `fields` when read.
    init(formatName: String, modelName: String, readings: [Reading],
         deferredFields fields: @escaping @Sendable () -> [(String, FieldValue)]) {
        self.formatName = formatName
        self.modelName = modelName
        self.readings = AdvertisementModel.numberRepeated(readings)
        self.fieldSource = .deferred(fields)
    }

    init(formatName: String, modelName: String, readings: [Reading], fieldSource: FieldSource) {
        self.formatName = formatName
        self.modelName = modelName
        self.readings = AdvertisementModel.numberRepeated(readings)
        self.fieldSource = fieldSource
    }

    @inline(__always)
    static func sameKey(_ a: Reading, _ b: Reading) -> Bool {
        // Same grouping as the key "\(kind.rawValue)|\(label ?? "")".
        guard a.kind == b.kind else { return false }
        switch (a.label, b.label) {
        case (nil, nil): return true
        case let (x?, y?): return x == y
        case let (x?, nil), let (nil, x?): return x.isEmpty
        }
    }

    /// `sameKey(buf[i], buf[j])` without copying the readings.
    @inline(__always)
    static func sameKey(_ buf: UnsafeBufferPointer<Reading>, _ i: Int, _ j: Int) -> Bool {
        guard buf[i].kind == buf[j].kind else { return false }
        switch (buf[i].label == nil, buf[j].label == nil) {
        case (true, true): return true
        case (false, false): return buf[i].label == buf[j].label
        case (false, true): return buf[i].label?.isEmpty ?? true
        case (true, false): return buf[j].label?.isEmpty ?? true
        }
    }

    /// Gives repeated (kind, label) pairs positional labels.
    static func numberRepeated(_ readings: [Reading]) -> [Reading] {
        let n = readings.count
        if n < 2 { return readings }
        if n <= 64 {
            // Pairwise comparison: no dictionaries or key strings for the usual handful of readings.
            let repeated = readings.withUnsafeBufferPointer { buf -> Bool in
                for i in 1..<n {
                    // The kinds first, here: most pairs differ in kind, and
                    // `sameKey` was called (not inlined) for each of them.
                    let kind = buf[i].kind
                    for j in 0..<i where buf[j].kind == kind && sameKey(buf, i, j) { return true }
                }
                return false
            }
            if !repeated { return readings }
            var out = readings
            for i in 0..<n {
                var total = 0
                var before = 0
                for j in 0..<n where readings[i].kind == readings[j].kind && sameKey(readings[i], readings[j]) {
                    total += 1
                    if j < i { before += 1 }
                }
                guard total > 1 else { continue }
                let k = before + 1
                out[i].label = readings[i].label.map { "\($0)_\(k)" } ?? "\(k)"
            }
            return out
        }
        var counts: [String: Int] = [:]
        for r in readings { counts["\(r.kind.rawValue)|\(r.label ?? "")", default: 0] += 1 }
        if counts.values.allSatisfy({ $0 == 1 }) { return readings }
        var seen: [String: Int] = [:]
        return readings.map { r in
            let key = "\(r.kind.rawValue)|\(r.label ?? "")"
            guard let total = counts[key], total > 1 else { return r }
            let n = (seen[key] ?? 0) + 1
            seen[key] = n
            var copy = r
            copy.label = r.label.map { "\($0)_\(n)" } ?? "\(n)"
            return copy
        }
    }

    /// First reading of a kind (and label), for callers and tests.
    public func reading(_ kind: ReadingKind, label: String? = nil) -> Reading? {
        readings.first { $0.kind == kind && $0.label == label }
    }
}

/// Small helpers shared by the advertisement decoders.
enum Adv {
    /// `raw / 10^decimals` without the binary rounding noise of `raw * 0.01`.
    @inline(__always)
    static func scaled<T: BinaryInteger>(_ raw: T, _ decimals: Int) -> Double {
        switch decimals {
        case 0: return Double(raw)
        case 1: return Double(raw) / 10
        case 2: return Double(raw) / 100
        case 3: return Double(raw) / 1000
        case 4: return Double(raw) / 10_000
        case 6: return Double(raw) / 1_000_000
        default:
            var d = Double(raw)
            for _ in 0..<decimals { d /= 10 }
            return d
        }
    }

    /// `value / 10^decimals` for floating-point raw values.
    static func scaledDouble(_ value: Double, _ decimals: Int) -> Double {
        var d = value
        for _ in 0..<max(0, decimals) { d /= 10 }
        return d
    }

    /// Rounds to `digits` decimals (for formats defined in decimal steps).
    @inline(__always)
    static func rounded(_ v: Double, _ digits: Int) -> Double {
        // Integer conversion instead of `rounded()`, which would need libm at
        // link time in executables that do not link Foundation.
        var p = 1.0
        for _ in 0..<digits { p *= 10 }
        let x = v * p
        guard x.isFinite, abs(x) < 9.0e18 else { return v }
        let n = x >= 0 ? Int64(x + 0.5) : -Int64(-x + 0.5)
        return Double(n) / p
    }

    static func macField(_ address: BluetoothAddress) -> FieldValue { .string(address.description) }

    static func hex16(_ v: UInt16) -> FieldValue { .string(hexString(v)) }

    /// The one-byte AAD `0x11` of the Xiaomi, BTHome v1 and pvvx encryption.
    static let aad11: [UInt8] = [0x11]
}
