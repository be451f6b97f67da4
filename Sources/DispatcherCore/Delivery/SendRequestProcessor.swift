import APNs
import APNsKeyRegistry
import DispatcherStatus
import Foundation
import Postgres
import PushDomain
import PushMessages
import ServiceCore
import Synchronization

/// The delivery pipeline (docs/dispatcher-engine.md "One delivery pipeline"): its stages take a
/// batch of targets (resolve targets, admit, send, settle, record, publish, complete) and serve four
/// sources: immediate requests (`process`), campaign pages and scheduled requests
/// (`sendCampaignPage`), parked re-drives (`redrive`) and, inside the settle stage, the one try on the
/// other environment. It publishes a `DeliveryReport` per token and a `RequestCompleted` at the end.
///
/// Outcomes are recorded in `send_log` before their report is published: a redelivered request
/// re-publishes the recorded report (same event id) instead of sending again, so a push goes out
/// twice only if the process died between Apple's answer and the record. Reports Kafka already
/// acknowledged are not published again (`send_log.acknowledged`, and `AcknowledgedReports` within
/// this process), and a request whose `RequestCompleted` was acknowledged is recorded in
/// `request_completions`: handled again, it publishes nothing.
public final class SendRequestProcessor: Sendable {
    let store: TokenStore
    let sender: any NotificationSender
    let feedback: FeedbackPublisher
    let defaultEnvironment: APNsEnvironment
    let clock: any WallClock
    let logger: Logger
    let monitor: DispatcherMonitor?
    let metrics = DispatcherMetrics.shared
    /// The apps that opted in to one try on the other APNs environment after `BadDeviceToken`.
    let otherEnvironmentRetry: OtherEnvironmentRetrySettings
    /// Notifications sent at once across every request of this processor.
    let budget: AsyncSemaphore
    let sendLog: SendLogWriter
    /// One warning a few seconds about outcomes waiting for PostgreSQL, not one per notification.
    let recordWarnings = Mutex(LogRateLimiter(interval: .seconds(5)))
    /// Notifications a SIGKILL can send twice: sent to Apple or answered, outcome not yet durable in
    /// `send_log` (the in-flight budget plus one unflushed `send_log` batch; docs/send-log.md), and
    /// the reports a SIGKILL can make a redelivery publish again with marks on (the unmarked window).
    public var crashWindow: (inFlight: Int, unflushedBatch: Int, unflushedMarks: Int) {
        (maxInFlight, sendLog.maxBatch, sendLog.unflushedMarks)
    }
    private let maxInFlight: Int
    /// Parked notifications and the requests waiting for them.
    let parking: PendingRetryStore
    /// Batched look-ups (see `Batcher`; natural batching, no wait): what earlier deliveries left by
    /// request id (recorded outcomes and parked tokens, and whether the request already completed),
    /// whether a broadcast's request already completed, active tokens by user, rows by token.
    private let progressLoader: Batcher<PendingRetryStore.ProgressRead, PendingRetryStore.RequestProgress>
    let completedLoader: Batcher<String, Bool>
    /// Writes `request_completions` rows of requests finishing together in one statement.
    let completionRecorder: Batcher<CompletionRow, Void>
    /// Reports acknowledged in this process for requests not finished yet.
    let acknowledged: AcknowledgedReports
    let userTokensLoader: Batcher<UserTokensRead, [String: [StoredToken]]>
    /// Tokens per page of a `user_ids` request's tokens, and the most of a request's earlier outcomes
    /// read at once (`UserTokenPages`, docs/dispatcher-engine.md "A user's tokens in pages").
    let userPageSize: Int
    let tokensLoader: Batcher<[String], [String: StoredToken]>
    /// Cancels known to this process (the cancel check of every source's admission).
    let cancellations: CampaignCancellations
    /// The APNs credentials registry: the key of every send (`send(_:bundleID:environment:options:)`);
    /// nil leaves the choice to the client's own map.
    let credentials: CredentialsStore?
    /// Class priority across this processor's sources (`ClassPriorityPolicy`, first in their chains):
    /// transactional notifications waiting for their budget go before bulk and campaign ones.
    let classPriority = ClassPriorityGate()
    /// The `channels` table: the broadcast path's channel look-up (docs/live-activities.md).
    let channelStore: ChannelStore

    /// The flush loops of this processor's batched statements (`send_log` writes and the look-ups):
    /// they must run while the processor is used, and stop (gracefully) after everything that uses it.
    public var batchers: [any Service] {
        [sendLog, progressLoader, completedLoader, completionRecorder, userTokensLoader, tokensLoader]
    }

