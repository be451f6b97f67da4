// The integer field types: `int32` … `sfixed64` (protobuf.dev/programming-guides/encoding, "Varints", "Non-varint Numbers").

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
