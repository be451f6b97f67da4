import DispatcherStatus
import Postgres

extension TokenStore {
    /// Records that a send request finished: every outcome recorded and its `RequestCompleted`
    /// acknowledged by Kafka (table `request_completions`). Recording it twice is harmless.
    /// - Parameters:
    ///   - requestID: the request id.
    ///   - eventID: the `RequestCompleted` event's id (`FeedbackEventID.requestCompleted`).
    ///   - status: what the `RequestCompleted` said, `completed` or `cancelled` (read back by the
    ///     request status, docs/campaigns.md "Request status").
    /// - Throws: `PostgresError`.
    public func recordCompletion(requestID: String, eventID: String, status: CampaignState = .completed) async throws {
        try await recordCompletions([(requestID, eventID, status)])
    }

    /// Records many completions in one statement (`INSERT … SELECT FROM unnest(…)`); see
    /// `recordCompletion(requestID:eventID:status:)`. A request id listed twice is recorded once.
    /// - Parameter completions: (request id, `RequestCompleted` event id, `completed` or `cancelled`).
    /// - Throws: `PostgresError`.
    public func recordCompletions(_ completions: [(requestID: String, eventID: String, status: CampaignState)]) async throws {
        guard !completions.isEmpty else { return }
        _ = try await pool.withConnection { connection in
            try await connection.execute(
                """
                INSERT INTO request_completions (request_id, event_id, status)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT (request_id) DO NOTHING
                """,
                [.textArray(completions.map(\.requestID)),
                 .textArray(completions.map(\.eventID)),
                 .textArray(completions.map { $0.status == .cancelled ? "cancelled" : "completed" })],
                prepared: true)
        }
    }

    /// Which of `requestIDs` finished earlier (see `recordCompletion(requestID:eventID:)`), in one query.
    /// - Throws: `PostgresError`.
    public func completedRequests(_ requestIDs: [String]) async throws -> Set<String> {
        guard !requestIDs.isEmpty else { return [] }
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT request_id FROM request_completions WHERE request_id = ANY($1::text[])",
                [.textArray(requestIDs)], prepared: true)
        }
        return Set(try rows.compactMap { try $0.string("request_id") })
    }
}
