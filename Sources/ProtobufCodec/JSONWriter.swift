/// Writes compact proto3 JSON (protobuf.dev/programming-guides/json) to a UTF-8 byte buffer.
///
/// Commas are placed automatically. Strings are escaped minimally (`"`, `\`, control characters);
/// `/` and non-ASCII characters are written as they are, so a string's text is never rewritten.
public struct JSONWriter: Sendable {
    private enum State { case start, afterKey, afterValue }

    /// The UTF-8 bytes written so far.
    public private(set) var bytes: [UInt8] = []
    private var state = State.start
    /// How field names are written.
    public let options: JSONEncodingOptions

    /// An empty writer.
    public init(options: JSONEncodingOptions = JSONEncodingOptions()) {
        self.options = options
        bytes.reserveCapacity(256)
    }

    private mutating func beforeValue() {
        if state == .afterValue { bytes.append(UInt8(ascii: ",")) }
    }

    /// Starts an object (`{`).
    public mutating func beginObject() {
        beforeValue()
        bytes.append(UInt8(ascii: "{"))
        state = .start
    }

    /// Ends an object (`}`).
    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        state = .afterValue
    }

    /// Starts an array (`[`).
    public mutating func beginArray() {
        beforeValue()
        bytes.append(UInt8(ascii: "["))
        state = .start
    }

    /// Ends an array (`]`).
    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        state = .afterValue
    }

    /// Writes an object key and the `:` after it.
    public mutating func writeKey(_ key: String) {
        beforeValue()
        appendQuoted(key)
        bytes.append(UInt8(ascii: ":"))
        state = .afterKey
    }

    /// Writes a field's key: `jsonName` (lowerCamelCase), or `protoName` when
    /// ``JSONEncodingOptions/useProtoFieldNames`` is set.
    public mutating func writeFieldName(_ jsonName: String, protoName: String) {
        writeKey(options.useProtoFieldNames ? protoName : jsonName)
    }

    /// Writes a string value, escaped.
    public mutating func writeString(_ string: String) {
        beforeValue()
        appendQuoted(string)
        state = .afterValue
    }

    /// Writes a number from its literal text (`12`, `-1.5e+20`).
    public mutating func writeNumber(_ literal: String) {
        writeRaw(literal)
    }

    /// Writes `text` unchanged as one value (`true`, `null`, a number).
    public mutating func writeRaw(_ text: String) {
        beforeValue()
        bytes.append(contentsOf: text.utf8)
        state = .afterValue
    }

    private mutating func appendQuoted(_ string: String) { Self.appendQuoted(string, to: &bytes) }

    /// Appends `string` to `bytes` as a JSON string literal (RFC 8259 §7), quotes included: `"`, `\\`
    /// and control characters escaped, everything else as it is. The project's one JSON string escaper.
    public static func appendQuoted(_ string: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(0x5C); bytes.append(byte)
            case UInt8(ascii: "\\"): bytes.append(0x5C); bytes.append(byte)
            case 0x0A: bytes.append(0x5C); bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(0x5C); bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(0x5C); bytes.append(UInt8(ascii: "t"))
            case 0x08: bytes.append(0x5C); bytes.append(UInt8(ascii: "b"))
            case 0x0C: bytes.append(0x5C); bytes.append(UInt8(ascii: "f"))
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: Array("\\u00".utf8))
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    // MARK: Fields (called by generated code; callers skip proto3 defaults)

    /// Writes `"name": value` for a scalar field.
    public mutating func writeField<T: ProtobufFieldType>(
        _ type: T.Type, _ value: T.Value, jsonName: String, protoName: String
    ) {
        writeFieldName(jsonName, protoName: protoName)
        T.writeJSON(value, to: &self)
    }

    /// Writes `"name": [ … ]` for a repeated scalar field; nothing when it is empty.
    public mutating func writeRepeated<T: ProtobufFieldType>(
        _ type: T.Type, _ values: [T.Value], jsonName: String, protoName: String
    ) {
        guard !values.isEmpty else { return }
        writeFieldName(jsonName, protoName: protoName)
        beginArray()
        for value in values { T.writeJSON(value, to: &self) }
        endArray()
    }

    /// Writes a message as a JSON object value.
    public mutating func writeMessageValue<M: ProtobufMessage>(_ message: M) {
        beginObject()
        message.encodeJSONFields(to: &self)
        endObject()
    }

    /// Writes `"name": { … }` for an embedded message field.
    public mutating func writeMessage<M: ProtobufMessage>(_ message: M, jsonName: String, protoName: String) {
        writeFieldName(jsonName, protoName: protoName)
        writeMessageValue(message)
    }

    /// Writes `"name": [ { … }, … ]` for a repeated message field; nothing when it is empty.
    public mutating func writeRepeatedMessages<M: ProtobufMessage>(_ messages: [M], jsonName: String, protoName: String) {
        guard !messages.isEmpty else { return }
        writeFieldName(jsonName, protoName: protoName)
        beginArray()
        for message in messages { writeMessageValue(message) }
        endArray()
    }

    /// Writes `"name": { "key": value, … }` for a map field, keys in ascending order; nothing when
    /// it is empty.
    public mutating func writeMap<K: ProtobufMapKeyType, V: ProtobufFieldType>(
        _ keyType: K.Type, _ valueType: V.Type, _ map: [K.Value: V.Value], jsonName: String, protoName: String
    ) {
        guard !map.isEmpty else { return }
        writeFieldName(jsonName, protoName: protoName)
        beginObject()
        for key in map.keys.sorted(by: K.precedes) {
            writeKey(K.jsonKey(key))
            V.writeJSON(map[key]!, to: &self)
        }
        endObject()
    }

    /// Writes a map field whose values are messages.
    public mutating func writeMessageMap<K: ProtobufMapKeyType, M: ProtobufMessage>(
        _ keyType: K.Type, _ map: [K.Value: M], jsonName: String, protoName: String
    ) {
        guard !map.isEmpty else { return }
        writeFieldName(jsonName, protoName: protoName)
        beginObject()
        for key in map.keys.sorted(by: K.precedes) {
            writeKey(K.jsonKey(key))
            writeMessageValue(map[key]!)
        }
        endObject()
    }
}
