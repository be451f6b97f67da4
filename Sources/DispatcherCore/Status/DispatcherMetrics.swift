import Kafka
import PushMessages
import ServiceCore
import Synchronization

/// The dispatcher's counters, in `MetricsRegistry.shared` (README "Metrics" lists each with its
/// labels). Gauges read at scrape time are registered by `DispatcherMonitor`.
struct DispatcherMetrics: Sendable {
    /// The process's counters.
    static let shared = DispatcherMetrics(registry: .shared)

    /// `push_notifications_total{outcome,reason}`: final outcomes of notifications, one per token
    /// of a request; `reason` is Apple's reason when Apple gave one, else the dispatcher's outcome
    /// reason, else `none`.
    let notifications: Counter
    /// `push_dead_letters_total{reason}`: records kept on the dead-letter topic.
    let deadLetters: Counter
    /// `push_send_log_writes_total`: rows written to `send_log_v2` (final outcomes recorded).
    let sendLogWrites: Counter
    /// `push_token_events_applied_total`: token events applied to the token table.
    let tokenEventsApplied: Counter
    /// `push_records_redelivered_total{topic}`: records the Kafka consumer handed out again within one
    /// assignment, at an offset taken already; ignored (docs/kafka-consumer.md "Records handed out
    /// twice"). `topic` is one of the dispatcher's input topics.
    let recordsRedelivered: Counter
    /// `push_other_environment_tries_total{result}`: tries on the other APNs environment after
    /// `BadDeviceToken` (docs/semantics.md "The other environment after BadDeviceToken"): `corrected`,
    /// `accepted_not_corrected` (a newer registration kept the row, or PostgreSQL failed), `refused`,
    /// `no_answer`.
    let otherEnvironmentTries: Counter
    /// `push_request_duration_seconds{lane}`: from a request's `requested_at_ms` (its `created_at_ms`,
    /// else when its record was consumed) to Kafka's acknowledgement of its `RequestCompleted`, in
    /// seconds; `lane` is `transactional` (immediate requests, with their parked notifications) or
    /// `campaign` (campaigns and scheduled requests).
    let requestDuration: Histogram
    /// `push_request_stage_seconds{stage}`: from an immediate request's `requested_at_ms` to the end
    /// of each stage of its handling in this process, in seconds (`RequestStage`); the end of the
    /// last stage, its `RequestCompleted` acknowledged, is `push_request_duration_seconds`.
    let requestStage: Histogram
    /// `push_batch_wait_seconds{batcher}`: how long the first item of each batch of a `Batcher`
    /// waited for its batch to start (behind the batcher's running batch, or its `maxWait`), in
    /// seconds; `batcher` is the batcher's `metricLabel`.
    let batchWait: Histogram
    /// `push_batch_duration_seconds{batcher}`: one batch's run, from its start to its result (its
    /// PostgreSQL statement or transaction, the checkout and the hops to and from the connection's
    /// thread), in seconds.
    let batchDuration: Histogram
    /// `push_batch_items{batcher}`: items (look-ups, rows) per batch.
    let batchItems: Histogram

