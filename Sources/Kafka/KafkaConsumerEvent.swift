/// Something that happened to a `KafkaConsumer` besides records arriving: rebalances and errors.
public enum KafkaConsumerEvent: Sendable {
    /// These partitions were added to this member's assignment; their records follow on `messages`.
    /// Eager protocol: the whole new assignment; cooperative: only the added partitions.
    case partitionsAssigned([KafkaTopicPartition])
    /// These partitions are being taken away. Their records still in the `messages` buffer were
    /// dropped (the next owner reads them from the committed offset). The revocation completes when
    /// `KafkaRevocation.finish()` is called or `revocationTimeout` elapsed, so in-flight work of these
    /// partitions can be finished and its offsets stored (or committed) first. Pause state of these
    /// partitions is forgotten.
    case partitionsRevoked(KafkaRevocation)
    /// A consumer error (e.g. a subscribed topic does not exist, or a broker is unreachable).
    case error(KafkaError)
}
