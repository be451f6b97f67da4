import APNs
import APNsSimulator
import Foundation
import Kafka
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import DispatcherCore

/// The world the engine tests run the dispatcher in, one per test: the suite's PostgreSQL database,
/// librdkafka's mock cluster with the dispatcher's four topics, the APNs simulator in this process
/// over TLS, and a reader that collects the feedback topic from its start.
///
/// `startEngine` is the one place that builds the engine (docs/dispatcher-engine.md "Invariants"):
/// the tests drive it only through Kafka records, the simulator and PostgreSQL, so when the engine is
/// restructured only that function changes.
final class EngineWorld: Sendable {
    static let bundleID = "com.example.app"
    /// The test's own Kafka clients log errors only (the mock broker's version warnings are noise here).
    static let quiet = Logger(label: "test.kafka", logLevel: .error)

    let pool: PostgresPool
    let store: TokenStore
    let cluster: KafkaMockCluster
    let topics: DispatcherConfiguration.Topics
    let group: String
    /// The test's own producer of send requests and token events.
    let producer: KafkaProducer
    let simulator: APNsSimulator
    let credentials: EngineCredentials
    let feedback: FeedbackCollector

    /// - Parameter partitions: partitions of the send-request topic (the other topics have one).
    /// - Parameter trustedKeys: keys the simulator trusts besides `EngineCredentials`' own.
    /// - Parameter channelLimit: the simulator's broadcast channels per app and environment (Apple's 10,000).
    init(partitions: Int = 1, trustedKeys: [APNsSimulator.TrustedKey] = [], channelLimit: Int = 10_000) async throws {
        ProcessSignals.ignoreSIGPIPE()
        pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 6))
        try await pool.start()
        store = TokenStore(pool: pool)
        try await store.migrate()
        cluster = try KafkaMockCluster(brokers: 1)
        let suffix = UUID().uuidString.prefix(8).lowercased()
        var topics = DispatcherConfiguration.Topics()
        topics.tokenEvents = "token-events-\(suffix)"
        topics.sendRequests = "send-requests-\(suffix)"
        topics.feedback = "feedback-\(suffix)"
        topics.deadLetter = "dead-letter-\(suffix)"
        for topic in topics.all { try cluster.createTopic(topic, partitions: topic == topics.sendRequests ? partitions : 1) }
        self.topics = topics
        group = "dispatcher-\(suffix)"
        producer = try KafkaProducer(configuration: KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers]), logger: Self.quiet)
        credentials = try await EngineCredentials.shared.value
        var simulator = APNsSimulator.Configuration(
            certificateChainFile: credentials.path("server-cert.pem"), privateKeyFile: credentials.path("server-key.pem"),
            trustedKeys: [APNsSimulator.TrustedKey(
                keyID: EngineCredentials.keyID, teamID: EngineCredentials.teamID, publicKeyPEM: try credentials.text("key.pub.pem"))]
                + trustedKeys)
        simulator.eventLoopCount = 1
        simulator.channelLimit = channelLimit
        simulator.adminPort = nil
        self.simulator = try APNsSimulator.start(configuration: simulator)
        feedback = try FeedbackCollector(cluster: cluster, topic: topics.feedback)
    }

    /// Builds the engine as production does (`Dispatcher` with the real `APNsClient`, its own
    /// producer and a `GracefulShutdown`) as member `instance` of the world's consumer group, and
    /// runs it. Test settings: 6 s session timeout, 10 ms fetch wait, parked rows scanned every
    /// 100 ms, no send-log retention, no campaign runner unless `configure` turns it on.
    func startEngine(
        instance: String = "a", logLevel: Logger.Level = .error, configure: (inout DispatcherConfiguration) -> Void = { _ in }
    ) throws -> RunningEngine {
        var configuration = DispatcherConfiguration(bootstrapServers: [cluster.bootstrapServers], instanceID: instance)
        configuration.consumerGroup = group
        configuration.topics = topics
        configuration.sessionTimeout = .seconds(6)
        configuration.fetchMaxWait = .milliseconds(10)
        configuration.sendLogRetention = nil
        configuration.pendingRetryScanInterval = .milliseconds(100)
        configuration.campaigns.runnerEnabled = false
        configuration.campaigns.pollInterval = .milliseconds(50)
        configuration.campaigns.cancelCheckInterval = .milliseconds(50)
        configuration.campaigns.progressInterval = .milliseconds(200)
        configuration.kafkaProperties = ["topic.metadata.refresh.interval.ms": "1000"]
        configure(&configuration)

        var apns = APNsClient.Configuration()
        apns.production = .init(host: "127.0.0.1", port: simulator.productionPort)
        apns.sandbox = .init(host: "127.0.0.1", port: simulator.sandboxPort)
        // The simulator serves the channel-management and broadcast APIs on the same listeners.
        apns.channelsProduction = .init(host: "127.0.0.1", port: simulator.productionPort)
        apns.channelsSandbox = .init(host: "127.0.0.1", port: simulator.sandboxPort)
        apns.broadcastProduction = .init(host: "127.0.0.1", port: simulator.productionPort)
        apns.broadcastSandbox = .init(host: "127.0.0.1", port: simulator.sandboxPort)
        apns.caFile = credentials.path("server-cert.pem")
        apns.connectionsPerPool = 1
        apns.connectStagger = .milliseconds(10)
        apns.requestTimeout = .seconds(20)
        apns.reconnectBackoff = .init(initial: .milliseconds(5), maximum: .milliseconds(100))
        apns.retry.backoff = .init(initial: .milliseconds(20), maximum: .milliseconds(100))
        // One notification's repeated 5xx must not open the breaker (it has tests of its own).
        apns.circuitBreaker.failureThreshold = 1_000_000
        let tokens = APNsProviderTokenCache(
            signingKey: try APNsSigningKey(p8: try credentials.text("key.p8")), keyID: EngineCredentials.keyID,
            teamID: EngineCredentials.teamID, clock: SystemWallClock())
        let registry = MetricsRegistry()
        let logger = Logger(label: "test.engine.\(instance)", logLevel: logLevel)
        let client = APNsClient(configuration: apns, tokens: tokens, logger: logger, metrics: registry)
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers]), logger: logger)
        let dispatcher = Dispatcher(
            configuration: configuration, store: store, sender: client, producer: producer, logger: logger,
            monitor: DispatcherMonitor(registry: registry), metrics: registry)
        let shutdown = GracefulShutdown()
        let task = Task { try await dispatcher.run(shutdown: shutdown) }
        return RunningEngine(task: task, shutdown: shutdown, client: client, producer: producer, registry: registry)
    }

    func close() async {
        simulator.releaseHeld()
        simulator.close()
        await feedback.close()
        await producer.shutdown()
        await pool.close()
    }

    // MARK: Producing

    /// A send request of an alert to `tokens` (explicit device tokens), keyed by its request id.
    @discardableResult
    func send(_ requestID: String, to tokens: [String], environment: PushMessages.Environment = .unspecified) async throws -> KafkaDeliveryReport {
        var request = SendRequest(requestID: requestID, target: .deviceTokens(DeviceTokens(deviceTokens: tokens)), notification: Self.alert(environment))
        request.createdAtMs = SystemWallClock().nowMilliseconds()
        return try await produceRequest(request)
    }

    /// Records in `send_log`, as an earlier delivery of `requestID` would have, that `token` was
    /// delivered, with the `DeliveryReport` event a redelivery publishes again.
    /// - Returns: whether the row was new.
    func recordDelivered(_ requestID: String, token: String, userID: String = "") async throws -> Bool {
        var report = DeliveryReport()
        report.eventID = FeedbackEventID.deliveryReport(requestID: requestID, deviceToken: token)
        report.requestID = requestID
        report.deviceToken = token
        report.bundleID = Self.bundleID
        report.userID = userID
        report.outcome = .delivered
        report.httpStatus = 200
        var event = FeedbackEvent()
        event.eventID = report.eventID
        event.event = .deliveryReport(report)
        return try await store.recordOutcome(report, event: event.serializedBytes())
    }

    /// A campaign: every active token of the app (`AppAudience`).
    @discardableResult
    func sendToAudience(_ requestID: String) async throws -> KafkaDeliveryReport {
        var request = SendRequest(requestID: requestID, target: .audience(AppAudience(bundleID: Self.bundleID)), notification: Self.alert(.unspecified))
        request.createdAtMs = SystemWallClock().nowMilliseconds()
        return try await produceRequest(request)
    }

    /// A broadcast to `channelID` (docs/live-activities.md) of a Live Activity update, production.
    @discardableResult
    func broadcast(_ requestID: String, to channelID: String, payload: String = #"{"aps":{"timestamp":1700000000,"event":"update"}}"#)
        async throws -> KafkaDeliveryReport {
        var request = SendRequest(
            requestID: requestID, target: .channelID(channelID),
            notification: PushMessages.Notification(bundleID: Self.bundleID, environment: .production, pushType: .liveactivity, payload: payload))
        request.createdAtMs = SystemWallClock().nowMilliseconds()
        return try await produceRequest(request)
    }

    func produceRequest(_ request: SendRequest) async throws -> KafkaDeliveryReport {
        try await producer.send(
            topic: topics.sendRequests, key: request.requestID, value: request.serializedBytes(),
            headers: [KafkaHeader(name: "content-type", value: SendRequest.protobufContentType)])
    }

    /// Registers `tokens` of the app in `environment` through the token-event topic.
    func register(_ tokens: [String], environment: PushMessages.Environment = .production, user: String = "u1") async throws {
        let now = SystemWallClock().nowMilliseconds()
        for token in tokens {
            var event = DispatcherHarness.registration(token: token, bundleID: Self.bundleID, userID: user, eventTimeMs: now)
            event.device?.environment = environment
            _ = try await producer.send(
                topic: topics.tokenEvents, key: token, value: event.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: TokenEvent.protobufContentType)])
        }
    }

    static func alert(_ environment: PushMessages.Environment) -> PushMessages.Notification {
        PushMessages.Notification(bundleID: bundleID, environment: environment, pushType: .alert, payload: #"{"aps":{"alert":"hi"}}"#)
    }

    /// A device token: 32 bytes whose hex starts with `tag` (lowercase hex digits), then `index`.
    static func token(_ tag: String, _ index: Int = 0) -> String {
        precondition(tag.allSatisfy(\.isHexDigit) && tag == tag.lowercased(), "a token tag is lowercase hex")
        let head = tag + String(format: "%08x", index)
        return head + String(repeating: "0", count: 64 - head.count)
    }

    // MARK: Reading

    /// `send_log` rows of `requestID`: outcome name by device token.
    func sendLog(_ requestID: String) async throws -> [String: String] {
        let rows = try await pool.query("SELECT device_token, outcome FROM send_log_all WHERE request_id = $1", [.string(requestID)])
        var result: [String: String] = [:]
        for row in rows { result[try row.string("device_token") ?? ""] = try row.string("outcome") ?? "" }
        return result
    }

    /// How many rows `sql` (a `SELECT count(*)`) counts, for a request id as `$1`.
    func count(_ sql: String, _ requestID: String) async throws -> Int {
        let rows = try await pool.query(sql, [.string(requestID)])
        return Int(try rows.first?.int64("count") ?? 0)
    }

    /// The group's committed offset of send-request partition `partition`, read by a consumer that
    /// joins the group: only while no engine is a member (it would rebalance them). It waits for its
    /// own assignment before it leaves, so that the group does not wait for it at the next join.
    func committedOffset(partition: Int32 = 0) async throws -> KafkaOffset? {
        var configuration = KafkaConsumerConfiguration(bootstrapServers: [cluster.bootstrapServers], groupID: group, topics: [topics.sendRequests])
        configuration.offsetCommit = .explicit
        configuration.sessionTimeout = .seconds(6)
        let consumer = try KafkaConsumer(configuration: configuration, logger: Self.quiet)
        let partition = KafkaTopicPartition(topic: topics.sendRequests, partition: KafkaPartition(rawValue: partition))
        let committed = try await consumer.committedOffsets(for: [partition])
        for await event in consumer.events {
            if case .partitionsAssigned = event { break }
        }
        await consumer.close()
        return committed[partition]
    }
}

