import Vocabulary

/// The layout language of device profiles (docs/PROFILES.md): where each
/// field of a device's bytes lies and how to read it, so a user can describe
/// a device the built-in decoders do not know and get typed values and
/// readings, and build the bytes of a command from typed arguments.
///
/// Decoding and encoding are inverse: for every *valid* byte string `b` of
/// a layout, `encode(decode(b)) == b`. Valid means: as long as the layout
/// (its fixed part, plus whole elements of a field repeated to the end), every
/// byte and every bit of an integer that no field describes zero, strings
/// UTF-8 padded with zeros, and floats not NaN. Pure: no I/O, and bad bytes
/// or values give a ``DecodeError`` or a ``FieldLayout/Problem``, never a trap.
public struct FieldLayout: Sendable, Equatable {
    public enum Endian: String, Sendable, Equatable { case little, big }

    /// How one element of a field is stored.
    public enum Encoding: Sendable, Equatable {
        /// An unsigned integer of 1…8 bytes.
        case unsigned(bytes: Int, Endian)
        /// A two's complement integer of 1…8 bytes (of its `bits` when given).
        case signed(bytes: Int, Endian)
        /// An IEEE 754 float of 2 (half), 4 or 8 bytes.
        case float(bytes: Int, Endian)
        /// UTF-8 text padded with zero bytes; nil: to the end of the data.
        case string(bytes: Int?)
        /// Bytes as they are (hex in JSON); nil: to the end of the data.
        case raw(bytes: Int?)

        /// Bytes one element takes; nil: the rest of the data.
        public var size: Int? {
            switch self {
            case let .unsigned(n, _), let .signed(n, _), let .float(n, _): return n
            case let .string(n), let .raw(n): return n
            }
        }

        var isInteger: Bool { container != nil }

        /// The integer's size and byte order (nil: not an integer): bit fields
        /// of one container share its bytes, each signed or not.
        var container: Container? {
            switch self {
            case let .unsigned(n, endian), let .signed(n, endian): return Container(bytes: n, endian: endian)
            default: return nil
            }
        }
    }

    struct Container: Equatable {
        var bytes: Int
        var endian: Endian
    }

    /// Some bits of an integer: `width` bits from bit `shift` (bit 0 is the
    /// least significant of the integer as its endianness reads it).
    public struct Bits: Sendable, Equatable {
        public var shift: Int
        public var width: Int
        public init(shift: Int, width: Int) {
            self.shift = shift
            self.width = width
        }
    }

    /// How many elements a field has.
    public enum Count: Sendable, Equatable {
        case fixed(Int)
        /// As many whole elements as the data has left (the field that ends the layout).
        case rest
    }

    public struct Field: Sendable, Equatable {
        public var name: String
        /// Byte offset of its first element.
        public var offset: Int
        public var encoding: Encoding
        public var bits: Bits?
        /// value = raw × scale + add (integers and floats).
        public var scale: Double
        public var add: Double
        /// Names of integer values (an enumeration); other values stay numbers.
        public var values: [Int64: String]
        public var count: Count
        /// The reading this field is, in the shared vocabulary (history, MQTT, Home Assistant).
        public var reading: ReadingKind?
        /// Unit of the reading; nil: the kind's canonical unit.
        public var unit: String?
        public var label: String?
        /// A scaled value is rounded to this many decimals (0…15; nil: not
        /// rounded), as a decoder would print it: 4860 × 0.005 is 24.3, not
        /// 24.300000000000001. Enough that it still reads back to the same raw
        /// value: a decimal finer than the scale's step, or as many as scale
        /// and add have.
        public var decimals: Int?
        /// A raw value (of the field's bits, before sign, scale and add) that
        /// means "not available": no reading then (the value still decodes).
        public var absent: UInt64?

        public init(name: String, offset: Int, encoding: Encoding, bits: Bits? = nil, scale: Double = 1, add: Double = 0,
                    values: [Int64: String] = [:], count: Count = .fixed(1), reading: ReadingKind? = nil,
                    unit: String? = nil, label: String? = nil, decimals: Int? = nil, absent: UInt64? = nil) {
            self.absent = absent
            self.decimals = decimals
            self.name = name
            self.offset = offset
            self.encoding = encoding
            self.bits = bits
            self.scale = scale
            self.add = add
            self.values = values
            self.count = count
            self.reading = reading
            self.unit = unit
            self.label = label
        }

        /// Bits of one element that carry the value.
        var width: Int {
            if let bits { return bits.width }
            return 8 * (encoding.size ?? 0)
        }

        public var isScaled: Bool { scale != 1 || add != 0 }

