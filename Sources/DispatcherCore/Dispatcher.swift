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
    private let configuration: DispatcherConfiguration
    private let store: TokenStore
    private let processor: SendRequestProcessor
    private let feedback: FeedbackPublisher
    private let producer: KafkaProducer
    private let clock: any WallClock
    private let logger: Logger
    private let monitor: DispatcherMonitor
    private let metrics = DispatcherMetrics.shared
    private let engine = Mutex(EngineState())
    /// Notifications waiting in the process for an APNs retry (woken early to be parked).
    private let retryTimers = RetryTimers()
    private let pendingRetriesGauge: Gauge
    /// `push_request_rereads_joined_total`: records read again while their request still ran here.
    private let rereadsJoined: Counter
    // Campaigns and scheduled sends (docs/campaigns.md).
    private let campaignStore: CampaignStore
    private let campaigns: CampaignRunner
    private let cancellations = CampaignCancellations()
    /// Token hygiene (docs/token-hygiene.md); nil when nothing of it is configured.
    private let tokenHygiene: TokenHygieneRunner?
    /// Records each send request's fingerprint, batched with the other requests running at once;
    /// answers the fingerprint recorded earlier for its request id, if any.
    private let fingerprints: Batcher<FingerprintInput, [UInt8]?>
    /// Send requests running in this process: a record handled again while its earlier handling still
    /// runs joins it (docs/dispatcher-engine.md "Records handled again"). A joined handling's
    /// continuation is resumed with its turn, or nil when it was cancelled.
    private let runningRequests = Mutex(RunningRequestsState())
    private struct RunningRequestsState {
        var requests = RunningRequests()
        var waiters: [Int: CheckedContinuation<RunningRequests.Turn?, Never>] = [:]
        var nextTicket = 0
    }

    private struct FingerprintInput: Sendable {
        var requestID: String
        var fingerprint: [UInt8]
    }

    /// One partition's scheduler; `generation` tells a worker whether the partition it serves was
    /// reset (revoked, re-read) since it started.
    private struct Slot {
        var generation: Int
        var scheduler: PartitionScheduler
    }

    private struct Worker {
        var partition: KafkaTopicPartition
        var task: Task<Void, Never>?
        /// Waiting on a retry timer: abandoned first when the process stops or the partition moves.
        var retrying = false
    }

    private struct EngineState {
        var slots: [KafkaTopicPartition: Slot] = [:]
        var workers: [Int: Worker] = [:]
        var nextID = 0
        var stopping = false
        var intakeWaiter: CheckedContinuation<Void, Never>?
        var idleWaiters: [Int: (partitions: Set<KafkaTopicPartition>?, continuation: CheckedContinuation<Void, Never>)] = [:]

        var pending: Int { slots.values.reduce(0) { $0 + $1.scheduler.pending } }

        func isIdle(_ partitions: Set<KafkaTopicPartition>?) -> Bool {
            workers.values.allSatisfy { worker in partitions.map { !$0.contains(worker.partition) } ?? false }
        }

        /// Waiters whose partitions have no worker any more.
        mutating func idleWaitersToWake() -> [CheckedContinuation<Void, Never>] {
            var woken: [CheckedContinuation<Void, Never>] = []
            for (id, waiter) in idleWaiters where isIdle(waiter.partitions) {
                idleWaiters[id] = nil
                woken.append(waiter.continuation)
            }
            return woken
        }
    }

    /// - Parameter monitor: readiness and the scrape-time gauges of the engine's queues
    ///   (`push_records_in_flight`, `push_uncommitted_records{partition}`).
    /// - Parameter metrics: where `push_pending_retries` is registered.
    public init(configuration: DispatcherConfiguration, store: TokenStore, sender: any NotificationSender,
                producer: KafkaProducer, clock: any WallClock = SystemWallClock(), logger: Logger = Logger(label: "dispatcher"),
                monitor: DispatcherMonitor = DispatcherMonitor(), metrics: MetricsRegistry = .shared) {
        self.configuration = configuration
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
            otherEnvironmentRetry: configuration.otherEnvironmentRetry, cancellations: cancellations)
        self.fingerprints = Batcher(name: "request fingerprints") { [store] inputs in
            try await store.recordFingerprints(inputs.map { ($0.requestID, $0.fingerprint) })
        }
        self.campaignStore = CampaignStore(pool: store.pool)
        self.campaigns = CampaignRunner(
            store: campaignStore, processor: processor, feedback: feedback, settings: configuration.campaigns,
            instanceID: configuration.instanceID, cancellations: cancellations, clock: clock, logger: logger)
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
        if let retention = configuration.sendLogRetention {
            sources.append(.init(
                store.makeSendLogRetention(retention: retention, interval: configuration.sendLogRetentionInterval), name: "send-log retention"))
        }
        let lifecycleLogger = logger.with(["component": "lifecycle"])
        // Under the sources, stopped after them (reverse start order): the cancel poller, so that
        // records still draining see new cancels, and the batched statements' flush loops, so that
        // every outcome given to them is written (docs/lifecycle.md "dispatcher").
        let batchers = ServiceGroup(
            configuredServices: (processor.batchers + [fingerprints]).map { .init($0, name: "batcher") },
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
    /// - Throws: `KafkaError` when the consumer cannot start.
    private func runEngine(shutdown: GracefulShutdown) async throws {
        let consumer = try KafkaConsumer(configuration: consumerConfiguration(), logger: logger.with(["component": "kafka"]))
        monitor.attach(consumer: consumer) { [weak self] in self?.engineSnapshot() ?? .init() }
        monitor.readiness.setPhase(.running)
        // The crash window: what a SIGKILL can send twice (docs/send-log.md "What a crash can lose").
        let window = processor.crashWindow
        logger.info("dispatcher ready", [
            "group": configuration.consumerGroup, "instance": configuration.instanceID,
            "in_flight_notifications": "\(window.inFlight)", "send_log_batch": "\(window.unflushedBatch)",
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
            monitor.readiness.setPhase(.stopping)
            logger.info("dispatcher stopping: intake stopped, waiting for running records")
            let dropped = stopAll()
            if dropped > 0 { logger.info("records not started are left for the next owner", ["records": "\(dropped)"]) }
            _ = await withTaskCancellationHandler {
                await waitUntilIdle(nil)
            } onCancel: {
                self.cancelWorkers(of: nil)
            }
            if Task.isCancelled {
                // Escalated: every worker was cancelled; give them a moment to end, store nothing more.
                logger.warning("shutdown escalated: unfinished records are abandoned, not stored")
                cancelWorkers(of: nil)
                await waitForCancelledWorkers(timeout: .seconds(2))
            } else {
                do {
                    try await producer.flush(timeout: .seconds(10))
                } catch {
                    logger.warning("producer flush on shutdown", ["error": "\(error)"])
                }
            }
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

    /// Waits up to `timeout` for every worker to end, also when the calling task is cancelled (the
    /// escalated stop gives cancelled workers a moment before the consumer closes).
    private func waitForCancelledWorkers(timeout: Duration) async {
        let id = engine.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = engine.withLock { state -> Bool in
                if state.isIdle(nil) { return true }
                state.idleWaiters[id] = (nil, continuation)
                return false
            }
            if idle { return continuation.resume() }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(timeout.wholeMilliseconds))) { [self] in
                engine.withLock { $0.idleWaiters.removeValue(forKey: id) }?.continuation.resume()
            }
        }
    }

    /// The engine's queues, for the scrape-time gauges.
    private func engineSnapshot() -> DispatcherMonitor.EngineSnapshot {
        engine.withLock { state in
            var snapshot = DispatcherMonitor.EngineSnapshot()
            snapshot.recordsInFlight = state.pending
            for (partition, slot) in state.slots { snapshot.uncommitted[partition] = slot.scheduler.tracker.uncommitted }
            return snapshot
        }
    }

    // MARK: Intake

    /// Hands each record to its partition's scheduler and starts the workers it asks for. Waits while
    /// the process holds `maxInFlightRecords` pending records (the consumer then pauses fetching).
    private func intake(_ consumer: KafkaConsumer) async {
        while !Task.isCancelled {
            // Records come in bursts: one suspension per burst, not per record (the cooperative pool
            // is shared with every running request, so each suspension waits its turn).
            let batch = await consumer.nextMessages(maxCount: 512)
            if batch.isEmpty { return }
            for message in batch {
                if !hasRoom() { await waitForRoom() }
                if Task.isCancelled { return }
                accept(message, consumer)
            }
        }
    }

    /// Hands one record to its partition's scheduler and starts the worker it asks for.
    private func accept(_ message: KafkaMessage, _ consumer: KafkaConsumer) {
        let partition = message.topicPartition
        let (flow, atCap) = engine.withLock { state -> (PartitionScheduler.FlowChange?, Bool) in
            guard !state.stopping else { return (nil, false) }
            // Taken out of the dictionary while it changes, so that its queues are not copied.
            var slot = state.slots.removeValue(forKey: partition) ?? newSlot(for: message.topic, state: &state)
            if !slot.scheduler.stopped, !slot.scheduler.accepts(message.offset) {
                // The consumer re-reads the partition from an older offset (it was revoked and
                // assigned again): start over; workers of the old generation are ignored.
                logger.info("partition re-read from an older offset: resetting its state", ["partition": "\(partition)", "offset": "\(message.offset)"])
                slot.scheduler.stop()
                slot = newSlot(for: message.topic, state: &state)
            }
            let start = slot.scheduler.receive(message)
            let flow = slot.scheduler.flowChange()
            let atCap = slot.scheduler.atCap
            state.slots[partition] = slot
            if !start.isEmpty { spawnWorker(start, partition: partition, generation: slot.generation, consumer: consumer, state: &state) }
            return (flow, atCap)
        }
        apply(flow, to: partition, consumer)
        // The span is full: notifications of the partition waiting on a timer are parked, so that
        // their records can finish and the prefix move.
        if atCap { retryTimers.parkAll(of: partition) }
    }

    private func hasRoom() -> Bool {
        engine.withLock { $0.pending < configuration.maxInFlightRecords }
    }

    private func newSlot(for topic: String, state: inout EngineState) -> Slot {
        state.nextID += 1
        let mode: PartitionScheduler.Mode =
            topic == configuration.topics.tokenEvents
            ? .ordered(batchSize: configuration.tokenEventBatchSize)
            : .parallel(maxInFlight: configuration.maxInFlightPerPartition)
        return Slot(generation: state.nextID, scheduler: PartitionScheduler(
            mode: mode, pauseThreshold: configuration.pauseThresholdPerPartition,
            maxUncommitted: configuration.retryParking.maxUncommittedRecords))
    }

    private func apply(_ flow: PartitionScheduler.FlowChange?, to partition: KafkaTopicPartition, _ consumer: KafkaConsumer) {
        switch flow {
        case .pause?: consumer.pause([partition])
        case .resume?: consumer.resume([partition])
        case nil: break
        }
    }

    private func waitForRoom() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = engine.withLock { state -> Bool in
                    if state.pending < configuration.maxInFlightRecords || Task.isCancelled { return true }
                    state.intakeWaiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            engine.withLock { state in
                defer { state.intakeWaiter = nil }
                return state.intakeWaiter
            }?.resume()
        }
    }

    // MARK: Workers

    /// Starts a worker for `records`; called with the engine locked (the task waits for the lock
    /// before it touches the state, so its entry exists when it ends).
    private func spawnWorker(
        _ records: [KafkaMessage], partition: KafkaTopicPartition, generation: Int, consumer: KafkaConsumer, state: inout EngineState
    ) {
        state.nextID += 1
        let id = state.nextID
        state.workers[id] = Worker(partition: partition)
        state.workers[id]?.task = Task { await self.work(id: id, records, partition: partition, generation: generation, consumer: consumer) }
    }

    /// Handles records of one partition until its scheduler has nothing more for this worker.
    private func work(id: Int, _ first: [KafkaMessage], partition: KafkaTopicPartition, generation: Int, consumer: KafkaConsumer) async {
        var records = first
        while !records.isEmpty {
            let finished = await handleWithRetries(records, worker: id, partition: partition, generation: generation, consumer: consumer)
            let (next, flow, woken, wake) = engine.withLock { state -> ([KafkaMessage], PartitionScheduler.FlowChange?, [CheckedContinuation<Void, Never>], CheckedContinuation<Void, Never>?) in
                guard state.slots[partition]?.generation == generation, var slot = state.slots.removeValue(forKey: partition) else {
                    state.workers[id] = nil
                    return ([], nil, state.idleWaitersToWake(), nil)
                }
                var next: [KafkaMessage]
                if finished {
                    let result = slot.scheduler.finish(records)
                    next = result.next
                    // Held records that joined the span may start beyond this worker's next one.
                    for more in slot.scheduler.takeStartable() {
                        spawnWorker(more, partition: partition, generation: generation, consumer: consumer, state: &state)
                    }
                    if let offset = result.store {
                        // Stored under the lock, so that stores of one partition never go backwards.
                        if case .notAssigned? = consumer.storeOffsets([partition: offset])[partition] {
                            logger.info("partition no longer assigned: dropping its state", ["partition": "\(partition)"])
                            slot.scheduler.stop()
                        }
                    }
                } else {
                    next = slot.scheduler.abandon(records)
                }
                if Task.isCancelled, !next.isEmpty {
                    next = slot.scheduler.abandon(next)
                }
                let flow = slot.scheduler.flowChange()
                state.slots[partition] = slot
                if next.isEmpty { state.workers[id] = nil }
                let waiter = state.pending < configuration.maxInFlightRecords ? state.intakeWaiter : nil
                if waiter != nil { state.intakeWaiter = nil }
                return (next, flow, state.idleWaitersToWake(), waiter)
            }
            apply(flow, to: partition, consumer)
            wake?.resume()
            woken.forEach { $0.resume() }
            records = next
        }
        let woken = engine.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.workers[id] = nil
            return state.idleWaitersToWake()
        }
        woken.forEach { $0.resume() }
    }

    /// Runs `handle` until it succeeds. Transient failures retry with exponential backoff; a record
    /// retried past `stuckRecordThreshold` is logged once a minute.
    /// - Returns: whether the records finished; false when cancelled or abandoned because the process
    ///   is stopping (the records then stay unfinished and are never stored).
    private func handleWithRetries(
        _ records: [KafkaMessage], worker: Int, partition: KafkaTopicPartition, generation: Int, consumer: KafkaConsumer
    ) async -> Bool {
        let shouldStop: @Sendable () -> Bool = { [engine = self] in engine.isAbandoned(partition, generation) }
        let record = records[0]
        let retryContext = RetryContext(
            partition: partition, recordStartedAt: .now,
            uncommittedRecords: { [engine = self] in engine.uncommittedRecords(partition, generation) },
            policy: configuration.retryParking, timers: retryTimers,
            recordWaits: { [engine = self] in engine.recordWaits(record, partition: partition, generation: generation, consumer: consumer) },
            recordResumes: { [engine = self] in engine.recordResumes(record, partition: partition, generation: generation) })
        var retry = InfrastructureRetry(.init(
            initialDelay: configuration.initialRetryDelay, maximumDelay: configuration.maximumRetryDelay,
            stuckThreshold: configuration.stuckRecordThreshold, stuckLogInterval: configuration.stuckRecordLogInterval))
        while true {
            if Task.isCancelled { return false }
            do {
                return try await handle(records, retryContext: retryContext, shouldStop: shouldStop) != .abandoned
            } catch {
                if Task.isCancelled || error is CancellationError { return false }
                if engine.withLock({ $0.stopping }) { return false }
                let decision = retry.failed(at: .now)
                let first = records[0]
                var fields = [
                    "partition": "\(first.topicPartition)", "offset": "\(first.offset)",
                    "key": first.key.map { String(decoding: $0, as: UTF8.self) } ?? "", "error": "\(error)",
                ]
                switch decision.log {
                case .retrying:
                    fields["delay_ms"] = "\(decision.delay.wholeMilliseconds)"
                    logger.warning("retrying a record after a failure", fields)
                case .stuck(let retryingFor):
                    fields["retrying_for_s"] = "\(retryingFor.components.seconds)"
                    logger.error("record stuck: still retrying", fields)
                case .quiet:
                    break
                }
                engine.withLock { $0.workers[worker]?.retrying = true }
                let slept: Void? = try? await Task.sleep(for: decision.delay)
                engine.withLock { $0.workers[worker]?.retrying = false }
                if slept == nil { return false }
            }
        }
    }

    // MARK: Stopping and rebalances

    /// Whether records of `partition` started under `generation` should stop: the process is stopping,
    /// or the partition was revoked or reset since.
    /// A running send request only waits for APNs retries: its slot goes to the next records.
    private func recordWaits(_ record: KafkaMessage, partition: KafkaTopicPartition, generation: Int, consumer: KafkaConsumer) {
        engine.withLock { state in
            guard state.slots[partition]?.generation == generation, var slot = state.slots.removeValue(forKey: partition) else { return }
            let start = slot.scheduler.recordWaits(record)
            state.slots[partition] = slot
            for records in start { spawnWorker(records, partition: partition, generation: generation, consumer: consumer, state: &state) }
        }
    }

    /// A waiting send request sends again: it takes its slot back.
    private func recordResumes(_ record: KafkaMessage, partition: KafkaTopicPartition, generation: Int) {
        engine.withLock { state in
            guard state.slots[partition]?.generation == generation else { return }
            state.slots[partition]?.scheduler.recordResumes(record)
        }
    }

    /// Records in the uncommitted span of `partition`; `Int.max` (park at once) when the partition
    /// was revoked or reset since `generation` started, or the process is stopping.
    private func uncommittedRecords(_ partition: KafkaTopicPartition, _ generation: Int) -> Int {
        engine.withLock { state in
            guard !state.stopping, let slot = state.slots[partition], slot.generation == generation, !slot.scheduler.stopped else { return .max }
            return slot.scheduler.uncommitted
        }
    }

    private func isAbandoned(_ partition: KafkaTopicPartition, _ generation: Int) -> Bool {
        engine.withLock { state in
            guard !state.stopping, state.slots[partition]?.generation == generation else { return true }
            return state.slots[partition]?.scheduler.stopped ?? true
        }
    }

    /// Stops every partition (queued records dropped) and cancels workers waiting on a retry timer.
    /// - Returns: how many records were dropped.
    private func stopAll() -> Int {
        let (dropped, retrying) = engine.withLock { state -> (Int, [Task<Void, Never>]) in
            state.stopping = true
            var dropped = 0
            for key in state.slots.keys { dropped += state.slots[key]!.scheduler.stop() }
            return (dropped, state.workers.values.filter(\.retrying).compactMap(\.task))
        }
        retrying.forEach { $0.cancel() }
        // Notifications waiting for an APNs retry are parked: durable, their records may finish.
        retryTimers.parkAll()
        return dropped
    }

    /// Cancels the workers of `partitions` (all workers when nil).
    private func cancelWorkers(of partitions: Set<KafkaTopicPartition>?) {
        let tasks = engine.withLock { state in
            state.workers.values.filter { partitions?.contains($0.partition) ?? true }.compactMap(\.task)
        }
        tasks.forEach { $0.cancel() }
    }

    /// Returns once no worker serves `partitions` (any partition when nil), or after `timeout`.
    /// - Returns: whether they became idle.
    @discardableResult
    private func waitUntilIdle(_ partitions: Set<KafkaTopicPartition>?, timeout: Duration? = nil) async -> Bool {
        let id = engine.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        let timer = timeout.map { timeout in
            Task {
                try? await Task.sleep(for: timeout)
                engine.withLock { $0.idleWaiters.removeValue(forKey: id) }?.continuation.resume()
            }
        }
        defer { timer?.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let idle = engine.withLock { state -> Bool in
                    if state.isIdle(partitions) || Task.isCancelled { return true }
                    state.idleWaiters[id] = (partitions, continuation)
                    return false
                }
                if idle { continuation.resume() }
            }
        } onCancel: {
            engine.withLock { $0.idleWaiters.removeValue(forKey: id) }?.continuation.resume()
        }
        return engine.withLock { $0.isIdle(partitions) }
    }

    /// Lets a revocation proceed once the revoked partitions' running records finished, at most
    /// `revokeDrain` later; queued records are dropped, records on a retry timer are abandoned at once,
    /// and records still running after the drain are cancelled (all of them stay unfinished). A lost
    /// assignment is not waited for and cancels no running record: those start no new notification,
    /// finish what is in flight and are never stored; a re-read record of the same request joins them.
    private func watchRebalances(_ consumer: KafkaConsumer) async {
        for await event in consumer.events {
            switch event {
            case .partitionsAssigned:
                break  // the consumer logs assignments
            case .partitionsRevoked(let revocation):
                let revoked = Set(revocation.partitions)
                let retrying = engine.withLock { state -> [Task<Void, Never>] in
                    for partition in revoked { state.slots[partition]?.scheduler.stop() }
                    // A lost assignment is handled like a revocation, without the wait: running
                    // records start no new notification, those in flight finish, nothing is stored.
                    return state.workers.values.filter { revoked.contains($0.partition) && $0.retrying }.compactMap(\.task)
                }
                retrying.forEach { $0.cancel() }
                retryTimers.parkAll { revoked.contains($0) }
                let drained = revocation.isLost ? true : await waitUntilIdle(revoked, timeout: configuration.revokeDrain)
                engine.withLock { state in
                    for partition in revoked { state.slots[partition] = nil }
                }
                if !drained {
                    logger.warning("revocation drain time over: cancelling records still running", ["partitions": revoked.map { "\($0)" }.joined(separator: ",")])
                    cancelWorkers(of: revoked)
                }
                logger.info("revoked partitions drained", [
                    "partitions": revocation.partitions.map { "\($0)" }.joined(separator: ","), "lost": "\(revocation.isLost)",
                    "finished_in_time": "\(drained)",
                ])
                revocation.finish()
            case .error(let error):
                logger.warning("consumer error", ["error": "\(error)"])
            }
        }
    }

    // MARK: Handling

    /// Handles records of one partition (one send request, or a batch of token events); throws only
    /// for transient infrastructure failures.
    /// - Returns: `.abandoned` when a send request stopped before it finished; else `.finished`.
    @discardableResult
    func handle(_ records: [KafkaMessage], retryContext: RetryContext = .unbounded(), shouldStop: @escaping @Sendable () -> Bool = { false }) async throws -> RecordOutcome {
        var records = records
        // Send requests too large are refused by the send-request path (with a RequestCompleted).
        let refusedHere: (KafkaMessage) -> Bool = { [configuration] message in
            message.unreadableError != nil || (message.oversizedValueBytes != nil && message.topic != configuration.topics.sendRequests)
        }
        if records.contains(where: refusedHere) {
            for message in records where message.unreadableError != nil { try await deadLetterUnreadable(message) }
            for message in records where refusedHere(message) && message.unreadableError == nil { try await deadLetterOversized(message) }
            records.removeAll(where: refusedHere)
        }
        guard let first = records.first else { return .finished }
        if first.topic == configuration.topics.tokenEvents {
            try await applyTokenEvents(records)
        } else if first.topic == configuration.topics.sendRequests {
            for message in records where try await handleSendRequest(message, retryContext: retryContext, shouldStop: shouldStop) == .abandoned {
                return .abandoned
            }
        }
        return .finished
    }

    /// A record the Kafka client could not read (the consumer skipped its offset): kept on the
    /// dead-letter topic by offset, with `unreadable_by_client` set.
    private func deadLetterUnreadable(_ message: KafkaMessage) async throws {
        let error = "the Kafka client could not read the record at this offset (records compressed into the same batch are lost with it): \(message.unreadableError ?? "")"
        try await feedback.deadLetter(message, error: error, rejectedBy: "dispatcher")
        metrics.deadLetters.increment(labels: ["undecodable_batch"])
    }

    /// The refusal of a record whose value is larger than `PUSH_MAX_SEND_REQUEST_BYTES` (the consumer
    /// did not copy it).
    private func oversized(_ message: KafkaMessage) -> SendRequestDecoder.Rejection {
        SendRequestDecoder.Rejection(
            "record value: \(message.oversizedValueBytes ?? 0) bytes (after the Kafka client decompressed it); at most \(configuration.intake.maxSendRequestBytes) (PUSH_MAX_SEND_REQUEST_BYTES)",
            reason: "send_request_too_large")
    }

    /// A token event larger than `PUSH_MAX_SEND_REQUEST_BYTES`: kept on the dead-letter topic with its
    /// size and no value.
    private func deadLetterOversized(_ message: KafkaMessage) async throws {
        logger.warning("token event refused: too large", ["partition": "\(message.topicPartition)", "offset": "\(message.offset)"])
        try await feedback.deadLetter(message, error: "invalid TokenEvent: \(oversized(message))", rejectedBy: "dispatcher")
        metrics.deadLetters.increment(labels: ["invalid_token_event"])
    }

    private func applyTokenEvents(_ records: [KafkaMessage]) async throws {
        var events: [(KafkaMessage, TokenEvent)] = []
        for message in records {
            do {
                events.append((message, try TokenEventChecker.checked(message, nowMs: clock.nowMilliseconds())))
            } catch {
                logger.warning("token event rejected", ["error": "\(error)", "partition": "\(message.topicPartition)", "offset": "\(message.offset)"])
                try await feedback.deadLetter(message, error: "invalid TokenEvent: \(error)", rejectedBy: "dispatcher")
                metrics.deadLetters.increment(labels: ["invalid_token_event"])
            }
        }
        guard !events.isEmpty else { return }
        do {
            let applied = try await store.applyBatch(events.map(\.1))
            try await deadLetterRefused(applied.refused, of: events)
            try await announceForgotten(applied.forgotten)
            metrics.tokenEventsApplied.increment(by: Double(events.count - applied.refused.count))
        } catch let error as PostgresError where error.isCausedByTheData {
            // One event of the batch is refused for its content: apply them one by one, so that only
            // that one goes to the dead-letter topic.
            for (message, event) in events {
                do {
                    let applied = try await store.applyOne(event)
                    try await deadLetterRefused(applied.refused, of: [(message, event)])
                    try await announceForgotten(applied.forgotten)
                    if applied.refused.isEmpty { metrics.tokenEventsApplied.increment() }
                } catch let error as PostgresError where error.isCausedByTheData {
                    logger.error("record refused by PostgreSQL", ["error": "\(error)", "offset": "\(message.offset)"])
                    try await feedback.deadLetter(message, error: "refused by PostgreSQL: \(error)", rejectedBy: "dispatcher")
                    metrics.deadLetters.increment(labels: ["refused_by_postgres"])
                }
            }
        }
    }

    /// Registrations not applied because another app owns their token (`TokenOwnership`): each goes
    /// to the dead-letter topic as `token_owned_by_other_app`, matched to its record by token, bundle
    /// id and event time.
    private func deadLetterRefused(_ refused: [TokenEventsApplied.RefusedRegistration], of events: [(KafkaMessage, TokenEvent)]) async throws {
        guard !refused.isEmpty else { return }
        var used = Set<Int>()
        for registration in refused {
            guard let index = events.indices.first(where: { index in
                let event = events[index].1
                return !used.contains(index) && event.action == .registered && event.device?.deviceToken == registration.deviceToken
                    && event.device?.bundleID == registration.bundleID && event.eventTimeMs == registration.eventTimeMs
            }) else { continue }
            used.insert(index)
            let message = events[index].0
            logger.warning("registration refused: the token belongs to another app", [
                "bundle_id": registration.bundleID, "owner_bundle_id": registration.ownerBundleID,
                "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
            ])
            try await feedback.deadLetter(
                message,
                error: "device.bundle_id: the token is registered to another app (\(registration.ownerBundleID)) and active or inactive for less than PUSH_TOKEN_REBIND_AFTER_DAYS; not applied",
                rejectedBy: "dispatcher")
            metrics.deadLetters.increment(labels: ["token_owned_by_other_app"])
        }
    }

    /// Publishes a `TokenInvalidated` (outcome reason `USER_FORGOTTEN`) for every row a forgotten
    /// user had, keyed by the token, with a deterministic event id (a redelivered forget event
    /// repeats the same ids).
    private func announceForgotten(_ forgotten: [TokenEventsApplied.ForgottenToken]) async throws {
        for row in forgotten {
            var invalidated = TokenInvalidated(
                deviceToken: row.deviceToken, bundleID: row.bundleID, environment: Environment(storedName: row.environment),
                userID: row.userID, installationID: row.installationID)
            invalidated.outcomeReason = .userForgotten
            let id = FeedbackEventID.tokenInvalidated(deviceToken: row.deviceToken, apnsTimestampMs: row.eventTimeMs, requestID: "user-forgotten")
            try await feedback.publish(feedback.event(id: id, .tokenInvalidated(invalidated)), key: row.deviceToken)
        }
        if !forgotten.isEmpty {
            logger.notice("user forgotten: tokens deactivated and announced", ["tokens": "\(forgotten.count)", "bundle_id": forgotten[0].bundleID])
        }
    }

    private func handleSendRequest(_ message: KafkaMessage, retryContext: RetryContext, shouldStop: @escaping @Sendable () -> Bool) async throws -> RecordOutcome {
        var request: SendRequest
        let headerTrace = message.headers.last { $0.name.lowercased() == TraceParent.headerName }?.value.map { String(decoding: $0, as: UTF8.self) }
        do {
            if message.oversizedValueBytes != nil { throw oversized(message) }
            // Campaign hook: a CancelRequest record, in key order (its on-receipt effect came first).
            if let cancel = try CampaignCancellations.cancelRequest(in: message, maxBytes: configuration.intake.maxSendRequestBytes) {
                try await applyCancel(cancel)
                return .finished
            }
            request = try SendRequestDecoder.decode(message, limits: configuration.intake.sendRequestLimits)
        } catch let error as SendRequestDecoder.Rejection {
            let trace = TraceParent.resolve([headerTrace]).trace
            logger.warning("send request rejected", [
                "error": error.description, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
                "key": message.key.map { String(decoding: $0, as: UTF8.self) } ?? "", "trace_id": trace.traceID,
            ])
            try await feedback.deadLetter(message, error: error.description, rejectedBy: "dispatcher")
            metrics.deadLetters.increment(labels: [error.reason])
            // Tell the producer too: its request finishes visibly, with the reason.
            if let key = message.key, !key.isEmpty {
                try await processor.publishRejected(requestID: String(decoding: key, as: UTF8.self), error: error.description, traceParent: trace.text)
            }
            return .finished
        }
        // docs/observability.md "Trace context": the record's traceparent header, else the request's
        // trace_parent field, else a new trace; every record this request causes carries the result.
        let (trace, generated) = TraceParent.resolve([headerTrace, request.traceParent])
        if generated || request.traceParent != trace.text {
            if !request.traceParent.isEmpty, TraceParent(request.traceParent) == nil {
                logger.debug("invalid trace_parent ignored", ["request_id": request.requestID, "trace_parent": String(request.traceParent.prefix(64))])
            }
            request.traceParent = trace.text
        }
        // Campaign hook: audiences and future send_at_ms become campaign rows; the record is then done.
        let nowMs = clock.nowMilliseconds()
        do {
            // Idempotency: the same request id must ask for the same thing (docs/contracts.md
            // "Request ids"); another notification under a used id is not a repeat.
            let fingerprint = RequestFingerprint.of(request)
            if let earlier = try await fingerprints.submit(FingerprintInput(requestID: request.requestID, fingerprint: fingerprint)),
               earlier != fingerprint
            {
                logger.warning("send request refused: its request id was used for another notification", [
                    "request_id": request.requestID, "partition": "\(message.topicPartition)", "offset": "\(message.offset)", "trace_id": trace.traceID,
                ])
                try await feedback.deadLetter(
                    message,
                    error: "request_id: \"\(request.requestID)\" was used before for another notification or target; a request id names one send (not applied)",
                    rejectedBy: "dispatcher")
                metrics.deadLetters.increment(labels: ["request_id_reused"])
                return .finished
            }
            if CampaignRunner.isCampaign(request, nowMs: nowMs) {
                try await campaignStore.create(request, requestedAtMs: request.createdAtMs > 0 ? request.createdAtMs : nowMs, nowMs: nowMs)
                return .finished
            }
            let requestID = request.requestID
            // An earlier handling of this request still running here (its partition was lost or
            // revoked and assigned back) is joined, never run beside.
            guard try await claimRequest(requestID, message) else { return .finished }
            var finished = false
            defer { releaseRequest(requestID, finished: finished) }
            let outcome = try await processor.process(request, consumedAtMs: nowMs, retryContext: retryContext, shouldStop: shouldStop)
            finished = outcome != .abandoned
            return outcome
        } catch let error as PostgresError where error.isCausedByTheData {
            // Retrying cannot help a record the database refuses: keep it for operators and go on.
            logger.error("record refused by PostgreSQL", [
                "error": "\(error)", "offset": "\(message.offset)", "request_id": request.requestID, "trace_id": trace.traceID,
            ])
            try await feedback.deadLetter(message, error: "refused by PostgreSQL: \(error)", rejectedBy: "dispatcher")
            metrics.deadLetters.increment(labels: ["refused_by_postgres"])
        }
        return .finished
    }
}

