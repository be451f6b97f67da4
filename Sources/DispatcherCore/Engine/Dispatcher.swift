import Foundation
import Kafka
import Postgres
import PushMessages
import ServiceCore
import Synchronization

/// The dispatcher's engine: consumes token events and send requests (consumer group
/// `push-dispatcher`), applies the events to PostgreSQL, sends the requests, and stores each
/// partition's offset only up to the end of its longest finished prefix (docs/dispatcher-engine.md).
///
/// - Send requests of a partition run in parallel (at most `maxInFlightPerPartition`); requests with
///   the same key (request id) run in offset order. Token events run in offset order, in batches.
/// - A failure of PostgreSQL or Kafka retries the same record with backoff, without holding other
///   records back; a record caused to fail by its content goes to the dead-letter topic.
/// - Graceful shutdown (`run(shutdown:)`) stops intake, lets running records finish, abandons the
///   rest unfinished and closes the consumer; cancellation abandons everything still running.
public final class Dispatcher: Sendable {
    let configuration: DispatcherConfiguration
    let store: TokenStore
    let processor: SendRequestProcessor
    let feedback: FeedbackPublisher
    let producer: KafkaProducer
    let clock: any WallClock
    let logger: Logger
    let monitor: DispatcherMonitor
    let metrics = DispatcherMetrics.shared
    let engine: Mutex<EngineState>
    /// Notifications waiting in the process for an APNs retry (woken early to be parked).
    let retryTimers = RetryTimers()
    let pendingRetriesGauge: Gauge
    /// `push_request_rereads_joined_total`: records read again while their request still ran here.
    let rereadsJoined: Counter
    // Campaigns and scheduled sends (docs/campaigns.md).
    let campaignStore: CampaignStore
    let campaigns: CampaignRunner
    let cancellations = CampaignCancellations()
    /// Token hygiene (docs/token-hygiene.md); nil when nothing of it is configured.
    let tokenHygiene: TokenHygieneRunner?
    /// Live Activity broadcast channels (docs/live-activities.md): `ChannelCommand` records and the
    /// channel-hygiene job.
    let channelCommands: ChannelCommandHandler
    let channelHygiene: ChannelHygieneRunner
    /// Writes the cancels taken on receipt (`applyCancelOnReceipt`), batched, off the poll thread.
    let cancelWrites: Batcher<CancelWrite, Void>
    /// Records each send request's fingerprint, batched with the other requests running at once;
    /// answers the fingerprint recorded earlier for its request id, if any.
    let fingerprints: Batcher<FingerprintInput, [UInt8]?>
    /// Send requests running in this process: a record handled again while its earlier handling still
    /// runs joins it (docs/dispatcher-engine.md "Records handled again"). A joined handling's
    /// continuation is resumed with its turn, or nil when it was cancelled.
    let runningRequests = Mutex(RunningRequestsState())
    struct RunningRequestsState {
        var requests = RunningRequests()
        var waiters: [Int: CheckedContinuation<RunningRequests.Turn?, Never>] = [:]
        var nextTicket = 0
    }

    struct FingerprintInput: Sendable {
        var requestID: String
        var fingerprint: [UInt8]
    }

    /// The engine's state (`EngineStateMachine`) and the continuations of those waiting on it.
    struct EngineState {
        var machine: EngineStateMachine
        /// Where spawned workers go: the engine's task group starts one child task each.
        var spawner: AsyncStream<EngineStateMachine.WorkerSpawn>.Continuation?
        var intake: CheckedContinuation<Void, Never>?
        var idle: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Each worker's cancel hook: resumed when the worker is to be cancelled (or ended).
        var workerHooks: [Int: CheckedContinuation<Void, Never>] = [:]
    }

