import ProtobufCodec

/// The parts of librdkafka's statistics (the JSON document its `stats_cb` receives every
/// `statistics.interval.ms`; fields described in librdkafka's STATISTICS.md) that the services use:
/// how many brokers are connected, and each consumed partition's lag.
public struct KafkaStatistics: Sendable, Equatable {
    /// Broker connections with a `nodeid` ≥ 0 (brokers learned from metadata, and a consumer's
    /// logical group-coordinator connection) whose `state` is `UP`.
    public var brokersUp: Int
    /// Brokers learned from metadata, whatever their state.
    public var brokersKnown: Int
    /// Per partition: `consumer_lag`, the high watermark (or last stable offset) less the consumer's
    /// committed offset, in records. Partitions librdkafka reports as unknown (-1) are left out.
    public var consumerLag: [KafkaTopicPartition: Int64]

    /// - Parameters: see the properties.
    public init(brokersUp: Int = 0, brokersKnown: Int = 0, consumerLag: [KafkaTopicPartition: Int64] = [:]) {
        self.brokersUp = brokersUp
        self.brokersKnown = brokersKnown
        self.consumerLag = consumerLag
    }

    /// Parses a statistics document.
    /// - Parameter json: the bytes `stats_cb` received.
    /// - Returns: nil when the bytes are not a JSON object (librdkafka always sends one).
    public init?(json: some Collection<UInt8>) {
        guard case .object(let root)? = try? JSONValue(parsing: Array(json)) else { return nil }
        var up = 0
        var known = 0
        if case .object(let brokers)? = root["brokers"] {
            for member in brokers.members {
                guard case .object(let broker) = member.value, let node = broker["nodeid"]?.integerValue, node >= 0 else { continue }
                known += 1
                if broker["state"] == .string("UP") { up += 1 }
            }
        }
        var lag: [KafkaTopicPartition: Int64] = [:]
        if case .object(let topics)? = root["topics"] {
            for topic in topics.members {
                guard case .object(let fields) = topic.value, case .object(let partitions)? = fields["partitions"] else { continue }
                for partition in partitions.members {
                    guard let number = Int32(partition.key), number >= 0, case .object(let values) = partition.value,
                          let value = values["consumer_lag"]?.integerValue, value >= 0
                    else { continue }
                    lag[KafkaTopicPartition(topic: topic.key, partition: KafkaPartition(rawValue: number))] = value
                }
            }
        }
        self.init(brokersUp: up, brokersKnown: known, consumerLag: lag)
    }
}
