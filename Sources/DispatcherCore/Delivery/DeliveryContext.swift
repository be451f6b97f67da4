import PushMessages
import ServiceCore

/// The lane a request's notifications travel in: the label of `push_request_duration_seconds`.
enum DeliveryLane: String, Sendable {
    /// Immediate requests (and their parked notifications), within the process-wide budget.
    case transactional
    /// Campaigns and scheduled requests, within the campaign lane (`PUSH_CAMPAIGN_MAX_IN_FLIGHT`).
    case campaign
}

/// Everything the pipeline's stages need about the source of one batch, in one value instead of
/// flags passed as closures (docs/dispatcher-engine.md "One delivery pipeline").
struct DeliveryContext: Sendable {
    /// The request the notifications belong to, and its validated notification.
    var request: SendRequest
    var template: NotificationTemplate
    /// `requested_at_ms` of the reports (the request's `created_at_ms`, else when it was consumed).
    var requestedAt: Int64
    var lane: DeliveryLane
    /// Where a notification waiting for an APNs retry waits (see `HotPathRetryWaiter`).
    var retryContext: RetryContext
    /// Asked in order before each notification starts.
    var admission: AdmissionChain
    /// The Kafka acknowledgements of the reports (and the `RequestCompleted`) published so far.
    let acks: Acknowledgements
    /// Outcomes earlier deliveries recorded, by device token: never sent again; their report is
    /// published again unless Kafka is known to have acknowledged it.
    var recorded: [String: TokenStore.RecordedOutcome] = [:]
    /// Tokens parked by an earlier delivery of this request: the parked path finishes them.
    var parked: Set<String> = []
    /// Once true (shutdown, revocation, a lost lease), no further notification starts; those in
    /// flight finish and are recorded, and the batch is abandoned.
    var shouldStop: @Sendable () -> Bool = { false }
    /// For pages sent in order: the batch starts only once `after` fired (the batch before it started
    /// its last send) and fires `started` once its own last send started or it ended early.
    var turn: (after: OneShot?, started: OneShot)?

    /// The candidate `target` is to the admission policies.
    func candidate(_ target: DeliveryTarget) -> AdmissionCandidate {
        let sends = if case .send = target { true } else { false }
        return AdmissionCandidate(requestID: request.requestID, bundleID: template.bundleID, sends: sends)
    }
}
