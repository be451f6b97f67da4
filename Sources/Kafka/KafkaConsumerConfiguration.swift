/// Settings of a `KafkaConsumer` (a member of a consumer group). Every default is visible here; each
/// field names the librdkafka property it sets (librdkafka 2.0.2 CONFIGURATION.md).
///
/// Offsets are never stored automatically (`enable.auto.offset.store=false`): a record counts as
/// processed only when the application says so. By default (`offsetCommit = .storedOffsets`) the
/// application stores the next offset to read with `KafkaConsumer.storeOffsets` and librdkafka commits
/// the stored offsets every `autoCommitInterval`, when partitions are revoked and on `close()`. With
/// `.explicit`, the application commits with `KafkaConsumer.commit` instead. See docs/kafka-consumer.md.
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

        /// `.cooperative` with librdkafka 2.3.0 or later, `.eager` before: librdkafka's
        /// cooperative-sticky assignor before 2.3.0 can abort the process on an assertion
        /// (`assignor_state`, librdkafka issue 4312) when a member's assignor state was never set, for
        /// example when it is destroyed or rejoins before its first assignment.
        public static var recommended: RebalanceProtocol {
            KafkaLibrary.hasCooperativeStickyFix ? .cooperative : .eager
        }
    }

    /// How processed offsets reach the group coordinator.
    public enum OffsetCommit: Sendable, Equatable {
        /// Only `KafkaConsumer.commit` commits (`enable.auto.commit=false`). Stored offsets are never
        /// committed.
        case explicit
        /// The application stores offsets with `KafkaConsumer.storeOffsets` (non-blocking) and
        /// librdkafka commits what was stored every `autoCommitInterval` (`enable.auto.commit=true`,
        /// `auto.commit.interval.ms`), for revoked partitions during the rebalance, and in `close()`.
        /// `KafkaConsumer.commit` keeps working alongside.
        case storedOffsets(autoCommitInterval: Duration)

        /// The default scheme: stored offsets committed every 200 ms.
        public static let `default` = OffsetCommit.storedOffsets(autoCommitInterval: .milliseconds(200))
    }

    /// Initial brokers, as `host:port` (`bootstrap.servers`).
    public var bootstrapServers: [String]
    /// The consumer group (`group.id`).
    public var groupID: String
    /// Topics to subscribe to.
    public var topics: [String]
    /// Client id sent to brokers (`client.id`). Default `push`.
    public var clientID: String = "push"
    /// Static group membership (KIP-345, `group.instance.id`): a member that restarts with the same id
    /// within `sessionTimeout` gets its partitions back without a rebalance. Must be unique within the
    /// group (a second member with the same id fences the first). A static member does not leave the
    /// group on `close()`; its partitions move only after `sessionTimeout`. Default `nil` (dynamic).
    public var groupInstanceID: String? = nil
    /// How offsets are committed. Default `.storedOffsets(autoCommitInterval: .milliseconds(200))`.
    public var offsetCommit: OffsetCommit = .default
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
    /// Eager or cooperative rebalancing. Default `.recommended`: `.cooperative` (a member joining or
    /// leaving only moves the partitions that change owner; the others keep flowing) where the
    /// installed librdkafka is safe with it, else `.eager`.
    public var rebalanceProtocol: RebalanceProtocol = .recommended
    /// Most messages held in the `messages` buffer; see `KafkaMessageSequence` for what happens when
    /// it is full (no more polling for records, then paused partitions). Default 1,000.
    public var maxBufferedMessages: Int = 1000
    /// Longest time the broker may hold a fetch request while it has too little data to answer
    /// (`fetch.wait.max.ms`). Default 500 ms (librdkafka's). A real broker answers as soon as data
    /// arrives; librdkafka's built-in test broker holds every fetch this long, so local stacks on it set
    /// a few milliseconds for realistic latency.
    public var fetchMaxWait: Duration = .milliseconds(500)
    /// Upper bound of librdkafka's own prefetch queue per partition, in KiB
    /// (`queued.max.messages.kbytes`). This, not a message count, bounds the prefetch: see
    /// `prefetchMinMessages`.
    /// Default 4,096 KiB.
    public var prefetchMaxKilobytes: Int = 4096
    /// Records librdkafka tries to keep prefetched per partition (`queued.min.messages`). Default
    /// 100,000 (librdkafka's). A low value throttles a busy partition: librdkafka 2.0.2 waits about a
    /// second before fetching again for a partition whose prefetch queue is above it, so records
    /// arrive in bursts once a second; `prefetchMaxKilobytes` bounds the memory instead.
    public var prefetchMinMessages: Int = 100_000
    /// How long a revocation waits for the application to call `KafkaRevocation.finish()` while someone
    /// iterates `events`. Must stay below `maxPollInterval`. Default 10 s. It is a safety net: the
    /// whole group's rebalance waits for this member meanwhile, so the application should finish in
    /// well under a second (drop queued work, wait only for what is in progress, store, finish).
    public var revocationTimeout: Duration = .seconds(10)
    /// How often librdkafka reports statistics (`statistics.interval.ms`), from which `health` reads
    /// broker connection states and, for a consumer, each partition's `consumer_lag`, without a broker query. Default 5 s; nil turns statistics off.
    public var statisticsInterval: Duration? = .seconds(5)
    /// Records the client cannot read (docs/kafka-consumer.md "Records the client cannot read"): after
    /// this many consumer errors at one partition's position (`_BAD_COMPRESSION`, `_BAD_MSG`,
    /// `CORRUPT_MESSAGE`, `MSG_SIZE_TOO_LARGE`), the consumer hands out a record with
    /// `KafkaMessage.unreadableError` set for that offset and seeks past it, one offset at a time until
    /// a record is delivered. Nil (the default) never skips: the partition stays at the unreadable
    /// record, as librdkafka leaves it. The dispatcher sets `PUSH_CONSUMER_ERROR_RETRIES` (default 3).
    public var unreadableRecordRetries: Int? = nil
    /// Records whose value (as the Kafka client hands it over, after decompression) is larger than this
    /// are handed out with only its first `maxValueBytes` bytes, `KafkaMessage.oversizedValueBytes`
    /// and the whole value's SHA-256 (computed in place), without copying the rest (the client's own
    /// copy is freed at once). Nil (the default): every value is copied.
    public var maxValueBytes: Int? = nil
    /// A partition whose client reported errors at its position and delivered no record for this long
    /// counts as stalled (`KafkaConsumer.stalledPartitions`). Default 60 s.
    public var partitionStallThreshold: Duration = .seconds(60)
    /// Any other librdkafka property, applied after the fields above (so it overrides them), for
    /// example the security settings of `KafkaSecurity.properties`. `allow.auto.create.topics` is
    /// always `false`.
    public var additionalProperties: [String: String] = [:]
    /// Called on the consumer's poll thread with each record as soon as librdkafka returns it, before
    /// it is buffered for `nextMessages`: for a decision that must not wait behind the application's
    /// tasks (the dispatcher's cancel on receipt, docs/campaigns.md "Cancellation"). It runs on the
    /// thread that serves the group protocol, so it must return within microseconds and never block.
    /// Default nil.
    public var onReceipt: (@Sendable (KafkaMessage) -> Void)? = nil

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
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", autoOffsetReset.rawValue),
            ("session.timeout.ms", String(session)),
            ("heartbeat.interval.ms", String(heartbeat)),
            ("max.poll.interval.ms", String(maxPollInterval.wholeMilliseconds)),
            ("partition.assignment.strategy", rebalanceProtocol == .cooperative ? "cooperative-sticky" : "range,roundrobin"),
            ("queued.min.messages", String(max(1, prefetchMinMessages))),
            ("queued.max.messages.kbytes", String(max(1, prefetchMaxKilobytes))),
            ("fetch.wait.max.ms", String(max(0, fetchMaxWait.wholeMilliseconds))),
        ]
        switch offsetCommit {
        case .explicit:
            list.append(("enable.auto.commit", "false"))
        case .storedOffsets(let interval):
            list.append(("enable.auto.commit", "true"))
            list.append(("auto.commit.interval.ms", String(max(1, interval.wholeMilliseconds))))
        }
        if let groupInstanceID { list.append(("group.instance.id", groupInstanceID)) }
        if let statisticsInterval { list.append(("statistics.interval.ms", String(max(1, statisticsInterval.wholeMilliseconds)))) }
        for key in additionalProperties.keys.sorted() { list.append((key, additionalProperties[key]!)) }
        // Never let a record or a subscription create a topic with the broker's default partition
        // count: topics are created by operators (docs/operations in the README). Applied last, so no
        // additional property can turn it back on.
        list.append(("allow.auto.create.topics", "false"))
        return list
    }
}
