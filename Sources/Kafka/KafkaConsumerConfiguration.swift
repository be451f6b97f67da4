/// Settings of a `KafkaConsumer` (a member of a consumer group). Every default is visible here; each
/// field names the librdkafka property it sets (librdkafka 2.0.2 CONFIGURATION.md).
///
/// Offsets are never committed automatically (`enable.auto.commit=false`,
/// `enable.auto.offset.store=false`): the application commits explicit offsets with
/// `KafkaConsumer.commit`.
public struct KafkaConsumerConfiguration: Sendable {
    /// Where a partition without a committed offset starts (`auto.offset.reset`).
    public enum AutoOffsetReset: String, Sendable {
        /// The oldest record still in the log.
        case earliest
        /// Only records written after the consumer joined.
        case latest
    }

    /// How the group moves partitions between members (`partition.assignment.strategy`).
    public enum RebalanceProtocol: Sendable {
        /// Stop-the-world: every member gives up all partitions, then receives a new assignment
        /// (`range,roundrobin`).
        case eager
        /// Incremental (KIP-429): only the partitions that move are revoked (`cooperative-sticky`).
        case cooperative
    }

    /// Initial brokers, as `host:port` (`bootstrap.servers`).
    public var bootstrapServers: [String]
    /// The consumer group (`group.id`).
    public var groupID: String
    /// Topics to subscribe to.
    public var topics: [String]
    /// Client id sent to brokers (`client.id`). Default `push`.
    public var clientID: String = "push"
    /// Start position without a committed offset (`auto.offset.reset`). Default `.earliest`, so a
    /// group that joins after records were written still reads them.
    public var autoOffsetReset: AutoOffsetReset = .earliest
    /// How long the coordinator waits for heartbeats before evicting a member (`session.timeout.ms`).
    /// Default 45 s; tests use a few seconds so that a vanished member leaves quickly.
    public var sessionTimeout: Duration = .seconds(45)
    /// Heartbeat period (`heartbeat.interval.ms`). Default: a third of `sessionTimeout`, at most 3 s.
    public var heartbeatInterval: Duration? = nil
    /// Longest time between two polls before the member leaves the group (`max.poll.interval.ms`).
    /// Default 300 s. The poll thread keeps polling while the message buffer is full (after 0.5 s it
    /// pauses the partitions instead), so only a revocation waiting for the application counts.
    public var maxPollInterval: Duration = .seconds(300)
    /// Eager or cooperative rebalancing. Default `.eager`.
    public var rebalanceProtocol: RebalanceProtocol = .eager
    /// Most messages held in the `messages` buffer; see `KafkaMessageSequence` for what happens when
    /// it is full (no more polling for records, then paused partitions). Default 1,000.
    public var maxBufferedMessages: Int = 1000
    /// Upper bound of librdkafka's own prefetch queue per partition, in KiB
    /// (`queued.max.messages.kbytes`; `queued.min.messages` is set to `maxBufferedMessages`).
    /// Default 4,096 KiB.
    public var prefetchMaxKilobytes: Int = 4096
    /// How long a revocation waits for the application to call `KafkaRebalance.finish()` while someone
    /// iterates `events`. Must stay below `maxPollInterval`. Default 30 s.
    public var revocationTimeout: Duration = .seconds(30)
    /// Any other librdkafka property, applied last (so it overrides the fields above).
    public var additionalProperties: [String: String] = [:]

    /// Creates a configuration; every other field has its default.
    public init(bootstrapServers: [String], groupID: String, topics: [String]) {
        self.bootstrapServers = bootstrapServers
        self.groupID = groupID
        self.topics = topics
    }

    /// The librdkafka properties this configuration sets, in application order.
    var properties: [(String, String)] {
        let session = sessionTimeout.wholeMilliseconds
        let heartbeat = heartbeatInterval?.wholeMilliseconds ?? max(100, min(3000, session / 3))
        var list: [(String, String)] = [
            ("bootstrap.servers", bootstrapServers.joined(separator: ",")),
            ("client.id", clientID),
            ("group.id", groupID),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", autoOffsetReset.rawValue),
            ("session.timeout.ms", String(session)),
            ("heartbeat.interval.ms", String(heartbeat)),
            ("max.poll.interval.ms", String(maxPollInterval.wholeMilliseconds)),
            ("partition.assignment.strategy", rebalanceProtocol == .cooperative ? "cooperative-sticky" : "range,roundrobin"),
            ("queued.min.messages", String(max(1, maxBufferedMessages))),
            ("queued.max.messages.kbytes", String(max(1, prefetchMaxKilobytes))),
        ]
        for key in additionalProperties.keys.sorted() { list.append((key, additionalProperties[key]!)) }
        return list
    }
}
