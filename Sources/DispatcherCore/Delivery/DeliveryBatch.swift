import DispatcherStatus
import PushDomain
import PushMessages

/// One notification of a batch: a token to send to, or an outcome known without sending (an
/// invalid, inactive or mismatched token).
enum DeliveryTarget: Sendable {
    case send(StoredToken)
    case outcome(token: String, userID: String, environment: APNsEnvironment?, outcome: DeliveryOutcome, reason: OutcomeReason)

    /// The device token (lowercase hex, or the raw text of an invalid one).
    var token: String {
        switch self {
        case .send(let stored): stored.deviceToken
        case .outcome(let token, _, _, _, _): token
        }
    }

    /// The same notification settled with `outcome` instead of sent.
    func settled(_ outcome: DeliveryOutcome, _ reason: OutcomeReason) -> DeliveryTarget {
        switch self {
        case .send(let stored):
            .outcome(token: stored.deviceToken, userID: stored.userID, environment: stored.environment, outcome: outcome, reason: reason)
        case .outcome(let token, let userID, let environment, _, _):
            .outcome(token: token, userID: userID, environment: environment, outcome: outcome, reason: reason)
        }
    }
}

/// The targets the pipeline's stages take at once (docs/dispatcher-engine.md "One delivery
/// pipeline"): an immediate request's resolved targets (a single-token request is a batch of one),
/// a campaign page, or a scheduled request's targets.
struct DeliveryBatch: Sendable {
    let targets: [DeliveryTarget]
    var count: Int { targets.count }
    /// The batch's device tokens (lowercase hex, or the raw text of an invalid one).
    var tokens: [String] { targets.map(\.token) }
}

/// What the pipeline made of one batch.
struct BatchResult: Sendable {
    /// Final outcomes reached or found recorded, counted once per token.
    var counts = CampaignCounts()
    /// Notifications parked (by this delivery or an earlier one): their outcome comes from the
    /// parked path.
    var parked = 0
    /// Whether the batch stopped before every notification started (see `RecordOutcome.abandoned`).
    var abandoned = false
}
