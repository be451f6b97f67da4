/// A record read by a `KafkaConsumer`.
public struct KafkaMessage: Sendable, Hashable {
    /// The topic the record was read from.
    public var topic: String
    /// The partition the record was read from.
    public var partition: KafkaPartition
    /// The record's offset in its partition; commit `offset.next` once it is processed.
    public var offset: KafkaOffset
    /// The record key, or `nil` for a null key.
    public var key: [UInt8]?
    /// The record value (empty for a null value).
    public var value: [UInt8]
    /// The record headers, in the order the producer wrote them.
    public var headers: [KafkaHeader]
    /// The record timestamp in milliseconds since the UNIX epoch (create or log-append time), or `nil`
    /// when the record carries none.
    public var timestamp: Int64?
    /// Set when the Kafka client could not read the record at this offset (a batch it cannot
    /// decompress or parse, see `UnreadableRecordSkipper`): librdkafka's error, while `key`, `value`
    /// and `headers` are empty and `timestamp` is nil. Only consumers with
    /// `KafkaConsumerConfiguration.unreadableRecordRetries` set hand such records out.
    public var unreadableError: String?
    /// Set when the value was larger than `KafkaConsumerConfiguration.maxValueBytes`: its size in
    /// bytes, while `value` holds only its first `maxValueBytes` bytes (the consumer never copied the
    /// rest out of the Kafka client).
    public var oversizedValueBytes: Int?
    /// With `oversizedValueBytes`: the SHA-256 of the whole value (32 bytes), computed in place.
    public var oversizedValueSHA256: [UInt8]?

    public init(
        topic: String, partition: KafkaPartition, offset: KafkaOffset, key: [UInt8]?, value: [UInt8],
        headers: [KafkaHeader], timestamp: Int64?
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }

    /// The topic and partition of this record.
    public var topicPartition: KafkaTopicPartition { KafkaTopicPartition(topic: topic, partition: partition) }

    /// The value of the first header named `name`, if any.
    public func header(_ name: String) -> [UInt8]? {
        headers.first { $0.name == name }?.value
    }
}
