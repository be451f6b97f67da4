/// Proto3 JSON entry points (protobuf.dev/programming-guides/json).
extension ProtobufMessage {
    /// Decodes a message from proto3 JSON. Field keys may be the lowerCamelCase JSON name or the
    /// `.proto` name; `null` means the default; 64-bit integers may be strings or numbers; enums
    /// names or numbers; bytes base64.
    /// - Throws: `ProtobufError` whose description names the field path, such as
    ///   `notification.priority: expected an integer, found a string`.
    public init(jsonUTF8 bytes: [UInt8], options: JSONDecodingOptions = JSONDecodingOptions()) throws(ProtobufError) {
        self = try JSONValue(parsing: bytes).decodeMessage(Self.self, options: options)
    }

    /// Decodes a message from proto3 JSON held in any byte collection (such as `Data`).
    /// - Throws: as ``init(jsonUTF8:options:)-([UInt8],_)``.
    public init(jsonUTF8 bytes: some Collection<UInt8>, options: JSONDecodingOptions = JSONDecodingOptions()) throws(ProtobufError) {
        try self.init(jsonUTF8: Array(bytes), options: options)
    }

    /// Decodes a message from proto3 JSON text.
    /// - Throws: as ``init(jsonUTF8:options:)-([UInt8],_)``.
    public init(jsonString: String, options: JSONDecodingOptions = JSONDecodingOptions()) throws(ProtobufError) {
        try self.init(jsonUTF8: Array(jsonString.utf8), options: options)
    }

    /// The message as compact proto3 JSON (UTF-8): default values omitted, 64-bit integers as
    /// strings, enums by name, bytes as base64, map keys in ascending order.
    public func jsonUTF8Bytes(options: JSONEncodingOptions = JSONEncodingOptions()) -> [UInt8] {
        var writer = JSONWriter(options: options)
        writer.writeMessageValue(self)
        return writer.bytes
    }

    /// The message as compact proto3 JSON text; see ``jsonUTF8Bytes(options:)``.
    public func jsonString(options: JSONEncodingOptions = JSONEncodingOptions()) -> String {
        String(decoding: jsonUTF8Bytes(options: options), as: UTF8.self)
    }
}

extension JSONValue {
    /// Decodes a message from this value, which must be an object.
    /// - Throws: `ProtobufError` with a path relative to this value.
    public func decodeMessage<M: ProtobufMessage>(_ type: M.Type, options: JSONDecodingOptions) throws(ProtobufError) -> M {
        guard case .object(let object) = self else {
            throw ProtobufError(.jsonTypeMismatch, "expected an object for \(M.protoMessageName), found \(kindDescription)")
        }
        var message = M()
        try message.decodeJSONObject(object, options: options)
        return message
    }

    private func elements() throws(ProtobufError) -> [JSONValue] {
        switch self {
        case .array(let elements): return elements
        case .null: return []
        default: throw ProtobufError(.jsonTypeMismatch, "expected an array, found \(kindDescription)")
        }
    }

    private func members() throws(ProtobufError) -> [JSONObject.Member] {
        switch self {
        case .object(let object): return object.members
        case .null: return []
        default: throw ProtobufError(.jsonTypeMismatch, "expected an object, found \(kindDescription)")
        }
    }

    private static func nullElement() -> ProtobufError {
        ProtobufError(.jsonTypeMismatch, "null is not allowed in a list or map")
    }

    /// Decodes a repeated scalar field from an array (`null` is an empty list).
    /// - Throws: `ProtobufError` with `[index]` in its path.
    public func decodeRepeated<T: ProtobufFieldType>(_ type: T.Type) throws(ProtobufError) -> [T.Value] {
        var values: [T.Value] = []
        for (index, element) in try elements().enumerated() {
            do throws(ProtobufError) {
                if element.isNull { throw Self.nullElement() }
                values.append(try T.readJSON(element))
            } catch {
                throw error.prefixingPath("[\(index)]")
            }
        }
        return values
    }

    /// Decodes a repeated message field from an array of objects.
    public func decodeRepeatedMessages<M: ProtobufMessage>(_ type: M.Type, options: JSONDecodingOptions) throws(ProtobufError) -> [M] {
        var values: [M] = []
        for (index, element) in try elements().enumerated() {
            do throws(ProtobufError) {
                if element.isNull { throw Self.nullElement() }
                values.append(try element.decodeMessage(M.self, options: options))
            } catch {
                throw error.prefixingPath("[\(index)]")
            }
        }
        return values
    }

    /// Decodes a map field from an object whose keys are the map keys as strings.
    /// - Throws: `ProtobufError` with `["key"]` in its path.
    public func decodeMap<K: ProtobufMapKeyType, V: ProtobufFieldType>(
        _ keyType: K.Type, _ valueType: V.Type
    ) throws(ProtobufError) -> [K.Value: V.Value] {
        var map: [K.Value: V.Value] = [:]
        for member in try members() {
            do throws(ProtobufError) {
                if member.value.isNull { throw Self.nullElement() }
                let key = try K.readJSONKey(member.key)
                guard map.updateValue(try V.readJSON(member.value), forKey: key) == nil else {
                    throw ProtobufError(.duplicateJSONField, "duplicate map key")
                }
            } catch {
                throw error.prefixingPath("[\"\(member.key)\"]")
            }
        }
        return map
    }

    /// Decodes a map field whose values are messages.
    public func decodeMessageMap<K: ProtobufMapKeyType, M: ProtobufMessage>(
        _ keyType: K.Type, _ messageType: M.Type, options: JSONDecodingOptions
    ) throws(ProtobufError) -> [K.Value: M] {
        var map: [K.Value: M] = [:]
        for member in try members() {
            do throws(ProtobufError) {
                if member.value.isNull { throw Self.nullElement() }
                let key = try K.readJSONKey(member.key)
                guard map.updateValue(try member.value.decodeMessage(M.self, options: options), forKey: key) == nil else {
                    throw ProtobufError(.duplicateJSONField, "duplicate map key")
                }
            } catch {
                throw error.prefixingPath("[\"\(member.key)\"]")
            }
        }
        return map
    }
}

/// Tracks which fields and oneofs a JSON object has set, so a field given twice (under either of
/// its names) or two members of one oneof are reported (the proto3 JSON mapping forbids both).
public struct JSONFieldTracker: Sendable {
    private var seenFields: [Int] = []
    private var seenOneofs: [(index: Int, key: String)] = []

    /// An empty tracker.
    public init() {}

    /// Records field `number`.
    /// - Throws: `.duplicateJSONField` when it was already set.
    public mutating func see(field number: Int) throws(ProtobufError) {
        guard !seenFields.contains(number) else {
            throw ProtobufError(.duplicateJSONField, "field given more than once")
        }
        seenFields.append(number)
    }

    /// Records field `number`, member `key` of oneof `oneofIndex` named `oneofName`.
    /// - Throws: `.duplicateJSONField` when the field or another member of the oneof was set.
    public mutating func see(field number: Int, oneof oneofIndex: Int, oneofName: String, key: String) throws(ProtobufError) {
        try see(field: number)
        if let earlier = seenOneofs.first(where: { $0.index == oneofIndex }) {
            throw ProtobufError(.duplicateJSONField, "oneof \(oneofName) already set by \"\(earlier.key)\"")
        }
        seenOneofs.append((oneofIndex, key))
    }
}
