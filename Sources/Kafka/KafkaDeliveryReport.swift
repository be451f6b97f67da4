/// Where the broker stored a produced record, once every in-sync replica acknowledged it (acks=all).
public struct KafkaDeliveryReport: Sendable, Hashable {
    /// The topic the record was written to.
    public var topic: String
    /// The partition the record was written to (chosen by the partitioner from the key).
    public var partition: KafkaPartition
    /// The offset the broker assigned to the record.
    public var offset: KafkaOffset

    public init(topic: String, partition: KafkaPartition, offset: KafkaOffset) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}
