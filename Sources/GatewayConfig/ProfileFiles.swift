import BLEParsing
import Foundation
import Vocabulary
import Yams

/// Device profile files (docs/PROFILES.md): one YAML document per profile,
/// read into ``DeviceProfile`` with every problem named by file, line and
/// key, as the gateway's configuration is.
public enum ProfileFiles {
    /// Reads and validates one profile file.
    public static func load(path: String) throws(GatewayConfigError) -> DeviceProfile {
        let bytes: [UInt8]
        switch SystemAccess.readFile(path) {
        case .success(let contents): bytes = contents
        case .failure(let reason):
            throw GatewayConfigError(file: path, problems: [.init(line: nil, key: "", message: "cannot read the profile: \(reason.text)")])
        }
        switch YAMLDocument.decodeUTF8(bytes) {
        case .success(let text): return try parse(text, file: path)
        case .failure(let invalid): throw GatewayConfigError(file: path, problems: [invalid.problem])
        }
    }

    /// Parses and validates profile YAML; `file` names the text in problems.
    public static func parse(_ text: String, file: String = "<profile>") throws(GatewayConfigError) -> DeviceProfile {
        let reader = ConfigReader()
        var profile: DeviceProfile?
        if case .parsed(let node) = YAMLDocument.compose(text, reader: reader) {
            profile = ProfileReader(reader: reader).profile(from: node)
        }
        let problems = reader.problemsInFileOrder
        guard problems.isEmpty, let profile else {
            throw GatewayConfigError(file: file, problems: problems.isEmpty ? [.init(line: nil, key: "", message: "no profile")] : problems)
        }
        return profile
    }

    /// What ``loadAll(_:)`` found: the profiles that are valid, and the problems of the others.
    public struct Loaded: Sendable {
        public var profiles: ProfileSet
        /// The files (or directories) read, in order.
        public var files: [String]
        public var errors: [GatewayConfigError]
    }

    /// Profiles from files and directories (a directory's `*.yaml` and
    /// `*.yml`, sorted by name). A file with problems is left out and its
    /// problems returned, so one bad profile costs its own device only; a
    /// second profile of a name already loaded is such a problem; a path that
    /// does not exist is one too, unless `optional` holds it.
    public static func loadAll(_ paths: [String], optional: Set<String> = []) -> Loaded {
        var files: [String] = []
        var errors: [GatewayConfigError] = []
        for path in paths {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                if !optional.contains(path) {
                    errors.append(GatewayConfigError(file: path, problems: [.init(line: nil, key: "", message: "no such file or directory")]))
                }
                continue
            }
            guard isDirectory.boolValue else {
                files.append(path)
                continue
            }
            do {
                let names = try FileManager.default.contentsOfDirectory(atPath: path)
                    .filter { ($0.hasSuffix(".yaml") || $0.hasSuffix(".yml")) && !$0.hasPrefix(".") }.sorted()
                files += names.map { path.hasSuffix("/") ? path + $0 : path + "/" + $0 }
            } catch {
                errors.append(GatewayConfigError(file: path, problems: [.init(line: nil, key: "", message: "cannot list the directory: \(error.localizedDescription)")]))
            }
        }
        var profiles: [DeviceProfile] = []
        var firstFile: [String: String] = [:]
        for file in files {
            do {
                let profile = try load(path: file)
                if let first = firstFile[profile.name] {
                    errors.append(GatewayConfigError(file: file, problems: [.init(line: nil, key: "profile", message: "a second profile named \"\(profile.name)\"; the first is in \(first)")]))
                    continue
                }
                guard profiles.count < ProfileSet.maximumProfiles else {
                    errors.append(GatewayConfigError(file: file, problems: [.init(line: nil, key: "", message: "more than \(ProfileSet.maximumProfiles) profiles; this one is left out")]))
                    continue
                }
                firstFile[profile.name] = file
                profiles.append(profile)
            } catch {
                errors.append(error)
            }
        }
        return Loaded(profiles: ProfileSet(profiles), files: files, errors: errors)
    }
}

/// Reads a profile document's nodes, reporting to the reader.
struct ProfileReader {
    let reader: ConfigReader

