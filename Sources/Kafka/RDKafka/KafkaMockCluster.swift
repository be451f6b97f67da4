import Foundation
internal import CRdKafka
import ServiceCore
import Synchronization

/// Held while a mock cluster binds its listeners and while a broker is taken down (which binds its
/// port again): see `KafkaMockCluster.setBrokerDown`.
private let mockListeners = Mutex(())

/// librdkafka's built-in Kafka-protocol broker (`rdkafka_mock.h`), running in this process on loopback.
///
/// A real Kafka-protocol endpoint for any client (ours, kcat, confluent-kafka): produce (idempotent
/// too), fetch, consumer groups with offset commits, and fault injection. Limits of librdkafka 2.0.2's
/// mock: brokers listen on random loopback ports (no setting for a fixed port; read
/// `bootstrapServers`); no CreateTopics handler (use `createTopic`; auto-created topics get 4
/// partitions); each partition keeps at most about 5 MiB / 100,000 records and drops the oldest;
/// everything is lost when the cluster is destroyed.
///
/// Methods send a command to the mock's own thread and wait for it (well under a millisecond).
public final class KafkaMockCluster: Sendable {
    /// A Kafka protocol API key, for `pushRequestErrors` (Kafka protocol guide, "Api Keys").
    public struct APIKey: RawRepresentable, Hashable, Sendable {
        public let rawValue: Int16
        public init(rawValue: Int16) { self.rawValue = rawValue }

        public static let produce = APIKey(rawValue: 0)
        public static let fetch = APIKey(rawValue: 1)
        public static let listOffsets = APIKey(rawValue: 2)
        public static let metadata = APIKey(rawValue: 3)
        public static let offsetCommit = APIKey(rawValue: 8)
        public static let offsetFetch = APIKey(rawValue: 9)
        public static let findCoordinator = APIKey(rawValue: 10)
        public static let joinGroup = APIKey(rawValue: 11)
        public static let heartbeat = APIKey(rawValue: 12)
        public static let leaveGroup = APIKey(rawValue: 13)
        public static let syncGroup = APIKey(rawValue: 14)
        public static let initProducerID = APIKey(rawValue: 22)
    }

    private let owner: MockClusterOwner
    /// The brokers' addresses, `127.0.0.1:PORT,…` (comma-separated, as `bootstrap.servers` wants).
    public let bootstrapServers: String
    /// How many brokers the cluster has; their ids are 1...brokerCount.
    public let brokerCount: Int