// MARK: - One handling of a request at a time (docs/dispatcher-engine.md "Records handled again")

extension Dispatcher {
    /// Claims `requestID` for this handling of `message`; when another handling in this process runs
    /// it, waits for that one to end (starting nothing meanwhile).
    /// - Returns: true when this handling runs the request (and must call `releaseRequest`); false
    ///   when the handling it joined finished the request: the record is then finished without
    ///   publishing anything.
    /// - Throws: `CancellationError` when cancelled while waiting.
    fileprivate func claimRequest(_ requestID: String, _ message: KafkaMessage) async throws -> Bool {
        let ticket = runningRequests.withLock { state in
            state.nextTicket += 1
            return state.nextTicket
        }
        let turn = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<RunningRequests.Turn?, Never>) in
                let claim = runningRequests.withLock { state -> RunningRequests.Claim? in
                    if Task.isCancelled { return nil }
                    let claim = state.requests.claim(requestID, ticket: ticket)
                    if claim == .join { state.waiters[ticket] = continuation }
                    return claim
                }
                switch claim {
                case nil: continuation.resume(returning: nil)
                case .run?: continuation.resume(returning: .run)
                case .join?:
                    rereadsJoined.increment()
                    logger.info("request already running in this process: waiting for that handling", [
                        "request_id": requestID, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
                    ])
                }
            }
        } onCancel: {
            runningRequests.withLock { state in
                state.requests.leave(requestID, ticket: ticket) ? state.waiters.removeValue(forKey: ticket) : nil
            }?.resume(returning: nil)
        }
        switch turn {
        case nil:
            throw CancellationError()
        case .run?:
            return true
        case .finishedByOther?:
            logger.info("request finished by the handling it waited for: nothing published again", [
                "request_id": requestID, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
            ])
            return false
        }
    }

    /// The handling that ran `requestID` ended (`finished`: the request is finished); resumes the
    /// handlings waiting for it.
    fileprivate func releaseRequest(_ requestID: String, finished: Bool) {
        let resumed = runningRequests.withLock { state in
            state.requests.release(requestID, finished: finished).compactMap { ticket, turn in
                state.waiters.removeValue(forKey: ticket).map { ($0, turn) }
            }
        }
        for (waiter, turn) in resumed { waiter.resume(returning: turn) }
    }
}

