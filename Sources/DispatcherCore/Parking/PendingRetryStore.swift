import APNs
import Foundation
import Postgres
import PushDomain
import PushMessages

/// The `pending_retries` and `pending_requests` tables (migration 4): parked notifications, claimed
/// by one replica at a time through a lease, and the requests waiting for them
/// (docs/dispatcher-engine.md "Retries off the hot path, and parking"). Times are the database's
/// (`now()`), so replicas agree on when a row is due and when a lease ends. Every statement is
/// parameterized.
public final class PendingRetryStore: Sendable {
    let pool: PostgresPool

    /// - Parameter pool: the dispatcher's database (schema of `TokenStoreMigrations`).
    public init(pool: PostgresPool) {
        self.pool = pool
    }

    private static let columns = """
        request_id, device_token, environment, topic, push_type, priority, expiration, collapse_id, apns_id,
        payload, report, trace_parent, retry_deadline, attempts, last_reason
        """

    /// Parks a notification: due `delay` from now. Also records its request as waiting for parked
    /// notifications (`pending_requests`, created once per request). Returns once both are durable.
    /// A second park of the same (request, token) changes nothing.
    /// - Parameters:
    ///   - retry: the notification.
    ///   - delay: the back-off before its next attempt.
    /// - Throws: `PostgresError`.
    public func park(_ retry: PendingRetry, delay: Duration) async throws {
        let request = retry.request
        let expiration: PostgresValue? = switch request.expiration {
        case .omitted: nil
        case .immediately: .int64(0)
        case .at(let seconds): .int64(seconds)
        }
        _ = try await pool.withConnection { connection in
            try await connection.query("""
                WITH waiting AS (
                    INSERT INTO pending_requests (request_id, requested_at_ms, trace_parent) VALUES ($1, $16, $12)
                    ON CONFLICT (request_id) DO NOTHING)
                INSERT INTO pending_retries (request_id, device_token, environment, topic, push_type, priority,
                    expiration, collapse_id, apns_id, payload, report, trace_parent, retry_deadline, next_attempt_at,
                    attempts, last_reason)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                        now() + $14 * interval '1 millisecond', $15, $17)
                ON CONFLICT (request_id, device_token) DO NOTHING
                """,
                [.string(retry.requestID), .string(retry.deviceToken), .string(retry.environment.rawValue),
                 .string(request.topic), .string(request.pushType.rawValue),
                 request.priority.map { .int32(Int32(clamping: $0.rawValue)) }, expiration,
                 request.collapseID.map(PostgresValue.string), request.apnsID.map { .string($0.uuidString) },
                 .bytes(request.payload), .bytes(retry.report.serializedBytes()), .string(retry.traceParent),
                 .timestamp(retry.retryDeadline), .int64(delay.wholeMilliseconds), .int(retry.attempts),
                 .int64(retry.report.requestedAtMs), .string(retry.lastReason)],
                prepared: true)
        }
    }

