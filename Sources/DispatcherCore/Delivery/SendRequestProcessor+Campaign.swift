import DispatcherStatus
import PushMessages
import ServiceCore

// MARK: - The campaign source (docs/campaigns.md)

extension SendRequestProcessor {
    /// A page of audience rows (already active, of the right app, kind and environment).
    static func campaignPage(_ tokens: [StoredToken]) -> DeliveryBatch {
        DeliveryBatch(targets: tokens.map(DeliveryTarget.send))
    }

    /// The targets of a scheduled `device_tokens` or `user_ids` request, resolved exactly as an
    /// immediate request's.
    /// - Throws: `PostgresError`.
    func campaignPage(resolving request: SendRequest) async throws -> DeliveryBatch {
        guard let notification = request.notification, let target = request.target else { return DeliveryBatch(targets: []) }
        let template = try NotificationTemplate(notification, requestID: request.requestID)
        return try await resolve(target, template: template, environment: notification.environment.apnsEnvironment)
    }

    /// Sends one page of a campaign through the pipeline (`deliver`) like any batch, without a
    /// `RequestCompleted`. Its admission: class priority (`.campaign`: behind transactional
    /// notifications waiting for their budget), the cancel check (the process-wide cancels, or `cancelled()`),
    /// then a permit of `lane` (the campaign lane, not the transactional budget), then the app's token
    /// bucket (`limiter`); settlements take neither.
    ///
    /// - Tokens already recorded in `recorded` are not sent again: their outcome is counted and
    ///   their report republished unless known acknowledged.
    /// - A cancelled page's remaining tokens are settled SKIPPED with OUTCOME_REASON_CANCELLED,
    ///   recorded and reported, never sent.
    /// - Once `shouldStop()` answers true (lease lost, stopping), nothing more starts; those in flight
    ///   finish and are recorded; `abandoned` is true and the page must not be checkpointed.
    /// - With a `turn`, the page starts sending only once the page before it started its last send
    ///   (`turn.after` fired), and fires `turn.started` when its own last send started (or it ended
    ///   early): pages in flight send in audience order, each behind the tail of the one before.
    /// - Returns: the page's counts (complete unless abandoned) and whether it was abandoned; every
    ///   report published was acknowledged by Kafka before it returns.
    /// - Throws: infrastructure errors (`PostgresError`, `KafkaError`); the page can be redone.
    func sendCampaignPage(
        _ page: consuming DeliveryBatch, request: SendRequest, requestedAt: Int64, recorded: [String: TokenStore.RecordedOutcome],
        lane: AsyncSemaphore, limiter: AppRateLimiter, turn: (after: OneShot?, started: OneShot)? = nil,
        cancelled: @escaping @Sendable () -> Bool, shouldStop: @escaping @Sendable () -> Bool
    ) async throws -> (counts: CampaignCounts, abandoned: Bool) {
        guard let notification = request.notification else {
            turn?.started.fire()
            return (CampaignCounts(), false)
        }
        let template: NotificationTemplate
        do {
            template = try NotificationTemplate(notification, requestID: request.requestID)
        } catch {
            turn?.started.fire()
            throw error
        }
        let context = DeliveryContext(
            request: request, template: template, requestedAt: requestedAt, lane: .campaign, retryContext: .unbounded(),
            admission: AdmissionChain([
                ClassPriorityPolicy(gate: classPriority, workClass: .campaign),
                CancelCheckPolicy(cancellations: cancellations, alsoCancelled: cancelled),
                InFlightBudgetPolicy(budget: lane, budgetsSettlements: false),
                AppRateLimitPolicy(limiter: limiter),
            ]),
            acks: Acknowledgements(),
            recorded: recorded, shouldStop: shouldStop, turn: turn)
        let result = try await deliver(consume page, context)
        try await context.acks.waitForAll()
        return (result.counts, result.abandoned)
    }

    /// Completes a campaign or scheduled request: its `RequestCompleted` (campaign lane), acknowledged.
    /// - Returns: the event's body as published.
    /// - Throws: `KafkaError`.
    func completeCampaign(_ request: SendRequest, requestedAtMs: Int64, counts: CampaignCounts, state: CampaignState) async throws
        -> RequestCompleted
    {
        try await publishCompleted(RequestCompletion(
            requestID: request.requestID, requestedAtMs: requestedAtMs, counts: counts, status: state, lane: .campaign,
            traceParent: request.traceParent))
    }
}
