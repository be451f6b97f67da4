/// A record header (Kafka protocol, record format v2): a name and an optional byte value.
/// Headers keep their order, and a name may appear more than once.
public struct KafkaHeader: Hashable, Sendable {
    /// The header name (UTF-8), such as `content-type`.
    public var name: String
    /// The header value bytes, or `nil` for a null value.
    public var value: [UInt8]?

    /// Creates a header with raw bytes.
    public init(name: String, value: [UInt8]?) {
        self.name = name
        self.value = value
    }

    /// Creates a header whose value is the UTF-8 encoding of `value`.
    public init(name: String, value: String) {
        self.init(name: name, value: Array(value.utf8))
    }

    /// The value decoded as UTF-8, or `nil` when it is null or not valid UTF-8.
    public var stringValue: String? {
        value.flatMap { String(validating: $0, as: UTF8.self) }
    }
}
