import DispatcherStatus
import Foundation
import Postgres
import PushMessages

/// The `campaigns` table (migration 6): durable campaign and scheduled-send jobs with a fenced lease
/// (docs/campaigns.md). Every lease-holder write is conditioned on `lease_owner`,
/// `lease_generation` and `lease_expires_at > now()` (the database's clock), and answers whether it
/// updated the row; a false answer means the lease is lost and the holder must stop.
public final class CampaignStore: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// Migration 6: the campaigns table, the version-tuple function of the audience filter and the
    /// partial index that serves audience paging. Listed in `TokenStoreMigrations.all`.
    public static let migration = Migration(version: 6, name: "campaigns", sql: """
        CREATE TABLE campaigns (
            request_id              text PRIMARY KEY,
            request                 bytea NOT NULL,
            target                  text NOT NULL CHECK (target IN ('audience', 'device_tokens', 'user_ids')),
            bundle_id               text NOT NULL,
            status                  text NOT NULL
                                    CHECK (status IN ('accepted', 'scheduled', 'running', 'completed', 'cancelled')),
            send_at_ms              bigint NOT NULL DEFAULT 0,
            requested_at_ms         bigint NOT NULL,
            started_at_ms           bigint,
            completed_at_ms         bigint,
            cursor                  text,
            processed               bigint NOT NULL DEFAULT 0,
            delivered               bigint NOT NULL DEFAULT 0,
            rejected                bigint NOT NULL DEFAULT 0,
            failed                  bigint NOT NULL DEFAULT 0,
            skipped                 bigint NOT NULL DEFAULT 0,
            cancel_requested_at_ms  bigint,
            cancel_reason           text,
            lease_owner             text,
            lease_generation        bigint NOT NULL DEFAULT 0,
            lease_expires_at        timestamptz,
            created_at              timestamptz NOT NULL DEFAULT now(),
            updated_at              timestamptz NOT NULL DEFAULT now()
        );
        -- Runners look for open rows that are due.
        CREATE INDEX campaigns_open ON campaigns (send_at_ms) WHERE status IN ('accepted', 'scheduled', 'running');
        -- Audience paging: active tokens of an app and token kind, in token order.
        CREATE INDEX device_tokens_campaign_audience
            ON device_tokens (bundle_id, token_kind, device_token) WHERE status = 'active';
        -- A dotted version as an integer tuple, trailing zeros dropped ('1.2.0' -> {1,2}); NULL when the
        -- text is not 1-9 digit components separated by dots. DottedVersion mirrors it in Swift.
        CREATE FUNCTION push_version_tuple(version text) RETURNS int[]
            LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT AS $$
            SELECT CASE WHEN version ~ '^[0-9]{1,9}(\\.[0-9]{1,9})*$'
                THEN string_to_array(regexp_replace(regexp_replace(version, '(\\.0+)+$', ''), '^0+$', ''), '.')::int[]
            END
        $$;
        """)

    static let nowMs = "(extract(epoch from now()) * 1000)::bigint"
    /// The lease's SQL, shared with the maintenance jobs' leases.
    static let lease = FencedLeaseSQL.campaigns

    // MARK: Creating and cancelling

    /// Writes the row for a campaign or scheduled request; a second call for the same request id
    /// (a redelivered record) changes nothing.
    /// - Parameters:
    ///   - nowMs: the consumer's clock, only to choose `accepted` or `scheduled` for the status answer.
    /// - Returns: whether the row was created now.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func create(_ request: SendRequest, requestedAtMs: Int64, nowMs: Int64) async throws -> Bool {
        let target: String =
            switch request.target {
            case .audience?: "audience"
            case .userIDs?: "user_ids"
            default: "device_tokens"
            }
        let state = CampaignState.initial(sendAtMs: request.sendAtMs, nowMs: nowMs)
        let rows = try await pool.query("""
            INSERT INTO campaigns (request_id, request, target, bundle_id, status, send_at_ms, requested_at_ms)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (request_id) DO NOTHING
            RETURNING request_id
            """,
            [.string(request.requestID), .bytes(request.serializedBytes()), .string(target),
             .string(request.notification?.bundleID ?? ""), .string(state.rawValue), .int64(max(0, request.sendAtMs)),
             .int64(requestedAtMs)])
        return !rows.isEmpty
    }

    /// Records a cancel for an open campaign (the first cancel's time and reason stay). A scheduled
    /// row becomes due at once, so that a runner settles it (SKIPPED, cancelled) and publishes its
    /// `RequestCompleted` now rather than at its `send_at_ms`.
    /// - Returns: whether an open row took it (false: no such campaign, or it already ended).
    /// - Throws: `PostgresError`.
    @discardableResult
    public func requestCancel(requestID: String, reason: String, atMs: Int64) async throws -> Bool {
        let updated = try await pool.execute("""
            UPDATE campaigns SET cancel_requested_at_ms = COALESCE(cancel_requested_at_ms, $2),
                   cancel_reason = COALESCE(cancel_reason, $3), updated_at = now(),
                   send_at_ms = LEAST(send_at_ms, \(Self.nowMs))
             WHERE request_id = $1 AND status IN ('accepted', 'scheduled', 'running')
            """, [.string(requestID), .int64(atMs), .string(reason)])
        return updated > 0
    }

    // MARK: Lease

    /// Takes the lease of the oldest due open campaign whose lease is free or expired, with the
    /// database's clock: the generation goes up by one and the status becomes `running`.
    /// - Parameters:
    ///   - owner: this runner's name (instance id and a random suffix).
    ///   - duration: the lease's length.
    /// - Returns: the row, with `lease` set; nil when nothing is due.
    /// - Throws: `PostgresError`.
    public func takeLease(owner: String, duration: Duration) async throws -> CampaignRecord? {
        let sentAt = ContinuousClock.now
        let rows = try await pool.query("""
            UPDATE campaigns c
               SET \(FencedLeaseSQL.take(owner: "$1", milliseconds: "$2", alias: "c")),
                   status = 'running', started_at_ms = COALESCE(c.started_at_ms, \(Self.nowMs)), updated_at = now()
             WHERE c.request_id = (
                SELECT request_id FROM campaigns
                 WHERE status IN ('accepted', 'scheduled', 'running') AND send_at_ms <= \(Self.nowMs)
                   AND \(FencedLeaseSQL.available)
                 ORDER BY send_at_ms, created_at
                 LIMIT 1 FOR UPDATE SKIP LOCKED)
            RETURNING c.*
            """, [.string(owner), .int64(duration.wholeMilliseconds)])
        guard let row = rows.first else { return nil }
        var record = try Self.record(row)
        record.lease = CampaignLease(
            requestID: record.requestID, owner: owner, generation: try row.int64("lease_generation") ?? 0,
            duration: duration, confirmedAt: sentAt)
        return record
    }

    /// Milliseconds until the earliest open campaign that is not due yet, by the database's clock;
    /// nil when there is none.
    /// - Throws: `PostgresError`.
    public func millisecondsUntilNextDue() async throws -> Int64? {
        let rows = try await pool.query("""
            SELECT min(send_at_ms) - \(Self.nowMs) AS wait FROM campaigns
             WHERE status IN ('accepted', 'scheduled', 'running') AND send_at_ms > \(Self.nowMs)
            """)
        return try rows.first?.int64("wait")
    }

    /// What a renewal learned.
    public struct Renewal: Sendable, Equatable {
        /// A cancel was recorded for the campaign.
        public var cancelRequested: Bool
    }

    /// Extends the lease by its duration from the database's now, if still held.
    /// - Returns: nil when the lease is lost (another generation, or expired).
    /// - Throws: `PostgresError` (the caller treats it as lost too).
    public func renew(_ lease: CampaignLease) async throws -> Renewal? {
        let rows = try await pool.query("""
            UPDATE campaigns SET lease_expires_at = \(FencedLeaseSQL.extend("$4"))
             WHERE \(Self.lease.held)
            RETURNING cancel_requested_at_ms IS NOT NULL AS cancel_requested
            """, FencedLeaseSQL.parameters(lease) + [.int64(lease.duration.wholeMilliseconds)])
        guard let row = rows.first else { return nil }
        return Renewal(cancelRequested: try row.bool("cancel_requested") ?? false)
    }

    /// Stores the position and counts after a finished page (absolute values, so a repeated write is
    /// harmless).
    /// - Returns: whether the lease still held (false: nothing was written; stop).
    /// - Throws: `PostgresError`.
    public func checkpoint(_ lease: CampaignLease, cursor: String?, counts: CampaignCounts) async throws -> Bool {
        let updated = try await pool.execute("""
            UPDATE campaigns SET cursor = COALESCE($4, cursor), processed = $5, delivered = $6, rejected = $7,
                   failed = $8, skipped = $9, updated_at = now()
             WHERE \(Self.lease.held)
            """, FencedLeaseSQL.parameters(lease) + [cursor.map { .string($0) }] + Self.values(counts))
        return updated > 0
    }

    /// Closes the campaign (`completed` or `cancelled`) with its final counts and frees the lease.
    /// - Returns: whether the lease still held.
    /// - Throws: `PostgresError`.
    public func finish(_ lease: CampaignLease, state: CampaignState, counts: CampaignCounts, completedAtMs: Int64) async throws -> Bool {
        let updated = try await pool.execute("""
            UPDATE campaigns SET status = $4, processed = $5, delivered = $6, rejected = $7, failed = $8, skipped = $9,
                   completed_at_ms = $10, \(FencedLeaseSQL.free), updated_at = now()
             WHERE \(Self.lease.held)
            """, FencedLeaseSQL.parameters(lease) + [.string(state.rawValue)] + Self.values(counts) + [.int64(completedAtMs)])
        return updated > 0
    }

    /// Gives the lease up (graceful stop), so another runner may take it at once.
    /// - Returns: whether the lease still held.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func release(_ lease: CampaignLease) async throws -> Bool {
        let updated = try await pool.execute("""
            UPDATE campaigns SET \(FencedLeaseSQL.free), updated_at = now()
             WHERE \(Self.lease.held)
            """, FencedLeaseSQL.parameters(lease))
        return updated > 0
    }

    // MARK: Reading

    /// The next page of an audience after `cursor` (see `AudienceQuery.page`).
    /// - Throws: `PostgresError`.
    public func audiencePage(_ query: AudienceQuery, after cursor: String?, limit: Int) async throws -> [StoredToken] {
        let (sql, parameters) = query.page(after: cursor, limit: limit)
        return try await pool.query(sql, parameters, prepared: true).map(TokenStore.storedToken)
    }

    /// The campaign row of a request, without lease.
    /// - Throws: `PostgresError`.
    public func campaign(requestID: String) async throws -> CampaignRecord? {
        try await pool.query("SELECT * FROM campaigns WHERE request_id = $1", [.string(requestID)]).first.map(Self.record)
    }

    /// Whether the campaign has a cancel recorded.
    /// - Throws: `PostgresError`.
    public func isCancelRequested(requestID: String) async throws -> Bool {
        try await pool.query("SELECT cancel_requested_at_ms IS NOT NULL AS c FROM campaigns WHERE request_id = $1",
                             [.string(requestID)]).first?.bool("c") ?? false
    }

    /// Where a request stands, from PostgreSQL: its campaign row, else what the immediate request
    /// tables hold (`RequestStatusReader`, `RequestStatusDecision`).
    /// - Returns: nil when no table knows the request.
    /// - Throws: `PostgresError`.
    public func status(requestID: String) async throws -> RequestStatusReport? {
        try await pool.withConnection { try await RequestStatusReader.status(requestID: requestID, on: $0) }
    }

    // MARK: Helpers

    static func values(_ counts: CampaignCounts) -> [PostgresValue?] {
        [.int64(counts.processed), .int64(counts.delivered), .int64(counts.rejected), .int64(counts.failed), .int64(counts.skipped)]
    }

    static func record(_ row: PostgresRow) throws -> CampaignRecord {
        let requestID = try row.string("request_id") ?? ""
        return CampaignRecord(
            requestID: requestID,
            request: try SendRequest(protobufBytes: try row.bytes("request") ?? []),
            state: CampaignState(rawValue: try row.string("status") ?? "") ?? .accepted,
            sendAtMs: try row.int64("send_at_ms") ?? 0,
            requestedAtMs: try row.int64("requested_at_ms") ?? 0,
            startedAtMs: try row.int64("started_at_ms") ?? 0,
            cursor: try row.string("cursor"),
            counts: try CampaignCounts(row: row),
            cancelRequested: !(try row.isNull("cancel_requested_at_ms")),
            lease: nil)
    }
}
