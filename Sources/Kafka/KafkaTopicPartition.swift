/// A topic and one of its partitions: the unit that a consumer group assigns to its members.
public struct KafkaTopicPartition: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The topic name.
    public var topic: String
    /// The partition within `topic`.
    public var partition: KafkaPartition

    public init(topic: String, partition: KafkaPartition) {
        self.topic = topic
        self.partition = partition
    }

    public static func < (lhs: KafkaTopicPartition, rhs: KafkaTopicPartition) -> Bool {
        (lhs.topic, lhs.partition) < (rhs.topic, rhs.partition)
    }

    public var description: String { "\(topic)[\(partition)]" }
}