    /// - Parameter monitor: readiness and the scrape-time gauges of the engine's queues
    ///   (`push_records_in_flight`, `push_uncommitted_records{partition}`).
    /// - Parameter metrics: where `push_pending_retries` is registered.
    /// - Parameter channelManagement: Apple's channel-management API; nil: `sender`'s when it offers it
    ///   (`APNsClient` does).
    public init(configuration: DispatcherConfiguration, store: TokenStore, sender: any NotificationSender,
                producer: KafkaProducer, clock: any WallClock = SystemWallClock(), logger: Logger = Logger(label: "dispatcher"),
                monitor: DispatcherMonitor = DispatcherMonitor(), metrics: MetricsRegistry = .shared,
                channelManagement: (any ChannelManagement)? = nil) {
        self.configuration = configuration
        self.engine = Mutex(EngineState(machine: EngineStateMachine(settings: .init(
            orderedTopic: configuration.topics.tokenEvents, tokenEventBatchSize: configuration.tokenEventBatchSize,
            maxInFlightPerPartition: configuration.maxInFlightPerPartition,
            pauseThresholdPerPartition: configuration.pauseThresholdPerPartition,
            maxUncommittedRecords: configuration.retryParking.maxUncommittedRecords,
            maxInFlightRecords: configuration.maxInFlightRecords, maxInFlightRecordBytes: configuration.maxInFlightRecordBytes))))
        self.monitor = monitor
        self.rereadsJoined = metrics.counter(
            "push_request_rereads_joined_total",
            help: "Send-request records read again while their request still ran in this process (a partition lost and assigned back): they joined it instead of sending twice.")
        self.pendingRetriesGauge = metrics.gauge(
            "push_pending_retries", help: "Notifications parked in pending_retries (every replica's), as of the last scan.")
        self.store = store
        self.clock = clock
        self.logger = logger
        self.producer = producer
        self.feedback = FeedbackPublisher(
            producer: producer, topics: configuration.topics, clock: clock,
            maxRecordBytes: min(configuration.deadLetterMaxBytes, producer.maxMessageBytes), logger: logger)
        self.processor = SendRequestProcessor(
            store: store, sender: sender, feedback: feedback, defaultEnvironment: configuration.defaultEnvironment,
            clock: clock, logger: logger, maxInFlight: configuration.maxInFlightNotifications, monitor: monitor,
            otherEnvironmentRetry: configuration.otherEnvironmentRetry, cancellations: cancellations,
            marksAcknowledgements: configuration.sendLogAcknowledgementMarks, credentials: configuration.credentials,
            userPageSize: configuration.userPageSize ?? configuration.campaigns.pageSize)
        let classPriority = processor.classPriority
        metrics.gaugeCallback(
            "push_admission_queued", help: "Notifications waiting at class priority while transactional ones are admitted (class: bulk, campaign).",
            labelNames: ["class"]
        ) {
            classPriority.queued.filter { $0.key != .transactional }.sorted { $0.key.rawValue < $1.key.rawValue }
                .map { MetricSample(labels: ["\($0.key)"], value: Double($0.value)) }
        }
        self.fingerprints = Batcher(name: "request fingerprints", metricLabel: "fingerprints") { [store] inputs in
            try await store.recordFingerprints(inputs.map { ($0.requestID, $0.fingerprint) })
        }
        self.cancelWrites = Self.cancelWriter(store: store)
        self.campaignStore = CampaignStore(pool: store.pool)
        self.campaigns = CampaignRunner(
            store: campaignStore, processor: processor, feedback: feedback, settings: configuration.campaigns,
            instanceID: configuration.instanceID, cancellations: cancellations, clock: clock, logger: logger,
            retryParkAge: configuration.retryParking.maxUncommittedAge)
        let channelStore = ChannelStore(pool: store.pool)
        self.channelCommands = ChannelCommandHandler(
            store: channelStore, apple: channelManagement ?? (sender as? any ChannelManagement), feedback: feedback,
            credentials: configuration.credentials, limit: configuration.channels.limit, clock: clock, logger: logger)
        self.channelHygiene = ChannelHygieneRunner(
            store: channelStore, handler: channelCommands, settings: configuration.channels, leaseDuration: configuration.campaigns.lease,
            instanceID: configuration.instanceID, clock: clock, logger: logger)
        self.tokenHygiene = configuration.tokenHygiene.isEnabled
            ? TokenHygieneRunner(
                store: TokenHygieneStore(pool: store.pool), feedback: feedback, settings: configuration.tokenHygiene,
                leaseDuration: configuration.campaigns.lease, instanceID: configuration.instanceID, clock: clock, logger: logger)
            : nil
    }