    static let topKeys = ["profile", "model", "manufacturer", "match", "advertisement", "gatt", "commands", "connection"]
    static let matchKeys = ["name", "service", "manufacturer", "address"]
    static let advertisementKeys = ["manufacturer", "service", "prefix", "fields"]
    static let gattKeys = ["service", "characteristic", "notify", "read_every", "read_on_connect", "fields"]
    static let commandKeys = ["name", "service", "characteristic", "response", "fields"]
    static let fieldKeys = ["name", "offset", "type", "endian", "bits", "scale", "add", "decimals", "values", "count", "length",
                            "reading", "unit", "label", "value", "absent"]
    static let integerTypes = (1...8).flatMap { ["u\(8 * $0)", "s\(8 * $0)"] }
    static let types = integerTypes + ["f16", "f32", "f64", "string", "bytes"]

    func profile(from root: Node?) -> DeviceProfile? {
        guard let root else {
            reader.report(line: nil, key: "", "the file is empty; a profile needs at least profile, match and fields")
            return nil
        }
        guard let top = reader.section(root, path: "", line: nil, keys: Self.topKeys, what: "a mapping (a profile)") else { return nil }
        var name = ""
        if let entry = top.value("profile"), let text = reader.nonEmptyText(entry, expected: "a profile name") {
            if Syntax.isIdentifier(text) { name = text } else {
                reader.report(entry, "expected 1 to 64 letters, digits, \"_\" or \"-\" (it names entities and commands), got \(ConfigReader.quote(text))")
            }
        } else if top.isMissing("profile") {
            reader.report(line: nil, key: "profile", "missing; every profile has a name")
        }
        let model = top.value("model").flatMap { reader.nonEmptyText($0, expected: "a model name") }
        let manufacturer = top.value("manufacturer").flatMap { reader.nonEmptyText($0, expected: "a manufacturer name") }
        var match = DeviceProfile.Match()
        if let section = reader.section(top, "match", keys: Self.matchKeys) {
            if let entry = section.value("name"), let glob = reader.nonEmptyText(entry, expected: "a name pattern") { match.name = glob }
            if let entry = section.value("service") { match.service = uuid(entry) }
            if let entry = section.value("manufacturer") { match.manufacturer = companyID(entry) }
            if let entry = section.value("address") { match.address = address(entry) }
            if match.isEmpty, section.entries.isEmpty {
                reader.report(line: section.line, key: "match", "expected at least one of: \(Self.matchKeys.joined(separator: ", "))")
            }
        } else if top.isMissing("match") {
            reader.report(line: nil, key: "match", "missing; a profile says which devices it is for (name, service, manufacturer or address)")
        }
        var advertisement: [DeviceProfile.AdvertisementField] = []
        if let entry = top.value("advertisement"), let items = reader.list(entry) {
            for item in items {
                if let field = advertisementField(item) { advertisement.append(field) }
            }
        }
        var gatt: [DeviceProfile.GATTField] = []
        if let entry = top.value("gatt"), let items = reader.list(entry) {
            for item in items {
                if let field = gattField(item) { gatt.append(field) }
            }
        }
        var commands: [DeviceProfile.Command] = []
        if let entry = top.value("commands"), let items = reader.list(entry) {
            var names = Set<String>()
            for item in items {
                guard let command = command(item) else { continue }
                guard names.insert(command.name).inserted else {
                    reader.report(item, "a second command named \"\(command.name)\"")
                    continue
                }
                commands.append(command)
            }
        }
        var connection = DeviceProfile.ConnectionPolicy.onDemand
        if let entry = top.value("connection"), let word = reader.choice(entry, ["keep", "on_demand"]) {
            connection = word == "keep" ? .keep : .onDemand
        }
        if connection == .onDemand, let i = gatt.firstIndex(where: { $0.access == .notify }) {
            reader.report(line: top.value("gatt")?.line, key: "gatt[\(i)].notify",
                          "notifications need a connection that stays up: add connection: keep (or read the value with read_every)")
        }
        if top.value("advertisement") == nil, top.value("gatt") == nil, top.value("commands") == nil {
            reader.report(line: nil, key: "", "the profile has no advertisement, gatt or commands section: nothing to read or write")
        }
        guard !name.isEmpty else { return nil }
        return DeviceProfile(name: name, model: model, manufacturer: manufacturer, match: match, advertisement: advertisement,
                             gatt: gatt, commands: commands, connection: connection)
    }