    /// - Parameter maxInFlight: notifications sent concurrently, across all requests this processor
    ///   handles at once (waiters are served in arrival order, so requests share it fairly). Default 1,000.
    /// - Parameter monitor: told of outcomes that blame Apple or our credentials (for `/readyz`'s body).
    /// - Parameter otherEnvironmentRetry: the apps that get one try on the other APNs environment after
    ///   `BadDeviceToken` (docs/semantics.md "The other environment after BadDeviceToken"); default none.
    /// - Parameter cancellations: the process-wide cancels, checked before every send of every source
    ///   (`CancelCheckPolicy`); default an empty set of this processor's own.
    /// - Parameter marksAcknowledgements: whether acknowledged reports are marked in `send_log` as Kafka
    ///   acknowledges them (`SendLogWriter`), bounding what a redelivery after a crash publishes again.
    /// - Parameter credentials: the APNs credentials registry that chooses each send's key; nil (the
    ///   default) leaves it to the client.
    /// - Parameter userPageSize: tokens per page of a `user_ids` request (and earlier outcomes of a
    ///   redelivered request read at once); default 1,000, at least 1.
    public init(store: TokenStore, sender: any NotificationSender, feedback: FeedbackPublisher,
                defaultEnvironment: APNsEnvironment, clock: any WallClock, logger: Logger, maxInFlight: Int = 1_000,
                monitor: DispatcherMonitor? = nil, otherEnvironmentRetry: OtherEnvironmentRetrySettings = OtherEnvironmentRetrySettings(),
                cancellations: CampaignCancellations = CampaignCancellations(), marksAcknowledgements: Bool = true,
                credentials: CredentialsStore? = nil, userPageSize: Int = 1_000) {
        let userPageSize = max(1, userPageSize)
        self.userPageSize = userPageSize
        self.cancellations = cancellations
        self.credentials = credentials
        self.monitor = monitor
        self.otherEnvironmentRetry = otherEnvironmentRetry
        self.budget = AsyncSemaphore(permits: maxInFlight)
        self.maxInFlight = maxInFlight
        self.sendLog = store.makeSendLogWriter(marksAcknowledgements: marksAcknowledgements)
        let parking = store.makePendingRetryStore()
        self.parking = parking
        self.progressLoader = Batcher(name: "request progress", metricLabel: "progress") { reads in
            // Read from the request's day partition of send_log_v2 when its created_at_ms gives it.
            let found = try await parking.progress(reads, limit: userPageSize)
            return reads.map { found[$0.requestID] ?? PendingRetryStore.RequestProgress() }
        }
        self.completedLoader = Batcher(name: "request completions look-up", metricLabel: "completions_lookup") { [store] requestIDs in
            let found = try await store.completedRequests(requestIDs)
            return requestIDs.map { found.contains($0) }
        }
        self.completionRecorder = Batcher(name: "request_completions", metricLabel: "completions") { [store] rows in
            try await store.recordCompletions(rows.map { ($0.requestID, $0.eventID, $0.status) })
            return rows.map { _ in () }
        }
        self.acknowledged = AcknowledgedReports()
        self.userTokensLoader = Batcher(name: "tokens by user", metricLabel: "user_tokens") { [store] reads in
            // One statement for the batch, at the largest limit asked; each read keeps its own.
            let found = try await store.activeTokens(ofUsers: reads.flatMap(\.users), limit: reads.map(\.limit).max() ?? 1)
            return reads.map { read in
                var tokens: [String: [StoredToken]] = [:]
                for user in read.users { tokens[user] = Array((found[user] ?? []).prefix(read.limit)) }
                return tokens
            }
        }
        self.tokensLoader = Batcher(name: "tokens by device token", metricLabel: "tokens") { [store] lists in
            let found = try await store.tokens(Array(Set(lists.joined())))
            return lists.map { tokens in
                var rows: [String: StoredToken] = [:]
                for token in tokens { rows[token] = found[token] }
                return rows
            }
        }
        self.store = store
        self.channelStore = ChannelStore(pool: store.pool)
        self.sender = sender
        self.feedback = feedback
        self.defaultEnvironment = defaultEnvironment
        self.clock = clock
        self.logger = logger
    }

    /// A `request_completions` row.
    struct CompletionRow: Sendable {
        var requestID: String
        var eventID: String
        /// `completed` or `cancelled`.
        var status: CampaignState
    }

