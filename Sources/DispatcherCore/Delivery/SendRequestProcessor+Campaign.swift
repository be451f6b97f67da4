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
    ///   their report republished unless known acknowledged. Tokens in `parked` wait in
    ///   `pending_retries` already: the parked path finishes them.
    /// - With `parkAfter`, a notification whose retry wait would keep the page unfinished longer than
    ///   that since it started is parked in `pending_retries` (`RetryContext.campaignPage`); the page
    ///   finishes without it and its outcome is not in the page's counts
    ///   (`waitForParkedNotifications`). Without, retries wait on timers in the page.
    /// - A cancelled page's remaining tokens are settled SKIPPED with OUTCOME_REASON_CANCELLED,
    ///   recorded and reported, never sent.
    /// - Once `shouldStop()` answers true (lease lost, stopping), nothing more starts; those in flight
    ///   finish and are recorded; `abandoned` is true and the page must not be checkpointed.
    /// - With a `turn`, the page starts sending only once the page before it started its last send
    ///   (`turn.after` fired), and fires `turn.started` when its own last send started (or it ended
    ///   early): pages in flight send in audience order, each behind the tail of the one before.
    /// - Returns: the page's counts (complete unless abandoned; without its parked notifications) and
    ///   whether it was abandoned; every report published was acknowledged by Kafka before it returns.
    /// - Throws: infrastructure errors (`PostgresError`, `KafkaError`); the page can be redone.
    func sendCampaignPage(
        _ page: consuming DeliveryBatch, request: SendRequest, requestedAt: Int64, recorded: [String: TokenStore.RecordedOutcome],
        parked: Set<String> = [], parkAfter: Duration? = nil, lane: AsyncSemaphore, limiter: AppRateLimiter,
        turn: (after: OneShot?, started: OneShot)? = nil,
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
            request: request, template: template, requestedAt: requestedAt, lane: .campaign,
            retryContext: parkAfter.map { RetryContext.campaignPage(parkingAfter: $0) } ?? .unbounded(),
            admission: AdmissionChain([
                ClassPriorityPolicy(gate: classPriority, workClass: .campaign),
                CancelCheckPolicy(cancellations: cancellations, alsoCancelled: cancelled),
                InFlightBudgetPolicy(budget: lane, budgetsSettlements: false),
                AppRateLimitPolicy(limiter: limiter),
            ]),
            acks: Acknowledgements(),
            recorded: recorded, parked: parked, shouldStop: shouldStop, turn: turn)
        let result = try await deliver(consume page, context)
        try await context.acks.waitForAll()
        return (result.counts, result.abandoned)
    }

    /// How the wait for a campaign's parked notifications ended.
    enum ParkedCampaignNotifications: Sendable, Equatable {
        /// None of its notifications was ever parked: the pages' counts are the campaign's.
        case neverParked
        /// Every parked notification has its outcome: the campaign's counts, from `send_log`.
        case settled(CampaignCounts)
        /// `shouldStop()` answered true first.
        case stopped
    }

    /// Waits until no notification of campaign `requestID` is parked any more, polling every
    /// `interval`. A parked notification's page finished without it, so once any was parked (its
    /// `pending_requests` row says so, whichever holder parked it) the campaign's counts are read
    /// from `send_log`, where the parked path records the outcomes. The row is left for
    /// `forgetParkedCampaign` once the campaign is closed.
    /// - Throws: `PostgresError`, `CancellationError`.
    func waitForParkedNotifications(
        ofCampaign requestID: String, interval: Duration, shouldStop: @Sendable () -> Bool
    ) async throws -> ParkedCampaignNotifications {
        while true {
            guard let found = try await parking.completion(requestID: requestID) else { return .neverParked }
            if found.state.parkedRemaining == 0 {
                return .settled(RequestCompletion.counts(try await parking.outcomeCounts(requestID: requestID)))
            }
            if shouldStop() { return .stopped }
            try await Task.sleep(for: interval)
        }
    }

    /// Forgets that campaign `requestID` had parked notifications, once it is closed.
    /// - Throws: `PostgresError`.
    func forgetParkedCampaign(_ requestID: String) async throws {
        try await parking.forgetRequest(requestID: requestID)
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