    // MARK: Sections

    func advertisementField(_ item: Entry) -> DeviceProfile.AdvertisementField? {
        guard let section = reader.section(item.node, path: item.path, line: item.line, keys: Self.advertisementKeys) else { return nil }
        var source: DeviceProfile.Source?
        switch (section.value("manufacturer"), section.value("service")) {
        case let (m?, nil): source = companyID(m).map { .manufacturer($0) }
        case let (nil, s?): source = uuid(s).map { .service($0) }
        case (_?, _?):
            reader.report(line: section.line, key: item.path, "give manufacturer or service, not both (one payload per entry)")
        case (nil, nil):
            reader.report(line: section.line, key: item.path, "missing manufacturer (a company id) or service (a service data UUID)")
        }
        var prefix: [UInt8] = []
        if let entry = section.value("prefix"), let text = reader.text(entry, expected: "hex bytes") {
            do { prefix = try Hex.bytes(text) } catch { reader.report(entry, "expected hex bytes like \"05\": \(error.description)") }
        }
        let layout = fields(section, required: true, constantsAllowed: false).layout
        guard let source, let layout else { return nil }
        return DeviceProfile.AdvertisementField(source: source, prefix: prefix, layout: layout)
    }

    func gattField(_ item: Entry) -> DeviceProfile.GATTField? {
        guard let section = reader.section(item.node, path: item.path, line: item.line, keys: Self.gattKeys) else { return nil }
        let service = required(section, "service", what: "the service UUID").flatMap(uuid)
        let characteristic = required(section, "characteristic", what: "the characteristic UUID").flatMap(uuid)
        var access: [DeviceProfile.Access] = []
        if let entry = section.value("notify"), reader.bool(entry) == true { access.append(.notify) }
        if let entry = section.value("read_on_connect"), reader.bool(entry) == true { access.append(.onConnect) }
        if let entry = section.value("read_every"), let seconds = reader.integer(entry, in: 1...86_400, bounds: "of seconds, 1…86400") {
            access.append(.poll(seconds: seconds))
        }
        if access.count != 1 {
            reader.report(line: section.line, key: item.path,
                          access.isEmpty ? "say how the value arrives: notify: true, read_every: SECONDS or read_on_connect: true"
                                         : "give one of notify, read_every and read_on_connect, not \(access.count)")
        }
        let layout = fields(section, required: true, constantsAllowed: false).layout
        guard let service, let characteristic, let layout, access.count == 1 else { return nil }
        return DeviceProfile.GATTField(service: service, characteristic: characteristic, access: access[0], layout: layout)
    }

    func command(_ item: Entry) -> DeviceProfile.Command? {
        guard let section = reader.section(item.node, path: item.path, line: item.line, keys: Self.commandKeys) else { return nil }
        var name: String?
        if let entry = required(section, "name", what: "the command's name"), let text = reader.nonEmptyText(entry, expected: "a command name") {
            if Syntax.isIdentifier(text) { name = text } else {
                reader.report(entry, "expected 1 to 64 letters, digits, \"_\" or \"-\", got \(ConfigReader.quote(text))")
            }
        }
        let service = required(section, "service", what: "the service UUID").flatMap(uuid)
        let characteristic = required(section, "characteristic", what: "the characteristic UUID").flatMap(uuid)
        var withResponse = true
        if let entry = section.value("response"), let on = reader.bool(entry) { withResponse = on }
        let (layout, constants) = fields(section, required: true, constantsAllowed: true)
        guard let name, let service, let characteristic, let layout else { return nil }
        return DeviceProfile.Command(name: name, service: service, characteristic: characteristic, withResponse: withResponse,
                                     layout: layout, constants: constants)
    }

    func required(_ section: Section, _ key: String, what: String) -> Entry? {
        if let entry = section.value(key) { return entry }
        if section.isMissing(key) { reader.report(line: section.line, key: section.path(key), "missing; \(what)") }
        return nil
    }

    // MARK: Fields

