import Postgres

extension PendingRetryStore {
    /// One chunk of a request's earlier outcomes, in token order after a cursor
    /// (`outcomes(of:after:limit:)`).
    public struct OutcomeChunk: Sendable, Equatable {
        /// The outcomes read: recorded in `send_log` and parked in `pending_retries` (`complete` is
        /// not used).
        public var progress = RequestProgress()
        /// The last device token through which `progress` holds every earlier outcome after the
        /// cursor; nil: it holds all of them (no table returned as many rows as the limit).
        public var coveredThrough: String?

        /// - Parameters:
        ///   - progress: the outcomes read.
        ///   - coveredThrough: the token through which they are complete; nil: to the end.
        public init(progress: RequestProgress = RequestProgress(), coveredThrough: String? = nil) {
            self.progress = progress
            self.coveredThrough = coveredThrough
        }
    }

    /// The read behind `outcomes(of:after:limit:)`: per table (`send_log_v2`, the old `send_log`,
    /// `pending_retries`, named by `source` 0, 1, 2) the request's rows after the cursor in primary-key
    /// order, at most $3 each. Parameters: $1 the request id, $2 the cursor, $3 the limit and, when
    /// `dated`, $4 the request's `requested_at_ms` (its day's partition only, as `progressSQL`).
    static func outcomesAfterSQL(dated: Bool) -> String {
        """
        (SELECT 0 AS source, device_token, report, acknowledged FROM send_log_v2
          WHERE request_id = $1 AND device_token > $2\(dated ? " AND request_day = \(SendLogV2.day(of: "$4::bigint"))" : "")
          ORDER BY device_token LIMIT $3)
        UNION ALL
        (SELECT 1, device_token, report, acknowledged FROM send_log
          WHERE request_id = $1 AND device_token > $2 ORDER BY device_token LIMIT $3)
        UNION ALL
        (SELECT 2, device_token, NULL, false FROM pending_retries
          WHERE request_id = $1 AND device_token > $2 ORDER BY device_token LIMIT $3)
        """
    }

    /// What earlier deliveries of `read`'s request left for the device tokens after `cursor`, in token
    /// order, at most `limit` rows per table: the read a campaign makes as its pages reach what an
    /// earlier holder may have sent (`EarlierOutcomes`, docs/campaigns.md "Pages in flight"). A table
    /// that returned `limit` rows may hold more after its last one, so the chunk is complete only
    /// through the smallest such last token (`OutcomeChunk.coveredThrough`); when no table did, it is
    /// complete to the end. Device tokens are lowercase hexadecimal, which PostgreSQL's collation and
    /// Swift's `String` order alike.
    /// - Parameters:
    ///   - read: the request and its `requested_at_ms` (0: every `send_log_v2` partition is read).
    ///   - cursor: the last token already covered ("" for none).
    ///   - limit: rows per table, at least 1.
    /// - Throws: `PostgresError`.
    public func outcomes(of read: ProgressRead, after cursor: String, limit: Int) async throws -> OutcomeChunk {
        let limit = max(1, limit)
        let dated = read.requestedAtMs > 0
        var parameters: [PostgresValue?] = [.string(read.requestID), .string(cursor), .int(limit)]
        if dated { parameters.append(.int64(read.requestedAtMs)) }
        let rows = try await pool.withConnection { connection in
            try await connection.query(Self.outcomesAfterSQL(dated: dated), parameters, prepared: true)
        }
        var chunk = OutcomeChunk()
        var counts = [0, 0, 0]
        var last: [String?] = [nil, nil, nil]
        for row in rows {
            guard let source = try row.int("source"), counts.indices.contains(source),
                  let token = try row.string("device_token") else { continue }
            counts[source] += 1
            if last[source].map({ token > $0 }) ?? true { last[source] = token }
            if source == 2 {
                chunk.progress.parked.insert(token)
            } else if let report = try row.bytes("report") {
                chunk.progress.recorded[token] = TokenStore.RecordedOutcome(event: report, acknowledged: try row.bool("acknowledged") ?? false)
            }
        }
        chunk.coveredThrough = counts.indices.filter { counts[$0] >= limit }.compactMap { last[$0] }.min()
        return chunk
    }
}
