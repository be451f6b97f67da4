import APNs

/// Everything the dispatcher needs to run; executables fill it from the environment.
public struct DispatcherConfiguration: Sendable {
    /// Kafka topics (DESIGN.md "Wire contracts").
    public struct Topics: Sendable {
        public var tokenEvents = "push.token-events.v1"
        public var sendRequests = "push.send-requests.v1"
        public var feedback = "push.feedback.v1"
        public var deadLetter = "push.dead-letter.v1"
        public init() {}
    }

    /// Kafka bootstrap servers, `host:port` each.
    public var bootstrapServers: [String]
    /// The consumer group all replicas share. Default `push-dispatcher`.
    public var consumerGroup = "push-dispatcher"
    public var topics = Topics()
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
    /// Records of one partition taken from the consumer but not yet handled; when a partition's
    /// lane is full, the consumer stops handing out records. Default 100.
    public var maxQueuedRecordsPerPartition = 100
    /// A name for this replica in logs and reports. Default: the host name.
    public var instanceID: String

    public init(bootstrapServers: [String], instanceID: String) {
        self.bootstrapServers = bootstrapServers
        self.instanceID = instanceID
    }
}
