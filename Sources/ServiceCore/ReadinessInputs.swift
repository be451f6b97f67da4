/// What `/readyz` decides from: cached observations of the process's Kafka clients and database
/// pool, never a query made for the probe. Absent parts (nil) are not used by this service.
public struct ReadinessInputs: Sendable, Equatable {
    /// An error a Kafka client reported through librdkafka's `error_cb`.
    public struct KafkaErrorObservation: Sendable, Equatable {
        /// librdkafka's error name (`_ALL_BROKERS_DOWN`, `_TRANSPORT`, `_FATAL`, …) and text.
        public var message: String
        /// Time since it was reported.
        public var age: Duration
        /// The client is unusable (`RD_KAFKA_RESP_ERR__FATAL`).
        public var isFatal: Bool
        /// `RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN`.
        public var isAllBrokersDown: Bool

        /// - Parameters: see the properties.
        public init(message: String, age: Duration, isFatal: Bool = false, isAllBrokersDown: Bool = false) {
            self.message = message
            self.age = age
            self.isFatal = isFatal
            self.isAllBrokersDown = isAllBrokersDown
        }
    }

    /// A Kafka client (consumer or producer), as its callbacks last described it.
    public struct KafkaClient: Sendable, Equatable {
        /// Consumer: a rebalance callback handed this member an assignment (possibly empty). Producers: true.
        public var joined: Bool
        /// Consumer: partitions assigned now (zero is still ready: more replicas than partitions).
        public var assignedPartitions: Int
        /// Time since the poll thread last returned from `rd_kafka_consumer_poll` / `rd_kafka_poll`.
        public var lastPollAge: Duration
        /// The last `error_cb` report, if any.
        public var lastError: KafkaErrorObservation?
        /// Brokers in state `UP` in the last statistics (`statistics.interval.ms`); nil before the first.
        public var brokersUp: Int?
        /// Time since the last statistics; nil before the first.
        public var statisticsAge: Duration?

        /// - Parameters: see the properties.
        public init(joined: Bool, assignedPartitions: Int = 0, lastPollAge: Duration, lastError: KafkaErrorObservation? = nil,
                    brokersUp: Int? = nil, statisticsAge: Duration? = nil) {
            self.joined = joined
            self.assignedPartitions = assignedPartitions
            self.lastPollAge = lastPollAge
            self.lastError = lastError
            self.brokersUp = brokersUp
            self.statisticsAge = statisticsAge
        }
    }

    /// The database pool's last periodic check.
    public struct DatabaseCheck: Sendable, Equatable {
        /// Whether it succeeded.
        public var succeeded: Bool
        /// Time since it finished.
        public var age: Duration
        /// The round-trip time, or the error.
        public var detail: String

        /// - Parameters: see the properties.
        public init(succeeded: Bool, age: Duration, detail: String) {
            self.succeeded = succeeded
            self.age = age
            self.detail = detail
        }
    }

    /// The Kafka consumer, when the service consumes.
    public var consumer: KafkaClient?
    /// The Kafka producer, when the service produces.
    public var producer: KafkaClient?
    /// Whether the service uses a database; then `databaseCheck` is its last check (nil: none yet).
    public var usesDatabase: Bool
    /// The database pool's last check.
    public var databaseCheck: DatabaseCheck?
    /// Findings shown in the body that never decide readiness (Apple's reachability, provider-token faults).
    public var informational: [ProbeReport.Check]
    /// The service's phase: only `running` can be ready. Default `running`.
    public var phase: ReadinessState.Phase = .running

    /// - Parameters: see the properties.
    public init(consumer: KafkaClient? = nil, producer: KafkaClient? = nil, usesDatabase: Bool = false,
                databaseCheck: DatabaseCheck? = nil, informational: [ProbeReport.Check] = []) {
        self.consumer = consumer
        self.producer = producer
        self.usesDatabase = usesDatabase
        self.databaseCheck = databaseCheck
        self.informational = informational
    }
}