    /// The layout of a section's `fields`, and the constant values fields give (commands).
    func fields(_ section: Section, required: Bool, constantsAllowed: Bool) -> (layout: FieldLayout?, constants: [String: FieldLayout.Value]) {
        guard let entry = section.value("fields") else {
            if required, section.isMissing("fields") { reader.report(line: section.line, key: section.path("fields"), "missing; the bytes' fields") }
            return (nil, [:])
        }
        guard let items = reader.list(entry) else { return (nil, [:]) }
        if items.isEmpty {
            reader.report(entry, "expected at least one field")
            return (nil, [:])
        }
        var fields: [FieldLayout.Field] = []
        var entries: [String: Entry] = [:]
        var constants: [String: FieldLayout.Value] = [:]
        var constantEntries: [String: Entry] = [:]
        var next: Int? = 0
        var previous: FieldLayout.Field?
        var failed = false
        for item in items {
            guard let (field, constant) = self.field(item, next: next, previous: previous, constantsAllowed: constantsAllowed) else {
                failed = true
                next = nil
                continue
            }
            fields.append(field)
            entries[field.name] = item
            if let constant {
                constants[field.name] = constant
                constantEntries[field.name] = item
            }
            previous = field
            if let size = field.encoding.size, case let .fixed(c) = field.count { next = field.offset + size * c } else { next = nil }
        }
        guard !failed else { return (nil, [:]) }
        let layout: FieldLayout
        do { layout = try FieldLayout(fields: fields) } catch {
            let at = entries[error.field] ?? entry
            reader.report(at, error.message)
            return (nil, [:])
        }
        // Each constant must encode (a value that fits its field).
        for (name, value) in constants {
            guard let field = layout.fields.first(where: { $0.name == name }), let at = constantEntries[name] else { continue }
            do {
                let one = try FieldLayout(fields: [FieldLayout.Field(name: field.name, offset: 0, encoding: field.encoding, bits: field.bits,
                                                                     scale: field.scale, add: field.add, values: field.values, count: field.count)])
                _ = try one.encode([name: value])
            } catch {
                reader.report(at, "value: \(error.message)")
                return (nil, [:])
            }
        }
        return (layout, constants)
    }

