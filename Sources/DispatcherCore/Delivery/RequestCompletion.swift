import DispatcherStatus
import PushMessages

/// What a request's `RequestCompleted` says, built in this one place for every source: an immediate
/// request, a request whose last parked notification settled, a campaign or scheduled request, and a
/// send request refused at intake (`rejected`).
struct RequestCompletion: Sendable {
    var requestID: String
    /// `created_at_ms` of the request, else when its record was consumed (ms since the epoch).
    var requestedAtMs: Int64
    var counts: CampaignCounts
    /// `completed`, or `cancelled` by a `CancelRequest`.
    var status: CampaignState
    var lane: DeliveryLane
    var traceParent: String

    /// The event's body, completed at `completedAtMs` (ms since the epoch).
    func event(completedAtMs: Int64) -> RequestCompleted {
        var completed = RequestCompleted()
        completed.requestID = requestID
        completed.requestedAtMs = requestedAtMs
        completed.status = status.requestStatus
        completed.total = UInt32(clamping: counts.processed)
        completed.delivered = UInt32(clamping: counts.delivered)
        completed.rejected = UInt32(clamping: counts.rejected)
        completed.failed = UInt32(clamping: counts.failed)
        completed.skipped = UInt32(clamping: counts.skipped)
        completed.completedAtMs = completedAtMs
        return completed
    }

    /// The `RequestCompleted` of a send request refused at intake: no counts, the refusal in `error`.
    static func rejected(requestID: String, error: String, completedAtMs: Int64) -> RequestCompleted {
        var completed = RequestCompleted()
        completed.requestID = requestID
        completed.error = error
        completed.completedAtMs = completedAtMs
        return completed
    }

    /// The counts of `outcomes` (outcome name, as `send_log.outcome` holds it, to number of tokens).
    static func counts(_ outcomes: [String: Int]) -> CampaignCounts {
        let tally = ParkedRequestCompletion.counts(outcomes)
        var counts = CampaignCounts()
        counts.processed = Int64(tally.total)
        counts.delivered = Int64(tally.delivered)
        counts.rejected = Int64(tally.rejected)
        counts.failed = Int64(tally.failed)
        counts.skipped = Int64(tally.skipped)
        return counts
    }
}