    /// Migrates the schema, then runs the dispatcher's sources as one nested `ServiceGroup` whose
    /// services all stop at once (docs/lifecycle.md "dispatcher"): the engine (intake, rebalances,
    /// record workers), the parked-retry driver, the campaign runner, token hygiene and the send-log
    /// retention. Graceful shutdown (`shutdown`) drains each of them; cancelling the calling task
    /// abandons what they have in progress (records still running are never stored).
    /// - Throws: `PostgresError` when migrations fail, `KafkaError` when the consumer cannot start, or
    ///   the first error a source threw.
    public func run(shutdown: GracefulShutdown) async throws {
        try await store.migrate()
        // Cancels any replica recorded (docs/campaigns.md "Cancellation"), all read before the first record.
        let cancelPoller = CancellationPoller(
            store: CancellationStore(pool: store.pool), cancellations: cancellations, interval: configuration.cancelPollInterval,
            lifetime: configuration.cancellationLifetime, clock: clock, logger: logger)
        try await cancelPoller.poll()
        let parkedRetries = ParkedRetryDriver(
            processor: processor, store: store.makePendingRetryStore(), owner: "\(configuration.instanceID)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))",
            interval: configuration.pendingRetryScanInterval, lease: configuration.pendingRetryLease,
            maxInFlight: configuration.maxParkedInFlight, logger: logger
        ) { [gauge = pendingRetriesGauge] count in gauge.set(Double(count)) }
        var sources: [ServiceGroup.ServiceConfiguration] = [
            .init(Engine(dispatcher: self), name: "engine"),
            .init(parkedRetries, name: "parked-retry driver"),
        ]
        if configuration.campaigns.runnerEnabled { sources.append(.init(campaigns, name: "campaign runner")) }
        if let tokenHygiene { sources.append(.init(tokenHygiene, name: "token hygiene")) }
        sources.append(.init(channelHygiene, name: "channel hygiene"))
        // send_log_v2's day partitions, created ahead whether or not a retention drops old ones.
        sources.append(.init(
            SendLogPartitions(pool: store.pool, retention: configuration.sendLogRetention, interval: configuration.sendLogRetentionInterval),
            name: "send-log partitions"))
        if let retention = configuration.sendLogRetention {
            sources.append(.init(
                store.makeSendLogRetention(retention: retention, interval: configuration.sendLogRetentionInterval), name: "send-log retention"))
        }
        let lifecycleLogger = logger.with(["component": "lifecycle"])
        // Under the sources, stopped after them (reverse start order): the cancel poller, so that
        // records still draining see new cancels, and the batched statements' flush loops, so that
        // every outcome given to them is written (docs/lifecycle.md "dispatcher").
        let batchers = ServiceGroup(
            configuredServices: (processor.batchers + [fingerprints]).map { .init($0, name: "batcher") } + [.init(cancelWrites, name: "batcher")],
            configuration: .nested(shutdownOrder: .concurrent), logger: lifecycleLogger)
        let tree = ServiceGroup(
            configuredServices: [
                .init(batchers, name: "batchers"), .init(cancelPoller, name: "cancel poller"),
                .init(ServiceGroup(configuredServices: sources, configuration: .nested(shutdownOrder: .concurrent), logger: lifecycleLogger), name: "sources"),
            ],
            configuration: .nested(shutdownOrder: .reverseStartOrder), logger: lifecycleLogger)
        try await tree.run(shutdown: shutdown)
        logger.info("dispatcher stopped")
    }

    /// The engine as a source: consumes records until `shutdown`, then drains.
    private struct Engine: Service {
        let dispatcher: Dispatcher
        func run(shutdown: GracefulShutdown) async throws { try await dispatcher.runEngine(shutdown: shutdown) }
    }

