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
        _ = try await pool.withConnection { connection in
            try await connection.execute(
                "INSERT INTO request_completions (request_id, event_id, status) VALUES ($1, $2, $3) ON CONFLICT (request_id) DO NOTHING",
                [.string(requestID), .string(eventID), .string(status == .cancelled ? "cancelled" : "completed")])
        }
    }

    /// Which of `requestIDs` finished earlier (see `recordCompletion(requestID:eventID:)`), in one query.
    /// - Throws: `PostgresError`.
    public func completedRequests(_ requestIDs: [String]) async throws -> Set<String> {
        guard !requestIDs.isEmpty else { return [] }
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT request_id FROM request_completions WHERE request_id = ANY($1::text[])",
                [.string(PostgresArrayLiteral.text(requestIDs))], prepared: true)
        }
        return Set(try rows.compactMap { try $0.string("request_id") })
    }
}
