/// A partition number within a topic (Kafka protocol: `int32`, 0-based).
public struct KafkaPartition: RawRepresentable, Hashable, Comparable, Sendable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    /// The 0-based partition number.
    public let rawValue: Int32

    public init(rawValue: Int32) { self.rawValue = rawValue }
    public init(integerLiteral value: Int32) { self.rawValue = value }

    public static func < (lhs: KafkaPartition, rhs: KafkaPartition) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { String(rawValue) }
}
