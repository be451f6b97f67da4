import Postgres

/// Reads what PostgreSQL holds about a request id and answers through `RequestStatusDecision`
/// (docs/campaigns.md "Request status"). Used by `CampaignStore.status(requestID:)`, the dispatcher's
/// `GET /v1/requests/<id>` and `pushctl status`, which has a single connection rather than a pool.
public enum RequestStatusReader {
    /// The status of `requestID`, in at most two statements on `connection`: the campaign row; without
    /// one, `request_completions`, `pending_requests`, `pending_retries`, `cancellations` and the
    /// `send_log` counts.
    /// - Returns: nil when no table knows the request.
    /// - Throws: `PostgresError`.
    public static func status(requestID: String, on connection: PostgresConnection) async throws -> RequestStatusReport? {
        let campaignRows = try await connection.query("""
            SELECT status, send_at_ms, processed, delivered, rejected, failed, skipped,
                   cancel_requested_at_ms IS NOT NULL AS cancel_requested,
                   COALESCE(started_at_ms, 0) AS started_at_ms, COALESCE(completed_at_ms, 0) AS completed_at_ms
              FROM campaigns WHERE request_id = $1
            """, [.string(requestID)], prepared: true)
        if let row = campaignRows.first {
            var facts = RequestStatusDecision.CampaignFacts(state: CampaignState(rawValue: try row.string("status") ?? "") ?? .accepted)
            facts.sendAtMs = try row.int64("send_at_ms") ?? 0
            facts.counts = try CampaignCounts(row: row)
            facts.cancelRequested = try row.bool("cancel_requested") ?? false
            facts.startedAtMs = try row.int64("started_at_ms") ?? 0
            facts.completedAtMs = try row.int64("completed_at_ms") ?? 0
            return RequestStatusDecision.report(requestID: requestID, campaign: facts, immediate: nil)
        }
        // One row whatever the tables hold (an aggregate without GROUP BY).
        let rows = try await connection.query("""
            SELECT (SELECT status FROM request_completions WHERE request_id = $1) AS completion,
                   (SELECT (extract(epoch FROM completed_at) * 1000)::bigint FROM request_completions WHERE request_id = $1)
                       AS completed_at_ms,
                   EXISTS (SELECT 1 FROM pending_requests WHERE request_id = $1) AS pending_request,
                   (SELECT count(*) FROM pending_retries WHERE request_id = $1) AS parked,
                   EXISTS (SELECT 1 FROM cancellations WHERE request_id = $1) AS cancel_requested,
                   count(*) FILTER (WHERE outcome <> 'PENDING') AS processed,
                   count(*) FILTER (WHERE outcome = 'PENDING') AS pending_broadcasts,
                   count(*) FILTER (WHERE outcome = 'DELIVERED') AS delivered,
                   count(*) FILTER (WHERE outcome = 'REJECTED') AS rejected,
                   count(*) FILTER (WHERE outcome = 'FAILED') AS failed,
                   count(*) FILTER (WHERE outcome NOT IN ('DELIVERED', 'REJECTED', 'FAILED', 'PENDING')) AS skipped
              FROM send_log_all WHERE request_id = $1
            """, [.string(requestID)], prepared: true)
        guard let row = rows.first else { return nil }
        var facts = RequestStatusDecision.ImmediateFacts()
        facts.completion = try row.string("completion").map { CampaignState(rawValue: $0) ?? .completed }
        facts.completedAtMs = try row.int64("completed_at_ms") ?? 0
        facts.pendingRequest = try row.bool("pending_request") ?? false
        facts.parked = try row.int64("parked") ?? 0
        facts.pendingBroadcast = (try row.int64("pending_broadcasts") ?? 0) > 0
        facts.cancelRequested = try row.bool("cancel_requested") ?? false
        facts.counts = try CampaignCounts(row: row)
        return RequestStatusDecision.report(requestID: requestID, campaign: nil, immediate: facts)
    }
}
