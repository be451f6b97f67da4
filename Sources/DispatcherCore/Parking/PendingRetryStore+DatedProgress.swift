import Postgres

extension PendingRetryStore {
    /// A request whose progress is read, with the `requested_at_ms` its outcomes were recorded under
    /// when that is stable (the request's `created_at_ms`; 0 when it has none).
    public struct ProgressRead: Sendable, Hashable {
        /// The request id.
        public var requestID: String
        /// The request's `created_at_ms` (milliseconds since the Unix epoch), or 0 when unknown.
        public var requestedAtMs: Int64

        /// - Parameters:
        ///   - requestID: the request id.
        ///   - requestedAtMs: the request's `created_at_ms`, 0 when it has none.
        public init(requestID: String, requestedAtMs: Int64) {
            self.requestID = requestID
            self.requestedAtMs = requestedAtMs
        }
    }

    /// The read behind `progress(_:limit:)`. Parameters: $1 request ids of unknown day, $2 the limit,
    /// $3 and $4 the dated requests' ids and `requested_at_ms`.
    ///
    /// Each look-up is `ORDER BY device_token LIMIT $2` on its table, the order of the primary key
    /// after `request_id`, so the plan is a primary-key descent per request whatever the statistics
    /// say. A plain `LIMIT` left the choice to them: the statement is prepared, so its generic plan
    /// estimates `request_id = r.id` from the number of distinct request ids, and on a day partition
    /// holding mostly a few large fan-outs PostgreSQL chose a sequential scan of the whole partition
    /// for every look-up (a cost growing with the day's rows: 1,658 µs of PostgreSQL CPU per
    /// single-token request after 60,000 rows, where 51 µs was usual).
    ///
    /// Its last part reads `request_completions` (a primary-key look-up per request): a row with
    /// `completed` true says the request finished before. One statement instead of two, and one
    /// snapshot for both answers.
    static let progressSQL = """
        SELECT r.id AS request_id, s.device_token, s.report, s.acknowledged, false AS parked, false AS completed
          FROM (SELECT DISTINCT unnest($1::text[]) AS id) AS r
         CROSS JOIN LATERAL (SELECT device_token, report, acknowledged FROM send_log_all WHERE request_id = r.id
                              ORDER BY device_token LIMIT $2) AS s
        UNION ALL
        SELECT r.id, s.device_token, s.report, s.acknowledged, false, false
          FROM (SELECT DISTINCT * FROM unnest($3::text[], $4::bigint[]) AS r(id, requested_at_ms)) AS r
         CROSS JOIN LATERAL (
            (SELECT device_token, report, acknowledged FROM send_log_v2
              WHERE request_id = r.id AND request_day = \(SendLogV2.day(of: "r.requested_at_ms"))
              ORDER BY device_token LIMIT $2)
            UNION ALL
            (SELECT device_token, report, acknowledged FROM send_log WHERE request_id = r.id ORDER BY device_token LIMIT $2)
            LIMIT $2) AS s
        UNION ALL
        SELECT r.id, p.device_token, NULL, false, true, false
          FROM (SELECT DISTINCT unnest($1::text[] || $3::text[]) AS id) AS r
         CROSS JOIN LATERAL (SELECT device_token FROM pending_retries WHERE request_id = r.id ORDER BY device_token LIMIT $2) AS p
        UNION ALL
        SELECT c.request_id, NULL, NULL, false, false, true
          FROM request_completions c WHERE c.request_id = ANY($1::text[] || $3::text[])
        """

    /// `progress(requestIDs:limit:)` for requests whose `requested_at_ms` is known: their outcomes in
    /// `send_log_v2` are read from their day's partition only (PostgreSQL prunes the others at run
    /// time), instead of one primary-key descent per partition (docs/send-log.md "What `send_log_v2`
    /// costs and saves"); the old `send_log` is read as before. Reads with `requestedAtMs` 0 read every
    /// partition. The same statement says which requests finished before (`RequestProgress.completed`,
    /// from `request_completions`).
    /// - Parameter limit: rows read per request and table, as `progress(requestIDs:limit:)`.
    /// - Throws: `PostgresError`.
    public func progress(_ reads: [ProgressRead], limit: Int) async throws -> [String: RequestProgress] {
        guard !reads.isEmpty else { return [:] }
        let dated = reads.filter { $0.requestedAtMs > 0 }
        let undated = reads.filter { $0.requestedAtMs <= 0 }.map(\.requestID)
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                Self.progressSQL,
                [.textArray(undated), .int(max(1, limit)),
                 .textArray(dated.map(\.requestID)),
                 .int64Array(dated.map(\.requestedAtMs))],
                prepared: true)
        }
        var result = try Self.progress(rows, completions: true)
        for (id, progress) in result where progress.recorded.count >= limit || progress.parked.count >= limit {
            result[id]?.complete = false
        }
        return result
    }
}
