// The non-integer scalar field types: `bool`, `double`, `float`, `string`, `bytes`.

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