/// One running engine: stopped gracefully with `stop()`.
final class RunningEngine: Sendable {
    let task: Task<Void, any Error>
    let shutdown: GracefulShutdown
    let client: APNsClient
    let producer: KafkaProducer
    let registry: MetricsRegistry

    init(task: Task<Void, any Error>, shutdown: GracefulShutdown, client: APNsClient, producer: KafkaProducer, registry: MetricsRegistry) {
        self.task = task
        self.shutdown = shutdown
        self.client = client
        self.producer = producer
        self.registry = registry
    }

    /// A test that fails before `stop()` leaves no engine running: its parked-retry driver and campaign
    /// runner would go on working on the suite's shared tables (re-driving a later test's parked rows).
    deinit { task.cancel() }

    /// Records taken from Kafka and not finished, queued ones included (`push_records_in_flight`):
    /// queued records are dropped the moment the engine stops a partition (shutdown, revocation).
    var recordsInFlight: Int { Int(registry.value("push_records_in_flight") ?? -1) }

    /// Triggers graceful shutdown and waits for `run` to return (then closes the APNs client and the
    /// producer, as `DispatcherService` does).
    func stop() async throws {
        shutdown.trigger()
        defer { task.cancel() }
        try await task.value
        await client.shutdown()
        await producer.shutdown()
    }
}

