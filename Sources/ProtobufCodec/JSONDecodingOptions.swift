/// How JSON is read into messages.
public struct JSONDecodingOptions: Sendable, Hashable {
    /// Skip object keys that name no field instead of throwing `.unknownJSONField`. Default
    /// `false`, as the proto3 JSON mapping specifies. Unknown enum names still throw.
    public var ignoreUnknownFields: Bool
    /// Most members of one JSON object or elements of one array; the parser stops with
    /// `.tooManyElements` at the first one past it, before it builds the rest. Default: no limit.
    public var maximumElements: Int

    /// Options with the given values.
    public init(ignoreUnknownFields: Bool = false, maximumElements: Int = .max) {
        self.ignoreUnknownFields = ignoreUnknownFields
        self.maximumElements = maximumElements
    }

    /// Throws `.unknownJSONField` for a key that names no field of `messageName`, unless unknown
    /// fields are ignored.
    public func unknownField(_ key: String, in messageName: String) throws(ProtobufError) {
        guard ignoreUnknownFields else {
            throw ProtobufError(.unknownJSONField, "unknown field of \(messageName)")
        }
    }
}