    /// Starts a cluster of `brokers` brokers (ids 1...brokers).
    /// - Throws: `KafkaError` when librdkafka cannot create it.
    public init(brokers: Int = 3, logger: Logger = Logger(label: "kafka.mock")) throws(KafkaError) {
        owner = try MockClusterOwner(brokers: brokers, logger: logger)
        bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(owner.cluster))
        brokerCount = brokers
    }

    /// Creates `name` with `partitions` partitions (`rd_kafka_mock_topic_create`).
    /// - Throws: `KafkaError` (e.g. `TOPIC_ALREADY_EXISTS`, `invalidArgument`).
    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1) throws(KafkaError) {
        let err = rd_kafka_mock_topic_create(owner.cluster, name, Int32(partitions), Int32(replicationFactor))
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "create topic \(name): \(String(cString: rd_kafka_err2str(err)))") }
    }

    /// Takes broker `id` down: its connections are closed and new ones refused until `setBrokerUp`.
    /// - Throws: `KafkaError` when there is no such broker.
    public func setBrokerDown(_ id: Int32) throws(KafkaError) {
        // The mock closes the broker's listening socket and binds its port again at once, and
        // aborts the process when that bind fails: a cluster created meanwhile in this process may
        // have been given the freed port. Clusters are created under the same lock.
        let err = mockListeners.withLock { _ in rd_kafka_mock_broker_set_down(owner.cluster, id) }
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "broker \(id): \(String(cString: rd_kafka_err2str(err)))") }
    }

    /// Brings broker `id` back up.
    /// - Throws: `KafkaError` when there is no such broker.
    public func setBrokerUp(_ id: Int32) throws(KafkaError) {
        let err = rd_kafka_mock_broker_set_up(owner.cluster, id)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "broker \(id): \(String(cString: rd_kafka_err2str(err)))") }
    }

    /// Delays every response of broker `id` (-1: every broker) by `milliseconds` from now on, on every
    /// connection (`rd_kafka_mock_broker_set_rtt`); 0 ends the delay. Requests are still served in
    /// order: a delayed Produce response delays the producer's delivery reports by as much.
    /// - Throws: `KafkaError` when there is no such broker.
    public func setBrokerRoundTripTime(_ id: Int32, milliseconds: Int) throws(KafkaError) {
        let err = rd_kafka_mock_broker_set_rtt(owner.cluster, id, Int32(milliseconds))
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err, "broker \(id): \(String(cString: rd_kafka_err2str(err)))") }
    }

    /// Moves the leadership of `topic`/`partition` to broker `brokerID` (`rd_kafka_mock_partition_set_leader`).
    /// - Throws: `KafkaError` for an unknown topic, partition or broker.
    public func setPartitionLeader(topic: String, partition: KafkaPartition, brokerID: Int32) throws(KafkaError) {
        let err = rd_kafka_mock_partition_set_leader(owner.cluster, topic, partition.rawValue, brokerID)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err) }
    }

    /// Makes the next `errors.count` requests of type `apiKey` (to any broker) fail with these errors,
    /// in order (`rd_kafka_mock_push_request_errors_array`).
    public func pushRequestErrors(apiKey: APIKey, errors: [KafkaError.Code]) {
        let codes = errors.map(\.rdKafkaValue)
        rd_kafka_mock_push_request_errors_array(owner.cluster, apiKey.rawValue, codes.count, codes)
    }

    /// Drops errors queued with `pushRequestErrors` for `apiKey`.
    public func clearRequestErrors(apiKey: APIKey) {
        rd_kafka_mock_clear_request_errors(owner.cluster, apiKey.rawValue)
    }
}

/// Owns the host `rd_kafka_t` and the mock cluster on it.
///
/// `@unchecked Sendable`: the mock API functions are thread-safe: each one posts an op to the mock
/// cluster's thread and waits for its reply (rdkafka_mock.c, `rd_kafka_mock_cluster_cmd`). Both
/// pointers are immutable after `init`.
private final class MockClusterOwner: @unchecked Sendable {
    let host: OpaquePointer
    let cluster: OpaquePointer
    private let context: RDKafkaContext

    init(brokers: Int, logger: Logger) throws(KafkaError) {
        let context = RDKafkaContext(logger: logger)
        // The mock needs a client instance for its bookkeeping; a producer that never produces.
        let conf = try RDKafkaConfig.make([("client.id", "mock-cluster-host"), ("log_level", "4")], context: context)
        let host = try RDKafkaConfig.newHandle(RD_KAFKA_PRODUCER, conf: conf)
        var created: OpaquePointer?
        mockListeners.withLock { _ in created = rd_kafka_mock_cluster_new(host, Int32(brokers)) }
        guard let cluster = created else {
            rd_kafka_destroy(host)
            throw KafkaError(code: .invalidArgument, message: "rd_kafka_mock_cluster_new failed (see logs)")
        }
        self.host = host
        self.cluster = cluster
        self.context = context
    }

    /// Destroys the cluster and its host client on a thread of their own: both calls join librdkafka
    /// threads (hundreds of milliseconds), and the last reference is usually dropped on a cooperative
    /// thread. The context rides along: the host's log callback reads it until `rd_kafka_destroy` returns.
    deinit {
        let doomed = Doomed(host: host, cluster: cluster, context: context)
        NamedThread.start(name: "kafka-mock-end") {
            rd_kafka_mock_cluster_destroy(doomed.cluster)
            rd_kafka_destroy(doomed.host)
            withExtendedLifetime(doomed.context) {}
        }
    }

    /// What the destroying thread owns. `@unchecked Sendable`: handed over once, used by that thread only.
    private struct Doomed: @unchecked Sendable {
        let host: OpaquePointer
        let cluster: OpaquePointer
        let context: RDKafkaContext
    }
}
