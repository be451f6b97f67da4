import APNs
import DispatcherStatus
import Kafka
import Postgres
import PushMessages
import ServiceCore
import Synchronization

/// What the dispatcher shows operators besides its counters: readiness (`readiness`, read by the
/// admin port's `/readyz`), gauges read at scrape time (records in flight,
/// uncommitted records per partition, consumer lag per partition from librdkafka's statistics), and
/// Apple's troubles for the readiness body (never a readiness condition).
///
/// Created by the executable and handed to `DispatcherService`; the engine registers its consumer
/// and a reader of its state while it runs.
public final class DispatcherMonitor: Sendable {
    /// Snapshot of the engine's queues, read at scrape time.
    struct EngineSnapshot: Sendable {
        var recordsInFlight = 0
        var uncommitted: [KafkaTopicPartition: Int] = [:]
    }

    private struct AppleTrouble {
        var count = 0
        var lastReason = ""
        var lastAt: UInt64 = 0
    }

    /// What `/readyz` decides from.
    public let readiness = ReadinessState()
    private let consumer = Mutex<KafkaConsumer?>(nil)
    /// `push_kafka_produce_rtt_seconds`, `push_kafka_producer_wakeups_total` and
    /// `push_kafka_producer_linger_seconds` of the feedback producer.
    private let producerMetrics: KafkaProducerMetrics
    private let databasePool = Mutex<(@Sendable () -> PostgresPool.Statistics)?>(nil)
    private let engine = Mutex<(@Sendable () -> EngineSnapshot)?>(nil)
    private let statusLookup = Mutex<(@Sendable (String) async throws -> RequestStatusReport?)?>(nil)
    private let channelLookup = Mutex<ChannelStatusEndpoint.Lookup?>(nil)
    private let providerTokenFaults = Mutex(AppleTrouble())
    /// The keys being rotated in that APNs refused (the APNs client's `keysInFallback`), while it runs.
    private let keyFallbacks = Mutex<(@Sendable () -> [APNsKeyFallbacks.Refusal])?>(nil)
    private let unreachable = Mutex(AppleTrouble())

    /// Registers the dispatcher's scrape-time gauges in `registry` (the first monitor registered in a
    /// registry is the one its gauges read).
    public init(registry: MetricsRegistry = .shared) {
        producerMetrics = KafkaProducerMetrics(registry: registry, role: "feedback")
        registry.gaugeCallback("push_records_in_flight", help: "Records taken from Kafka and not finished (queued or running).") { [weak self] in
            [MetricSample(value: Double(self?.engineSnapshot().recordsInFlight ?? 0))]
        }
        registry.gaugeCallback(
            "push_uncommitted_records", help: "Records of a partition not yet covered by its stored offset (topic[partition]).",
            labelNames: ["partition"]
        ) { [weak self] in
            (self?.engineSnapshot().uncommitted ?? [:]).sorted { $0.key < $1.key }.map { MetricSample(labels: ["\($0.key)"], value: Double($0.value)) }
        }
        registry.gaugeCallback(
            "push_kafka_consumer_lag", help: "Records between a partition's high watermark and this consumer's committed offset (librdkafka statistics).",
            labelNames: ["topic", "partition"]
        ) { [weak self] in
            let lag = self?.consumer.withLock { $0 }?.health.statistics?.consumerLag ?? [:]
            return lag.sorted { $0.key < $1.key }.map { MetricSample(labels: [$0.key.topic, "\($0.key.partition.rawValue)"], value: Double($0.value)) }
        }
        registry.gaugeCallback(
            "push_pg_pool_connections", help: "PostgreSQL connections of the pool by state: idle, leased (running a statement or transaction), connecting.",
            labelNames: ["state"]
        ) { [weak self] in
            guard let pool = self?.databasePool.withLock({ $0 })?() else { return [] }
            return [MetricSample(labels: ["idle"], value: Double(pool.idle)), MetricSample(labels: ["leased"], value: Double(pool.leased)),
                    MetricSample(labels: ["connecting"], value: Double(max(0, pool.open - pool.idle - pool.leased)))]
        }
        registry.gaugeCallback("push_pg_pool_max_connections", help: "The most PostgreSQL connections the pool opens.") { [weak self] in
            self?.poolSample { Double($0.maximum) } ?? []
        }
        registry.gaugeCallback("push_pg_pool_waiting", help: "Checkouts (a statement or a transaction) waiting for a PostgreSQL connection of the pool now (every connection leased).") { [weak self] in
            self?.poolSample { Double($0.waiting) } ?? []
        }
        registry.counterCallback("push_pg_pool_waits_total", help: "Checkouts that waited for a PostgreSQL connection of the pool (every connection leased).") { [weak self] in
            self?.poolSample { Double($0.waits) } ?? []
        }
        registry.counterCallback("push_pg_pool_wait_seconds_total", help: "Seconds checkouts spent waiting for a PostgreSQL connection of the pool, in total.") { [weak self] in
            self?.poolSample { $0.waitTime.inSeconds } ?? []
        }
        registry.gaugeCallback(
            "push_kafka_partition_stalled",
            help: "1 while the Kafka client reports errors at an assigned partition's position and delivers nothing for PUSH_PARTITION_STALL_MS, else 0.",
            labelNames: ["topic", "partition"]
        ) { [weak self] in
            guard let consumer = self?.consumer.withLock({ $0 }) else { return [] }
            let stalled = consumer.stalledPartitions
            return consumer.assignment.map { MetricSample(labels: [$0.topic, "\($0.partition.rawValue)"], value: stalled[$0] == nil ? 0 : 1) }
        }
        readiness.setInformational { [weak self] in (self?.partitionFindings() ?? []) + (self?.appleFindings() ?? []) }
    }

