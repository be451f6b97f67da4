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
