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
                "SELECT request_id, device_token, report, acknowledged FROM send_log WHERE request_id = ANY($1::text[])",
                [.string(PostgresArrayLiteral.text(requestIDs))], prepared: true)
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

    /// The active tokens of several users (any app, kind and environment), in one query, by user id,
    /// each list ordered by token.
    /// - Throws: `PostgresError`.
    public func activeTokens(ofUsers userIDs: [String]) async throws -> [String: [StoredToken]] {
        guard !userIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT \(Self.columns) FROM device_tokens WHERE user_id = ANY($1::text[]) AND status = 'active' ORDER BY device_token",
                [.string(PostgresArrayLiteral.text(userIDs))], prepared: true)
        }
        var result: [String: [StoredToken]] = [:]
        for row in rows {
            let token = try Self.storedToken(row)
            result[token.userID, default: []].append(token)
        }
        return result
    }
}