    /// Test hook (admin port `POST /debug/wedge-kafka-poll?seconds=N`, enabled by
    /// `PUSH_ADMIN_TEST_HOOKS=1`): the consumer's poll thread stops coming round for `duration`.
    /// - Returns: false when no consumer runs.
    public func wedgeConsumerPollForTesting(for duration: Duration) -> Bool {
        guard let consumer = consumer.withLock({ $0 }) else { return false }
        consumer.wedgePollThreadForTesting(for: duration)
        return true
    }

    /// The answer of the admin port's `GET /v1/requests/<requestID>` (`RequestStatusEndpoint`), read
    /// from PostgreSQL through the pool of the running service; 503 before it connected or after it
    /// closed.
    public func requestStatusAnswer(requestID: String) async -> RequestStatusEndpoint.Answer {
        await RequestStatusEndpoint.answer(requestID: requestID) { id in
            guard let lookup = statusLookup.withLock({ $0 }) else { throw NotConnected() }
            return try await lookup(id)
        }
    }

    /// The answer of the admin port's `GET /v1/channels/<bundle id>[/<name>]` (`ChannelStatusEndpoint`),
    /// read through the pool of the running service; 503 before it connected or after it closed.
    public func channelStatusAnswer(path: String) async -> RequestStatusEndpoint.Answer {
        await ChannelStatusEndpoint.answer(path: path, lookup: channelLookup.withLock { $0 })
    }

    /// Sets (or with nil removes) what `channelStatusAnswer` reads through.
    func setChannelLookup(_ lookup: ChannelStatusEndpoint.Lookup?) {
        channelLookup.withLock { $0 = lookup }
    }

    private struct NotConnected: Error, CustomStringConvertible {
        var description: String { "not connected (the dispatcher is starting or stopping)" }
    }

    /// Sets (or with nil removes) what `requestStatusAnswer` reads through.
    func setStatusLookup(_ lookup: (@Sendable (String) async throws -> RequestStatusReport?)?) {
        statusLookup.withLock { $0 = lookup }
    }

    func attach(consumer: KafkaConsumer, engine: @escaping @Sendable () -> EngineSnapshot) {
        self.consumer.withLock { $0 = consumer }
        self.engine.withLock { $0 = engine }
        readiness.setConsumer { consumer.health.readinessInput }
    }

    /// Sets (or with nil removes) the feedback producer the `push_kafka_produce*` families describe,
    /// while the service runs.
    func setProducer(_ producer: KafkaProducer?) {
        producerMetrics.setProducer(producer)
    }

