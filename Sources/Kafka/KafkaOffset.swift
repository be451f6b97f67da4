/// A record's position within a partition (Kafka protocol: `int64`, 0-based, increasing by one per record).
///
/// When committing, Kafka's convention is to commit the offset of the *next* record to read,
/// that is the last processed record's offset + 1.
public struct KafkaOffset: RawRepresentable, Hashable, Comparable, Sendable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    /// The 0-based offset.
    public let rawValue: Int64

    public init(rawValue: Int64) { self.rawValue = rawValue }
    public init(integerLiteral value: Int64) { self.rawValue = value }

    /// The offset after this one: what to commit once this record has been processed.
    public var next: KafkaOffset { KafkaOffset(rawValue: rawValue + 1) }

    public static func < (lhs: KafkaOffset, rhs: KafkaOffset) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { String(rawValue) }
}
