/// A protobuf scalar type (`int32`, `sint64`, `string`, an enum, …): how a value of its Swift type
/// is written to and read from the wire and to and from proto3 JSON. Generated code names these
/// marker types (`ProtobufInt32.self`) so one generic writer or reader method serves every type.
public protocol ProtobufFieldType {
    /// The Swift type of a value (`Int32`, `String`, `[UInt8]`, an enum).
    associatedtype Value: Sendable, Hashable
    /// The wire type of one value written on its own (not packed).
    static var wireType: WireType { get }
    /// The proto3 default: zero, `false`, empty, or the enum's zero value.
    static var defaultValue: Value { get }
    /// Appends one value without its tag.
    static func write(_ value: Value, to writer: inout ProtobufWriter)
    /// Reads one value whose tag was just read.
    static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Value
    /// Appends one value as proto3 JSON (protobuf.dev/programming-guides/json).
    static func writeJSON(_ value: Value, to writer: inout JSONWriter)
    /// Decodes one non-null proto3 JSON value.
    /// - Throws: `ProtobufError` (`.jsonTypeMismatch`, `.jsonValueOutOfRange`, …) without a path;
    ///   callers add it.
    static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Value
}

/// A scalar type that may be a map key: integers, `bool` and `string`. In JSON, keys are strings.
public protocol ProtobufMapKeyType: ProtobufFieldType {
    /// The key's JSON object key: the decimal number, `"true"`/`"false"`, or the string itself.
    static func jsonKey(_ value: Value) -> String
    /// Decodes a JSON object key.
    static func readJSONKey(_ key: String) throws(ProtobufError) -> Value
    /// Orders keys so map encoding is deterministic.
    static func precedes(_ lhs: Value, _ rhs: Value) -> Bool
}

extension ProtobufMapKeyType where Value: Comparable {
    /// Ascending order.
    @inlinable
    public static func precedes(_ lhs: Value, _ rhs: Value) -> Bool { lhs < rhs }
}

extension ProtobufMapKeyType where Value: BinaryInteger & LosslessStringConvertible {
    /// The decimal number.
    public static func jsonKey(_ value: Value) -> String { String(value) }
    /// Parses a decimal key (map keys are always quoted in JSON).
    public static func readJSONKey(_ key: String) throws(ProtobufError) -> Value {
        try readJSON(.number(key))
    }
}

// MARK: Integers

/// Integer JSON decoding shared by every integer type: a JSON number or a string holding one;
/// exponent notation is accepted when the value is integral (protobuf.dev/programming-guides/json).
@usableFromInline
func readJSONInteger<I: FixedWidthInteger>(_ value: JSONValue, as type: I.Type) throws(ProtobufError) -> I {
    let text: String
    let shown: String
    switch value {
    case .number(let literal):
        text = literal
        shown = literal
    case .string(let string):
        text = string
        shown = "the string \"\(string)\""
        guard JSONValue.isNumberLiteral(string) else {
            throw ProtobufError(.jsonTypeMismatch, "expected an integer, found \(shown)")
        }
    default:
        throw ProtobufError(.jsonTypeMismatch, "expected an integer, found \(value.kindDescription)")
    }
    if let exact = I(text) { return exact }
    // Not a plain integer literal: a number with a fraction or exponent, or out of range.
    if let double = Double(text), double.isFinite, double == double.rounded(.towardZero) {
        guard let converted = I(exactly: double) else {
            throw ProtobufError(.jsonValueOutOfRange, "expected \(integerTypeName(I.self)), found \(shown), out of range")
        }
        return converted
    }
    if text.allSatisfy({ $0.isNumber || $0 == "-" }) {
        throw ProtobufError(.jsonValueOutOfRange, "expected \(integerTypeName(I.self)), found \(shown), out of range")
    }
    throw ProtobufError(.jsonValueOutOfRange, "expected an integer, found \(shown), not integral")
}

private func integerTypeName<I: FixedWidthInteger>(_ type: I.Type) -> String {
    "a\(I.isSigned ? "" : "n unsigned") \(I.bitWidth)-bit integer"
}