    /// Joins the consumer group and processes records until `shutdown` triggers; then stops
    /// gracefully: intake stops, queued records are dropped, running records finish, the producer is
    /// flushed, the finished prefix is stored and the consumer leaves the group (committing it).
    /// Cancellation abandons the records still running: they are never stored.
    ///
    /// Every worker runs as a child task of this function's task group: the engine's state
    /// (`EngineStateMachine`) decides to spawn one, the spawn travels through an `AsyncStream`, and the
    /// group's body starts it (`runWorker`).
    /// - Throws: `KafkaError` when the consumer cannot start.
    private func runEngine(shutdown: GracefulShutdown) async throws {
        let consumer = try KafkaConsumer(configuration: consumerConfiguration(), logger: logger.with(["component": "kafka"]))
        let (spawns, spawner) = AsyncStream.makeStream(of: EngineStateMachine.WorkerSpawn.self)
        engine.withLock { $0.spawner = spawner }
        await withDiscardingTaskGroup { workers in
            workers.addTask {
                await self.consume(consumer, shutdown: shutdown)
                self.engine.withLock { $0.spawner = nil }
                spawner.finish()
            }
            for await spawn in spawns {
                workers.addTask { await self.runWorker(spawn, consumer) }
            }
        }
    }

    /// Intake and rebalances until `shutdown`, then the stop (docs/lifecycle.md "dispatcher").
    private func consume(_ consumer: KafkaConsumer, shutdown: GracefulShutdown) async {
        monitor.attach(consumer: consumer) { [weak self] in self?.engineSnapshot() ?? .init() }
        monitor.readiness.setPhase(.running)
        // The crash window: what a SIGKILL can send twice (docs/send-log.md "What a crash can lose").
        let window = processor.crashWindow
        logger.info("dispatcher ready", [
            "group": configuration.consumerGroup, "instance": configuration.instanceID,
            "in_flight_notifications": "\(window.inFlight)", "send_log_batch": "\(window.unflushedBatch)",
            "unflushed_ack_marks": "\(window.unflushedMarks)",
            "campaign_in_flight": "\(configuration.campaigns.runnerEnabled ? configuration.campaigns.maxInFlight : 0)",
        ])
        await withTaskGroup(of: Void.self) { rebalancing in
            // Rebalances are answered until the consumer has closed (closing revokes everything).
            rebalancing.addTask { await self.watchRebalances(consumer) }
            await withTaskGroup(of: Void.self) { intaking in
                intaking.addTask { await self.intake(consumer) }
                await shutdown.wait()
                intaking.cancelAll()
            }
            await stopEngine()
            await consumer.close()
            monitor.detachConsumer()
            rebalancing.cancelAll()
        }
    }

    /// The consumer of both input topics, its offsets stored only past finished records.
    private func consumerConfiguration() -> KafkaConsumerConfiguration {
        var consumerConfiguration = KafkaConsumerConfiguration(
            bootstrapServers: configuration.bootstrapServers, groupID: configuration.consumerGroup,
            topics: [configuration.topics.tokenEvents, configuration.topics.sendRequests])
        consumerConfiguration.clientID = "dispatcher-\(configuration.instanceID)"
        consumerConfiguration.sessionTimeout = configuration.sessionTimeout
        consumerConfiguration.groupInstanceID = configuration.groupInstanceID
        consumerConfiguration.rebalanceProtocol = configuration.rebalanceProtocol
        consumerConfiguration.offsetCommit = .storedOffsets(autoCommitInterval: configuration.autoCommitInterval)
        consumerConfiguration.revocationTimeout = configuration.revokeDrain + .seconds(5)
        consumerConfiguration.fetchMaxWait = configuration.fetchMaxWait
        consumerConfiguration.additionalProperties = configuration.kafkaProperties
        // Records the client cannot read are skipped by offset and dead-lettered (docs/kafka-consumer.md).
        consumerConfiguration.unreadableRecordRetries = configuration.intake.consumerErrorRetries
        consumerConfiguration.partitionStallThreshold = configuration.intake.partitionStall
        // A value past the send-request limit is never copied out of librdkafka (README "Limits on
        // what arrives from Kafka").
        consumerConfiguration.maxValueBytes = configuration.intake.maxSendRequestBytes
        // A cancel takes effect on the poll thread, the moment the record arrives: under load the
        // intake task waits its turn on the cooperative pool behind every running send.
        consumerConfiguration.onReceipt = { [self] message in
            if message.topic == configuration.topics.sendRequests { applyCancelOnReceipt(message) }
        }
        return consumerConfiguration
    }
}