    /// One field; `next`: the byte after the previous field (nil: unknown).
    func field(_ item: Entry, next: Int?, previous: FieldLayout.Field?, constantsAllowed: Bool) -> (FieldLayout.Field, FieldLayout.Value?)? {
        guard let s = reader.section(item.node, path: item.path, line: item.line, keys: Self.fieldKeys, what: "a mapping (a field)") else { return nil }
        var ok = true
        func need(_ key: String, _ what: String) -> Entry? {
            if let e = s.value(key) { return e }
            if s.isMissing(key) { reader.report(line: s.line, key: s.path(key), "missing; \(what)") }
            ok = false
            return nil
        }
        var name = ""
        if let e = need("name", "every field has a name"), let text = reader.nonEmptyText(e, expected: "a field name") {
            if Syntax.isIdentifier(text) { name = text } else {
                reader.report(e, "expected 1 to 64 letters, digits, \"_\" or \"-\", got \(ConfigReader.quote(text)))")
                ok = false
            }
        }
        var typeName = ""
        if let e = need("type", "one of \(Self.types.joined(separator: ", "))") {
            if let word = e.node.scalar?.string, let spelled = Self.typeSpelling(word) {
                reader.report(e, "expected \(ConfigReader.oneOf(Self.types)), got \(ConfigReader.quote(word)); did you mean \(ConfigReader.quote(spelled))?")
                ok = false
            } else if let word = reader.choice(e, Self.types) { typeName = word } else { ok = false }
        }
        var endian = FieldLayout.Endian.little
        if let e = s.value("endian"), let word = reader.choice(e, ["little", "big"]) { endian = word == "big" ? .big : .little }
        var length: Int?
        if let e = s.value("length") {
            guard typeName == "string" || typeName == "bytes" else {
                reader.report(e, "length applies to string and bytes (the other types have their size)")
                return nil
            }
            length = reader.integer(e, in: 1...65_535)
            if length == nil { ok = false }
        }
        let encoding: FieldLayout.Encoding
        switch typeName {
        case "string": encoding = .string(bytes: length)
        case "bytes": encoding = .raw(bytes: length)
        case "f16", "f32", "f64": encoding = .float(bytes: (Int(typeName.dropFirst()) ?? 32) / 8, endian)
        default:
            let bytes = (Int(typeName.dropFirst()) ?? 8) / 8
            encoding = typeName.hasPrefix("s") ? .signed(bytes: bytes, endian) : .unsigned(bytes: bytes, endian)
        }
        var bits: FieldLayout.Bits?
        if let e = s.value("bits") { bits = self.bits(e); if bits == nil { ok = false } }
        var offset: Int?
        if let e = s.value("offset") {
            offset = reader.integer(e, in: 0...65_535)
            if offset == nil { ok = false }
        } else if let previous, bits != nil, previous.bits != nil, previous.encoding == encoding {
            offset = previous.offset  // the next bits of the same integer
        } else if let next {
            offset = next
        } else if ok {
            reader.report(line: s.line, key: s.path("offset"), "missing; the field before this one has no fixed end, so give this one's offset")
            ok = false
        }
        var scale = 1.0, add = 0.0
        if let e = s.value("scale") { if let x = number(e) { scale = x } else { ok = false } }
        if let e = s.value("add") { if let x = number(e) { add = x } else { ok = false } }
        var decimals: Int?
        if let e = s.value("decimals") { decimals = reader.integer(e, in: 0...15); if decimals == nil { ok = false } }
        if decimals == nil, scale != 1 || add != 0 { decimals = FieldLayout.defaultDecimals(scale: scale, add: add) }
        var values: [Int64: String] = [:]
        if let e = s.value("values") {
            guard let pairs = reader.keyedEntries(e) else { return nil }
            for pair in pairs {
                guard let code = Self.integer(pair.key) else {
                    reader.report(pair, "expected an integer key (a raw value, like 0 or 0x1F), got \(ConfigReader.quote(pair.key))")
                    ok = false
                    continue
                }
                guard let word = reader.nonEmptyText(pair, expected: "the value's name") else { ok = false; continue }
                values[code] = word
            }
        }
        var count = FieldLayout.Count.fixed(1)
        if let e = s.value("count") {
            if case .scalar(let scalar) = e.node, scalar.string == "rest" { count = .rest } else if let n = reader.integer(e, in: 1...4096, bounds: "1…4096 or rest") {
                count = .fixed(n)
            } else { ok = false }
        }
        var reading: ReadingKind?
        if let e = s.value("reading"), let word = reader.nonEmptyText(e, expected: "a reading kind") {
            if let kind = ReadingKind(rawValue: word) { reading = kind } else {
                var message = "unknown reading kind \(ConfigReader.quote(word))"
                if let guess = Suggestion.closest(to: word, among: ReadingKind.allCases.map(\.rawValue)) { message += "; did you mean \(ConfigReader.quote(guess))?" }
                reader.report(e, message + " (docs/PROFILES.md lists the kinds)")
                ok = false
            }
        }
        var absent: UInt64?
        if let e = s.value("absent") {
            if case .scalar(let scalar) = e.node, let raw = UInt64(hexOrDecimal: scalar.string) { absent = raw } else {
                reader.report(e, "expected the raw value that means \"not available\" (like 0xFFFF or 255), got \(ConfigReader.describe(e.node))")
                ok = false
            }
        }
        let unit = s.value("unit").flatMap { reader.nonEmptyText($0, expected: "a unit") }
        let label = s.value("label").flatMap { reader.nonEmptyText($0, expected: "a label") }
        var constant: FieldLayout.Value?
        if let e = s.value("value") {
            guard constantsAllowed else {
                reader.report(e, "a fixed value belongs to a command's fields only")
                return nil
            }
            constant = self.value(e, encoding: encoding, values: values)
            if constant == nil { ok = false }
        }
        guard ok, let offset else { return nil }
        let field = FieldLayout.Field(name: name, offset: offset, encoding: encoding, bits: bits, scale: scale, add: add, values: values,
                                      count: count, reading: reading, unit: unit, label: label, decimals: decimals, absent: absent)
        return (field, constant)
    }

