import APNsKeyRegistry
import Kafka
import PushDomain

/// Everything the dispatcher needs to run; executables fill it from the environment.
public struct DispatcherConfiguration: Sendable {
    /// Kafka topics (docs/semantics.md "Wire contracts"); the executable reads them from
    /// `PUSH_TOPIC_TOKEN_EVENTS`, `PUSH_TOPIC_SEND_REQUESTS`, `PUSH_TOPIC_FEEDBACK`,
    /// `PUSH_TOPIC_DEAD_LETTER`.
    public struct Topics: Sendable {
        /// Token events consumed. Default `push.token-events.v1`.
        public var tokenEvents = PushTopic.tokenEvents.name
        /// Send and cancel requests consumed. Default `push.send-requests.v1`.
        public var sendRequests = PushTopic.sendRequests.name
        /// Delivery reports and request completions produced. Default `push.feedback.v1`.
        public var feedback = PushTopic.feedback.name
        /// Dead letters produced. Default `push.dead-letter.v1`.
        public var deadLetter = PushTopic.deadLetter.name
        /// The default names.
        public init() {}

        /// All four, in the order above.
        public var all: [String] { [tokenEvents, sendRequests, feedback, deadLetter] }
    }

    /// Kafka bootstrap servers, `host:port` each.
    public var bootstrapServers: [String]
    /// The consumer group all replicas share. Default `push-dispatcher`.
    public var consumerGroup = "push-dispatcher"
    public var topics = Topics()
    /// Further librdkafka properties of the consumer (the security settings of
    /// `KafkaSecurity.properties`). Default none.
    public var kafkaProperties: [String: String] = [:]
    /// Kafka's session timeout for this consumer: how long a dead replica keeps its partitions.
    /// Default 45 s (Kafka's); tests use less.
    public var sessionTimeout: Duration = .seconds(45)
    /// The APNs environment for an explicit token the table has never seen when the request names
    /// none. Default production.
    public var defaultEnvironment: APNsEnvironment = .production
    /// How long to wait before retrying a message whose processing failed for a transient reason
    /// (database or Kafka unavailable); doubles up to `maximumRetryDelay`.
    public var initialRetryDelay: Duration = .milliseconds(200)
    public var maximumRetryDelay: Duration = .seconds(10)
    /// Send requests of one partition handled at once (records with the same key still run one after
    /// the other). Default 256.
    public var maxInFlightPerPartition = 256
    /// Pending records (running and waiting) of one partition at which its fetching pauses
    /// (`rd_kafka_pause_partitions`); it resumes at half. Default 1,024.
    public var pauseThresholdPerPartition = 1_024
    /// Records taken from the consumer and not yet finished, across all partitions; past it, intake
    /// waits and the consumer pauses fetching. Default 10,000.
    public var maxInFlightRecords = 10_000
    /// Key and value bytes of those records (`PUSH_MAX_IN_FLIGHT_RECORD_BYTES`); past it, intake
    /// waits likewise. A record larger than this is taken when nothing else is in flight. Default
    /// 64 MiB (67,108,864).
    public var maxInFlightRecordBytes = 64 << 20
    /// Notifications of one request sent to APNs at once. Default 1,000.
    public var maxInFlightNotifications = 1_000
    /// Tokens per page of a `user_ids` request (docs/dispatcher-engine.md "A user's tokens in
    /// pages"); the campaign page size (`PUSH_CAMPAIGN_PAGE_SIZE`) by default.
    public var userPageSize: Int? = nil
    /// Token events applied in one batch (one transaction). Default 500.
    public var tokenEventBatchSize = 500
    /// How long a revocation waits for the revoked partitions' running records before cancelling
    /// them. Far below `max.poll.interval.ms`. Default 3 s.
    public var revokeDrain: Duration = .seconds(3)
    /// `fetch.wait.max.ms` of the consumer (`PUSH_KAFKA_FETCH_WAIT_MAX_MS`). Default 500 ms; the local
    /// stack on librdkafka's test broker uses 10 ms (that broker holds every fetch this long).
    public var fetchMaxWait: Duration = .milliseconds(500)
    /// How the group moves partitions (`PUSH_KAFKA_REBALANCE_PROTOCOL`: `cooperative` or `eager`).
    /// Default `.recommended`: cooperative-sticky (only moved partitions drain) with librdkafka 2.3.0
    /// or later; eager with older ones, whose cooperative-sticky assignor can abort the process.
    public var rebalanceProtocol: KafkaConsumerConfiguration.RebalanceProtocol = .recommended
    /// How often librdkafka commits the stored offsets (`auto.commit.interval.ms`). Default 200 ms.
    public var autoCommitInterval: Duration = .milliseconds(200)
    /// Static group membership (`group.instance.id`, KIP-345): a restart within the session timeout
    /// keeps the assignment without a rebalance. Nil (dynamic membership) by default.
    public var groupInstanceID: String?
    /// A record retried longer than this is logged as stuck, once per `stuckRecordLogInterval`.
    /// Defaults 60 s and 60 s.
    public var stuckRecordThreshold: Duration = .seconds(60)
    public var stuckRecordLogInterval: Duration = .seconds(60)
    /// Largest dead letter produced, in bytes; the original value is cut to fit under this and the
    /// producer's `message.max.bytes` less 1 KiB. Default 1,000,000.
    public var deadLetterMaxBytes = 1_000_000
    /// How long `send_log` rows are kept (`PUSH_SEND_LOG_RETENTION_H`): at least as long as a send
    /// request can be redelivered, i.e. the send-requests topic's retention plus a margin. Nil keeps
    /// them forever. Default 8 days (Kafka's default 7-day retention plus a day).
    public var sendLogRetention: Duration? = .seconds(8 * 24 * 3600)
    /// Whether a report's `send_log` row is marked acknowledged once Kafka acknowledged it
    /// (`PUSH_SEND_LOG_ACK_MARKS`, default false: they cost more than 5 % of the CPU per notification,
    /// docs/send-log.md); with them, a request redelivered after a crash publishes
    /// again only the reports whose marks were not written yet (docs/send-log.md).
    public var sendLogAcknowledgementMarks = false
    /// How often expired `send_log` rows are deleted (in small batches). Default 10 minutes.
    public var sendLogRetentionInterval: Duration = .seconds(600)
    /// How often every replica reads new rows of the `cancellations` table (`PUSH_CANCEL_POLL_MS`):
    /// a cancel received by another replica stops sends here within about this time. Default 200 ms.
    public var cancelPollInterval: Duration = .milliseconds(200)
    /// How long a cancel is kept in memory when `sendLogRetention` is nil (rows kept forever): 8 days,
    /// the default retention.
    public static let defaultCancellationLifetime: Duration = .seconds(8 * 24 * 3600)
    /// How long a cancel is kept in memory (docs/campaigns.md "Cancellation"): the send-log
    /// retention, since a request redelivered later is sent again anyway, or
    /// `defaultCancellationLifetime` without one.
    public var cancellationLifetime: Duration { sendLogRetention ?? Self.defaultCancellationLifetime }
    /// The cap on a partition's uncommitted span and where notifications waiting for an APNs retry
    /// wait (`PUSH_MAX_UNCOMMITTED_RECORDS`, default 10,000; `PUSH_MAX_UNCOMMITTED_AGE_MS`, default
    /// 60 s); see docs/dispatcher-engine.md "Retries off the hot path, and parking".
    public var retryParking = RetryParkingPolicy()
    /// How often parked notifications that are due are claimed and sent again
    /// (`PUSH_PENDING_RETRY_SCAN_MS`). Default 1 s.
    public var pendingRetryScanInterval: Duration = .seconds(1)
    /// How long a claim on a parked notification lasts before another replica may take it over
    /// (`PUSH_PENDING_RETRY_LEASE_MS`): above the APNs request timeout. Default 60 s.
    public var pendingRetryLease: Duration = .seconds(60)
    /// Parked notifications re-driven at once by this replica. Default 200.
    public var maxParkedInFlight = 200
    /// Campaigns and scheduled sends (`PUSH_CAMPAIGN_*`, docs/campaigns.md).
    public var campaigns = CampaignSettings()
    /// The apps that get one try on the other APNs environment after `BadDeviceToken`
    /// (`PUSH_APNS_OTHER_ENVIRONMENT_RETRY`, docs/semantics.md "The other environment after
    /// BadDeviceToken"). Default none.
    public var otherEnvironmentRetry = OtherEnvironmentRetrySettings()
    /// Token hygiene: stale ageing, deletion of old inactive rows and finished campaigns
    /// (`PUSH_TOKEN_*`, `PUSH_CAMPAIGN_RETENTION_DAYS`, docs/token-hygiene.md). Runs under its own
    /// lease of `campaigns.lease` length.
    public var tokenHygiene = TokenHygieneSettings()
    /// Live Activity broadcast channels: the limit per app and environment and the channel-hygiene
    /// job (`PUSH_CHANNEL_LIMIT`, `PUSH_CHANNEL_HYGIENE_INTERVAL_MS`, docs/live-activities.md). Its
    /// job runs under its own lease of `campaigns.lease` length.
    public var channels = ChannelSettings()
    /// Guards against hostile input on Kafka: unreadable records, send-request limits, token ownership
    /// (`PUSH_CONSUMER_ERROR_RETRIES`, `PUSH_PARTITION_STALL_MS`, `PUSH_MAX_SEND_REQUEST_BYTES`,
    /// `PUSH_MAX_TOKENS_PER_REQUEST`, `PUSH_TOKEN_REBIND_AFTER_DAYS`).
    public var intake = IntakeSettings()
    /// The APNs credentials registry (`PUSH_APNS_CREDENTIALS_FILE`, or the single-key shorthand):
    /// which key sends to which app; a bundle id no key may send to is refused before sending
    /// (`OUTCOME_REASON_NO_CREDENTIAL`). Nil (the default): the APNs client's own credentials.
    public var credentials: CredentialsStore?
    /// A name for this replica in logs and reports. Default: the host name.
    public var instanceID: String

    public init(bootstrapServers: [String], instanceID: String) {
        self.bootstrapServers = bootstrapServers
        self.instanceID = instanceID
    }
}
