import APNs
import DispatcherStatus
import Foundation
import Postgres
import PushDomain
import PushMessages
import ServiceCore
import Synchronization

/// Fans one send request out to its device tokens, sends each notification, and publishes a
/// `DeliveryReport` per token and a `RequestCompleted` at the end.
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
    private let defaultEnvironment: APNsEnvironment
    let clock: any WallClock
    let logger: Logger
    private let monitor: DispatcherMonitor?
    let metrics = DispatcherMetrics.shared
    /// The apps that opted in to one try on the other APNs environment after `BadDeviceToken`.
    let otherEnvironmentRetry: OtherEnvironmentRetrySettings
    /// Notifications sent at once across every request of this processor.
    let budget: AsyncSemaphore
    private let sendLog: SendLogWriter
    /// One warning a few seconds about outcomes waiting for PostgreSQL, not one per notification.
    private let recordWarnings = Mutex(LogRateLimiter(interval: .seconds(5)))
    /// Notifications a SIGKILL can send twice: sent to Apple or answered, outcome not yet durable in
    /// `send_log` (the in-flight budget plus one unflushed `send_log` batch; docs/send-log.md).
    public var crashWindow: (inFlight: Int, unflushedBatch: Int) { (maxInFlight, sendLog.maxBatch) }
    private let maxInFlight: Int
    /// Parked notifications and the requests waiting for them.
    let parking: PendingRetryStore
    /// Batched look-ups (see `Batcher`; natural batching, no wait): what earlier deliveries left by
    /// request id (recorded outcomes and parked tokens), whether a request already completed, active
    /// tokens by user, rows by token.
    private let progressLoader: Batcher<String, PendingRetryStore.RequestProgress>
    private let completedLoader: Batcher<String, Bool>
    /// Writes `request_completions` rows of requests finishing together in one statement.
    private let completionRecorder: Batcher<CompletionRow, Void>
    /// Reports acknowledged in this process for requests not finished yet.
    let acknowledged: AcknowledgedReports
    private let userTokensLoader: Batcher<[String], [String: [StoredToken]]>
    private let tokensLoader: Batcher<[String], [String: StoredToken]>

    /// The flush loops of this processor's batched statements (`send_log` writes and the look-ups):
    /// they must run while the processor is used, and stop (gracefully) after everything that uses it.
    public var batchers: [any Service] { [sendLog, progressLoader, completedLoader, completionRecorder, userTokensLoader, tokensLoader] }

    /// - Parameter maxInFlight: notifications sent concurrently, across all requests this processor
    ///   handles at once (waiters are served in arrival order, so requests share it fairly). Default 1,000.
    /// - Parameter monitor: told of outcomes that blame Apple or our credentials (for `/readyz`'s body).
    /// - Parameter otherEnvironmentRetry: the apps that get one try on the other APNs environment after
    ///   `BadDeviceToken` (docs/semantics.md "The other environment after BadDeviceToken"); default none.
    public init(store: TokenStore, sender: any NotificationSender, feedback: FeedbackPublisher,
                defaultEnvironment: APNsEnvironment, clock: any WallClock, logger: Logger, maxInFlight: Int = 1_000,
                monitor: DispatcherMonitor? = nil, otherEnvironmentRetry: OtherEnvironmentRetrySettings = OtherEnvironmentRetrySettings()) {
        self.monitor = monitor
        self.otherEnvironmentRetry = otherEnvironmentRetry
        self.budget = AsyncSemaphore(permits: maxInFlight)
        self.maxInFlight = maxInFlight
        self.sendLog = store.makeSendLogWriter()
        let parking = store.makePendingRetryStore()
        self.parking = parking
        self.progressLoader = Batcher(name: "request progress") { requestIDs in
            let found = try await parking.progress(requestIDs: requestIDs)
            return requestIDs.map { found[$0] ?? PendingRetryStore.RequestProgress() }
        }
        self.completedLoader = Batcher(name: "request completions look-up") { [store] requestIDs in
            let found = try await store.completedRequests(requestIDs)
            return requestIDs.map { found.contains($0) }
        }
        self.completionRecorder = Batcher(name: "request_completions") { [store] rows in
            try await store.recordCompletions(rows.map { ($0.requestID, $0.eventID, $0.status) })
            return rows.map { _ in () }
        }
        self.acknowledged = AcknowledgedReports()
        self.userTokensLoader = Batcher(name: "tokens by user") { [store] lists in
            let found = try await store.activeTokens(ofUsers: Array(Set(lists.joined())))
            return lists.map { users in Dictionary(uniqueKeysWithValues: users.map { ($0, found[$0] ?? []) }) }
        }
        self.tokensLoader = Batcher(name: "tokens by device token") { [store] lists in
            let found = try await store.tokens(Array(Set(lists.joined())))
            return lists.map { tokens in
                var rows: [String: StoredToken] = [:]
                for token in tokens { rows[token] = found[token] }
                return rows
            }
        }
        self.store = store
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

    /// One token to send to, or an outcome known without sending.
    fileprivate enum Target {
        case send(StoredToken)
        case outcome(token: String, userID: String, environment: APNsEnvironment?, outcome: DeliveryOutcome, reason: OutcomeReason)
    }

    /// Processes a request that `SendRequestDecoder` accepted.
    /// - Parameter consumedAtMs: when the record was consumed, for requests without `created_at_ms`.
    /// - Parameter shouldStop: asked before each notification starts; once it answers true, no further
    ///   notification starts, those in flight finish, and `RecordAbandoned` is thrown.
    /// - Parameter retryContext: where a notification waiting for an APNs retry waits (its record's
    ///   partition, the cap on its uncommitted span); see `HotPathRetryWaiter`.
    /// - Throws: `RecordAbandoned` when stopped; otherwise only infrastructure errors (`PostgresError`, `KafkaError`); the caller retries the
    ///   whole request, which is idempotent through `send_log` and `pending_retries`.
    /// - Parameter cancelled: asked before each send (campaign hook, docs/campaigns.md "Cancellation"):
    ///   once it answers true, tokens not yet sent are settled SKIPPED with OUTCOME_REASON_CANCELLED and
    ///   the RequestCompleted says REQUEST_STATUS_CANCELLED.
    func process(_ request: SendRequest, consumedAtMs: Int64, retryContext: RetryContext = .unbounded(),
                 shouldStop: @Sendable () -> Bool = { false }, cancelled: @escaping @Sendable () -> Bool = { false }) async throws {
        guard let notification = request.notification, let target = request.target else { return }
        // Every line about this request carries its id and trace id (docs/observability.md).
        let logger = logger.with(["request_id": request.requestID, "trace_id": TraceParent(request.traceParent)?.traceID ?? ""])
        let template = try NotificationTemplate(notification, requestID: request.requestID)
        let requestedAt = request.createdAtMs > 0 ? request.createdAtMs : consumedAtMs
        // The look-ups are batched with those of other requests running at the same time.
        async let completedLookup = completedLoader.submit(request.requestID)
        async let progressLookup = progressLoader.submit(request.requestID)
        let targets = try await resolve(target, template: template, environment: notification.environment.apnsEnvironment)
        if try await completedLookup {
            // Finished before (its offset commit was lost, or the producer sent it twice): every report
            // and the RequestCompleted were acknowledged then; nothing is sent or published again.
            _ = try? await progressLookup
            acknowledged.remove(requestID: request.requestID)
            logger.info("request already completed: not handled again", ["request_id": request.requestID])
            return
        }
        let progress = try await progressLookup
        let recorded = progress.recorded

        var counts = RequestCompleted()
        counts.requestID = request.requestID
        counts.requestedAtMs = requestedAt
        counts.status = .completed
        // Tokens go out concurrently (the pool multiplexes them), within the process-wide budget;
        // each outcome is recorded in send_log before its report is published (in `deliver`).
        let tally = OutcomeTally(counts)
        // Reports are produced as outcomes are recorded; their acknowledgements are awaited together
        // (with the RequestCompleted's) before the request counts as finished.
        let acks = Acknowledgements()
        let activity = RecordActivity(retryContext)
        defer { activity.startingDone() }
        var abandoned = false
        try await withThrowingDiscardingTaskGroup { group in
            defer { activity.startingDone() }
            for target in targets {
                // Stopping (shutdown, revocation): no new notification starts; those in flight finish
                // and are recorded; the request stays unfinished and is read again.
                if shouldStop() { abandoned = true; break }
                let token: String
                switch target {
                case .send(let stored): token = stored.deviceToken
                case .outcome(let raw, _, _, _, _): token = raw
                }
                if progress.parked.contains(token) {
                    // Parked by an earlier delivery of this record: the parked path finishes it.
                    tally.countParked()
                    continue
                }
                let permit = NotificationPermit(budget)
                try await permit.acquire()
                if shouldStop() {
                    permit.release()
                    abandoned = true
                    break
                }
                let earlier = recorded[token]
                activity.notificationStarted()
                group.addTask {
                    defer {
                        permit.release()
                        activity.notificationEnded()
                    }
                    let outcome: DeliveryOutcome
                    if let earlier, let event = try? FeedbackEvent(protobufBytes: earlier.event),
                       case .deliveryReport(let report)? = event.event
                    {
                        // Done in an earlier delivery of this record: never sent again. Its report is
                        // published again unless Kafka is known to have acknowledged it.
                        if !earlier.acknowledged, !self.acknowledged.contains(requestID: request.requestID, token: token) {
                            acks.start { [feedback = self.feedback, acknowledged = self.acknowledged] in
                                try await feedback.publish(serialized: earlier.event, key: token, traceParent: event.traceParent)
                                acknowledged.insert(requestID: request.requestID, token: token)
                            }
                        }
                        outcome = report.outcome
                    } else {
                        // Campaign hook: a cancel seen on receipt stops sends that have not started.
                        var chosen = target
                        if case .send(let stored) = target, cancelled() {
                            chosen = .outcome(token: stored.deviceToken, userID: stored.userID, environment: stored.environment,
                                              outcome: .skipped, reason: .cancelled)
                        }
                        guard let report = try await self.deliver(
                            chosen, request: request, template: template, requestedAt: requestedAt, acks: acks,
                            permit: permit, retryContext: retryContext, activity: activity)
                        else {
                            tally.countParked()
                            return
                        }
                        self.noteFinal(report)
                        outcome = report.outcome
                    }
                    tally.count(outcome)
                }
            }
        }
        if abandoned {
            try await acks.waitForAll()
            // Every outcome recorded so far had its report acknowledged (the group waited for them):
            // the next owner need not publish them again.
            try? await store.markAcknowledged(requestID: request.requestID)
            throw RecordAbandoned()
        }
        if tally.parked > 0 {
            // Some notifications wait in pending_retries: the RequestCompleted comes once the last
            // of them is recorded (docs/dispatcher-engine.md "When a request with parked
            // notifications completes"). The reports published so far must be acknowledged first.
            try await acks.waitForAll()
            try await parking.markRecordDone(requestID: request.requestID)
            logger.debug("request handed over to parked retries", ["request_id": request.requestID, "parked": "\(tally.parked)"])
            try await completeParkedRequest(request.requestID)
            return
        }
        counts = tally.counts
        counts.completedAtMs = clock.nowMilliseconds()
        if cancelled() { counts.status = .cancelled }
        let completed = feedback.event(
            id: FeedbackEventID.requestCompleted(requestID: request.requestID), .requestCompleted(counts), traceParent: request.traceParent)
        let requestID = request.requestID
        let finalState: CampaignState = counts.status == .cancelled ? .cancelled : .completed
        if !acknowledged.contains(requestID: requestID, token: AcknowledgedReports.requestCompleted) {
            // The completion is recorded when Kafka acknowledges the RequestCompleted, even when this
            // handling was cancelled meanwhile (a lost partition: the record queued in the producer
            // still goes out), so that handling the request again publishes nothing.
            acks.start { [feedback, acknowledged, completionRecorder, logger] in
                try await feedback.publish(completed, key: requestID)
                acknowledged.insert(requestID: requestID, token: AcknowledgedReports.requestCompleted)
                do {
                    try await completionRecorder.submit(CompletionRow(requestID: requestID, eventID: completed.eventID, status: finalState))
                    acknowledged.remove(requestID: requestID)
                } catch {
                    // Finished all the same; only a redelivery to another process would publish again.
                    logger.warning("recording the completion failed", ["request_id": requestID, "error": "\(error)"])
                }
            }
        }
        try await acks.waitForAll()
        logger.debug("request completed", [
            "total": "\(counts.total)", "delivered": "\(counts.delivered)",
            "rejected": "\(counts.rejected)", "failed": "\(counts.failed)", "skipped": "\(counts.skipped)",
        ])
    }

    private func resolve(_ target: SendRequest.Target, template: NotificationTemplate, environment: APNsEnvironment?) async throws -> [Target] {
        let kind = template.request(for: NotificationTemplate.placeholderToken).requiredTokenKind.rawValue
        switch target {
        case .userIDs(let users):
            var seen = Set<String>()
            let ids = users.userIDs.filter { !$0.isEmpty && seen.insert($0).inserted }
            let byUser = try await userTokensLoader.submit(ids)
            var tokens: [StoredToken] = []
            for user in ids {
                for token in byUser[user] ?? [] where token.bundleID == template.bundleID && token.tokenKind == kind {
                    if let environment, token.environment != environment { continue }
                    tokens.append(token)
                }
            }
            tokens.sort { $0.deviceToken < $1.deviceToken }
            return tokens.map(Target.send)
        case .deviceTokens(let list):
            var result: [Target] = []
            var valid: [String] = []
            var seen = Set<String>()
            for raw in list.deviceTokens {
                guard let token = try? DeviceToken(validating: raw).hex else {
                    if seen.insert(raw).inserted {
                        result.append(.outcome(token: raw, userID: "", environment: environment, outcome: .rejected, reason: .invalidDeviceToken))
                    }
                    continue
                }
                if seen.insert(token).inserted { valid.append(token) }
            }
            let stored = try await tokensLoader.submit(valid)
            for token in valid {
                guard let row = stored[token] else {
                    // Never registered: the request's environment, or the configured default, decides.
                    result.append(.send(StoredToken(
                        deviceToken: token, bundleID: template.bundleID, environment: environment ?? defaultEnvironment, tokenKind: kind)))
                    continue
                }
                let skip: OutcomeReason? =
                    if !row.isActive { .tokenInactive }
                    else if row.bundleID != template.bundleID { .notForTopic }
                    else if let environment, row.environment != environment { .environmentMismatch }
                    else if row.tokenKind != kind { .tokenKindMismatch }
                    else { nil }
                if let skip {
                    result.append(.outcome(token: token, userID: row.userID, environment: row.environment, outcome: .skipped, reason: skip))
                } else {
                    result.append(.send(row))
                }
            }
            return result
        case .audience:
            return []
        }
    }

    /// Sends (or settles without sending) one target, records the outcome and publishes its report.
    /// - Returns: the report, or nil when the notification was parked for a later retry.
    /// Counts a final outcome this owner reached (not one republished from `send_log`) wherever the
    /// notification came from, a transactional request or a campaign page: `push_notifications_total`
    /// and readiness's Apple-trouble detail.
    private func noteFinal(_ report: DeliveryReport) {
        metrics.count(report)
        monitor?.noteAppleTrouble(report)
    }

    private func deliver(_ target: Target, request: SendRequest, template: NotificationTemplate, requestedAt: Int64,
                         acks: Acknowledgements, permit: NotificationPermit, retryContext: RetryContext,
                         activity: RecordActivity) async throws -> DeliveryReport? {
        var report = DeliveryReport()
        report.requestID = request.requestID
        report.bundleID = template.bundleID
        report.pushType = PushType(template.pushType)
        report.requestedAtMs = requestedAt
        report.collapseID = template.collapseID ?? ""
        switch target {
        case .outcome(let token, let userID, let environment, let outcome, let reason):
            report.deviceToken = token
            report.userID = userID
            report.environment = environment.map(Environment.init) ?? .unspecified
            report.outcome = outcome
            report.outcomeReason = reason
            report.completedAtMs = clock.nowMilliseconds()
        case .send(let stored):
            report.deviceToken = stored.deviceToken
            report.userID = stored.userID
            report.environment = Environment(stored.environment)
            let token = try DeviceToken(validating: stored.deviceToken)
            let apnsRequest = template.request(for: token)
            report.apnsID = apnsRequest.apnsID?.uuidString ?? ""
            if case .at(let seconds) = template.expiration, seconds * 1000 <= clock.nowMilliseconds() {
                // Its apns-expiration passed while it waited (a Kafka backlog, an outage): Apple would
                // store it for no one; it is not sent.
                report.outcome = .failed
                report.outcomeReason = .expired
                report.completedAtMs = clock.nowMilliseconds()
                return try await publishOutcome(report, traceParent: request.traceParent, acks: acks)
            }
            report.sentAtMs = clock.nowMilliseconds()
            let deadline = sender.retryDeadline(for: apnsRequest)
            let parkedReport = report
            let waiter = HotPathRetryWaiter(permit: permit, context: retryContext, activity: activity, logger: logger) { [parking] delay, attempts, reason in
                var pending = parkedReport
                pending.attempts = UInt32(clamping: attempts)
                let retry = PendingRetry(
                    request: apnsRequest, environment: stored.environment, report: pending, traceParent: request.traceParent,
                    retryDeadline: deadline, attempts: attempts, lastReason: reason.metricLabel)
                try await parking.park(retry, delay: delay)
            }
            guard let settled = try await sendAndSettle(
                apnsRequest, environment: stored.environment, report: report, earlierAttempts: 0,
                options: APNsSendOptions(waiter: waiter, retryDeadline: deadline), requestID: request.requestID, traceParent: request.traceParent,
                scope: Self.scope(of: request))
            else { return nil }
            report = settled
        }
        return try await publishOutcome(report, traceParent: request.traceParent, acks: acks)
    }

    /// Sends one notification and fills `report` with the outcome (not yet recorded).
    /// - Parameters:
    ///   - earlierAttempts: attempts made by earlier deliveries (a parked notification), added to
    ///     the client's count.
    ///   - scope: the environments the request lets the notification reach, for the other-environment
    ///     try after `BadDeviceToken` (`.unknown` for a parked notification: no try).
    /// - Returns: the settled report, or nil when the waiter parked the notification (`RetryParked`).
    /// - Throws: `CancellationError` when stopped while sending (not an outcome: the record stays
    ///   unfinished); `PostgresError`/`KafkaError` from deactivating a token.
    func sendAndSettle(_ apnsRequest: APNsRequest, environment: APNsEnvironment, report: DeliveryReport, earlierAttempts: Int,
                       options: APNsSendOptions, requestID: String, traceParent: String,
                       scope: OtherEnvironmentTry.RequestScope) async throws -> DeliveryReport? {
        var report = report
        do {
            let response = try await sender.send(apnsRequest, environment: environment, options: options)
            report.attempts = UInt32(clamping: earlierAttempts + response.attempts)
            report.completedAtMs = clock.nowMilliseconds()
            report.httpStatus = UInt32(response.status)
            report.apnsID = response.apnsID ?? report.apnsID
            report.apnsUniqueID = response.apnsUniqueID ?? ""
            report.apnsReason = response.reason?.rawValue ?? ""
            switch response.action {
            case _ where response.isSuccess:
                report.outcome = .delivered
            case .deactivateToken where response.reason == .badDeviceToken:
                // docs/semantics.md "The other environment after BadDeviceToken": one try there for
                // an app that opted in; else (or refused there too) deactivated as for every app.
                switch try await tryOtherEnvironment(
                    apnsRequest, refusedIn: environment, report: report, scope: scope, retryDeadline: options.retryDeadline) {
                case .delivered(let delivered):
                    report = delivered
                case .notDelivered(let extraAttempts):
                    report.attempts = UInt32(clamping: Int(report.attempts) + extraAttempts)
                    report.outcome = .rejected
                    try await invalidate(report.deviceToken, response: response, report: report, traceParent: traceParent)
                }
            case .deactivateToken:
                report.outcome = .rejected
                try await invalidate(report.deviceToken, response: response, report: report, traceParent: traceParent)
            case .reject:
                report.outcome = .rejected
            case _ where response.hasUnknownReason:
                report.outcome = .rejected
            default:
                // The client retried as far as the rules allow and gave up: final.
                report.outcome = .failed
                report.outcomeReason = .retryHorizonExceeded
            }
            if let reason = response.reason, Self.isProviderTokenFault(reason) { report.outcomeReason = .providerTokenFault }
        } catch is RetryParked {
            return nil
        } catch let error as CancellationError {
            throw error
        } catch where Task.isCancelled {
            // Stopped while sending: not an outcome. The record stays unfinished and is read again.
            throw CancellationError()
        } catch {
            report.attempts = UInt32(clamping: earlierAttempts + ((error as? APNsError)?.attempts ?? 1))
            report.completedAtMs = clock.nowMilliseconds()
            report.outcomeReason = Self.outcomeReason(for: error)
            report.outcome = report.outcomeReason == .invalidRequest ? .rejected : .failed
            logger.warning("APNs send failed", [
                "request_id": requestID, "apns_id": report.apnsID, "token": Logger.shortened(token: report.deviceToken), "error": "\(error)",
            ])
        }
        return report
    }

    /// The dispatcher's reason for a send that threw (docs/contracts.md "Outcome reasons"): a stream
    /// APNs left unanswered, our own credentials, our own validation, or else the connection.
    static func outcomeReason(for error: any Error) -> OutcomeReason {
        guard let error = error as? APNsError else { return .connectionError }
        if error.isStreamTimeout { return .streamTimeout }
        switch error.code {
        case .missingCredentials, .invalidSigningKey, .signingFailed, .invalidCertificate, .invalidPKCS12:
            return .providerTokenFault
        case .invalidRequest, .invalidDeviceToken, .payloadDoesNotMatchPushType, .topicDoesNotMatchPushType:
            return .invalidRequest
        case .retryHorizonExceeded:
            return .retryHorizonExceeded
        default:
            return .connectionError
        }
    }

    /// Apple's reasons that blame our provider token or certificate, not the notification: the APNs
    /// module's one list, `APNsReason.isProviderTokenFault`.
    static func isProviderTokenFault(_ reason: APNsReason) -> Bool { reason.isProviderTokenFault }

    /// Records the final outcome in `send_log` (batched, see `SendLogWriter`), then publishes its
    /// report (in that order: a redelivered request re-publishes what was recorded instead of sending
    /// again). When the row already existed, the stored report is published, never a new outcome.
    func publishOutcome(_ report: DeliveryReport, traceParent: String, acks: Acknowledgements) async throws -> DeliveryReport {
        var report = report
        report.eventID = FeedbackEventID.deliveryReport(requestID: report.requestID, deviceToken: report.deviceToken)
        let event = feedback.event(id: report.eventID, .deliveryReport(report), traceParent: traceParent)
        let bytes = event.serializedBytes()
        let stored = try await recordRetrying(report, event: bytes)
        let key = report.deviceToken
        let requestID = report.requestID
        acks.start { [feedback, acknowledged] in
            try await feedback.publish(serialized: stored, key: key, traceParent: traceParent)
            acknowledged.insert(requestID: requestID, token: key)
        }
        if stored != bytes, let event = try? FeedbackEvent(protobufBytes: stored), case .deliveryReport(let first)? = event.event {
            // Another delivery of this request recorded this token first: its outcome stands.
            return first
        }
        return report
    }

    /// Records an outcome Apple already gave, waiting out a PostgreSQL outage (capped exponential
    /// back-off, 50 ms to 2 s) instead of failing the request: a failed request would be handled
    /// again and this notification sent to Apple a second time. Stops only when the task is cancelled
    /// (the notification is then sent again by the next delivery, as after a crash) or when
    /// PostgreSQL refuses the row for its content (SQLSTATE class 22 or 23, rethrown).
    /// - Throws: `PostgresError` caused by the data; `CancellationError`.
    private func recordRetrying(_ report: DeliveryReport, event: [UInt8]) async throws -> [UInt8] {
        var delay = Duration.milliseconds(50)
        var failures = 0
        while true {
            do {
                return try await sendLog.record(report, event: event)
            } catch let error as PostgresError where !error.isCausedByTheData {
                try Task.checkCancellation()
                failures += 1
                if recordWarnings.withLock({ $0.admit("send_log", now: .now) }) != nil {
                    logger.warning("recording an outcome failed: retrying (Apple already answered)", [
                        "request_id": report.requestID, "failures": "\(failures)", "error": "\(error)",
                    ])
                }
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// docs/semantics.md "Token hygiene": deactivate unless registered again after Apple's timestamp, and
    /// announce it with `TokenInvalidated`.
    private func invalidate(_ token: String, response: APNsResponse, report: DeliveryReport, traceParent: String) async throws {
        let now = clock.nowMilliseconds()
        let invalidatedAt = response.timestampMilliseconds ?? report.sentAtMs
        guard let row = try await store.deactivate(
            token: token, reason: response.reason?.rawValue ?? "HTTP \(response.status)",
            invalidatedAtMs: invalidatedAt, nowMs: now)
        else { return }
        var invalidated = TokenInvalidated(
            deviceToken: row.deviceToken, bundleID: row.bundleID, environment: Environment(row.environment),
            userID: row.userID, installationID: row.installationID)
        invalidated.apnsReason = response.reason?.rawValue ?? ""
        invalidated.apnsTimestampMs = response.timestampMilliseconds ?? 0
        invalidated.requestID = report.requestID
        let id = FeedbackEventID.tokenInvalidated(
            deviceToken: invalidated.deviceToken, apnsTimestampMs: invalidated.apnsTimestampMs, requestID: invalidated.requestID)
        try await feedback.publish(feedback.event(id: id, .tokenInvalidated(invalidated), traceParent: traceParent), key: row.deviceToken)
        logger.info("token deactivated", [
            "token": Logger.shortened(token: row.deviceToken), "reason": invalidated.apnsReason, "apns_id": report.apnsID,
        ])
    }
}

/// Thrown when a request stopped before all of its notifications were sent (graceful shutdown or
/// revocation): its record is not finished, so its offset is never stored.
public struct RecordAbandoned: Error, CustomStringConvertible {
    public init() {}
    public var description: String { "record abandoned before it finished (stopping or revoked)" }
}

/// Counts of a request's outcomes, updated by its concurrent notification tasks.
private final class OutcomeTally: Sendable {
    private let state: Mutex<RequestCompleted>

    init(_ initial: RequestCompleted) { state = Mutex(initial) }

    func count(_ outcome: DeliveryOutcome) {
        state.withLock { counts in
            counts.total += 1
            switch outcome {
            case .delivered: counts.delivered += 1
            case .rejected: counts.rejected += 1
            case .failed: counts.failed += 1
            default: counts.skipped += 1
            }
        }
    }

    var counts: RequestCompleted { state.withLock { $0 } }

    /// A notification left to the parked path (no outcome here).
    func countParked() { parkedCount.add(1, ordering: .relaxed) }

    /// Notifications parked by this delivery or an earlier one.
    var parked: Int { parkedCount.load(ordering: .relaxed) }
    private let parkedCount = Atomic<Int>(0)
}

// MARK: - Campaign hook (docs/campaigns.md)

extension SendRequestProcessor {
    /// The tokens a campaign's page sends to, or a scheduled request's targets.
    struct CampaignPage: Sendable {
        fileprivate let targets: [Target]
        var count: Int { targets.count }
        /// The page's device tokens (lowercase hex, or the raw text of an invalid one).
        var tokens: [String] {
            targets.map { target in
                switch target {
                case .send(let stored): stored.deviceToken
                case .outcome(let token, _, _, _, _): token
                }
            }
        }
    }

    /// A page of audience rows (already active, of the right app, kind and environment).
    static func campaignPage(_ tokens: [StoredToken]) -> CampaignPage {
        CampaignPage(targets: tokens.map(Target.send))
    }

    /// The targets of a scheduled `device_tokens` or `user_ids` request, resolved exactly as an
    /// immediate request's.
    /// - Throws: `PostgresError`.
    func campaignPage(resolving request: SendRequest) async throws -> CampaignPage {
        guard let notification = request.notification, let target = request.target else { return CampaignPage(targets: []) }
        let template = try NotificationTemplate(notification, requestID: request.requestID)
        return CampaignPage(targets: try await resolve(target, template: template, environment: notification.environment.apnsEnvironment))
    }

    /// Sends one page of a campaign through the same path as any request (validation, APNs client,
    /// `send_log` record before the report), without a `RequestCompleted`.
    ///
    /// - Tokens already recorded in `recorded` are not sent again: their outcome is counted and
    ///   their report republished unless known acknowledged.
    /// - Once `cancelled()` answers true (asked before each send), the remaining tokens are settled
    ///   SKIPPED with OUTCOME_REASON_CANCELLED, recorded and reported, never sent.
    /// - Once `shouldStop()` answers true (lease lost, stopping), nothing more starts; those in flight
    ///   finish and are recorded; `abandoned` is true and the page must not be checkpointed.
    /// - Sends take a permit of `lane` (the campaign lane, not the transactional budget) and wait
    ///   for `limiter` (the app's token bucket).
    /// - With a `turn`, the page starts sending only once the page before it started its last send
    ///   (`turn.after` fired), and fires `turn.started` when its own last send started (or it ended
    ///   early): pages in flight send in audience order, each behind the tail of the one before.
    /// - Returns: the page's counts (complete unless abandoned) and whether it was abandoned; every
    ///   report published was acknowledged by Kafka before it returns.
    /// - Throws: infrastructure errors (`PostgresError`, `KafkaError`); the page can be redone.
    func sendCampaignPage(
        _ page: CampaignPage, request: SendRequest, requestedAt: Int64, recorded: [String: TokenStore.RecordedOutcome],
        lane: AsyncSemaphore, limiter: AppRateLimiter, turn: (after: OneShot?, started: OneShot)? = nil,
        cancelled: @escaping @Sendable () -> Bool, shouldStop: @escaping @Sendable () -> Bool
    ) async throws -> (counts: CampaignCounts, abandoned: Bool) {
        defer { turn?.started.fire() }
        guard let notification = request.notification else { return (CampaignCounts(), false) }
        let template = try NotificationTemplate(notification, requestID: request.requestID)
        let counts = CampaignTally()
        let acks = Acknowledgements()
        let context = RetryContext.unbounded()
        var abandoned = false
        try await withThrowingDiscardingTaskGroup { group in
            await turn?.after?.wait()
            defer { turn?.started.fire() }
            for target in page.targets {
                if shouldStop() { abandoned = true; break }
                let token: String
                switch target {
                case .send(let stored): token = stored.deviceToken
                case .outcome(let raw, _, _, _, _): token = raw
                }
                if let earlier = recorded[token], let event = try? FeedbackEvent(protobufBytes: earlier.event),
                   case .deliveryReport(let report)? = event.event
                {
                    if !earlier.acknowledged {
                        acks.start { [feedback] in try await feedback.publish(serialized: earlier.event, key: token) }
                    }
                    counts.withLock { $0.count(report.outcome) }
                    continue
                }
                // The campaign lane's permit, released while a send waits for an APNs retry (a campaign
                // is durable by itself: its notifications wait on timers and never park).
                let permit = NotificationPermit(lane)
                if case .send = target {
                    if !cancelled() {
                        try await permit.acquire()
                        do {
                            try await limiter.acquire(template.bundleID)
                        } catch {
                            permit.release()
                            throw error
                        }
                        if shouldStop() { permit.release(); abandoned = true; break }
                    }
                }
                group.addTask {
                    defer { permit.release() }
                    var chosen = target
                    // Asked once more when the task runs: with a thousand sends starting at once, a
                    // task can start well after it was added, and a cancel seen meanwhile stops it.
                    if case .send(let stored) = chosen, cancelled() {
                        permit.release()
                        chosen = .outcome(token: stored.deviceToken, userID: stored.userID, environment: stored.environment,
                                          outcome: .skipped, reason: .cancelled)
                    }
                    let activity = RecordActivity(context)
                    activity.notificationStarted()
                    defer { activity.notificationEnded() }
                    guard let report = try await self.deliver(
                        chosen, request: request, template: template, requestedAt: requestedAt, acks: acks,
                        permit: permit, retryContext: context, activity: activity)
                    else { return }
                    self.noteFinal(report)
                    counts.withLock { $0.count(report.outcome) }
                }
            }
        }
        try await acks.waitForAll()
        return (counts.withLock { $0 }, abandoned)
    }
}

/// A campaign page's counts, updated by its concurrent notification tasks.
private final class CampaignTally: Sendable {
    private let state = Mutex(CampaignCounts())
    func withLock<T>(_ body: (inout CampaignCounts) -> T) -> T { state.withLock { body(&$0) } }
}