/// Every feedback event published so far, collected by a task of its own from the topic's start.
final class FeedbackCollector: Sendable {
    private let consumer: KafkaConsumer
    /// What was read, with the offsets seen: a record read again (this reader's own group lost its
    /// assignment and resumed before its position) is kept once, so that counts are publications.
    private let events: Shared<(events: [FeedbackEvent], offsets: Set<KafkaOffset>)>
    private let reader: Task<Void, Never>

    init(cluster: KafkaMockCluster, topic: String) throws {
        var configuration = KafkaConsumerConfiguration(bootstrapServers: [cluster.bootstrapServers], groupID: "reader-\(UUID())", topics: [topic])
        configuration.sessionTimeout = .seconds(6)
        configuration.fetchMaxWait = .milliseconds(10)
        let consumer = try KafkaConsumer(configuration: configuration, logger: EngineWorld.quiet)
        let events = Shared<(events: [FeedbackEvent], offsets: Set<KafkaOffset>)>(([], []))
        self.consumer = consumer
        self.events = events
        reader = Task {
            while !Task.isCancelled {
                let batch = await consumer.nextMessages(maxCount: 1_000)
                if batch.isEmpty { return }
                events.update { read in
                    for record in batch where read.offsets.insert(record.offset).inserted {
                        if let event = try? FeedbackEvent(protobufBytes: record.value) { read.events.append(event) }
                    }
                }
            }
        }
    }