    /// The immediate-request source: resolves a request that `SendRequestDecoder` accepted into one
    /// batch, sends it through the pipeline and completes it.
    /// - Parameters:
    ///   - template: the notification template `SendRequestDecoder`'s check built for `request`
    ///     (`CheckedSendRequest`); nil builds it here.
    ///   - consumedAtMs: when the record was consumed, for requests without `created_at_ms`.
    ///   - firstHandling: this handling recorded the request's fingerprint (`request_fingerprints`,
    ///     none was there): nothing of the request can be stored yet, since every row of a request is
    ///     written after its fingerprint, so its earlier progress is not read (docs/dispatcher-engine.md
    ///     "Records handled again"). False reads it.
    ///   - firstTargets: the request's first targets when they were read already (`lookUpFirstTargets`).
    ///   - retryContext: where a notification waiting for an APNs retry waits (its record's partition,
    ///     the cap on its uncommitted span); see `HotPathRetryWaiter`.
    ///   - shouldStop: asked before each notification starts; once it answers true, no further
    ///     notification starts, those in flight finish, and the outcome is `.abandoned`.
    /// - Returns: how the record's handling ended (`RecordOutcome`). A cancel (`CancelCheckPolicy`)
    ///   settles the tokens not yet sent SKIPPED with OUTCOME_REASON_CANCELLED and the RequestCompleted
    ///   says REQUEST_STATUS_CANCELLED.
    /// - Throws: only infrastructure errors (`PostgresError`, `KafkaError`) and `CancellationError`; the
    ///   caller retries the whole request, which is idempotent through `send_log` and `pending_retries`.
    func process(_ request: SendRequest, template checked: NotificationTemplate? = nil, consumedAtMs: Int64, firstHandling: Bool = false,
                 firstTargets: FirstTargets? = nil, retryContext: RetryContext = .unbounded(), shouldStop: @escaping @Sendable () -> Bool = { false }) async throws -> RecordOutcome {
        guard let notification = request.notification, let target = request.target else { return .finished }
        if case .channelID(let channelID) = target {
            return try await processBroadcast(
                request, channelID: channelID, notification: notification, consumedAtMs: consumedAtMs, firstHandling: firstHandling)
        }
        // Every line about this request carries its id and trace id (docs/observability.md).
        let logger = logger.with(["request_id": request.requestID, "trace_id": TraceParent(request.traceParent)?.traceID ?? ""])
        let template = try checked ?? NotificationTemplate(notification, requestID: request.requestID)
        let requestedAtMs = request.createdAtMs > 0 ? request.createdAtMs : consumedAtMs
        metrics.observe(.consumed, requestedAtMs: requestedAtMs, nowMs: consumedAtMs)
        // The look-ups are batched with those of other requests running at the same time. A request
        // handled before has its progress read beside its first tokens; the read also says whether
        // it finished before (request_completions). A first handling has none to read.
        let environment = notification.environment.apnsEnvironment
        let batch: DeliveryBatch, more: UserTokenPages?, progress: PendingRetryStore.RequestProgress
        let read = PendingRetryStore.ProgressRead(requestID: request.requestID, requestedAtMs: request.createdAtMs)
        switch (firstHandling, firstTargets) {
        case (true, let first?):
            (batch, more, progress) = (first.batch, first.more, PendingRetryStore.RequestProgress())
        case (true, nil):
            (batch, more) = try await resolveFirst(target, template: template, environment: environment)
            progress = PendingRetryStore.RequestProgress()
        case (false, let first?):
            (batch, more) = (first.batch, first.more)
            progress = try await progressLoader.submit(read)
        case (false, nil):
            async let progressLookup = progressLoader.submit(read)
            (batch, more) = try await resolveFirst(target, template: template, environment: environment)
            progress = try await progressLookup
        }
        metrics.observe(.resolved, requestedAtMs: requestedAtMs, nowMs: clock.nowMilliseconds())
        if progress.completed {
            // Finished before (its offset commit was lost, or the producer sent it twice): every report
            // and the RequestCompleted were acknowledged then; nothing is sent or published again.
            acknowledged.remove(requestID: request.requestID)
            logger.info("request already completed: not handled again", ["request_id": request.requestID])
            return .finished
        }
        let cancel = CancelCheckPolicy(cancellations: cancellations)
        let context = DeliveryContext(
            request: request, template: template, requestedAt: requestedAtMs,
            lane: .transactional, retryContext: retryContext,
            admission: AdmissionChain([
                ClassPriorityPolicy(gate: classPriority, workClass: more != nil || batch.count > userPageSize ? .bulk : .transactional),
                InFlightBudgetPolicy(budget: budget), cancel,
            ]),
            acks: Acknowledgements(),
            recorded: progress.recorded, parked: progress.parked, shouldStop: shouldStop)
        let result = try await deliverPages(
            first: batch, more: more, progress: progress, context: context, environment: environment)
        if result.abandoned {
            try await context.acks.waitForAll()
            // Every outcome recorded so far had its report acknowledged: the next owner need not
            // publish them again.
            try? await store.markAcknowledged(requestID: request.requestID)
            return .abandoned
        }
        metrics.observe(.sent, requestedAtMs: requestedAtMs, nowMs: clock.nowMilliseconds())
        if result.parked > 0 {
            // Some notifications wait in pending_retries: the RequestCompleted comes once the last
            // of them is recorded (docs/dispatcher-engine.md "When a request with parked
            // notifications completes"). The reports published so far must be acknowledged first.
            try await context.acks.waitForAll()
            try await parking.markRecordDone(requestID: request.requestID)
            logger.debug("request handed over to parked retries", ["request_id": request.requestID, "parked": "\(result.parked)"])
            try await completeParkedRequest(request.requestID)
            return .handedToParking
        }
        let completion = RequestCompletion(
            requestID: request.requestID, requestedAtMs: context.requestedAt, counts: result.counts,
            status: .final(cancelRequested: cancel.isCancelled(request.requestID)), lane: .transactional,
            traceParent: request.traceParent)
        try await complete(completion, acks: context.acks)
        logger.debug("request completed", [
            "total": "\(result.counts.processed)", "delivered": "\(result.counts.delivered)",
            "rejected": "\(result.counts.rejected)", "failed": "\(result.counts.failed)", "skipped": "\(result.counts.skipped)",
        ])
        return .finished
    }
}
