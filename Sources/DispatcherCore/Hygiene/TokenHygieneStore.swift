import Postgres

/// The token-hygiene job's SQL (docs/token-hygiene.md): its lease row in `job_leases` (the same fenced
/// lease as campaigns, `FencedLeaseSQL`), and bounded statements over `device_tokens` and `campaigns`.
///
/// Each page is one transaction that starts by extending the lease under its generation (which also
/// locks the lease row, so no other replica can take the lease until the page committed) and ends by
/// storing the position: a holder that lost its lease changes nothing, and a pass interrupted by a
/// crash or a stop resumes at the last committed page.
public final class TokenHygieneStore: Sendable {
    /// The job's name, the key of its `job_leases` row.
    public static let job = "token_hygiene"

    /// Migration 8: the leases of maintenance jobs, with the token-hygiene job's row.
    public static let migration = Migration(version: 8, name: "job_leases", sql: """
        -- Maintenance jobs run by one replica at a time under the same fenced lease as campaigns
        -- (docs/token-hygiene.md). cursor: the last device token of the last committed page of an
        -- unfinished pass (NULL: start at the beginning); last_finished_at: the end of the last
        -- complete pass (the next one is due an interval later).
        CREATE TABLE job_leases (
            job               text PRIMARY KEY,
            lease_owner       text,
            lease_generation  bigint NOT NULL DEFAULT 0,
            lease_expires_at  timestamptz,
            cursor            text,
            last_finished_at  timestamptz,
            updated_at        timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO job_leases (job) VALUES ('token_hygiene');
        """)

    /// The lease SQL of job rows.
    static let lease = FencedLeaseSQL.jobs

    /// The holder's lease is gone (another generation, or expired): the page rolled back.
    public struct LeaseLost: Error, Sendable, CustomStringConvertible {
        public var description: String { "the token-hygiene lease was lost (another replica holds it)" }
    }

    /// An active token found stale, as its `TokenInvalidated` announces it.
    public struct StaleToken: Sendable, Equatable {
        public var deviceToken: String
        public var bundleID: String
        /// `sandbox` or `production`.
        public var environment: String
        public var userID: String
        public var installationID: String
        /// Its last registration (`registered_at_ms`, else `last_event_at_ms`), ms since the epoch.
        public var registeredAtMs: Int64
    }

    /// What one page did.
    public struct Page: Sendable, Equatable {
        /// Active tokens deactivated as stale.
        public var deactivated = 0
        /// Inactive rows deleted.
        public var deleted = 0
        /// The position after this page; nil when it was the last page of the table.
        public var next: String?
    }

    let pool: PostgresPool

    /// - Parameter pool: the dispatcher's database, migrated (`TokenStore.migrate`).
    public init(pool: PostgresPool) {
        self.pool = pool
    }

    // MARK: Lease

    /// Takes the job's lease when it is free (or expired) and a pass is due: one is unfinished
    /// (`cursor` set), none ever finished, or the last finished at least `interval` ago, all by the
    /// database's clock.
    /// - Parameters:
    ///   - owner: this replica's lease owner name.
    ///   - duration: the lease's length.
    ///   - interval: the pause between complete passes.
    /// - Returns: the lease and the position to resume at (nil: the beginning); nil when the lease is
    ///   held elsewhere or no pass is due.
    /// - Throws: `PostgresError`.
    public func takeLease(owner: String, duration: Duration, interval: Duration) async throws -> (lease: CampaignLease, cursor: String?)? {
        let sentAt = ContinuousClock.now
        let rows = try await pool.query("""
            UPDATE job_leases SET \(FencedLeaseSQL.take(owner: "$2", milliseconds: "$3")), updated_at = now()
             WHERE job = $1 AND \(FencedLeaseSQL.available)
               AND (cursor IS NOT NULL OR last_finished_at IS NULL OR last_finished_at <= now() - $4 * interval '1 millisecond')
            RETURNING lease_generation, cursor
            """, [.string(Self.job), .string(owner), .int64(duration.wholeMilliseconds), .int64(interval.wholeMilliseconds)])
        guard let row = rows.first else { return nil }
        let lease = CampaignLease(requestID: Self.job, owner: owner, generation: try row.int64("lease_generation") ?? 0,
                                  duration: duration, confirmedAt: sentAt)
        return (lease, try row.string("cursor"))
    }