    /// Claims up to `limit` parked notifications that are due and not claimed by a live lease, for
    /// `owner`, until `lease` from now. Rows locked by another claimer are skipped
    /// (`FOR UPDATE SKIP LOCKED`), so concurrent replicas never claim the same row.
    /// - Returns: the claimed notifications, earliest due first.
    /// - Throws: `PostgresError`.
    public func claimDue(owner: String, lease: Duration, limit: Int) async throws -> [PendingRetry] {
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                UPDATE pending_retries p SET claimed_by = $1, claimed_until = now() + $2 * interval '1 millisecond'
                FROM (SELECT request_id, device_token FROM pending_retries
                      WHERE next_attempt_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
                      ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED) due
                WHERE p.request_id = due.request_id AND p.device_token = due.device_token
                RETURNING \(Self.columns.split(separator: ",").map { "p." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", "))
                """,
                [.string(owner), .int64(lease.wholeMilliseconds), .int(limit)], prepared: true)
        }
        return try rows.map(Self.pendingRetry)
    }

    /// Puts a claimed notification back, due `delay` from now, with `attempts` more attempts counted
    /// and its lease cleared. Does nothing unless `owner` still holds the claim.
    /// - Returns: whether the row was rescheduled.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func reschedule(_ retry: PendingRetry, owner: String, delay: Duration, addingAttempts attempts: Int, reason: String) async throws -> Bool {
        try await pool.withConnection { connection in
            try await connection.execute("""
                UPDATE pending_retries SET next_attempt_at = now() + $4 * interval '1 millisecond',
                    attempts = attempts + $5, last_reason = $6, claimed_by = NULL, claimed_until = NULL
                WHERE request_id = $1 AND device_token = $2 AND claimed_by = $3
                """,
                [.string(retry.requestID), .string(retry.deviceToken), .string(owner), .int64(delay.wholeMilliseconds),
                 .int(attempts), .string(reason)], prepared: true)
        } > 0
    }

    /// Gives a claim up without trying (shutdown): the row is due again at once.
    /// - Throws: `PostgresError`.
    public func release(_ retry: PendingRetry, owner: String) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute(
                "UPDATE pending_retries SET claimed_by = NULL, claimed_until = NULL WHERE request_id = $1 AND device_token = $2 AND claimed_by = $3",
                [.string(retry.requestID), .string(retry.deviceToken), .string(owner)])
        }
    }

    /// Deletes a parked notification whose outcome is recorded in `send_log` (call it after that).
    /// - Returns: whether `owner` still held it.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func remove(_ retry: PendingRetry, owner: String) async throws -> Bool {
        try await pool.withConnection { connection in
            try await connection.execute(
                "DELETE FROM pending_retries WHERE request_id = $1 AND device_token = $2 AND claimed_by = $3",
                [.string(retry.requestID), .string(retry.deviceToken), .string(owner)], prepared: true)
        } > 0
    }

    /// Marks that the request's record finished: every notification of it is recorded or parked.
    /// - Throws: `PostgresError`.
    public func markRecordDone(requestID: String) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute(
                "UPDATE pending_requests SET record_done = true WHERE request_id = $1", [.string(requestID)], prepared: true)
        }
    }

    /// The request's completion state, in one statement (one snapshot); nil when the request has no
    /// `pending_requests` row (never parked, or its `RequestCompleted` was published).
    /// - Throws: `PostgresError`.
    public func completion(requestID: String) async throws -> (state: ParkedRequestCompletion, requestedAtMs: Int64, traceParent: String)? {
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                SELECT r.record_done, r.requested_at_ms, r.trace_parent,
                       (SELECT count(*) FROM pending_retries p WHERE p.request_id = r.request_id) AS parked
                FROM pending_requests r WHERE r.request_id = $1
                """, [.string(requestID)], prepared: true)
        }
        guard let row = rows.first else { return nil }
        return (ParkedRequestCompletion(recordDone: try row.bool("record_done") ?? false, parkedRemaining: try row.int("parked") ?? 0),
                try row.int64("requested_at_ms") ?? 0, try row.string("trace_parent") ?? "")
    }

    /// Rows per outcome recorded in `send_log` for a request, by `DeliveryOutcome` proto name.
    /// - Throws: `PostgresError`.
    public func outcomeCounts(requestID: String) async throws -> [String: Int] {
        try await pool.withConnection { try await Self.outcomeCounts(requestID: requestID, on: $0) }
    }

    private static func outcomeCounts(requestID: String, on connection: PostgresConnection) async throws -> [String: Int] {
        let rows = try await connection.query(
            "SELECT outcome, count(*) AS n FROM send_log_all WHERE request_id = $1 GROUP BY outcome", [.string(requestID)], prepared: true)
        var counts: [String: Int] = [:]
        for row in rows {
            if let outcome = try row.string("outcome") { counts[outcome] = try row.int("n") ?? 0 }
        }
        return counts
    }

    /// Publishes a request's completion exactly once, however many tasks and replicas ask at the same
    /// time (each re-drive that records a request's last parked notification asks, and so does the
    /// record's own path). In one transaction: locks the request's `pending_requests` row — a caller
    /// that finds it locked returns at once, the holder publishes — checks that it is complete (record
    /// done, nothing parked), runs `publish` with its requested-at time, trace parent and `send_log`
    /// counts, then deletes the row and records the completion in `request_completions` (so a
    /// redelivered record publishes nothing). When `publish` throws, everything rolls back and the
    /// row stays for the caller's retry.
    /// - Parameter eventID: the `RequestCompleted`'s event id, kept in `request_completions`.
    /// - Parameter status: what the `RequestCompleted` says, kept there too: `completed` or `cancelled`.
    /// - Returns: whether this caller published.
    /// - Throws: `PostgresError`, or what `publish` throws.
    public func completeOnce(
        requestID: String, eventID: String, status: String = "completed",
        publish: (_ requestedAtMs: Int64, _ traceParent: String, _ counts: [String: Int]) async throws -> Void
    ) async throws -> Bool {
        try await pool.withTransaction { connection in
            let rows = try await connection.query("""
                SELECT r.record_done, r.requested_at_ms, r.trace_parent,
                       (SELECT count(*) FROM pending_retries p WHERE p.request_id = r.request_id) AS parked
                FROM pending_requests r WHERE r.request_id = $1 FOR UPDATE OF r SKIP LOCKED
                """, [.string(requestID)], prepared: true)
            guard let row = rows.first else { return false }
            let state = ParkedRequestCompletion(recordDone: try row.bool("record_done") ?? false, parkedRemaining: try row.int("parked") ?? 0)
            guard state.isComplete else { return false }
            try await publish(try row.int64("requested_at_ms") ?? 0, try row.string("trace_parent") ?? "",
                              try await Self.outcomeCounts(requestID: requestID, on: connection))
            _ = try await connection.execute("DELETE FROM pending_requests WHERE request_id = $1", [.string(requestID)])
            _ = try await connection.execute(
                "INSERT INTO request_completions (request_id, event_id, status) VALUES ($1, $2, $3) ON CONFLICT (request_id) DO NOTHING",
                [.string(requestID), .string(eventID), .string(status)])
            return true
        }
    }

    /// Forgets a request whose `RequestCompleted` was acknowledged.
    /// - Throws: `PostgresError`.
    public func forgetRequest(requestID: String) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute("DELETE FROM pending_requests WHERE request_id = $1", [.string(requestID)])
        }
    }

    /// Parked notifications now (for the `push_pending_retries` gauge).
    /// - Throws: `PostgresError`.
    public func count() async throws -> Int {
        let rows = try await pool.withConnection { connection in
            try await connection.query("SELECT count(*) AS n FROM pending_retries")
        }
        return try rows.first?.int("n") ?? 0
    }

    /// What earlier deliveries left of several requests, read in one statement (one snapshot, so a
    /// notification moving from `pending_retries` to `send_log` is seen in one of them): recorded
    /// outcomes and parked tokens, by request id.
    /// - Parameter limit: rows read per request and table; nil: all. A request with as many rows
    ///   as `limit` in either table gets `RequestProgress.complete` false (its tokens' progress is
    ///   then read page by page with `progress(requestID:tokens:)`), so a redelivered fan-out to a
    ///   million tokens does not hold a million reports at once.
    /// - Throws: `PostgresError`.
    public func progress(requestIDs: [String], limit: Int? = nil) async throws -> [String: RequestProgress] {
        guard !requestIDs.isEmpty else { return [:] }
        if let limit {
            // The limited read of requests whose day is unknown: every partition of send_log_v2.
            return try await progress(requestIDs.map { ProgressRead(requestID: $0, requestedAtMs: 0) }, limit: limit)
        }
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                SELECT request_id, device_token, report, acknowledged, false AS parked FROM send_log_all WHERE request_id = ANY($1::text[])
                UNION ALL
                SELECT request_id, device_token, NULL, false, true FROM pending_retries WHERE request_id = ANY($1::text[])
                """, [.textArray(requestIDs)], prepared: true)
        }
        return try Self.progress(rows)
    }

    /// What earlier deliveries of `requestID` left for `tokens` only (one page of a request whose
    /// `progress(requestIDs:limit:)` was not complete).
    /// - Throws: `PostgresError`.
    public func progress(requestID: String, tokens: [String]) async throws -> RequestProgress {
        guard !tokens.isEmpty else { return RequestProgress() }
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                SELECT request_id, device_token, report, acknowledged, false AS parked FROM send_log_all
                 WHERE request_id = $1 AND device_token = ANY($2::text[])
                UNION ALL
                SELECT request_id, device_token, NULL, false, true FROM pending_retries
                 WHERE request_id = $1 AND device_token = ANY($2::text[])
                """, [.string(requestID), .textArray(tokens)], prepared: true)
        }
        return try Self.progress(rows)[requestID] ?? RequestProgress()
    }

    /// Groups the rows of a progress read by request id.
    /// - Parameter completions: the rows carry a `completed` column (`progressSQL`); a row where it
    ///   is true says the request is in `request_completions` and holds nothing else.
    static func progress(_ rows: PostgresRows, completions: Bool = false) throws -> [String: RequestProgress] {
        var result: [String: RequestProgress] = [:]
        for row in rows {
            if completions, try row.bool("completed") == true, let requestID = try row.string("request_id") {
                result[requestID, default: RequestProgress()].completed = true
                continue
            }
            guard let requestID = try row.string("request_id"), let token = try row.string("device_token") else { continue }
            if try row.bool("parked") == true {
                result[requestID, default: RequestProgress()].parked.insert(token)
            } else if let report = try row.bytes("report") {
                result[requestID, default: RequestProgress()].recorded[token] =
                    TokenStore.RecordedOutcome(event: report, acknowledged: try row.bool("acknowledged") ?? false)
            }
        }
        return result
    }

    /// What earlier deliveries of one request left.
    public struct RequestProgress: Sendable, Equatable {
        /// Outcomes recorded in `send_log`, by device token.
        public var recorded: [String: TokenStore.RecordedOutcome] = [:]
        /// Tokens parked in `pending_retries` (their outcome comes from the parked path).
        public var parked: Set<String> = []
        /// Whether `recorded` and `parked` hold everything of the request; false when a read was
        /// limited (`progress(requestIDs:limit:)`) and may have left rows out.
        public var complete = true
        /// Whether `request_completions` holds the request: its `RequestCompleted` was acknowledged,
        /// so nothing of it is sent or published again. Read only by `progress(_:limit:)`.
        public var completed = false
        public init() {}
    }

    private static func pendingRetry(_ row: PostgresRow) throws -> PendingRetry {
        func required<T>(_ value: T?, _ column: String) throws -> T {
            guard let value else { throw PostgresError(code: .typeMismatch, message: "pending_retries.\(column) is NULL") }
            return value
        }
        let token = try DeviceToken(validating: try required(row.string("device_token"), "device_token"))
        let pushTypeName = try required(row.string("push_type"), "push_type")
        guard let pushType = APNsPushType(rawValue: pushTypeName) else {
            throw PostgresError(code: .typeMismatch, message: "pending_retries.push_type \"\(pushTypeName)\" is unknown")
        }
        let expiration: APNsExpiration = switch try row.int64("expiration") {
        case nil: .omitted
        case 0?: .immediately
        case let seconds?: .at(secondsSinceEpoch: seconds)
        }
        let request = APNsRequest(
            deviceToken: token, topic: try required(row.string("topic"), "topic"), pushType: pushType,
            priority: try row.int("priority").map(APNsPriority.init(rawValue:)), expiration: expiration,
            collapseID: try row.string("collapse_id"), apnsID: try row.string("apns_id").flatMap { try? APNsID(validating: $0) },
            payload: try required(row.bytes("payload"), "payload"))
        let environmentName = try required(row.string("environment"), "environment")
        return PendingRetry(
            request: request, environment: APNsEnvironment(rawValue: environmentName) ?? .production,
            report: try DeliveryReport(protobufBytes: try required(row.bytes("report"), "report")),
            traceParent: try row.string("trace_parent") ?? "", retryDeadline: try required(row.date("retry_deadline"), "retry_deadline"),
            attempts: try row.int("attempts") ?? 0, lastReason: try row.string("last_reason") ?? "")
    }
}

extension TokenStore {
    /// The parked-retry tables over this store's pool.
    public func makePendingRetryStore() -> PendingRetryStore { PendingRetryStore(pool: pool) }
}
