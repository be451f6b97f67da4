/// Decoding helpers that generated `decodeJSONObject(_:options:)` methods call.
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
