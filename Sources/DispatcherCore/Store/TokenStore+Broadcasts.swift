import Postgres

// MARK: Broadcasts in send_log (docs/live-activities.md "Never broadcast twice", docs/send-log.md)

extension TokenStore {
    /// The `send_log.outcome` of a broadcast's intent row: written before the request goes to Apple,
    /// replaced by the final outcome once Apple answered. A redelivery that finds it knows the
    /// broadcast may have reached Apple and never sends it again.
    public static let pendingBroadcastOutcome = "PENDING"

    /// A broadcast's `send_log` row: its outcome (`PENDING` or a `DeliveryOutcome` name) and the
    /// serialized `FeedbackEvent` it publishes (for `PENDING`, the `FAILED` `OUTCOME_REASON_UNCONFIRMED`
    /// report a redelivery publishes).
    public struct BroadcastLogRow: Sendable, Equatable {
        /// `PENDING`, `DELIVERED`, `REJECTED` or `FAILED`.
        public var outcome: String
        /// The serialized `FeedbackEvent` (a `BroadcastReport`).
        public var event: [UInt8]
    }

    /// The row of (`requestID`, `key`), if any.
    /// - Parameter key: the `device_token` column of a broadcast: `channel:` + the channel id.
    /// - Throws: `PostgresError`.
    public func broadcastRow(requestID: String, key: String) async throws -> BroadcastLogRow? {
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT outcome, report FROM send_log WHERE request_id = $1 AND device_token = $2", [.string(requestID), .string(key)])
        }
        guard let row = rows.first, let outcome = try row.string("outcome"), let event = try row.bytes("report") else { return nil }
        return BroadcastLogRow(outcome: outcome, event: event)
    }

    /// Inserts a broadcast's row (the pending intent, or a refusal's final outcome) unless the key has
    /// one already.
    /// - Returns: nil when this call inserted it; otherwise the row already there (left unchanged).
    /// - Throws: `PostgresError`.
    public func insertBroadcastRow(
        requestID: String, key: String, eventID: String, outcome: String, httpStatus: Int, apnsReason: String, apnsID: String,
        attempts: Int, event: [UInt8]
    ) async throws -> BroadcastLogRow? {
        for _ in 0..<3 {
            let inserted = try await pool.withConnection { connection in
                try await connection.query("""
                    INSERT INTO send_log (request_id, device_token, event_id, outcome, http_status, apns_reason, apns_id, attempts, report)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                    ON CONFLICT (request_id, device_token) DO NOTHING
                    RETURNING request_id
                    """,
                    [.string(requestID), .string(key), .string(eventID), .string(outcome), .int(httpStatus), .string(apnsReason),
                     .string(apnsID), .int(attempts), .bytes(event)])
            }
            if !inserted.isEmpty { return nil }
            // The row that was there (it can vanish in between only to the retention job: insert again).
            if let existing = try await broadcastRow(requestID: requestID, key: key) { return existing }
        }
        throw PostgresError(code: .unsupportedResult, message: "send_log row of broadcast \(requestID) neither inserted nor found")
    }

    /// Sets a broadcast's final outcome on its row (the intent written before the Apple request).
    /// - Throws: `PostgresError`.
    public func settleBroadcastRow(
        requestID: String, key: String, outcome: String, httpStatus: Int, apnsReason: String, apnsID: String, attempts: Int, event: [UInt8]
    ) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute("""
                UPDATE send_log SET outcome = $3, http_status = $4, apns_reason = $5, apns_id = $6, attempts = $7, report = $8,
                       completed_at = now()
                 WHERE request_id = $1 AND device_token = $2
                """,
                [.string(requestID), .string(key), .string(outcome), .int(httpStatus), .string(apnsReason), .string(apnsID),
                 .int(attempts), .bytes(event)])
        }
    }

    /// A pending intent found by a redelivery becomes `FAILED`: its stored report (`FAILED`,
    /// `OUTCOME_REASON_UNCONFIRMED`) is the outcome now, and the request's counts see it.
    /// - Throws: `PostgresError`.
    public func settleUnconfirmedBroadcast(requestID: String, key: String) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute(
                "UPDATE send_log SET outcome = 'FAILED', completed_at = now() WHERE request_id = $1 AND device_token = $2 AND outcome = $3",
                [.string(requestID), .string(key), .string(Self.pendingBroadcastOutcome)])
        }
    }
}
