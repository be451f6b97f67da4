import Postgres

extension TokenStore {
    /// The serialized `FeedbackEvent`s already recorded for several requests, in one query.
    /// - Parameter requestIDs: request ids; duplicates are harmless.
    /// - Returns: by request id, then by device token (lowercase hex); requests with no recorded
    ///   outcome are absent.
    /// - Throws: `PostgresError`.
    public func recordedOutcomes(requestIDs: [String]) async throws -> [String: [String: [UInt8]]] {
        guard !requestIDs.isEmpty else { return [:] }
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT request_id, device_token, report FROM send_log WHERE request_id = ANY($1::text[])",
                [.string(PostgresArrayLiteral.text(requestIDs))], prepared: true)
        }
        var result: [String: [String: [UInt8]]] = [:]
        for row in rows {
            if let requestID = try row.string("request_id"), let token = try row.string("device_token"),
               let report = try row.bytes("report") {
                result[requestID, default: [:]][token] = report
            }
        }
        return result
    }
}