/// `int32`: varint, negative values sign-extended to 10 bytes. JSON: a number.
public enum ProtobufInt32: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: Int32 { 0 }
    @inlinable public static func write(_ value: Int32, to writer: inout ProtobufWriter) {
        writer.writeVarint(UInt64(bitPattern: Int64(value)))
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Int32 {
        Int32(truncatingIfNeeded: try reader.readVarint())
    }
    public static func writeJSON(_ value: Int32, to writer: inout JSONWriter) { writer.writeNumber(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Int32 { try readJSONInteger(value, as: Int32.self) }
}

/// `int64`: varint. JSON: a decimal string (numbers accepted).
public enum ProtobufInt64: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: Int64 { 0 }
    @inlinable public static func write(_ value: Int64, to writer: inout ProtobufWriter) {
        writer.writeVarint(UInt64(bitPattern: value))
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Int64 {
        Int64(bitPattern: try reader.readVarint())
    }
    public static func writeJSON(_ value: Int64, to writer: inout JSONWriter) { writer.writeString(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Int64 { try readJSONInteger(value, as: Int64.self) }
}

/// `uint32`: varint. JSON: a number.
public enum ProtobufUInt32: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: UInt32 { 0 }
    @inlinable public static func write(_ value: UInt32, to writer: inout ProtobufWriter) {
        writer.writeVarint(UInt64(value))
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> UInt32 {
        UInt32(truncatingIfNeeded: try reader.readVarint())
    }
    public static func writeJSON(_ value: UInt32, to writer: inout JSONWriter) { writer.writeNumber(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> UInt32 { try readJSONInteger(value, as: UInt32.self) }
}

/// `uint64`: varint. JSON: a decimal string (numbers accepted).
public enum ProtobufUInt64: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: UInt64 { 0 }
    @inlinable public static func write(_ value: UInt64, to writer: inout ProtobufWriter) {
        writer.writeVarint(value)
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> UInt64 {
        try reader.readVarint()
    }
    public static func writeJSON(_ value: UInt64, to writer: inout JSONWriter) { writer.writeString(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> UInt64 { try readJSONInteger(value, as: UInt64.self) }
}

/// `sint32`: ZigZag-encoded varint, so small negative numbers stay short. JSON: a number.
public enum ProtobufSInt32: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: Int32 { 0 }
    @inlinable public static func write(_ value: Int32, to writer: inout ProtobufWriter) {
        writer.writeVarint(UInt64(ZigZag.encode(value)))
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Int32 {
        ZigZag.decode(UInt32(truncatingIfNeeded: try reader.readVarint()))
    }
    public static func writeJSON(_ value: Int32, to writer: inout JSONWriter) { writer.writeNumber(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Int32 { try readJSONInteger(value, as: Int32.self) }
}

/// `sint64`: ZigZag-encoded varint. JSON: a decimal string (numbers accepted).
public enum ProtobufSInt64: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: Int64 { 0 }
    @inlinable public static func write(_ value: Int64, to writer: inout ProtobufWriter) {
        writer.writeVarint(ZigZag.encode(value))
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Int64 {
        ZigZag.decode(try reader.readVarint())
    }
    public static func writeJSON(_ value: Int64, to writer: inout JSONWriter) { writer.writeString(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Int64 { try readJSONInteger(value, as: Int64.self) }
}

/// `fixed32`: 4 bytes little-endian. JSON: a number.
public enum ProtobufFixed32: ProtobufMapKeyType {
    public static var wireType: WireType { .fixed32 }
    public static var defaultValue: UInt32 { 0 }
    @inlinable public static func write(_ value: UInt32, to writer: inout ProtobufWriter) { writer.writeFixed32(value) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> UInt32 { try reader.readFixed32() }
    public static func writeJSON(_ value: UInt32, to writer: inout JSONWriter) { writer.writeNumber(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> UInt32 { try readJSONInteger(value, as: UInt32.self) }
}

/// `fixed64`: 8 bytes little-endian. JSON: a decimal string (numbers accepted).
public enum ProtobufFixed64: ProtobufMapKeyType {
    public static var wireType: WireType { .fixed64 }
    public static var defaultValue: UInt64 { 0 }
    @inlinable public static func write(_ value: UInt64, to writer: inout ProtobufWriter) { writer.writeFixed64(value) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> UInt64 { try reader.readFixed64() }
    public static func writeJSON(_ value: UInt64, to writer: inout JSONWriter) { writer.writeString(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> UInt64 { try readJSONInteger(value, as: UInt64.self) }
}

/// `sfixed32`: 4 bytes little-endian, two's complement. JSON: a number.
public enum ProtobufSFixed32: ProtobufMapKeyType {
    public static var wireType: WireType { .fixed32 }
    public static var defaultValue: Int32 { 0 }
    @inlinable public static func write(_ value: Int32, to writer: inout ProtobufWriter) { writer.writeFixed32(UInt32(bitPattern: value)) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Int32 { Int32(bitPattern: try reader.readFixed32()) }
    public static func writeJSON(_ value: Int32, to writer: inout JSONWriter) { writer.writeNumber(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Int32 { try readJSONInteger(value, as: Int32.self) }
}

/// `sfixed64`: 8 bytes little-endian, two's complement. JSON: a decimal string (numbers accepted).
public enum ProtobufSFixed64: ProtobufMapKeyType {
    public static var wireType: WireType { .fixed64 }
    public static var defaultValue: Int64 { 0 }
    @inlinable public static func write(_ value: Int64, to writer: inout ProtobufWriter) { writer.writeFixed64(UInt64(bitPattern: value)) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Int64 { Int64(bitPattern: try reader.readFixed64()) }
    public static func writeJSON(_ value: Int64, to writer: inout JSONWriter) { writer.writeString(String(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Int64 { try readJSONInteger(value, as: Int64.self) }
}

/// ZigZag encoding of `sint32`/`sint64` (protobuf.dev/programming-guides/encoding, "Signed Integers"):
/// 0 → 0, -1 → 1, 1 → 2, -2 → 3, …
public enum ZigZag {
    /// `(n << 1) ^ (n >> 31)`.
    @inlinable public static func encode(_ value: Int32) -> UInt32 { UInt32(bitPattern: (value << 1) ^ (value >> 31)) }
    /// `(n << 1) ^ (n >> 63)`.
    @inlinable public static func encode(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }
    /// The inverse of ``encode(_:)-(Int32)``.
    @inlinable public static func decode(_ value: UInt32) -> Int32 { Int32(bitPattern: value >> 1) ^ -Int32(bitPattern: value & 1) }
    /// The inverse of ``encode(_:)-(Int64)``.
    @inlinable public static func decode(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }
}

// MARK: Bool, floating point, string, bytes

/// `bool`: varint 0 or 1 (any nonzero varint decodes as `true`). JSON: `true`/`false`.
public enum ProtobufBool: ProtobufMapKeyType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: Bool { false }
    @inlinable public static func write(_ value: Bool, to writer: inout ProtobufWriter) { writer.writeVarint(value ? 1 : 0) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Bool { try reader.readVarint() != 0 }
    public static func writeJSON(_ value: Bool, to writer: inout JSONWriter) { writer.writeRaw(value ? "true" : "false") }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Bool {
        guard case .bool(let bool) = value else {
            throw ProtobufError(.jsonTypeMismatch, "expected true or false, found \(value.kindDescription)")
        }
        return bool
    }
    public static func jsonKey(_ value: Bool) -> String { value ? "true" : "false" }
    public static func readJSONKey(_ key: String) throws(ProtobufError) -> Bool {
        switch key {
        case "true": return true
        case "false": return false
        default: throw ProtobufError(.jsonTypeMismatch, "expected the map key true or false, found \"\(key)\"")
        }
    }
    public static func precedes(_ lhs: Bool, _ rhs: Bool) -> Bool { !lhs && rhs }
}

/// Floating-point JSON shared by `float` and `double`: numbers, or the strings `"NaN"`,
/// `"Infinity"`, `"-Infinity"` and numeric strings.
@usableFromInline
func readJSONDouble(_ value: JSONValue) throws(ProtobufError) -> Double {
    switch value {
    case .number(let literal):
        guard let double = Double(literal) else {
            throw ProtobufError(.jsonTypeMismatch, "expected a number, found \(literal)")
        }
        return double
    case .string("NaN"): return .nan
    case .string("Infinity"): return .infinity
    case .string("-Infinity"): return -.infinity
    case .string(let string):
        guard JSONValue.isNumberLiteral(string), let double = Double(string) else {
            throw ProtobufError(.jsonTypeMismatch, "expected a number, found the string \"\(string)\"")
        }
        return double
    default:
        throw ProtobufError(.jsonTypeMismatch, "expected a number, found \(value.kindDescription)")
    }
}

@usableFromInline
func writeJSONDouble(_ value: Double, description: String, to writer: inout JSONWriter) {
    if value.isNaN {
        writer.writeString("NaN")
    } else if value.isInfinite {
        writer.writeString(value < 0 ? "-Infinity" : "Infinity")
    } else {
        writer.writeNumber(description)
    }
}

/// `double`: 8 bytes IEEE 754 little-endian. JSON: a number, or `"NaN"`/`"Infinity"`/`"-Infinity"`.
public enum ProtobufDouble: ProtobufFieldType {
    public static var wireType: WireType { .fixed64 }
    public static var defaultValue: Double { 0 }
    @inlinable public static func write(_ value: Double, to writer: inout ProtobufWriter) { writer.writeFixed64(value.bitPattern) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Double { Double(bitPattern: try reader.readFixed64()) }
    public static func writeJSON(_ value: Double, to writer: inout JSONWriter) {
        writeJSONDouble(value, description: value.description, to: &writer)
    }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Double { try readJSONDouble(value) }
}

/// `float`: 4 bytes IEEE 754 little-endian. JSON: as `double`, range-checked.
public enum ProtobufFloat: ProtobufFieldType {
    public static var wireType: WireType { .fixed32 }
    public static var defaultValue: Float { 0 }
    @inlinable public static func write(_ value: Float, to writer: inout ProtobufWriter) { writer.writeFixed32(value.bitPattern) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> Float { Float(bitPattern: try reader.readFixed32()) }
    public static func writeJSON(_ value: Float, to writer: inout JSONWriter) {
        writeJSONDouble(Double(value), description: value.description, to: &writer)
    }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> Float {
        let double = try readJSONDouble(value)
        if double.isFinite && abs(double) > Double(Float.greatestFiniteMagnitude) {
            throw ProtobufError(.jsonValueOutOfRange, "\(double) is out of range for float")
        }
        return Float(double)
    }
}

/// `string`: length-delimited UTF-8 (validated on decode). JSON: a string.
public enum ProtobufString: ProtobufMapKeyType {
    public static var wireType: WireType { .lengthDelimited }
    public static var defaultValue: String { "" }
    @inlinable public static func write(_ value: String, to writer: inout ProtobufWriter) { writer.writeLengthPrefixed(value) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> String {
        try reader.readLengthDelimitedString()
    }
    public static func writeJSON(_ value: String, to writer: inout JSONWriter) { writer.writeString(value) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> String {
        guard case .string(let string) = value else {
            throw ProtobufError(.jsonTypeMismatch, "expected a string, found \(value.kindDescription)")
        }
        return string
    }
    public static func jsonKey(_ value: String) -> String { value }
    public static func readJSONKey(_ key: String) throws(ProtobufError) -> String { key }
}

/// `bytes`: length-delimited. JSON: standard base64 with padding (URL-safe and unpadded accepted).
public enum ProtobufBytes: ProtobufFieldType {
    public static var wireType: WireType { .lengthDelimited }
    public static var defaultValue: [UInt8] { [] }
    @inlinable public static func write(_ value: [UInt8], to writer: inout ProtobufWriter) { writer.writeLengthPrefixed(value) }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> [UInt8] {
        try reader.readLengthDelimitedBytes()
    }
    public static func writeJSON(_ value: [UInt8], to writer: inout JSONWriter) { writer.writeString(Base64.encode(value)) }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> [UInt8] {
        guard case .string(let string) = value else {
            throw ProtobufError(.jsonTypeMismatch, "expected a base64 string, found \(value.kindDescription)")
        }
        return try Base64.decode(string)
    }
}

/// An enum field of type `E`: varint of its number. JSON: the value's name (numbers accepted).
public enum ProtobufEnumField<E: ProtobufEnum>: ProtobufFieldType {
    public static var wireType: WireType { .varint }
    public static var defaultValue: E { E(rawValue: 0) }
    @inlinable public static func write(_ value: E, to writer: inout ProtobufWriter) {
        writer.writeVarint(UInt64(bitPattern: Int64(value.rawValue)))
    }
    @inlinable public static func read(from reader: inout ProtobufReader) throws(ProtobufError) -> E {
        E(rawValue: Int32(truncatingIfNeeded: try reader.readVarint()))
    }
    public static func writeJSON(_ value: E, to writer: inout JSONWriter) {
        if let name = value.protoName {
            writer.writeString(name)
        } else {
            writer.writeNumber(String(value.rawValue))
        }
    }
    public static func readJSON(_ value: JSONValue) throws(ProtobufError) -> E {
        switch value {
        case .string(let name):
            guard let known = E(protoName: name) else {
                throw ProtobufError(.unknownEnumName, "\"\(name)\" is not a value of enum \(E.protoEnumName)")
            }
            return known
        case .number:
            return E(rawValue: try readJSONInteger(value, as: Int32.self))
        default:
            throw ProtobufError(.jsonTypeMismatch, "expected an enum name or number, found \(value.kindDescription)")
        }
    }
}
