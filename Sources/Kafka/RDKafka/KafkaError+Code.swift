internal import CRdKafka

extension KafkaError {
    /// A Kafka protocol error code (positive) or a librdkafka-internal code (negative), wrapping
    /// `rd_kafka_resp_err_t` without exposing it. Unknown codes keep their number and librdkafka's name.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The numeric code: Kafka protocol error codes are positive, librdkafka-internal ones negative.
        public let rawValue: Int32

        /// Wraps a numeric code as returned by librdkafka.
        public init(rawValue: Int32) { self.rawValue = rawValue }

        init(_ err: rd_kafka_resp_err_t) { self.rawValue = err.rawValue }

        var rdKafkaValue: rd_kafka_resp_err_t { rd_kafka_resp_err_t(rawValue: rawValue) }

        /// librdkafka's symbolic name, such as `_QUEUE_FULL` or `NOT_LEADER_FOR_PARTITION`.
        public var name: String { String(cString: rd_kafka_err2name(rdKafkaValue)) }

        public var description: String { "\(name) (\(rawValue))" }

        // MARK: librdkafka-internal codes

        /// The client hit an unrecoverable error and must be recreated (`_FATAL`).
        public static let fatal = Code(RD_KAFKA_RESP_ERR__FATAL)
        /// The local producer queue is full (`_QUEUE_FULL`); `KafkaProducer` waits instead of failing.
        public static let queueFull = Code(RD_KAFKA_RESP_ERR__QUEUE_FULL)
        /// The message was not acknowledged within `message.timeout.ms` (`_MSG_TIMED_OUT`).
        public static let messageTimedOut = Code(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
        /// An operation did not finish in time (`_TIMED_OUT`).
        public static let timedOut = Code(RD_KAFKA_RESP_ERR__TIMED_OUT)
        /// A broker connection failed (`_TRANSPORT`).
        public static let transport = Code(RD_KAFKA_RESP_ERR__TRANSPORT)
        /// No broker is reachable (`_ALL_BROKERS_DOWN`).
        public static let allBrokersDown = Code(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        /// The client is shut down or shutting down (`_DESTROY`).
        public static let shutdown = Code(RD_KAFKA_RESP_ERR__DESTROY)
        /// A configuration property or argument is invalid (`_INVALID_ARG`).
        public static let invalidArgument = Code(RD_KAFKA_RESP_ERR__INVALID_ARG)
        /// A message was purged from the local queues (`_PURGE_QUEUE`).
        public static let purgedFromQueue = Code(RD_KAFKA_RESP_ERR__PURGE_QUEUE)
        /// An in-flight request was purged (`_PURGE_INFLIGHT`).
        public static let purgedInFlight = Code(RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)
        /// The partition does not exist locally (`_UNKNOWN_PARTITION`).
        public static let unknownPartition = Code(RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
        /// The topic does not exist locally (`_UNKNOWN_TOPIC`).
        public static let unknownTopic = Code(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC)
        /// The partitions were lost in a rebalance before they could be committed (`_ASSIGNMENT_LOST`).
        public static let assignmentLost = Code(RD_KAFKA_RESP_ERR__ASSIGNMENT_LOST)
        /// No offsets to commit (`_NO_OFFSET`).
        public static let noOffset = Code(RD_KAFKA_RESP_ERR__NO_OFFSET)
        /// The consumer is not in a group state that allows this (`_STATE`).
        public static let state = Code(RD_KAFKA_RESP_ERR__STATE)
        /// A fetched record batch could not be decompressed (`_BAD_COMPRESSION`), for example when it
        /// would expand past `receive.message.max.bytes`.
        public static let badCompression = Code(RD_KAFKA_RESP_ERR__BAD_COMPRESSION)
        /// A fetched record batch could not be parsed or failed its CRC check (`_BAD_MSG`).
        public static let badMessage = Code(RD_KAFKA_RESP_ERR__BAD_MSG)

        // MARK: Kafka protocol codes

        /// Topic or partition unknown to the broker (3, `UNKNOWN_TOPIC_OR_PART`).
        public static let unknownTopicOrPartition = Code(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        /// No leader for the partition right now (5, `LEADER_NOT_AVAILABLE`).
        public static let leaderNotAvailable = Code(RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
        /// The broker is not the partition's leader (6, `NOT_LEADER_FOR_PARTITION`).
        public static let notLeaderForPartition = Code(RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION)
        /// The broker timed out the request (7, `REQUEST_TIMED_OUT`).
        public static let requestTimedOut = Code(RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT)
        /// The message exceeds the broker's size limit (10, `MSG_SIZE_TOO_LARGE`).
        public static let messageSizeTooLarge = Code(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
        /// The broker found a record corrupt, e.g. a CRC mismatch (2, `CORRUPT_MESSAGE`).
        public static let corruptMessage = Code(RD_KAFKA_RESP_ERR_INVALID_MSG)
        /// A network problem on the broker side (13, `NETWORK_EXCEPTION`).
        public static let networkException = Code(RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION)
        /// The group coordinator is loading (14, `COORDINATOR_LOAD_IN_PROGRESS`).
        public static let coordinatorLoadInProgress = Code(RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS)
        /// No group coordinator is available (15, `COORDINATOR_NOT_AVAILABLE`).
        public static let coordinatorNotAvailable = Code(RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE)
        /// The broker is not the group's coordinator (16, `NOT_COORDINATOR`).
        public static let notCoordinator = Code(RD_KAFKA_RESP_ERR_NOT_COORDINATOR)
        /// Fewer in-sync replicas than `min.insync.replicas` (19, `NOT_ENOUGH_REPLICAS`).
        public static let notEnoughReplicas = Code(RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS)
        /// Written, but the in-sync replica set shrank (20, `NOT_ENOUGH_REPLICAS_AFTER_APPEND`).
        public static let notEnoughReplicasAfterAppend = Code(RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        /// The group generation is stale (22, `ILLEGAL_GENERATION`).
        public static let illegalGeneration = Code(RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION)
        /// The member id is unknown to the coordinator (25, `UNKNOWN_MEMBER_ID`).
        public static let unknownMemberID = Code(RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID)
        /// The group is rebalancing (27, `REBALANCE_IN_PROGRESS`).
        public static let rebalanceInProgress = Code(RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS)
        /// The idempotent producer's sequence is out of order (45, `OUT_OF_ORDER_SEQUENCE_NUMBER`).
        public static let outOfOrderSequenceNumber = Code(RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER)
        /// The producer id is unknown to the broker (59, `UNKNOWN_PRODUCER_ID`).
        public static let unknownProducerID = Code(RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID)
        /// The producer epoch is stale (47, `INVALID_PRODUCER_EPOCH`).
        public static let invalidProducerEpoch = Code(RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)
        /// The broker could not write to its log (56, `KAFKA_STORAGE_ERROR`).
        public static let kafkaStorageError = Code(RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR)

        private static let retriable: Set<Code> = [
            .queueFull, .messageTimedOut, .timedOut, .transport, .allBrokersDown, .unknownTopicOrPartition,
            .leaderNotAvailable, .notLeaderForPartition, .requestTimedOut, .networkException,
            .coordinatorLoadInProgress, .coordinatorNotAvailable, .notCoordinator, .notEnoughReplicas,
            .notEnoughReplicasAfterAppend, .rebalanceInProgress, .kafkaStorageError,
        ]

        /// Whether retrying later may succeed: broker unavailability, leader changes, timeouts, a full queue.
        public var isRetriable: Bool { Code.retriable.contains(self) }

        /// Whether this is librdkafka's `_FATAL`: the client instance must be recreated.
        public var isFatal: Bool { self == .fatal }
    }
}

extension KafkaError {
    /// An error for `err` with librdkafka's description (`rd_kafka_err2str`) unless `message` is given.
    init(_ err: rd_kafka_resp_err_t, _ message: String? = nil) {
        self.init(code: Code(err), message: message ?? String(cString: rd_kafka_err2str(err)))
    }

    /// Converts and destroys an `rd_kafka_error_t`.
    static func consuming(_ error: OpaquePointer) -> KafkaError {
        defer { rd_kafka_error_destroy(error) }
        let code = Code(rd_kafka_error_code(error))
        let message = rd_kafka_error_string(error).map { String(cString: $0) } ?? code.name
        return KafkaError(code: code, message: message)
    }
}
