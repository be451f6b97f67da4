/// How JSON is read into messages.
public struct JSONDecodingOptions: Sendable, Hashable {
    /// Skip object keys that name no field instead of throwing `.unknownJSONField`. Default
    /// `false`, as the proto3 JSON mapping specifies. Unknown enum names still throw.
    public var ignoreUnknownFields: Bool

    /// Options with the given values.
    public init(ignoreUnknownFields: Bool = false) {
        self.ignoreUnknownFields = ignoreUnknownFields
    }

    /// Throws `.unknownJSONField` for a key that names no field of `messageName`, unless unknown
    /// fields are ignored.
    public func unknownField(_ key: String, in messageName: String) throws(ProtobufError) {
        guard ignoreUnknownFields else {
            throw ProtobufError(.unknownJSONField, "unknown field of \(messageName)")
        }
    }
}