        /// The values a numeric field takes (scaled), lowest first; nil for
        /// text, bytes, enumerations and integers wider than 53 bits.
        public var numberRange: ClosedRange<Double>? {
            guard values.isEmpty else { return nil }
            switch encoding {
            case .unsigned, .signed:
                guard width <= 53 else { return nil }
                let signed: Bool = if case .signed = encoding { true } else { false }
                let low = signed ? -Double(UInt64(1) << UInt64(width - 1)) : 0
                let high = signed ? Double((UInt64(1) << UInt64(width - 1)) - 1) : Double((UInt64(1) << UInt64(width)) - 1)
                let a = FieldLayout.rounded(low * scale + add, decimals), b = FieldLayout.rounded(high * scale + add, decimals)
                return min(a, b)...max(a, b)
            case let .float(n, _):
                let m = n == 2 ? 65504.0 : n == 4 ? Double(Float.greatestFiniteMagnitude) : Double.greatestFiniteMagnitude
                return -m...m
            default: return nil
            }
        }

        var isRepeated: Bool { count != .fixed(1) }
    }

    /// A decoded value, or one to encode.
    public enum Value: Sendable, Equatable {
        case integer(Int64)
        case unsigned(UInt64)
        case number(Double)
        case text(String)
        case bytes([UInt8])
        case list([Value])

        public var fieldValue: FieldValue {
            switch self {
            case let .integer(v): return .integer(v)
            case let .unsigned(v): return .integer(v)
            case let .number(v): return .number(v)
            case let .text(t): return .string(t)
            case let .bytes(b): return .bytes(b)
            case let .list(items): return .list(items.map(\.fieldValue))
            }
        }
    }

