/// How messages are written as JSON.
public struct JSONEncodingOptions: Sendable, Hashable {
    /// Write the `.proto` field names (`device_token`) instead of the lowerCamelCase JSON names
    /// (`deviceToken`). Default `false`.
    public var useProtoFieldNames: Bool

    /// Options with the given values.
    public init(useProtoFieldNames: Bool = false) {
        self.useProtoFieldNames = useProtoFieldNames
    }
}