    /// `3` (one bit) or `"4-7"` (bits 4 to 7, bit 0 the least significant).
    func bits(_ entry: Entry) -> FieldLayout.Bits? {
        let expected = "expected a bit (0…63) or a range like \"4-7\""
        guard case .scalar(let scalar) = entry.node else {
            reader.report(entry, "\(expected), got \(ConfigReader.describe(entry.node))")
            return nil
        }
        let parts = scalar.string.split(separator: "-", omittingEmptySubsequences: false).map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard (1...2).contains(parts.count), let low = parts.first ?? nil, let high = parts.last ?? nil, (0...63).contains(low), (low...63).contains(high) else {
            reader.report(entry, "\(expected), got \(ConfigReader.quote(scalar.string))")
            return nil
        }
        return FieldLayout.Bits(shift: low, width: high - low + 1)
    }

    func number(_ entry: Entry) -> Double? {
        switch entry.node.scalar.map(ScalarValue.init) {
        case .integer(let n)?: return Double(n)
        case .float(let x)? where x.isFinite: return x
        default:
            reader.report(entry, "expected a finite number, got \(ConfigReader.describe(entry.node))")
            return nil
        }
    }

    /// A constant of a command's field, as its type reads it.
    func value(_ entry: Entry, encoding: FieldLayout.Encoding, values: [Int64: String]) -> FieldLayout.Value? {
        guard case .scalar(let scalar) = entry.node else {
            reader.report(entry, "expected a single value, got \(ConfigReader.describe(entry.node))")
            return nil
        }
        switch encoding {
        case .string: return .text(scalar.string)
        case .raw:
            do { return .bytes(try Hex.bytes(scalar.string)) } catch {
                reader.report(entry, "expected hex bytes: \(error.description)")
                return nil
            }
        default:
            switch ScalarValue(scalar) {
            case .integer(let n): return .integer(Int64(n))
            case .float(let x) where x.isFinite: return .number(x)
            case .string(let word, _) where values.values.contains(word): return .text(word)
            default:
                reader.report(entry, "expected a number\(values.isEmpty ? "" : " or one of the field's values"), got \(ConfigReader.describe(entry.node))")
                return nil
            }
        }
    }

    /// This language's name for a type spelt as C, ESPHome or Theengs spell
    /// it (`int16`, `uint8_t`, `float`): `s16`, `u8`, `f32`.
    static func typeSpelling(_ word: String) -> String? {
        var w = word.lowercased()
        if w.hasSuffix("_t") { w.removeLast(2) }
        if w == "float" { return "f32" }
        if w == "double" { return "f64" }
        for (prefix, letter) in [("uint", "u"), ("int", "s"), ("float", "f"), ("i", "s")] where w.hasPrefix(prefix) {
            let bits = w.dropFirst(prefix.count)
            if let n = Int(bits), types.contains("\(letter)\(n)") { return "\(letter)\(n)" }
        }
        return nil
    }

    /// Decimal, `0x` hex or negative integers (enumeration keys).
    static func integer(_ text: String) -> Int64? {
        let t = text.trimmingCharacters(in: .whitespaces)
        if t.hasPrefix("0x") || t.hasPrefix("0X") { return Int64(t.dropFirst(2), radix: 16) }
        return Int64(t)
    }

    // MARK: Vocabulary

    func uuid(_ entry: Entry) -> BluetoothUUID? { reader.uuid(entry) }

    /// A company id: `0x0499` (as the Bluetooth SIG lists them) or a decimal number.
    func companyID(_ entry: Entry) -> UInt16? {
        let expected = "a company id like 0x0499 (hex, as the Bluetooth SIG lists them) or a decimal number"
        guard case .scalar(let scalar) = entry.node, let value = Self.integer(scalar.string), (0...0xFFFF).contains(value) else {
            reader.report(entry, "expected \(expected), got \(ConfigReader.describe(entry.node))")
            return nil
        }
        return UInt16(value)
    }

    func address(_ entry: Entry) -> BluetoothAddress? { reader.address(entry) }
}

extension UInt64 {
    /// `0x…` hex or decimal, as profiles write raw values.
    init?(hexOrDecimal text: String) {
        let t = text.trimmingCharacters(in: .whitespaces)
        if t.hasPrefix("0x") || t.hasPrefix("0X") { self.init(t.dropFirst(2), radix: 16) } else { self.init(t) }
    }
}
