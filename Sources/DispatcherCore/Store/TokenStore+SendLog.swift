import Postgres

extension TokenStore {
    /// The outcomes already recorded for several requests, in one query.
    /// - Parameter requestIDs: request ids; duplicates are harmless.
    /// - Returns: by request id, then by device token (lowercase hex); requests with no recorded
    ///   outcome are absent.
    /// - Throws: `PostgresError`.
    public func recordedOutcomeStates(requestIDs: [String]) async throws -> [String: [String: RecordedOutcome]] {
        guard !requestIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT request_id, device_token, report, acknowledged FROM send_log_all WHERE request_id = ANY($1::text[])",
                [.textArray(requestIDs)], prepared: true)
        }
        var result: [String: [String: RecordedOutcome]] = [:]
        for row in rows {
            if let requestID = try row.string("request_id"), let token = try row.string("device_token"),
               let report = try row.bytes("report") {
                result[requestID, default: [:]][token] = RecordedOutcome(event: report, acknowledged: try row.bool("acknowledged") ?? false)
            }
        }
        return result
    }

    /// The serialized `FeedbackEvent`s already recorded for several requests, in one query.
    /// - Returns: by request id, then by device token; see `recordedOutcomeStates(requestIDs:)`.
    /// - Throws: `PostgresError`.
    public func recordedOutcomes(requestIDs: [String]) async throws -> [String: [String: [UInt8]]] {
        try await recordedOutcomeStates(requestIDs: requestIDs).mapValues { $0.mapValues(\.event) }
    }

    /// The first page of active tokens of several users (any app, kind and environment), in one
    /// query, by user id: at most `limit` tokens of each user, the first in token order (a user with
    /// exactly `limit` may have more: `activeTokens(ofUser:after:limit:)` reads on). Served by the
    /// index `device_tokens_user_pages (user_id, device_token) WHERE status = 'active'`.
    /// - Parameters:
    ///   - userIDs: user ids; duplicates are harmless.
    ///   - limit: tokens per user, at least 1.
    /// - Throws: `PostgresError`.
    public func activeTokens(ofUsers userIDs: [String], limit: Int) async throws -> [String: [StoredToken]] {
        guard !userIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                SELECT t.* FROM (SELECT DISTINCT unnest($1::text[]) AS user_id) AS u
                 CROSS JOIN LATERAL (
                    SELECT \(Self.columns) FROM device_tokens d
                     WHERE d.user_id = u.user_id AND d.status = 'active' ORDER BY d.device_token LIMIT $2) AS t
                """,
                [.textArray(userIDs), .int(max(1, limit))], prepared: true)
        }
        var result: [String: [StoredToken]] = [:]
        for row in rows {
            let token = try Self.storedToken(row)
            result[token.userID, default: []].append(token)
        }
        for (user, tokens) in result where !tokens.isSorted { result[user] = tokens.sorted { $0.deviceToken < $1.deviceToken } }
        return result
    }

    /// The next page of one user's active tokens (any app, kind and environment): those whose token
    /// sorts after `cursor`, in token order, at most `limit` (keyset paging over
    /// `device_tokens_user_pages`, as an audience pages over `device_tokens_campaign_audience`).
    /// - Throws: `PostgresError`.
    public func activeTokens(ofUser userID: String, after cursor: String, limit: Int) async throws -> [StoredToken] {
        try await pool.withConnection { connection in
            try await connection.query(
                "SELECT \(Self.columns) FROM device_tokens WHERE user_id = $1 AND status = 'active' AND device_token > $2 ORDER BY device_token LIMIT $3",
                [.string(userID), .string(cursor), .int(max(1, limit))], prepared: true)
        }.map(Self.storedToken)
    }
}

private extension [StoredToken] {
    var isSorted: Bool { zip(self, dropFirst()).allSatisfy { $0.deviceToken < $1.deviceToken } }
}