    /// Ends a complete pass: the position is cleared, the pass's end recorded and the lease freed.
    /// - Returns: whether the lease still held (false: nothing was written).
    /// - Throws: `PostgresError`.
    public func finish(_ lease: CampaignLease) async throws -> Bool {
        try await pool.execute("""
            UPDATE job_leases SET cursor = NULL, last_finished_at = now(), \(FencedLeaseSQL.free), updated_at = now()
             WHERE \(Self.lease.held)
            """, FencedLeaseSQL.parameters(lease)) > 0
    }

    /// Frees the lease without ending the pass (graceful stop): the next holder resumes at the
    /// stored position at once.
    /// - Returns: whether the lease still held.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func release(_ lease: CampaignLease) async throws -> Bool {
        try await pool.execute(
            "UPDATE job_leases SET \(FencedLeaseSQL.free), updated_at = now() WHERE \(Self.lease.held)",
            FencedLeaseSQL.parameters(lease)) > 0
    }

    /// Extends the lease inside a page's transaction, locking the lease row until the page commits.
    /// - Throws: `LeaseLost` when the lease is no longer this holder's; `PostgresError`.
    private static func fence(_ lease: CampaignLease, on connection: PostgresConnection) async throws {
        let extended = try await connection.execute("""
            UPDATE job_leases SET lease_expires_at = \(FencedLeaseSQL.extend("$4")), updated_at = now()
             WHERE \(Self.lease.held)
            """, FencedLeaseSQL.parameters(lease) + [.int64(lease.duration.wholeMilliseconds)])
        guard extended > 0 else { throw LeaseLost() }
    }

    // MARK: Device tokens

    /// One page of the pass over `device_tokens`, in one transaction under the lease: the next `limit`
    /// tokens after `cursor` in key order (a range of the primary key, so each statement reads and
    /// locks at most `limit` rows whatever the table's size).
    ///
    /// 1. With `cutoffs.staleBeforeMs`: the active tokens of the range last registered before it are
    ///    locked (`FOR UPDATE SKIP LOCKED`: a row a registration is writing is left for the next
    ///    pass), handed to `announce` (which publishes their `TokenInvalidated` and returns once Kafka
    ///    acknowledged every one), and only then marked inactive, reason `stale`. `last_event_at_ms`
    ///    is kept, so any newer registration makes the token active again.
    /// 2. With `cutoffs.deleteInactiveBeforeMs`: the inactive rows of the range that became inactive
    ///    before it are deleted.
    /// 3. The position moves to the end of the range.
    ///
    /// If `announce` throws, or the process dies before the commit, nothing of the page is written:
    /// the next pass finds the same tokens and announces them again (same event ids). An event can
    /// be repeated, never lost.
    /// - Parameters:
    ///   - lease: the job's lease.
    ///   - cursor: the last token of the previous page (nil: the beginning).
    ///   - limit: tokens per page (at least 1).
    ///   - cutoffs: the pass's limits.
    ///   - nowMs: `inactive_at_ms` of deactivated tokens.
    ///   - announce: publishes the stale tokens' `TokenInvalidated` events.
    /// - Returns: what the page did and where the next starts.
    /// - Throws: `LeaseLost`, `PostgresError`, or what `announce` throws (the page is rolled back).
    public func sweepPage(
        _ lease: CampaignLease, after cursor: String?, limit: Int, cutoffs: TokenHygieneCutoffs, nowMs: Int64,
        announce: ([StaleToken]) async throws -> Void
    ) async throws -> Page {
        precondition(limit >= 1, "limit must be at least 1")
        return try await pool.withTransaction { connection in
            try await Self.fence(lease, on: connection)
            var page = Page()
            // The range (cursor, end]: end is the limit-th token after the cursor; without one, fewer
            // than `limit` tokens remain and the range is open (still at most `limit` rows).
            let start = cursor ?? ""
            let end = try await connection.query(
                "SELECT device_token FROM device_tokens WHERE device_token > $1 ORDER BY device_token OFFSET $2 LIMIT 1",
                [.string(start), .int(limit - 1)], prepared: true
            ).first?.string("device_token")
            var range = "device_token > $1"
            var bounds: [PostgresValue?] = [.string(start)]
            if let end {
                range += " AND device_token <= $2"
                bounds.append(.string(end))
            }
            let next = "$\(bounds.count + 1)"
            if let staleBefore = cutoffs.staleBeforeMs {
                let rows = try await connection.query("""
                    SELECT device_token, bundle_id, environment, COALESCE(user_id, '') AS user_id,
                           COALESCE(installation_id, '') AS installation_id,
                           COALESCE(registered_at_ms, last_event_at_ms) AS registered_at_ms
                      FROM device_tokens
                     WHERE \(range) AND status = 'active' AND COALESCE(registered_at_ms, last_event_at_ms) < \(next)
                     ORDER BY device_token
                       FOR UPDATE SKIP LOCKED
                    """, bounds + [.int64(staleBefore)])
                let stale = try rows.map { row in
                    StaleToken(
                        deviceToken: try row.string("device_token") ?? "", bundleID: try row.string("bundle_id") ?? "",
                        environment: try row.string("environment") ?? "", userID: try row.string("user_id") ?? "",
                        installationID: try row.string("installation_id") ?? "", registeredAtMs: try row.int64("registered_at_ms") ?? 0)
                }
                if !stale.isEmpty {
                    try await announce(stale)
                    page.deactivated = try await connection.execute("""
                        UPDATE device_tokens SET status = 'inactive', inactive_reason = 'stale', inactive_at_ms = $2, updated_at = now()
                         WHERE device_token = ANY($1::text[])
                        """, [.textArray(stale.map(\.deviceToken)), .int64(nowMs)])
                }
            }
            if let inactiveBefore = cutoffs.deleteInactiveBeforeMs {
                page.deleted = try await connection.execute("""
                    DELETE FROM device_tokens
                     WHERE \(range) AND status = 'inactive' AND COALESCE(inactive_at_ms, last_event_at_ms) < \(next)
                    """, bounds + [.int64(inactiveBefore)])
            }
            page.next = end
            _ = try await connection.execute(
                "UPDATE job_leases SET cursor = $4 WHERE \(Self.lease.held)",
                FencedLeaseSQL.parameters(lease) + [end.map { .string($0) }])
            return page
        }
    }

    // MARK: Campaigns

    /// Deletes up to `limit` finished campaign rows (`completed`, `cancelled`) completed before
    /// `beforeMs`, in one transaction under the lease.
    /// - Returns: the number deleted (fewer than `limit`: none is left).
    /// - Throws: `LeaseLost`, `PostgresError`.
    public func deleteFinishedCampaigns(_ lease: CampaignLease, before beforeMs: Int64, limit: Int) async throws -> Int {
        try await pool.withTransaction { connection in
            try await Self.fence(lease, on: connection)
            return try await connection.execute("""
                DELETE FROM campaigns WHERE request_id IN (
                    SELECT request_id FROM campaigns
                     WHERE status IN ('completed', 'cancelled')
                       AND COALESCE(completed_at_ms, (extract(epoch FROM updated_at) * 1000)::bigint) < $1
                     LIMIT $2 FOR UPDATE SKIP LOCKED)
                """, [.int64(beforeMs), .int(limit)])
        }
    }
}
