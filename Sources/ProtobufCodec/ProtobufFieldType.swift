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
        try readJSON(.string(key))
    }
}