    init(registry: MetricsRegistry) {
        notifications = registry.counter(
            "push_notifications_total", help: "Final outcomes of notifications, by outcome and reason (Apple's, else the dispatcher's).",
            labelNames: ["outcome", "reason"])
        deadLetters = registry.counter(
            "push_dead_letters_total", help: "Records kept on the dead-letter topic, by reason.", labelNames: ["reason"])
        sendLogWrites = registry.counter("push_send_log_writes_total", help: "Rows written to send_log_v2 (final outcomes recorded).")
        tokenEventsApplied = registry.counter("push_token_events_applied_total", help: "Token events applied to the token table.")
        recordsRedelivered = registry.counter(
            "push_records_redelivered_total", help: "Records the Kafka consumer handed out again at an offset taken already (ignored), by topic.",
            labelNames: ["topic"])
        otherEnvironmentTries = registry.counter(
            "push_other_environment_tries_total", help: "Tries on the other APNs environment after BadDeviceToken, by result.",
            labelNames: ["result"])
        requestDuration = registry.histogram(
            "push_request_duration_seconds",
            help: "Time from a request's requested_at_ms to the acknowledgement of its RequestCompleted, by lane (transactional, campaign).",
            labelNames: ["lane"], buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600])
        requestStage = registry.histogram(
            "push_request_stage_seconds",
            help: "Time from an immediate request's requested_at_ms to the end of each stage of its handling (consumed, resolved, sent).",
            labelNames: ["stage"], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300])
        let batchBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
        batchWait = registry.histogram(
            "push_batch_wait_seconds",
            help: "Time the first item of a batch waited for the batch to start (behind the running batch, or the batcher's wait), by batcher.",
            labelNames: ["batcher"], buckets: batchBuckets)
        batchDuration = registry.histogram(
            "push_batch_duration_seconds",
            help: "Time one batch ran, its PostgreSQL statement or transaction with the checkout and thread hops, by batcher.",
            labelNames: ["batcher"], buckets: batchBuckets)
        batchItems = registry.histogram(
            "push_batch_items", help: "Items (look-ups, rows) per batch, by batcher.",
            labelNames: ["batcher"], buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000])
    }

    /// Observes one batch of the batcher labelled `batcher`: `items` in it, its first item's `wait`
    /// before it started and the time it `ran`.
    func observeBatch(_ batcher: String, items: Int, wait: Duration, ran: Duration) {
        let labels = [batcher]
        batchWait.observe(wait.inSeconds, labels: labels)
        batchDuration.observe(ran.inSeconds, labels: labels)
        batchItems.observe(Double(items), labels: labels)
    }

    /// Observes the end of `stage` of an immediate request whose `requested_at_ms` is `requestedAtMs`,
    /// at `nowMs` (both milliseconds since the Unix epoch); a clock behind the request counts as 0 s.
    func observe(_ stage: RequestStage, requestedAtMs: Int64, nowMs: Int64) {
        requestStage.observe(Double(max(0, nowMs - requestedAtMs)) / 1000, labels: [stage.rawValue])
    }

    /// Counts one final outcome.
    func count(_ report: DeliveryReport) {
        notifications.increment(labels: Self.labels(of: report))
    }

    /// The `outcome` and `reason` label values of `report`: bounded sets (the outcome enum, Apple's
    /// reason strings, the outcome-reason enum).
    static func labels(of report: DeliveryReport) -> [String] {
        let outcome = outcomeLabels[report.outcome.rawValue] ?? "unknown"
        let reason: String
        if !report.apnsReason.isEmpty, report.apnsReason.count <= 40, report.apnsReason.allSatisfy({ $0.isASCII && $0.isLetter }) {
            reason = report.apnsReason
        } else if report.outcomeReason != .unspecified {
            reason = reasonLabel(report.outcomeReason) ?? "unknown"
        } else {
            reason = "none"
        }
        return [outcome, reason]
    }

    /// The label of an outcome reason (`stream_timeout`), nil for one this build does not know.
    static func reasonLabel(_ reason: OutcomeReason) -> String? { reasonLabels[reason.rawValue] }

    // Made once: labels are looked up for every notification.
    private static let outcomeLabels = Dictionary(uniqueKeysWithValues: DeliveryOutcome.allCases.compactMap { outcome in
        label(outcome.protoName, dropping: "DELIVERY_OUTCOME_").map { (outcome.rawValue, $0) }
    })
    private static let reasonLabels = Dictionary(uniqueKeysWithValues: OutcomeReason.allCases.compactMap { reason in
        label(reason.protoName, dropping: "OUTCOME_REASON_").map { (reason.rawValue, $0) }
    })

    /// `OUTCOME_REASON_STREAM_TIMEOUT` → `stream_timeout`.
    static func label(_ protoName: String?, dropping prefix: String) -> String? {
        guard let protoName else { return nil }
        return (protoName.hasPrefix(prefix) ? String(protoName.dropFirst(prefix.count)) : protoName).lowercased()
    }
}

/// The stages of an immediate request's handling that `push_request_stage_seconds` times from the
/// request's `requested_at_ms` (docs/observability.md "Where a request's time goes"). Each is the
/// time since the request was made, so a stage's own share is the difference to the one before.
enum RequestStage: String, Sendable, CaseIterable {
    /// Its record decoded by the engine's worker: Kafka's transit, the consumer's prefetch and the
    /// engine's queues (0 s for a request without `created_at_ms`, which is timed from here).
    case consumed
    /// Its request id checked against earlier uses (`request_fingerprints`), its first batch of
    /// targets resolved (the token look-up) and its earlier progress read.
    case resolved
    /// Every notification of it answered by Apple (or parked) and recorded in `send_log`, its
    /// reports handed to the Kafka producer (their acknowledgements not awaited yet).
    case sent
}