    /// What is wrong with a layout, or with a value given to encode: the field and why.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var field: String
        public var message: String
        public init(field: String, _ message: String) {
            self.field = field
            self.message = message
        }
        public var description: String { field.isEmpty ? message : "field \"\(field)\": \(message)" }
    }

    public let fields: [Field]

    /// Layouts of the same fields are the same (the rest is derived from them).
    public static func == (a: FieldLayout, b: FieldLayout) -> Bool { a.fields == b.fields }

    /// Bytes of the fixed part (every field but a `.rest` one's elements).
    public let fixedLength: Int
    /// The field repeated to the end of the data, if any.
    private let restField: Int?
    /// Fields ``readings(of:context:)`` reads: those that are readings, and
    /// text (whose bytes must be UTF-8 whether it is a reading or not).
    private let readingFields: [Int]
    private let readingCount: Int
    /// The same fields as plain steps where they are single numbers (the
    /// usual sensor field): no name, enumeration or list to copy per payload.
    private let steps: [Step]
    /// Per field, the value its `absent` raw value decodes to (no reading for it).
    private let absentValues: [Value?]

    /// One field of ``readings(of:context:)``: a plain number read inline, or the general path.
    struct Step {
        enum Read { case integer(signed: Bool), float, general }
        var read: Read
        var field: Int
        var offset: Int
        var bytes: Int
        var endian: Endian
        var shift: UInt64
        var width: Int
        var scaled: Bool
        var scale: Double
        var add: Double
        var decimals: Int?
        var kind: ReadingKind?
        var unit: String?
        var label: String?
        var absent: UInt64?
    }

    /// The bytes a layout's fixed part may cover at most.
    public static let maximumLength = 65_536

    /// The largest scaled integer: its raw value still round-trips through a Double.
    static let maximumScaledBytes = 6

    /// Checks the fields: unique names, sizes, bits within their integer,
    /// scale and offset finite, enumerations on integers only, no two
    /// fields on the same bytes unless both are bit fields of the same
    /// integer with bits apart, at most one field repeated to the end.
    public init(fields: [Field]) throws(Problem) {
        var names = Set<String>()
        var rest: Int?
        var fixedEnd = 0
        for (i, f) in fields.enumerated() {
            guard !f.name.isEmpty else { throw Problem(field: "", "a field needs a name") }
            guard names.insert(f.name).inserted else { throw Problem(field: f.name, "a second field with this name") }
            guard f.offset >= 0, f.offset <= 65_535 else { throw Problem(field: f.name, "offset \(f.offset) is outside 0…65535") }
            switch f.encoding {
            case let .unsigned(n, _), let .signed(n, _):
                guard (1...8).contains(n) else { throw Problem(field: f.name, "an integer is 1 to 8 bytes, not \(n)") }
                if let b = f.bits {
                    guard b.width >= 1, b.shift >= 0, b.shift + b.width <= 8 * n else {
                        throw Problem(field: f.name, "bits \(b.shift)…\(b.shift + b.width - 1) are outside its \(8 * n)-bit integer")
                    }
                }
                if f.isScaled, n > Self.maximumScaledBytes {
                    throw Problem(field: f.name, "a scaled integer is at most \(Self.maximumScaledBytes) bytes (a larger one would lose precision)")
                }
            case let .float(n, _):
                guard [2, 4, 8].contains(n) else { throw Problem(field: f.name, "a float is 2, 4 or 8 bytes, not \(n)") }
                guard f.bits == nil else { throw Problem(field: f.name, "bits apply to integers only") }
                // A scaled float would not read back bit for bit; give its unit instead.
                guard !f.isScaled else { throw Problem(field: f.name, "scale and add apply to integers only (give a float's unit instead)") }
            case let .string(n), let .raw(n):
                if let n, !(1...65_535).contains(n) { throw Problem(field: f.name, "a length of \(n) bytes") }
                guard f.bits == nil, !f.isScaled, f.values.isEmpty else {
                    throw Problem(field: f.name, "bits, scale, offset and values apply to numbers only")
                }
                if n == nil, f.count != .fixed(1) { throw Problem(field: f.name, "text or bytes to the end cannot be repeated") }
            }
            guard f.scale.isFinite, f.scale != 0, f.add.isFinite else { throw Problem(field: f.name, "scale must be a finite non-zero number, add finite") }
            guard f.values.isEmpty || f.encoding.isInteger else { throw Problem(field: f.name, "values (an enumeration) apply to integers only") }
            guard f.values.isEmpty || !f.isScaled else { throw Problem(field: f.name, "an enumeration cannot also be scaled") }
            if let d = f.decimals {
                guard f.isScaled, (0...15).contains(d) else { throw Problem(field: f.name, "decimals (0…15) apply to scaled integers only") }
                // Rounding moves a value by at most half a unit of its last decimal: less than
                // half a step of the scale when a decimal is finer than the step; nothing
                // (beyond floating-point noise) when scale and add are whole in those decimals.
                guard pow10(-d) < abs(f.scale) || (Self.isWhole(f.scale, decimals: d) && Self.isWhole(f.add, decimals: d)) else {
                    throw Problem(field: f.name, "\(d) decimals are too few for a scale of \(f.scale) (values would not read back)")
                }
            }
            if let kind = f.reading {
                // A reading's value must be of its kind's shape, or the same kind would
                // reach history, MQTT and Home Assistant as a number here and a state there.
                let text = !f.values.isEmpty || f.encoding == .string(bytes: f.encoding.size)
                let state = f.encoding.isInteger && f.values.isEmpty && f.width == 1
                switch (kind.shape, f.encoding) {
                case (_, .raw): throw Problem(field: f.name, "bytes cannot be a reading (\(kind.rawValue))")
                case (.event, _) where !text:
                    throw Problem(field: f.name, "\(kind.rawValue) is an event: its field is text or an enumeration")
                case (.state, _) where !state:
                    throw Problem(field: f.name, "\(kind.rawValue) is an on/off state: its field is a single bit (bits: N)")
                case (.number, _) where text || state, (.numberOrState, _) where text:
                    throw Problem(field: f.name, "\(kind.rawValue) is a number: its field is a number, not \(text ? "text or an enumeration" : "a single bit")")
                default: break
                }
            }
            if let a = f.absent {
                guard f.encoding.isInteger else { throw Problem(field: f.name, "absent (a \"not available\" raw value) applies to integers only") }
                guard a <= Self.mask(f.width) else { throw Problem(field: f.name, "absent \(a) does not fit its \(f.width) bits") }
            }
            switch f.count {
            case let .fixed(c):
                guard (1...4096).contains(c) else { throw Problem(field: f.name, "count \(c) is outside 1…4096") }
                if let size = f.encoding.size {
                    // Attribute values are at most 512 bytes and advertisements shorter: a
                    // layout past 64 KiB is a mistake, and would make encode allocate it.
                    guard f.offset + size * c <= Self.maximumLength else {
                        throw Problem(field: f.name, "it ends at byte \(f.offset + size * c), past the \(Self.maximumLength) bytes a layout may cover")
                    }
                    fixedEnd = max(fixedEnd, f.offset + size * c)
                } else {
                    guard rest == nil else { throw Problem(field: f.name, "two fields run to the end of the data") }
                    rest = i
                }
            case .rest:
                guard f.encoding.size != nil else { throw Problem(field: f.name, "text or bytes to the end cannot be repeated") }
                guard rest == nil else { throw Problem(field: f.name, "two fields run to the end of the data") }
                rest = i
            }
        }
        if let r = rest {
            let f = fields[r]
            guard f.offset >= fixedEnd else {
                throw Problem(field: f.name, "it runs to the end of the data, so it must come after every other field (they end at byte \(fixedEnd))")
            }
            fixedEnd = f.offset
        }
        // Overlaps: byte ranges of fixed fields.
        for a in 0..<fields.count {
            for b in (a + 1)..<fields.count {
                let x = fields[a], y = fields[b]
                guard let xs = x.encoding.size, let ys = y.encoding.size, x.count != .rest, y.count != .rest,
                      case let .fixed(xc) = x.count, case let .fixed(yc) = y.count else { continue }
                let xr = x.offset..<(x.offset + xs * xc), yr = y.offset..<(y.offset + ys * yc)
                guard xr.overlaps(yr) else { continue }
                // One integer (same bytes, same endianness); each bit field says whether its bits are signed.
                let sameInteger = x.offset == y.offset && xc == 1 && yc == 1 && x.encoding.container != nil
                    && x.encoding.container == y.encoding.container
                guard sameInteger, let xb = x.bits, let yb = y.bits,
                      xb.shift + xb.width <= yb.shift || yb.shift + yb.width <= xb.shift else {
                    throw Problem(field: y.name, "overlaps field \"\(x.name)\" (bytes \(xr.lowerBound)…\(xr.upperBound - 1)); only bit fields of one integer may share bytes, with bits apart")
                }
            }
        }
        self.fields = fields
        self.fixedLength = fixedEnd
        self.restField = rest
        var plan: [Int] = []
        for (i, f) in fields.enumerated() {
            if f.reading != nil { plan.append(i) } else if case .string = f.encoding { plan.append(i) }
        }
        self.readingFields = plan
        self.steps = plan.map { i in
            let f = fields[i]
            var read = Step.Read.general
            var bytes = 0
            var endian = Endian.little
            if case .fixed(1) = f.count, f.values.isEmpty {
                switch f.encoding {
                case let .unsigned(n, e): read = .integer(signed: false); bytes = n; endian = e
                case let .signed(n, e): read = .integer(signed: true); bytes = n; endian = e
                case let .float(n, e): read = .float; bytes = n; endian = e
                default: break
                }
            }
            return Step(read: read, field: i, offset: f.offset, bytes: bytes, endian: endian, shift: UInt64(f.bits?.shift ?? 0),
                        width: f.width, scaled: f.isScaled, scale: f.scale, add: f.add, decimals: f.decimals, kind: f.reading,
                        unit: f.unit, label: f.label, absent: f.absent)
        }
        self.absentValues = fields.map { f in
            guard let a = f.absent, let container = f.encoding.container else { return nil }
            var bytes = [UInt8](repeating: 0, count: container.bytes)
            Self.store(&bytes, 0, container.bytes, container.endian, a << UInt64(f.bits?.shift ?? 0))
            var one = f
            one.offset = 0
            one.count = .fixed(1)
            return try? FieldLayout.elementValue(one, bytes, at: 0, length: container.bytes, context: "")
        }
        self.readingCount = fields.reduce(0) { n, f in
            guard f.reading != nil else { return n }
            if case let .fixed(c) = f.count { return n + c }
            return n + 4
        }
    }

    // MARK: - Decoding

    /// The fields' values in field order. Data shorter than the fixed part,
    /// or with a part of an element left at the end, is an error naming the
    /// field; longer data without a field running to the end is too.
    public func decode(_ data: [UInt8], context: String = "profile") throws(DecodeError) -> [(name: String, value: Value)] {
        guard data.count >= fixedLength else {
            throw DecodeError.truncated(context: context, offset: 0, needed: fixedLength, available: data.count, what: "the fields of this layout")
        }
        if restField == nil, data.count > fixedLength {
            throw DecodeError.trailingBytes(context: context, offset: fixedLength, extra: data.count - fixedLength)
        }
        var out: [(name: String, value: Value)] = []
        out.reserveCapacity(fields.count)
        for f in fields {
            let elements: Int
            switch f.count {
            case let .fixed(c): elements = c
            case .rest:
                let size = f.encoding.size ?? 1
                let left = data.count - f.offset
                guard left % size == 0 else {
                    throw DecodeError.invalidValue(context: context, offset: f.offset, expected: "whole \(size)-byte elements of \(f.name)",
                                                   found: "\(left) bytes")
                }
                elements = left / size
            }
            if f.encoding.size == nil {
                out.append((f.name, try element(f, data, at: f.offset, length: data.count - f.offset, context: context)))
                continue
            }
            let size = f.encoding.size ?? 0
            if case .fixed(1) = f.count {
                out.append((f.name, try element(f, data, at: f.offset, length: size, context: context)))
            } else {
                var items: [Value] = []
                items.reserveCapacity(elements)
                for k in 0..<elements { items.append(try element(f, data, at: f.offset + k * size, length: size, context: context)) }
                out.append((f.name, .list(items)))
            }
        }
        return out
    }

    /// The readings of the fields that name a reading kind: numbers, a
    /// one-bit field as on/off, an enumeration's name as text; a list gives
    /// one reading per element, labelled with its index.
    public func readings(_ decoded: [(name: String, value: Value)]) -> [Reading] {
        var out: [Reading] = []
        for (i, (f, d)) in zip(fields, decoded).enumerated() {
            guard let kind = f.reading else { continue }
            if case let .list(items) = d.value {
                for (k, item) in items.enumerated() {
                    append(item, f, kind, label: [f.label, "\(k)"].compactMap { $0 }.joined(separator: "_"), to: &out, index: i)
                }
            } else {
                append(d.value, f, kind, label: f.label, to: &out, index: i)
            }
        }
        return out
    }

    /// ``readings(_:)`` of ``decode(_:context:)``, without building the
    /// values of fields that are not readings: the same readings and the same
    /// errors (the advertisement path, where nothing else is wanted).
    public func readings(of data: [UInt8], context: String = "profile") throws(DecodeError) -> [Reading] {
        guard data.count >= fixedLength else {
            throw DecodeError.truncated(context: context, offset: 0, needed: fixedLength, available: data.count, what: "the fields of this layout")
        }
        if let r = restField {
            if let size = fields[r].encoding.size, (data.count - fields[r].offset) % size != 0 {
                let f = fields[r]
                throw DecodeError.invalidValue(context: context, offset: f.offset, expected: "whole \(size)-byte elements of \(f.name)",
                                               found: "\(data.count - f.offset) bytes")
            }
        } else if data.count > fixedLength {
            throw DecodeError.trailingBytes(context: context, offset: fixedLength, extra: data.count - fixedLength)
        }
        var out: [Reading] = []
        out.reserveCapacity(readingCount)
        for step in steps {
            switch step.read {
            case let .integer(signed):
                guard let kind = step.kind else { continue }
                var raw = Self.load(data, step.offset, step.bytes, step.endian)
                if step.width < 8 * step.bytes { raw = (raw >> step.shift) & Self.mask(step.width) }
                if let absent = step.absent, raw == absent { continue }
                if step.width == 1 {
                    out.append(Reading(kind, raw != 0, label: step.label))
                    continue
                }
                let x: Double = signed ? Double(Self.signExtend(raw, bits: step.width)) : Double(raw)
                let value = step.scaled ? Self.rounded(x * step.scale + step.add, step.decimals) : x
                out.append(Reading(kind, value, unit: step.unit, label: step.label))
            case .float:
                guard let kind = step.kind else { continue }
                let raw = Self.load(data, step.offset, step.bytes, step.endian)
                let x: Double = switch step.bytes {
                case 2: Self.halfToDouble(UInt16(truncatingIfNeeded: raw))
                case 4: Double(Float(bitPattern: UInt32(truncatingIfNeeded: raw)))
                default: Double(bitPattern: raw)
                }
                if x.isFinite { out.append(Reading(kind, x, unit: step.unit, label: step.label)) }
            case .general:
                try generalReadings(step.field, data, context: context, into: &out)
            }
        }
        return out
    }

    private func generalReadings(_ i: Int, _ data: [UInt8], context: String, into out: inout [Reading]) throws(DecodeError) {
        let f = fields[i]
        guard let size = f.encoding.size else {
            let v = try element(f, data, at: f.offset, length: data.count - f.offset, context: context)
            if let kind = f.reading { append(v, f, kind, label: f.label, to: &out, index: i) }
            return
        }
        if case .fixed(1) = f.count {
            let v = try element(f, data, at: f.offset, length: size, context: context)
            if let kind = f.reading { append(v, f, kind, label: f.label, to: &out, index: i) }
            return
        }
        let elements: Int = if case let .fixed(c) = f.count { c } else { (data.count - f.offset) / size }
        for k in 0..<elements {
            let v = try element(f, data, at: f.offset + k * size, length: size, context: context)
            if let kind = f.reading {
                append(v, f, kind, label: [f.label, "\(k)"].compactMap { $0 }.joined(separator: "_"), to: &out, index: i)
            }
        }
    }

    @inline(__always)
    private func append(_ v: Value, _ f: borrowing Field, _ kind: ReadingKind, label: String?, to out: inout [Reading], index: Int) {
        if f.absent != nil, let a = absentValues[index], a == v { return }
        Self.append(v, f, kind, label: label, to: &out)
    }

    @inline(__always)
    private static func append(_ v: Value, _ f: borrowing Field, _ kind: ReadingKind, label: String?, to out: inout [Reading]) {
        switch v {
        case let .number(x): if x.isFinite { out.append(Reading(kind, x, unit: f.unit, label: label)) }
        case let .integer(i):
            if f.width == 1 { out.append(Reading(kind, i != 0, label: label)) } else { out.append(Reading(kind, Double(i), unit: f.unit, label: label)) }
        case let .unsigned(u):
            if f.width == 1 { out.append(Reading(kind, u != 0, label: label)) } else { out.append(Reading(kind, Double(u), unit: f.unit, label: label)) }
        case let .text(t): out.append(Reading(kind: kind, value: .text(t), unit: nil, label: label))
        case .bytes, .list: break
        }
    }

    private func element(_ f: borrowing Field, _ data: [UInt8], at offset: Int, length: Int, context: String) throws(DecodeError) -> Value {
        try Self.elementValue(f, data, at: offset, length: length, context: context)
    }

    private static func elementValue(_ f: borrowing Field, _ data: [UInt8], at offset: Int, length: Int, context: String) throws(DecodeError) -> Value {
        switch f.encoding {
        case let .unsigned(n, endian), let .signed(n, endian):
            var raw = Self.load(data, offset, n, endian)
            var width = 8 * n
            if let b = f.bits {
                raw = (raw >> UInt64(b.shift)) & Self.mask(b.width)
                width = b.width
            }
            if case .signed = f.encoding {
                let v = Self.signExtend(raw, bits: width)
                if !f.values.isEmpty, let name = f.values[v] { return .text(name) }
                return f.isScaled ? .number(Self.rounded(Double(v) * f.scale + f.add, f.decimals)) : .integer(v)
            }
            if !f.values.isEmpty, raw <= UInt64(Int64.max), let name = f.values[Int64(raw)] { return .text(name) }
            return f.isScaled ? .number(Self.rounded(Double(raw) * f.scale + f.add, f.decimals)) : .unsigned(raw)
        case let .float(n, endian):
            let raw = Self.load(data, offset, n, endian)
            let x: Double = switch n {
            case 2: Self.halfToDouble(UInt16(truncatingIfNeeded: raw))
            case 4: Double(Float(bitPattern: UInt32(truncatingIfNeeded: raw)))
            default: Double(bitPattern: raw)
            }
            return .number(x)
        case .string:
            let bytes = data[offset..<(offset + length)]
            let text = bytes.prefix { $0 != 0 }
            guard let s = String(validating: text, as: UTF8.self) else {
                throw DecodeError.invalidValue(context: context, offset: offset, expected: "UTF-8 text in \(f.name)", found: Hex.string(text))
            }
            return .text(s)
        case .raw:
            return .bytes(Array(data[offset..<(offset + length)]))
        }
    }

    // MARK: - Encoding

    /// The bytes for `values` (by field name): every field needs one, of its
    /// kind (an integer, a number for scaled or float fields, an
    /// enumeration's name or its number, text, bytes, a list for a repeated
    /// field); a value that does not fit is an error naming the field and
    /// its range. Bytes and bits no field describes are zero.
    public func encode(_ values: [String: Value]) throws(Problem) -> [UInt8] {
        var restElements = 0
        var restBytes = 0
        if let r = restField {
            let f = fields[r]
            guard let v = values[f.name] else { throw Problem(field: f.name, "no value given") }
            switch (f.encoding.size, v) {
            case (nil, .text(let t)): restBytes = t.utf8.count
            case (nil, .bytes(let b)): restBytes = b.count
            case (let size?, .list(let items)):
                restElements = items.count
                restBytes = items.count * size
            default: throw Problem(field: f.name, "expected \(f.encoding.size == nil ? "text or bytes" : "a list") for a field that runs to the end")
            }
        }
        var out = [UInt8](repeating: 0, count: fixedLength + restBytes)
        for f in fields {
            guard let v = values[f.name] else { throw Problem(field: f.name, "no value given") }
            guard let size = f.encoding.size else {
                switch (f.encoding, v) {
                case (.string, .text(let t)):
                    let bytes = Array(t.utf8)
                    guard !bytes.contains(0) else { throw Problem(field: f.name, "text with a zero byte") }
                    out.replaceSubrange(f.offset..<(f.offset + bytes.count), with: bytes)
                case (.raw, .bytes(let b)): out.replaceSubrange(f.offset..<(f.offset + b.count), with: b)
                default: throw Problem(field: f.name, "expected \(f.encoding == .string(bytes: nil) ? "text" : "bytes")")
                }
                continue
            }
            let elements: [Value]
            switch f.count {
            case .fixed(1): elements = [v]
            case let .fixed(c):
                guard case let .list(items) = v, items.count == c else { throw Problem(field: f.name, "expected a list of \(c) values") }
                elements = items
            case .rest:
                guard case let .list(items) = v, items.count == restElements else { throw Problem(field: f.name, "expected a list") }
                elements = items
            }
            for (k, e) in elements.enumerated() { try put(f, e, into: &out, at: f.offset + k * size) }
        }
        return out
    }

    private func put(_ f: Field, _ v: Value, into out: inout [UInt8], at offset: Int) throws(Problem) {
        switch f.encoding {
        case let .unsigned(n, endian), let .signed(n, endian):
            let signed: Bool = if case .signed = f.encoding { true } else { false }
            let width = f.width
            let raw: Int64OrUInt64
            switch v {
            case let .text(name) where !f.values.isEmpty:
                guard let code = f.values.first(where: { $0.value == name })?.key else {
                    throw Problem(field: f.name, "\"\(name)\" is not one of its values (\(f.values.values.sorted().joined(separator: ", ")))")
                }
                raw = .signed(code)
            case let .integer(i) where !f.isScaled:
                raw = .signed(i)
            case let .unsigned(u) where !f.isScaled:
                raw = .unsigned(u)
            case .integer, .unsigned, .number:
                // A number: scaled back to the raw value (a whole number when the field is not scaled).
                let x = v.number ?? .nan
                let q = (x - f.add) / f.scale
                guard q.isFinite, abs(q) < 9.0e15 else { throw Problem(field: f.name, "\(x) is out of its range") }
                let r = Adv.rounded(q, 0)
                guard f.isScaled || r == q else { throw Problem(field: f.name, "expected a whole number, got \(x)") }
                raw = .signed(Int64(r))
            default:
                throw Problem(field: f.name, "expected a number")
            }
            guard let bits = raw.bits(width: width, signed: signed) else {
                let range = signed ? "\(Self.signedRange(width))" : "0…\(Self.mask(width))"
                let scaled = f.isScaled ? " (raw, before scale \(f.scale) and add \(f.add))" : ""
                throw Problem(field: f.name, "\(raw.description) does not fit \(width) bits: \(range)\(scaled)")
            }
            let shift = UInt64(f.bits?.shift ?? 0)
            var container = Self.load(out, offset, n, endian)
            container |= bits << shift
            Self.store(&out, offset, n, endian, container)
        case let .float(n, endian):
            guard let y = v.number else { throw Problem(field: f.name, "expected a number") }
            let x = y
            let raw: UInt64
            switch n {
            case 2:
                guard let h = Self.doubleToHalf(y) else { throw Problem(field: f.name, "\(x) is not a half-precision float") }
                raw = UInt64(h)
            case 4: raw = UInt64(Float(y).bitPattern)
            default: raw = y.bitPattern
            }
            Self.store(&out, offset, n, endian, raw)
        case let .string(n?):
            guard case let .text(t) = v else { throw Problem(field: f.name, "expected text") }
            let bytes = Array(t.utf8)
            guard bytes.count <= n, !bytes.contains(0) else { throw Problem(field: f.name, "\"\(t)\" is not at most \(n) bytes of UTF-8 without a zero byte") }
            out.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        case let .raw(n?):
            guard case let .bytes(b) = v, b.count == n else { throw Problem(field: f.name, "expected \(n) bytes") }
            out.replaceSubrange(offset..<(offset + n), with: b)
        case .string(nil), .raw(nil):
            break  // encoded by encode(_:) (to the end)
        }
    }

    // MARK: - Bits and bytes

    enum Int64OrUInt64: CustomStringConvertible {
        case signed(Int64)
        case unsigned(UInt64)

        /// The value's low `width` bits, when it fits them as a signed or unsigned field.
        func bits(width: Int, signed: Bool) -> UInt64? {
            let mask = FieldLayout.mask(width)
            switch (self, signed) {
            case let (.signed(i), true):
                let r = FieldLayout.signedRange(width)
                guard r.contains(i) else { return nil }
                return UInt64(bitPattern: i) & mask
            case let (.signed(i), false):
                guard i >= 0, UInt64(i) <= mask else { return nil }
                return UInt64(i)
            case let (.unsigned(u), true):
                guard u <= UInt64(FieldLayout.signedRange(width).upperBound) else { return nil }
                return u
            case let (.unsigned(u), false):
                guard u <= mask else { return nil }
                return u
            }
        }

        var description: String {
            switch self {
            case let .signed(i): return "\(i)"
            case let .unsigned(u): return "\(u)"
            }
        }
    }

    /// As the built-in decoders round (``Adv/rounded(_:_:)``), so a profile and a decoder agree.
    static func rounded(_ x: Double, _ decimals: Int?) -> Double {
        guard let decimals else { return x }
        return Adv.rounded(x, decimals)
    }

    static func mask(_ width: Int) -> UInt64 { width >= 64 ? .max : (1 << UInt64(width)) - 1 }

    static func signedRange(_ width: Int) -> ClosedRange<Int64> {
        width >= 64 ? Int64.min...Int64.max : -(Int64(1) << Int64(width - 1))...((Int64(1) << Int64(width - 1)) - 1)
    }

    static func signExtend(_ v: UInt64, bits: Int) -> Int64 {
        guard bits < 64 else { return Int64(bitPattern: v) }
        let shift = UInt64(64 - bits)
        return Int64(bitPattern: v << shift) >> Int64(shift)
    }

    static func load(_ data: [UInt8], _ offset: Int, _ n: Int, _ endian: Endian) -> UInt64 {
        var v: UInt64 = 0
        for k in 0..<n {
            let b = UInt64(data[offset + k])
            switch endian {
            case .little: v |= b << UInt64(8 * k)
            case .big: v = v << 8 | b
            }
        }
        return v
    }

    static func store(_ data: inout [UInt8], _ offset: Int, _ n: Int, _ endian: Endian, _ v: UInt64) {
        for k in 0..<n {
            let shift = endian == .little ? 8 * k : 8 * (n - 1 - k)
            data[offset + k] = UInt8(truncatingIfNeeded: v >> UInt64(shift))
        }
    }

    /// IEEE 754 binary16 to Double (exact).
    static func halfToDouble(_ h: UInt16) -> Double {
        let sign: Double = h & 0x8000 != 0 ? -1 : 1
        let exponent = Int(h >> 10 & 0x1F)
        let fraction = Double(h & 0x3FF)
        switch exponent {
        case 0: return sign * fraction * 0x1p-24
        case 31: return fraction == 0 ? sign * .infinity : .nan
        default: return sign * (1 + fraction / 1024) * Double(sign: .plus, exponent: exponent - 15, significand: 1)
        }
    }

    /// Double to IEEE 754 binary16 when it is exactly one (nil otherwise); NaN is 0x7E00.
    static func doubleToHalf(_ x: Double) -> UInt16? {
        if x.isNaN { return 0x7E00 }
        let sign: UInt16 = x.sign == .minus ? 0x8000 : 0
        let a = abs(x)
        if a.isInfinite { return sign | 0x7C00 }
        if a == 0 { return sign }
        if a < 0x1p-14 {
            let f = a / 0x1p-24
            guard f == f.rounded(), f < 1024 else { return nil }
            return sign | UInt16(f)
        }
        let e = Int(a.exponent)
        guard e <= 15 else { return nil }
        let f = (a / Double(sign: .plus, exponent: e, significand: 1) - 1) * 1024
        guard f == f.rounded() else { return nil }
        return sign | UInt16(e + 15) << 10 | UInt16(f)
    }
}

extension FieldLayout.Value {
    /// The number, for integers and numbers.
    public var number: Double? {
        switch self {
        case let .number(x): return x
        case let .integer(i): return Double(i)
        case let .unsigned(u): return Double(u)
        default: return nil
        }
    }
}

extension FieldLayout {
    /// Whether `x` has no digits beyond `decimals` (floating-point noise aside).
    static func isWhole(_ x: Double, decimals: Int) -> Bool {
        abs(x * pow10(decimals) - (x * pow10(decimals)).rounded()) < 1e-6
    }

    /// The fewest decimals (0…15) in which `scale` and `add` are whole: what a
    /// scaled field is rounded to when its profile does not say (0.005 → 3).
    /// Always enough for the validation's rule (values read back).
    public static func defaultDecimals(scale: Double, add: Double) -> Int {
        (0...15).first { isWhole(scale, decimals: $0) && isWhole(add, decimals: $0) } ?? 15
    }
}

/// 10^e for -15…15, exactly where a Double can be.
func pow10(_ e: Int) -> Double {
    var p = 1.0
    for _ in 0..<abs(e) { p *= 10 }
    return e < 0 ? 1 / p : p
}