    /// Sets (or with nil removes) where the `push_pg_pool_*` families read the PostgreSQL pool's
    /// counts from, while the service runs.
    func setDatabasePool(_ statistics: (@Sendable () -> PostgresPool.Statistics)?) {
        databasePool.withLock { $0 = statistics }
    }

    /// One sample of the pool's statistics; none while no pool is set.
    private func poolSample(_ value: (PostgresPool.Statistics) -> Double) -> [MetricSample] {
        guard let statistics = databasePool.withLock({ $0 })?() else { return [] }
        return [MetricSample(value: value(statistics))]
    }

    func detachConsumer() {
        readiness.setConsumer(nil)
        consumer.withLock { $0 = nil }
    }

    private func engineSnapshot() -> EngineSnapshot {
        engine.withLock { $0 }?() ?? EngineSnapshot()
    }

    /// Sets (or clears) what `/readyz`'s body reads the refused keys from: one informational line per
    /// key and bundle ID whose sends go to the key before it (never a readiness condition: the
    /// fallback key delivers).
    /// The APNs client's keys in fallback now (empty while no client runs).
    public func keysInFallback() -> [APNsKeyFallbacks.Refusal] {
        keyFallbacks.withLock { $0 }?() ?? []
    }

    func setKeyFallbacks(_ read: (@Sendable () -> [APNsKeyFallbacks.Refusal])?) {
        keyFallbacks.withLock { $0 = read }
    }

    /// Notes a final outcome that blames our credentials or Apple's reachability, for `/readyz`'s body.
    func noteAppleTrouble(_ report: DeliveryReport) {
        if report.outcomeReason == .providerTokenFault {
            let now = Heartbeat.monotonicNanoseconds()
            providerTokenFaults.withLock { $0.count += 1; $0.lastReason = report.apnsReason.isEmpty ? "local signing failure" : report.apnsReason; $0.lastAt = now }
        } else if report.outcome == .failed, report.httpStatus >= 500 || report.outcomeReason == .connectionError || report.outcomeReason == .streamTimeout
            || report.outcomeReason == .retryHorizonExceeded
        {
            let now = Heartbeat.monotonicNanoseconds()
            unreachable.withLock {
                $0.count += 1
                $0.lastReason = report.apnsReason.isEmpty ? (DispatcherMetrics.reasonLabel(report.outcomeReason) ?? "") : report.apnsReason
                $0.lastAt = now
            }
        }
    }

    /// One line per stalled partition (never a readiness condition: a restart would not read it either).
    private func partitionFindings() -> [ProbeReport.Check] {
        guard let consumer = consumer.withLock({ $0 }) else { return [] }
        let now = Heartbeat.monotonicNanoseconds()
        return consumer.stalledPartitions.sorted { $0.key < $1.key }.map { partition, stuck in
            let age = Duration.nanoseconds(Int64(clamping: now > stuck.since ? now - stuck.since : 0))
            return .init("kafka.partition_stalled", .info,
                         "\(partition) at offset \(stuck.position): no record for \(age.secondsText) (\(stuck.lastError)); not a readiness condition")
        }
    }

    private func appleFindings() -> [ProbeReport.Check] {
        let now = Heartbeat.monotonicNanoseconds()
        func describe(_ trouble: AppleTrouble, _ what: String) -> String {
            guard trouble.count > 0 else { return "no \(what) since start" }
            let age = Duration.nanoseconds(Int64(now > trouble.lastAt ? now - trouble.lastAt : 0))
            return "\(trouble.count) \(what) since start, last \(age.secondsText) ago (\(trouble.lastReason)); not a readiness condition"
        }
        let fallbacks = (keyFallbacks.withLock { $0 }?() ?? []).map { refusal -> ProbeReport.Check in
            .init("apns.key_fallback", .info,
                  "key \(refusal.teamID)/\(refusal.keyID) refused for \(refusal.bundleID) (\(refusal.reason.rawValue), \(refusal.refusals) times):"
                      + " sending on \(refusal.fallbackKeyID); tried again at \(refusal.retryAt) ms; not a readiness condition")
        }
        return [
            .init("apns.provider_token", .info, describe(providerTokenFaults.withLock { $0 }, "provider-token faults")),
            .init("apns.reachability", .info, describe(unreachable.withLock { $0 }, "notifications failed for Apple's availability")),
        ] + fallbacks
    }
}
