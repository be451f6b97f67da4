/// Building JSON documents as values and writing them with ``JSONWriter`` (for callers that answer
/// with JSON that is not a message, such as the simulator's admin API).
extension JSONValue {
    /// An integer number.
    public static func integer(_ value: some BinaryInteger) -> JSONValue { .number(String(value)) }

    /// A number from a `Double`: without a fraction when it is a whole number (`1`, not `1.0`), else
    /// Swift's shortest round-tripping text (`0.25`, `1e-05`); `null` for NaN and the infinities, which
    /// JSON cannot write.
    public static func double(_ value: Double) -> JSONValue {
        guard value.isFinite else { return .null }
        if value == value.rounded(), abs(value) < 1e15 { return .number(String(Int64(value))) }
        return .number(String(value))
    }

    /// An array of strings.
    public static func strings(_ values: some Sequence<String>) -> JSONValue { .array(values.map { .string($0) }) }

    /// An object whose members are `members` in key order (`String`'s `<`), so that the
    /// same dictionary always writes the same text.
    public static func sortedObject(_ members: [String: JSONValue]) -> JSONValue {
        .object(JSONObject(members: members.sorted { $0.key < $1.key }.map { JSONObject.Member(key: $0.key, value: $0.value) }))
    }

    /// The value as compact JSON text (UTF-8), members in their order, numbers as their literal text.
    public var serializedBytes: [UInt8] {
        var writer = JSONWriter()
        writer.writeValue(self)
        return writer.bytes
    }
}

extension JSONWriter {
    /// Writes `value` as one value: objects' members in their order, numbers as their literal text,
    /// strings escaped as ``appendQuoted(_:to:)`` escapes them.
    public mutating func writeValue(_ value: JSONValue) {
        switch value {
        case .null: writeRaw("null")
        case .bool(let flag): writeRaw(flag ? "true" : "false")
        case .number(let literal): writeNumber(literal)
        case .string(let text): writeString(text)
        case .array(let elements):
            beginArray()
            for element in elements { writeValue(element) }
            endArray()
        case .object(let object):
            beginObject()
            for member in object.members {
                writeKey(member.key)
                writeValue(member.value)
            }
            endObject()
        }
    }
}
