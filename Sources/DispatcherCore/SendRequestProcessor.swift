import APNs
import Foundation
import PushMessages
import ServiceCore
import Synchronization

/// Fans one send request out to its device tokens, sends each notification, and publishes a
/// `DeliveryReport` per token and a `RequestCompleted` at the end.
///
/// Outcomes are recorded in `send_log` before their report is published: a redelivered request
/// re-publishes the recorded report (same event id) instead of sending again, so a push goes out
/// twice only if the process died between Apple's answer and the record.
public final class SendRequestProcessor: Sendable {
    private let store: TokenStore
    private let sender: any NotificationSender
    private let feedback: FeedbackPublisher
    private let defaultEnvironment: APNsEnvironment
    private let clock: any WallClock
    private let logger: Logger
    /// Notifications sent at once across every request of this processor.
    private let budget: AsyncSemaphore
    private let sendLog: SendLogWriter
    /// Batched look-ups (see `BatchLoader`): recorded outcomes by request id, active tokens by user,
    /// rows by token.
    private let recordedLoader: BatchLoader<String, [String: TokenStore.RecordedOutcome]>
    private let userTokensLoader: BatchLoader<[String], [String: [StoredToken]]>
    private let tokensLoader: BatchLoader<[String], [String: StoredToken]>

    /// - Parameter maxInFlight: notifications sent concurrently, across all requests this processor
    ///   handles at once (waiters are served in arrival order, so requests share it fairly). Default 1,000.
    public init(store: TokenStore, sender: any NotificationSender, feedback: FeedbackPublisher,
                defaultEnvironment: APNsEnvironment, clock: any WallClock, logger: Logger, maxInFlight: Int = 1_000) {
        self.budget = AsyncSemaphore(permits: maxInFlight)
        self.sendLog = store.makeSendLogWriter()
        self.recordedLoader = BatchLoader { [store] requestIDs in
            let found = try await store.recordedOutcomeStates(requestIDs: requestIDs)
            return requestIDs.map { found[$0] ?? [:] }
        }
        self.userTokensLoader = BatchLoader { [store] lists in
            let found = try await store.activeTokens(ofUsers: Array(Set(lists.joined())))
            return lists.map { users in Dictionary(uniqueKeysWithValues: users.map { ($0, found[$0] ?? []) }) }
        }
        self.tokensLoader = BatchLoader { [store] lists in
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

    /// One token to send to, or an outcome known without sending.
    fileprivate enum Target {
        case send(StoredToken)
        case outcome(token: String, userID: String, environment: APNsEnvironment?, outcome: DeliveryOutcome, reason: OutcomeReason)
    }

    /// Processes a request that `SendRequestDecoder` accepted.
    /// - Parameter consumedAtMs: when the record was consumed, for requests without `created_at_ms`.
    /// - Parameter shouldStop: asked before each notification starts; once it answers true, no further
    ///   notification starts, those in flight finish, and `RecordAbandoned` is thrown.
    /// - Throws: `RecordAbandoned` when stopped; otherwise only infrastructure errors (`PostgresError`, `KafkaError`); the caller retries the
    ///   whole request, which is idempotent through `send_log`.
    /// - Parameter cancelled: asked before each send (campaign hook, docs/campaigns.md "Cancellation"):
    ///   once it answers true, tokens not yet sent are settled SKIPPED with OUTCOME_REASON_CANCELLED and
    ///   the RequestCompleted says REQUEST_STATUS_CANCELLED.
    public func process(_ request: SendRequest, consumedAtMs: Int64, shouldStop: @Sendable () -> Bool = { false },
                        cancelled: @escaping @Sendable () -> Bool = { false }) async throws {
        guard let notification = request.notification, let target = request.target else { return }
        let template = try NotificationTemplate(notification)
        let requestedAt = request.createdAtMs > 0 ? request.createdAtMs : consumedAtMs
        // Both look-ups are batched with those of other requests running at the same time.
        async let recordedLookup = recordedLoader.load(request.requestID)
        let targets = try await resolve(target, template: template, environment: notification.environment.apnsEnvironment)
        let recorded = try await recordedLookup

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
        var abandoned = false
        try await withThrowingDiscardingTaskGroup { group in
            for target in targets {
                // Stopping (shutdown, revocation): no new notification starts; those in flight finish
                // and are recorded; the request stays unfinished and is read again.
                if shouldStop() { abandoned = true; break }
                try await budget.acquire()
                if shouldStop() {
                    budget.release()
                    abandoned = true
                    break
                }
                let token: String
                switch target {
                case .send(let stored): token = stored.deviceToken
                case .outcome(let raw, _, _, _, _): token = raw
                }
                let earlier = recorded[token]
                group.addTask {
                    defer { self.budget.release() }
                    let outcome: DeliveryOutcome
                    if let earlier, let event = try? FeedbackEvent(protobufBytes: earlier.event),
                       case .deliveryReport(let report)? = event.event
                    {
                        // Done in an earlier delivery of this record: never sent again. Its report is
                        // published again unless Kafka is known to have acknowledged it.
                        if !earlier.acknowledged {
                            acks.start { [feedback = self.feedback] in try await feedback.publish(serialized: earlier.event, key: token) }
                        }
                        outcome = report.outcome
                    } else {
                        // Campaign hook: a cancel seen on receipt stops sends that have not started.
                        var chosen = target
                        if case .send(let stored) = target, cancelled() {
                            chosen = .outcome(token: stored.deviceToken, userID: stored.userID, environment: stored.environment,
                                              outcome: .skipped, reason: .cancelled)
                        }
                        outcome = try await self.deliver(chosen, request: request, template: template, requestedAt: requestedAt, acks: acks).outcome
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
        counts = tally.counts
        counts.completedAtMs = clock.nowMilliseconds()
        if cancelled() { counts.status = .cancelled }
        let completed = feedback.event(
            id: FeedbackEventID.requestCompleted(requestID: request.requestID), .requestCompleted(counts), traceParent: request.traceParent)
        acks.start { [feedback] in try await feedback.publish(completed, key: request.requestID) }
        try await acks.waitForAll()
        logger.debug("request completed", [
            "request_id": request.requestID, "total": "\(counts.total)", "delivered": "\(counts.delivered)",
            "rejected": "\(counts.rejected)", "failed": "\(counts.failed)", "skipped": "\(counts.skipped)",
        ])
    }

    private func resolve(_ target: SendRequest.Target, template: NotificationTemplate, environment: APNsEnvironment?) async throws -> [Target] {
        let kind = template.request(for: NotificationTemplate.placeholderToken).requiredTokenKind.rawValue
        switch target {
        case .userIDs(let users):
            var seen = Set<String>()
            let ids = users.userIDs.filter { !$0.isEmpty && seen.insert($0).inserted }
            let byUser = try await userTokensLoader.load(ids)
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
            let stored = try await tokensLoader.load(valid)
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
    private func deliver(_ target: Target, request: SendRequest, template: NotificationTemplate, requestedAt: Int64,
                         acks: Acknowledgements) async throws -> DeliveryReport {
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
            do {
                let response = try await sender.send(apnsRequest, environment: stored.environment)
                report.attempts = UInt32(clamping: response.attempts)
                report.completedAtMs = clock.nowMilliseconds()
                report.httpStatus = UInt32(response.status)
                report.apnsID = response.apnsID ?? report.apnsID
                report.apnsUniqueID = response.apnsUniqueID ?? ""
                report.apnsReason = response.reason?.rawValue ?? ""
                switch response.action {
                case _ where response.isSuccess:
                    report.outcome = .delivered
                case .deactivateToken:
                    report.outcome = .rejected
                    try await invalidate(stored, response: response, report: report, traceParent: request.traceParent)
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
            } catch let error as CancellationError {
                throw error
            } catch where Task.isCancelled {
                // Stopped while sending: not an outcome. The record stays unfinished and is read again.
                throw CancellationError()
            } catch {
                report.attempts = UInt32(clamping: (error as? APNsError)?.attempts ?? 1)
                report.completedAtMs = clock.nowMilliseconds()
                report.outcomeReason = Self.outcomeReason(for: error)
                report.outcome = report.outcomeReason == .invalidRequest ? .rejected : .failed
                logger.warning("APNs send failed", ["request_id": request.requestID, "error": "\(error)"])
            }
        }
        return try await publishOutcome(report, traceParent: request.traceParent, acks: acks)
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
        default:
            return .connectionError
        }
    }

    /// Apple's reasons that blame our provider token or certificate, not the notification
    /// ("Handling notification responses from APNs", status 403 and 429 TooManyProviderTokenUpdates).
    static func isProviderTokenFault(_ reason: APNsReason) -> Bool {
        switch reason {
        case .invalidProviderToken, .expiredProviderToken, .missingProviderToken, .tooManyProviderTokenUpdates,
             .badCertificate, .badCertificateEnvironment, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken:
            true
        default:
            false
        }
    }

    /// Records the final outcome in `send_log` (batched, see `SendLogWriter`), then publishes its
    /// report (in that order: a redelivered request re-publishes what was recorded instead of sending
    /// again). When the row already existed, the stored report is published, never a new outcome.
    private func publishOutcome(_ report: DeliveryReport, traceParent: String, acks: Acknowledgements) async throws -> DeliveryReport {
        var report = report
        report.eventID = FeedbackEventID.deliveryReport(requestID: report.requestID, deviceToken: report.deviceToken)
        let event = feedback.event(id: report.eventID, .deliveryReport(report), traceParent: traceParent)
        let bytes = event.serializedBytes()
        let stored = try await sendLog.record(report, event: bytes)
        let key = report.deviceToken
        acks.start { [feedback] in try await feedback.publish(serialized: stored, key: key) }
        if stored != bytes, let event = try? FeedbackEvent(protobufBytes: stored), case .deliveryReport(let first)? = event.event {
            // Another delivery of this request recorded this token first: its outcome stands.
            return first
        }
        return report
    }

    /// docs/semantics.md "Token hygiene": deactivate unless registered again after Apple's timestamp, and
    /// announce it with `TokenInvalidated`.
    private func invalidate(_ stored: StoredToken, response: APNsResponse, report: DeliveryReport, traceParent: String) async throws {
        let now = clock.nowMilliseconds()
        let invalidatedAt = response.timestampMilliseconds ?? report.sentAtMs
        guard let row = try await store.deactivate(
            token: stored.deviceToken, reason: response.reason?.rawValue ?? "HTTP \(response.status)",
            invalidatedAtMs: invalidatedAt, nowMs: now)
        else { return }
        var invalidated = TokenInvalidated()
        invalidated.deviceToken = row.deviceToken
        invalidated.bundleID = row.bundleID
        invalidated.environment = Environment(row.environment)
        invalidated.userID = row.userID
        invalidated.installationID = row.installationID
        invalidated.apnsReason = response.reason?.rawValue ?? ""
        invalidated.apnsTimestampMs = response.timestampMilliseconds ?? 0
        invalidated.requestID = report.requestID
        let id = FeedbackEventID.tokenInvalidated(
            deviceToken: invalidated.deviceToken, apnsTimestampMs: invalidated.apnsTimestampMs, requestID: invalidated.requestID)
        try await feedback.publish(feedback.event(id: id, .tokenInvalidated(invalidated), traceParent: traceParent), key: row.deviceToken)
        logger.info("token deactivated", ["token": row.deviceToken, "reason": invalidated.apnsReason])
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
        let template = try NotificationTemplate(notification)
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
    /// - Returns: the page's counts (complete unless abandoned) and whether it was abandoned; every
    ///   report published was acknowledged by Kafka before it returns.
    /// - Throws: infrastructure errors (`PostgresError`, `KafkaError`); the page can be redone.
    func sendCampaignPage(
        _ page: CampaignPage, request: SendRequest, requestedAt: Int64, recorded: [String: TokenStore.RecordedOutcome],
        lane: AsyncSemaphore, limiter: AppRateLimiter,
        cancelled: @escaping @Sendable () -> Bool, shouldStop: @escaping @Sendable () -> Bool
    ) async throws -> (counts: CampaignCounts, abandoned: Bool) {
        guard let notification = request.notification else { return (CampaignCounts(), false) }
        let template = try NotificationTemplate(notification)
        let counts = CampaignTally()
        let acks = Acknowledgements()
        var abandoned = false
        try await withThrowingDiscardingTaskGroup { group in
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
                var settled = target
                var holdsPermit = false
                if case .send(let stored) = target {
                    if !cancelled() {
                        try await lane.acquire()
                        holdsPermit = true
                        do {
                            try await limiter.acquire(template.bundleID)
                        } catch {
                            lane.release()
                            throw error
                        }
                        if shouldStop() { lane.release(); abandoned = true; break }
                    }
                    // Asked again after waiting for the lane and the bucket: a cancel stops sends at once.
                    if cancelled() {
                        if holdsPermit { lane.release(); holdsPermit = false }
                        settled = .outcome(token: stored.deviceToken, userID: stored.userID, environment: stored.environment,
                                           outcome: .skipped, reason: .cancelled)
                    }
                }
                let permit = holdsPermit
                let chosen = settled
                group.addTask {
                    defer { if permit { lane.release() } }
                    let report = try await self.deliver(chosen, request: request, template: template, requestedAt: requestedAt, acks: acks)
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