    var all: [FeedbackEvent] { events.value.events }

    /// Delivery reports of `requestID`, in the order published.
    func reports(_ requestID: String) -> [DeliveryReport] {
        all.compactMap { event -> DeliveryReport? in
            if case .deliveryReport(let report)? = event.event, report.requestID == requestID { return report }
            return nil
        }
    }

    /// `RequestCompleted` events of `requestID`, in the order published.
    func completions(_ requestID: String) -> [RequestCompleted] {
        all.compactMap { event -> RequestCompleted? in
            if case .requestCompleted(let completed)? = event.event, completed.requestID == requestID { return completed }
            return nil
        }
    }

    /// Broadcast reports of `requestID`, in the order published.
    func broadcastReports(_ requestID: String) -> [(eventID: String, report: BroadcastReport)] {
        all.compactMap { event -> (String, BroadcastReport)? in
            if case .broadcastReport(let report)? = event.event, report.requestID == requestID { return (event.eventID, report) }
            return nil
        }
    }

    func close() async {
        reader.cancel()
        await consumer.close()
    }
}

/// Credentials made with the openssl CLI in a temporary directory at test time (never committed):
/// the simulator's server certificate (subjectAltName localhost and 127.0.0.1) and one `.p8`
/// provider-token key with its public half.
struct EngineCredentials: Sendable {
    static let teamID = "TEAM000001"
    static let keyID = "KEY0000001"
    static let shared = Task<EngineCredentials, any Error> { try await generate() }

    let directory: URL

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
    func text(_ name: String) throws -> String { try String(contentsOfFile: path(name), encoding: .utf8) }

    private static func generate() async throws -> EngineCredentials {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("engine-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let commands: [[String]] = [
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", "/CN=apns-simulator", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", "server-key.pem", "-out", "server-cert.pem"],
            ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "key.p8"],
            ["openssl", "pkey", "-in", "key.p8", "-pubout", "-out", "key.pub.pem"],
        ]
        for command in commands {
            let (status, output) = try await runProgram(command, directory: directory)
            guard status == 0 else { throw TestFailure("\(command.joined(separator: " ")) failed: \(output)") }
        }
        return EngineCredentials(directory: directory)
    }
}
