/// Settings of a `KafkaProducer`. Every default is visible here; each field names the librdkafka
/// property it sets (see librdkafka's CONFIGURATION.md for 2.0.2).
public struct KafkaProducerConfiguration: Sendable {
    /// How many replicas must acknowledge a record before the broker answers (Kafka `acks`).
    public enum Acks: String, Sendable {
        /// Every in-sync replica (`acks=all`); required by the idempotent producer.
        case all = "all"
        /// The partition leader only (`acks=1`).
        case leader = "1"
        /// No acknowledgement (`acks=0`): a delivery report only means "sent".
        case none = "0"
    }

    /// Initial brokers, as `host:port` (`bootstrap.servers`).
    public var bootstrapServers: [String]
    /// Client id sent to brokers, shown in their logs and quotas (`client.id`). Default `push`.
    public var clientID: String = "push"
    /// Acknowledgement level (`acks`). Default `.all`.
    public var acks: Acks = .all
    /// Idempotent producer: no duplicates or reordering from librdkafka's own retries
    /// (`enable.idempotence`). Default `true`.
    public var enableIdempotence: Bool = true
    /// How long records wait locally to be batched (`linger.ms`). Default 5 ms.
    public var linger: Duration = .milliseconds(5)
    /// How long librdkafka retries a record before reporting `messageTimedOut`, counted from `send`
    /// (`message.timeout.ms`). Default 300 s, so a broker outage shorter than that only delays `send`.
    public var messageTimeout: Duration = .seconds(300)
    /// Partitioner choosing the partition from the key (`partitioner`). Default `murmur2_random`, the
    /// Java client's: the same key lands on the same partition as with Java producers.
    public var partitioner: String = "murmur2_random"
    /// Most records in librdkafka's local queue (`queue.buffering.max.messages`). When it is full,
    /// `send` waits for room instead of failing. Default 100,000.
    public var maxQueuedMessages: Int = 100_000
    /// Largest record librdkafka accepts, in bytes (`message.max.bytes`): key, value and headers plus
    /// librdkafka's per-record overhead must fit. A larger `send` fails with `messageSizeTooLarge`
    /// without reaching the broker. Default 1,000,000 (librdkafka's default). The broker and topic have
    /// limits of their own (`message.max.bytes`, `max.message.bytes`), reported the same way.
    public var maxMessageBytes: Int = 1_000_000
    /// Recreate the producer and re-send unacknowledged records after a fatal error
    /// (`RD_KAFKA_RESP_ERR__FATAL`, e.g. the idempotent producer's sequence desynchronisation in
    /// librdkafka 2.0.2). Default `true`. When `false`, pending sends fail with a fatal `KafkaError`.
    public var recoverFromFatalErrors: Bool = true
    /// How often librdkafka reports statistics (`statistics.interval.ms`), from which `health` reads
    /// broker connection states, without a broker query. Default 5 s; nil turns statistics off.
    public var statisticsInterval: Duration? = .seconds(5)
    /// Any other librdkafka property, applied after the fields above (so it overrides them), for
    /// example the security settings of `KafkaSecurity.properties`. `allow.auto.create.topics` is
    /// always `false`.
    public var additionalProperties: [String: String] = [:]

    /// Creates a configuration for the given brokers; every other field has its default.
    public init(bootstrapServers: [String]) {
        self.bootstrapServers = bootstrapServers
    }

    /// The `linger.ms` librdkafka runs with, in milliseconds: `linger`, or the additional property
    /// that overrides it (`linger.ms`, or its alias `queue.buffering.max.ms`; the last one set wins,
    /// as in librdkafka). Nil when that property is not a number (librdkafka then refuses it).
    public var effectiveLingerMilliseconds: Double? {
        properties.last { $0.0 == "linger.ms" || $0.0 == "queue.buffering.max.ms" }.flatMap { Double($0.1) }
    }

    /// The librdkafka properties this configuration sets, in application order.
    var properties: [(String, String)] {
        var list: [(String, String)] = [
            ("bootstrap.servers", bootstrapServers.joined(separator: ",")),
            ("client.id", clientID),
            ("acks", acks.rawValue),
            ("enable.idempotence", enableIdempotence ? "true" : "false"),
            ("linger.ms", String(linger.wholeMilliseconds)),
            ("message.timeout.ms", String(messageTimeout.wholeMilliseconds)),
            ("partitioner", partitioner),
            ("queue.buffering.max.messages", String(maxQueuedMessages)),
            ("message.max.bytes", String(maxMessageBytes)),
        ]
        if let statisticsInterval { list.append(("statistics.interval.ms", String(max(1, statisticsInterval.wholeMilliseconds)))) }
        for key in additionalProperties.keys.sorted() { list.append((key, additionalProperties[key]!)) }
        // Never let a record or a subscription create a topic with the broker's default partition
        // count: topics are created by operators (docs/operations in the README). Applied last, so no
        // additional property can turn it back on.
        list.append(("allow.auto.create.topics", "false"))
        return list
    }
}

