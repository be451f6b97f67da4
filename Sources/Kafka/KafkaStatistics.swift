import Foundation

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
        guard let root = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] else { return nil }
        var up = 0
        var known = 0
        for case let broker as [String: Any] in (root["brokers"] as? [String: Any] ?? [:]).values {
            guard let node = (broker["nodeid"] as? NSNumber)?.intValue, node >= 0 else { continue }
            known += 1
            if broker["state"] as? String == "UP" { up += 1 }
        }
        var lag: [KafkaTopicPartition: Int64] = [:]
        for case let (topicName, topic as [String: Any]) in root["topics"] as? [String: Any] ?? [:] {
            for case let (key, partition as [String: Any]) in topic["partitions"] as? [String: Any] ?? [:] {
                guard let number = Int32(key), number >= 0,
                      let value = (partition["consumer_lag"] as? NSNumber)?.int64Value, value >= 0
                else { continue }
                lag[KafkaTopicPartition(topic: topicName, partition: KafkaPartition(rawValue: number))] = value
            }
        }
        self.init(brokersUp: up, brokersKnown: known, consumerLag: lag)
    }
}
