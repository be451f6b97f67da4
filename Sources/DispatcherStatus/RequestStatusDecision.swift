/// Decides a request's status from what PostgreSQL holds about it (docs/campaigns.md "Request
/// status"), without I/O: `RequestStatusReader` reads the facts, this type answers.
///
/// - A `campaigns` row answers alone: its status (`accepted`, `scheduled`, `running`, `completed`,
///   `cancelled`), checkpointed counts, `send_at_ms`, cancel flag and times.
/// - Otherwise the request is immediate (sent while its Kafka record was held):
///   - a `request_completions` row → `completed` or `cancelled` (as its `RequestCompleted` said), with
///     the counts of its `send_log` rows; `cancel_requested` from the `cancellations` table;
///   - else outcomes in `send_log`, a `pending_requests` row, parked notifications or a broadcast's
///     `PENDING` intent row → `running`;
///   - else nothing is known: nil ("not found"). An immediate request is never reported `accepted`
///     or `scheduled`: until the dispatcher handles its record, only Kafka holds it. Rows are deleted
///     after `PUSH_SEND_LOG_RETENTION_H` (immediate requests) and `PUSH_CAMPAIGN_RETENTION_DAYS`
///     (finished campaigns), so a request that old is not found either.
public enum RequestStatusDecision {
    /// The campaign row's fields that the answer uses.
    public struct CampaignFacts: Sendable, Equatable {
        public var state: CampaignState
        public var sendAtMs: Int64 = 0
        public var counts = CampaignCounts()
        public var cancelRequested = false
        public var startedAtMs: Int64 = 0
        public var completedAtMs: Int64 = 0

        /// - Parameter state: the row's status.
        public init(state: CampaignState) { self.state = state }
    }

    /// What the tables of immediate requests hold about one request id.
    public struct ImmediateFacts: Sendable, Equatable {
        /// The `request_completions` row's status (`completed` or `cancelled`); nil without a row.
        public var completion: CampaignState?
        /// When the completion was recorded, ms since the epoch.
        public var completedAtMs: Int64 = 0
        /// A `pending_requests` row exists (the request has or had parked notifications).
        public var pendingRequest = false
        /// Rows of the request in `pending_retries`.
        public var parked: Int64 = 0
        /// Its `send_log` rows by outcome.
        public var counts = CampaignCounts()
        /// A `cancellations` row exists (a `CancelRequest` for it was recorded). Alone it does not make
        /// the request known: a cancel may come before its request.
        public var cancelRequested = false

        public init() {}

        /// Whether any table knows the request.
        /// A broadcast of the request was sent and its outcome is not recorded yet (its `send_log`
        /// intent row is `PENDING`, docs/live-activities.md): running, no outcome counted.
        public var pendingBroadcast = false
        public var isEmpty: Bool { completion == nil && !pendingRequest && !pendingBroadcast && parked == 0 && counts.processed == 0 }
    }

    /// The answer for `requestID`.
    /// - Parameters:
    ///   - campaign: the campaign row, when there is one (it wins over everything else).
    ///   - immediate: what the immediate request tables hold (read only when there is no campaign row).
    /// - Returns: nil when neither knows the request.
    public static func report(requestID: String, campaign: CampaignFacts?, immediate: ImmediateFacts?) -> RequestStatusReport? {
        if let campaign {
            var report = RequestStatusReport(requestID: requestID, state: campaign.state, isCampaign: true)
            report.sendAtMs = campaign.sendAtMs
            report.counts = campaign.counts
            report.cancelRequested = campaign.cancelRequested
            report.startedAtMs = campaign.startedAtMs
            report.completedAtMs = campaign.state.isOpen ? 0 : campaign.completedAtMs
            return report
        }
        guard let immediate, !immediate.isEmpty else { return nil }
        let state: CampaignState =
            switch immediate.completion {
            case .cancelled?: .cancelled
            case .some: .completed
            case nil: .running
            }
        var report = RequestStatusReport(requestID: requestID, state: state, isCampaign: false)
        report.counts = immediate.counts
        report.parked = state == .running ? immediate.parked : 0
        report.cancelRequested = immediate.cancelRequested
        report.completedAtMs = immediate.completion == nil ? 0 : immediate.completedAtMs
        return report
    }
}