// MARK: - Campaign hooks (docs/campaigns.md "Cancellation")

extension Dispatcher {
    /// A cancel takes effect on receipt (the consumer's `onReceipt`, on its poll thread), before key
    /// order: the in-process set at once; the `cancellations` row (which every replica polls) and the
    /// campaign row's flag as soon as PostgreSQL answers. The record's in-order handling writes both
    /// again (idempotent) before its offset is stored, so a failed write here loses nothing.
    fileprivate func applyCancelOnReceipt(_ message: KafkaMessage) {
        guard let cancel = try? CampaignCancellations.cancelRequest(in: message, maxBytes: configuration.intake.maxSendRequestBytes) else { return }
        let nowMs = clock.nowMilliseconds()
        cancellations.insert(cancel.requestID, atMs: nowMs)
        Task { [campaignStore, cancellationStore = CancellationStore(pool: store.pool)] in
            let atMs = cancel.requestedAtMs > 0 ? cancel.requestedAtMs : nowMs
            try? await cancellationStore.record(requestID: cancel.requestID, reason: cancel.reason, requestedAtMs: atMs)
            _ = try? await campaignStore.requestCancel(requestID: cancel.requestID, reason: cancel.reason, atMs: atMs)
        }
    }

    fileprivate func applyCancel(_ cancel: CancelRequest) async throws {
        let nowMs = clock.nowMilliseconds()
        cancellations.insert(cancel.requestID, atMs: nowMs)
        let atMs = cancel.requestedAtMs > 0 ? cancel.requestedAtMs : nowMs
        try await CancellationStore(pool: store.pool).record(requestID: cancel.requestID, reason: cancel.reason, requestedAtMs: atMs)
        let applied = try await campaignStore.requestCancel(requestID: cancel.requestID, reason: cancel.reason, atMs: atMs)
        logger.info("cancel request", ["request_id": cancel.requestID, "reason": cancel.reason, "campaign": "\(applied)"])
    }
}

extension PostgresError {
    /// SQLSTATE classes 22 (data exception) and 23 (integrity constraint violation): the record's
    /// content is at fault, so retrying the same record cannot succeed.
    var isCausedByTheData: Bool {
        guard let state = sqlState else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23")
    }
}
