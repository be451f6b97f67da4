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
                "SELECT outcome, report FROM send_log_all WHERE request_id = $1 AND device_token = $2", [.string(requestID), .string(key)])
        }
        guard let row = rows.first, let outcome = try row.string("outcome"), let event = try row.bytes("report") else { return nil }
        return BroadcastLogRow(outcome: outcome, event: event)
    }

    /// Inserts a broadcast's row (the pending intent, or a refusal's final outcome) into `send_log_v2`
    /// unless the key has one already there or in the old `send_log`.
    /// - Parameter requestedAtMs: the request's `requested_at_ms`, whose UTC day is the row's
    ///   `request_day` (docs/send-log.md "The partition key").
    /// - Returns: nil when this call inserted it; otherwise the row already there (left unchanged).
    /// - Throws: `PostgresError`.
    public func insertBroadcastRow(
        requestID: String, key: String, requestedAtMs: Int64, outcome: String, httpStatus: Int, apnsReason: String,
        attempts: Int, event: [UInt8]
    ) async throws -> BroadcastLogRow? {
        for _ in 0..<3 {
            let inserted = try await pool.withConnection { connection in
                try await connection.query("""
                    INSERT INTO send_log_v2 (request_id, device_token, request_day, outcome, http_status, apns_reason, attempts, report)
                    SELECT $1, $2, \(SendLogV2.day(of: "$3::bigint")), $4, $5, $6, $7, $8
                     WHERE NOT EXISTS (SELECT 1 FROM send_log WHERE request_id = $1 AND device_token = $2)
                    ON CONFLICT (request_id, device_token, request_day) DO NOTHING
                    RETURNING request_id
                    """,
                    [.string(requestID), .string(key), .int64(requestedAtMs), .string(outcome), .int(httpStatus), .string(apnsReason),
                     .int(attempts), .bytes(event)])
            }
            if !inserted.isEmpty { return nil }
            // The row that was there (it can vanish in between only to the retention job: insert again).
            if let existing = try await broadcastRow(requestID: requestID, key: key) { return existing }
        }
        throw PostgresError(code: .unsupportedResult, message: "send_log row of broadcast \(requestID) neither inserted nor found")
    }

    /// Sets a broadcast's final outcome on its row (the intent written before the Apple request), in
    /// `send_log_v2` or, for an intent written before the upgrade, in `send_log`.
    /// - Parameter apnsID: kept in the old table's `apns_id` only (`send_log_v2` has it in `event`).
    /// - Throws: `PostgresError`.
    public func settleBroadcastRow(
        requestID: String, key: String, outcome: String, httpStatus: Int, apnsReason: String, apnsID: String, attempts: Int, event: [UInt8]
    ) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute("""
                WITH old AS (
                    UPDATE send_log SET outcome = $3, http_status = $4, apns_reason = $5, apns_id = $6, attempts = $7, report = $8,
                           completed_at = now()
                     WHERE request_id = $1 AND device_token = $2)
                UPDATE send_log_v2 SET outcome = $3, http_status = $4, apns_reason = $5, attempts = $7, report = $8, completed_at = now()
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
            try await connection.execute("""
                WITH old AS (UPDATE send_log SET outcome = 'FAILED', completed_at = now()
                              WHERE request_id = $1 AND device_token = $2 AND outcome = $3)
                UPDATE send_log_v2 SET outcome = 'FAILED', completed_at = now() WHERE request_id = $1 AND device_token = $2 AND outcome = $3
                """,
                [.string(requestID), .string(key), .string(Self.pendingBroadcastOutcome)])
        }
    }
}
