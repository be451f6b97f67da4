import ProtobufCodec

/// The parts of librdkafka's statistics (the JSON document its `stats_cb` receives every
/// `statistics.interval.ms`; fields described in librdkafka's STATISTICS.md) that the services use:
/// how many brokers are connected, each broker's round-trip time and thread wake-ups, and each
/// consumed partition's lag.
public struct KafkaStatistics: Sendable, Equatable {
    /// Broker connections with a `nodeid` ≥ 0 (brokers learned from metadata, and a consumer's
    /// logical group-coordinator connection) whose `state` is `UP`.
    public var brokersUp: Int
    /// Brokers learned from metadata, whatever their state.
    public var brokersKnown: Int
    /// Per partition: `consumer_lag`, the high watermark (or last stable offset) less the consumer's
    /// committed offset, in records. Partitions librdkafka reports as unknown (-1) are left out.
    public var consumerLag: [KafkaTopicPartition: Int64]
    /// Per broker (its `nodeid`, ≥ 0) that answered requests in the last statistics window: the 99th
    /// percentile of the time from a request's send to its answer (`rtt.p99`), in microseconds. For a
    /// producer these are its produce requests: an idempotent producer sends one at a time per
    /// partition once a batch holds 5 records, so a round trip above `linger.ms` holds the next batch
    /// back (docs/capacity.md "Produce round trips"). Brokers without an answer in the window are left out.
    public var roundTripP99Microseconds: [Int32: Int64]
    /// Per broker (its `nodeid`, ≥ 0): how many times its broker thread woke up since the client
    /// started (`wakeups`, a counter). A thread that polls without sleeping (the spin of
    /// docs/capacity.md "Produce round trips") adds hundreds of thousands per second; a sleeping one,
    /// a few per request.
    public var wakeups: [Int32: Int64]

    /// - Parameters: see the properties.
    public init(
        brokersUp: Int = 0, brokersKnown: Int = 0, consumerLag: [KafkaTopicPartition: Int64] = [:],
        roundTripP99Microseconds: [Int32: Int64] = [:], wakeups: [Int32: Int64] = [:]
    ) {
        self.brokersUp = brokersUp
        self.brokersKnown = brokersKnown
        self.consumerLag = consumerLag
        self.roundTripP99Microseconds = roundTripP99Microseconds
        self.wakeups = wakeups
    }

    /// Parses a statistics document.
    /// - Parameter json: the bytes `stats_cb` received.
    /// - Returns: nil when the bytes are not a JSON object (librdkafka always sends one).
    public init?(json: some Collection<UInt8>) {
        guard case .object(let root)? = try? JSONValue(parsing: Array(json)) else { return nil }
        var up = 0
        var known = 0
        var roundTrips: [Int32: Int64] = [:]
        var wakeups: [Int32: Int64] = [:]
        if case .object(let brokers)? = root["brokers"] {
            for member in brokers.members {
                guard case .object(let broker) = member.value, let node = broker["nodeid"]?.integerValue, node >= 0,
                      let id = Int32(exactly: node)
                else { continue }
                known += 1
                if let count = broker["wakeups"]?.integerValue, count >= 0 { wakeups[id] = count }
                if broker["state"] == .string("UP") { up += 1 }
                if case .object(let rtt)? = broker["rtt"], let answered = rtt["cnt"]?.integerValue, answered > 0,
                   let p99 = rtt["p99"]?.integerValue {
                    roundTrips[id] = p99
                }
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
        self.init(brokersUp: up, brokersKnown: known, consumerLag: lag, roundTripP99Microseconds: roundTrips, wakeups: wakeups)
    }
}
