import Postgres
import PushMessages

/// The `channels` table (docs/live-activities.md): one row per broadcast channel of an app in an
/// environment, keyed by the caller's name, and the channel-hygiene job's lease (`job_leases`, the
/// same fenced lease as token hygiene).
///
/// The quota (`reserve`) counts an app's rows that may hold a channel at Apple and inserts the
/// `creating` row in one transaction under `pg_advisory_xact_lock` per (bundle id, environment), so
/// two replicas creating channels of one app at once cannot pass the limit together.
public final class ChannelStore: Sendable {
    /// The channel-hygiene job's name, the key of its `job_leases` row.
    public static let job = "channel_hygiene"

    /// Migration 13: the `channels` table and the channel-hygiene job's lease row.
    public static let migration = Migration(version: 13, name: "channels", sql: """
        -- Live Activity broadcast channels (docs/live-activities.md), keyed by the caller's name.
        -- channel_id: Apple's apns-channel-id once created (unique per app and environment);
        -- storage_policy: Apple's message-storage-policy (0 none stored, 1 most recent);
        -- delete_at_ms: when hygiene deletes it (Apple's creation + delete_after_ms); times in ms
        -- since the epoch by the dispatcher's clock.
        CREATE TABLE channels (
            bundle_id        text NOT NULL,
            environment      text NOT NULL CHECK (environment IN ('production', 'sandbox')),
            name             text NOT NULL,
            channel_id       text,
            state            text NOT NULL CHECK (state IN ('creating', 'active', 'deleting', 'deleted', 'failed')),
            storage_policy   smallint NOT NULL DEFAULT 0 CHECK (storage_policy IN (0, 1)),
            delete_after_ms  bigint NOT NULL DEFAULT 0,
            delete_at_ms     bigint,
            created_at_ms    bigint NOT NULL,
            updated_at_ms    bigint NOT NULL,
            PRIMARY KEY (bundle_id, environment, name)
        );
        CREATE UNIQUE INDEX channels_channel_id ON channels (bundle_id, environment, channel_id) WHERE channel_id IS NOT NULL;
        -- The quota's count: the rows that may hold a channel at Apple.
        CREATE INDEX channels_live ON channels (bundle_id, environment) WHERE state IN ('creating', 'active', 'deleting');
        -- Hygiene: channels due for deletion, and commands that did not get Apple's answer.
        CREATE INDEX channels_due ON channels (delete_at_ms) WHERE state = 'active' AND delete_at_ms IS NOT NULL;
        CREATE INDEX channels_unsettled ON channels (updated_at_ms) WHERE state IN ('creating', 'deleting');
        INSERT INTO job_leases (job) VALUES ('channel_hygiene');
        """)

    /// What `reserve` did.
    public enum Reservation: Sendable, Equatable {
        /// The `creating` row was written: ask Apple.
        case reserved(ChannelRow)
        /// The app already has `count` channels in the environment, at least the limit: refused, no row written.
        case overLimit(count: Int)
        /// A row of another state than `failed` holds the key (a command raced this one): decide again with it.
        case existing(ChannelRow)
    }

    let pool: PostgresPool

    /// - Parameter pool: the dispatcher's database, migrated (`TokenStore.migrate`).
    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// The columns every read selects.
    static let columns = "bundle_id, environment, name, channel_id, state, storage_policy, delete_after_ms, delete_at_ms, created_at_ms, updated_at_ms"

    /// The row of a `SELECT \(columns)`.
    static func channelRow(_ row: PostgresRow) throws -> ChannelRow {
        ChannelRow(
            bundleID: try row.string("bundle_id") ?? "", environment: Environment(storedName: try row.string("environment") ?? ""),
            name: try row.string("name") ?? "", channelID: try row.string("channel_id"),
            state: ChannelState(rawValue: try row.string("state") ?? "") ?? .failed,
            storagePolicy: MessageStoragePolicy(appleValue: try row.int("storage_policy") ?? 0),
            deleteAfterMs: try row.int64("delete_after_ms") ?? 0, deleteAtMs: try row.int64("delete_at_ms"),
            createdAtMs: try row.int64("created_at_ms") ?? 0, updatedAtMs: try row.int64("updated_at_ms") ?? 0)
    }

    static func stored(_ environment: Environment) -> String { environment == .sandbox ? "sandbox" : "production" }

    // MARK: Quota

    /// Counts the app's rows that may hold a channel at Apple (`creating`, `active`, `deleting`) and,
    /// when fewer than `limit`, writes the command's `creating` row (replacing a `failed` one), all in
    /// one transaction under the advisory lock of (bundle id, environment).
    /// - Parameters:
    ///   - command: a checked CREATE (`ChannelCommandDecoder`).
    ///   - limit: the app's channel limit per environment (`PUSH_CHANNEL_LIMIT`).
    ///   - nowMs: the row's times, ms since the epoch.
    /// - Returns: the reservation.
    /// - Throws: `PostgresError`.
    public func reserve(_ command: ChannelCommand, limit: Int, nowMs: Int64) async throws -> Reservation {
        let app: [PostgresValue?] = [.string(command.bundleID), .string(Self.stored(command.environment))]
        return try await pool.withTransaction { connection in
            // Two-key form, class 30 (this issue's number), so it never meets the migrator's lock.
            _ = try await connection.query("SELECT pg_advisory_xact_lock(30, hashtext($1 || '/' || $2))", app)
            let existing = try await connection.query(
                "SELECT \(Self.columns) FROM channels WHERE bundle_id = $1 AND environment = $2 AND name = $3",
                app + [.string(command.name)])
            if let row = try existing.first.map(Self.channelRow), row.state != .failed { return .existing(row) }
            let count = Int(try await connection.query(
                "SELECT count(*) AS count FROM channels WHERE bundle_id = $1 AND environment = $2 AND state IN ('creating', 'active', 'deleting')",
                app
            ).first?.int64("count") ?? 0)
            guard count < limit else { return .overLimit(count: count) }
            let policy = MessageStoragePolicy(appleValue: command.messageStoragePolicy.appleValue)
            let inserted = try await connection.query("""
                INSERT INTO channels (bundle_id, environment, name, state, storage_policy, delete_after_ms, created_at_ms, updated_at_ms)
                VALUES ($1, $2, $3, 'creating', $4, $5, $6, $6)
                ON CONFLICT (bundle_id, environment, name) DO UPDATE
                   SET state = 'creating', channel_id = NULL, storage_policy = $4, delete_after_ms = $5, delete_at_ms = NULL,
                       created_at_ms = $6, updated_at_ms = $6
                 WHERE channels.state = 'failed'
                RETURNING \(Self.columns)
                """, app + [.string(command.name), .int(policy.appleValue), .int64(command.deleteAfterMs), .int64(nowMs)])
            guard let row = try inserted.first.map(Self.channelRow) else {
                throw PostgresError(code: .unsupportedResult, message: "channels: the reserved row of \(command.name) was not written")
            }
            return .reserved(row)
        }
    }

    // MARK: Transitions

    /// Moves the row of `row`'s key from one of `from` to `state`, setting Apple's id (when given) and
    /// `delete_at_ms` (when given; `.some(nil)` clears it).
    /// - Returns: the row as written; nil when the row was not in one of `from` (nothing written).
    /// - Throws: `PostgresError` (a `channel_id` another row of the app holds violates `channels_channel_id`).
    @discardableResult
    public func transition(_ row: ChannelRow, from: [ChannelState], to state: ChannelState, channelID: String? = nil,
                           deleteAtMs: Int64?? = nil, nowMs: Int64) async throws -> ChannelRow? {
        let states = from.map { "'\($0.rawValue)'" }.joined(separator: ", ")
        var sets = ["state = $4", "updated_at_ms = $5"]
        var parameters: [PostgresValue?] = [
            .string(row.bundleID), .string(Self.stored(row.environment)), .string(row.name), .string(state.rawValue), .int64(nowMs),
        ]
        if let channelID {
            parameters.append(.string(channelID))
            sets.append("channel_id = $\(parameters.count)")
        }
        if let deleteAtMs {
            parameters.append(deleteAtMs.map { .int64($0) } ?? nil)
            sets.append("delete_at_ms = $\(parameters.count)::bigint")
        }
        let rows = try await pool.query("""
            UPDATE channels SET \(sets.joined(separator: ", "))
             WHERE bundle_id = $1 AND environment = $2 AND name = $3 AND state IN (\(states))
            RETURNING \(Self.columns)
            """, parameters)
        return try rows.first.map(Self.channelRow)
    }

    // MARK: Lookups

    /// The row named `name` of the app in `environment`, or nil.
    /// - Throws: `PostgresError`.
    public func row(bundleID: String, environment: Environment, name: String) async throws -> ChannelRow? {
        try await pool.query(
            "SELECT \(Self.columns) FROM channels WHERE bundle_id = $1 AND environment = $2 AND name = $3",
            [.string(bundleID), .string(Self.stored(environment)), .string(name)], prepared: true
        ).first.map(Self.channelRow)
    }

    /// The row holding Apple's `channelID` for the app in `environment` (the broadcast path's look-up:
    /// its state, storage policy and name), or nil.
    /// - Throws: `PostgresError`.
    public func row(bundleID: String, environment: Environment, channelID: String) async throws -> ChannelRow? {
        try await pool.query(
            "SELECT \(Self.columns) FROM channels WHERE bundle_id = $1 AND environment = $2 AND channel_id = $3",
            [.string(bundleID), .string(Self.stored(environment)), .string(channelID)], prepared: true
        ).first.map(Self.channelRow)
    }

    /// The app's rows named `name` (both environments: production first), for the admin endpoint.
    /// - Throws: `PostgresError`.
    public func rows(bundleID: String, name: String) async throws -> [ChannelRow] {
        try await pool.query(
            "SELECT \(Self.columns) FROM channels WHERE bundle_id = $1 AND name = $2 ORDER BY environment",
            [.string(bundleID), .string(name)]
        ).map(Self.channelRow)
    }

    /// A page of the app's rows in name order (then environment), after `afterName`, at most `limit`.
    /// - Throws: `PostgresError`.
    public func rows(bundleID: String, afterName: String = "", limit: Int) async throws -> [ChannelRow] {
        try await pool.query(
            "SELECT \(Self.columns) FROM channels WHERE bundle_id = $1 AND name > $2 ORDER BY name, environment LIMIT $3",
            [.string(bundleID), .string(afterName), .int(limit)]
        ).map(Self.channelRow)
    }

    /// Every row of the app in `environment` (hygiene's orphan check; at most the limit of live rows
    /// plus the settled ones).
    /// - Throws: `PostgresError`.
    public func rows(bundleID: String, environment: Environment) async throws -> [ChannelRow] {
        try await pool.query(
            "SELECT \(Self.columns) FROM channels WHERE bundle_id = $1 AND environment = $2",
            [.string(bundleID), .string(Self.stored(environment))]
        ).map(Self.channelRow)
    }

    /// Rows hygiene may have work for at `nowMs`: `active` past `delete_at_ms`, and `creating` or
    /// `deleting` unchanged for `ChannelLifecycle.crashedAfterMs`; at most `limit`, oldest first.
    /// - Throws: `PostgresError`.
    public func hygieneCandidates(nowMs: Int64, limit: Int) async throws -> [ChannelRow] {
        try await pool.query("""
            (SELECT \(Self.columns) FROM channels WHERE state = 'active' AND delete_at_ms <= $1 ORDER BY delete_at_ms LIMIT $3)
            UNION ALL
            (SELECT \(Self.columns) FROM channels WHERE state IN ('creating', 'deleting') AND updated_at_ms <= $2
              ORDER BY updated_at_ms LIMIT $3)
            """, [.int64(nowMs), .int64(nowMs - ChannelLifecycle.crashedAfterMs), .int(limit)]
        ).map(Self.channelRow)
    }

    // MARK: Hygiene lease

    /// Takes the channel-hygiene lease when it is free (or expired) and a pass is due (none finished
    /// yet, or the last at least `interval` ago, by the database's clock).
    /// - Returns: the lease, or nil when another replica holds it or no pass is due.
    /// - Throws: `PostgresError`.
    public func takeLease(owner: String, duration: Duration, interval: Duration) async throws -> CampaignLease? {
        let sentAt = ContinuousClock.now
        let rows = try await pool.query("""
            UPDATE job_leases SET \(FencedLeaseSQL.take(owner: "$2", milliseconds: "$3")), updated_at = now()
             WHERE job = $1 AND \(FencedLeaseSQL.available)
               AND (last_finished_at IS NULL OR last_finished_at <= now() - $4 * interval '1 millisecond')
            RETURNING lease_generation
            """, [.string(Self.job), .string(owner), .int64(duration.wholeMilliseconds), .int64(interval.wholeMilliseconds)])
        guard let row = rows.first else { return nil }
        return CampaignLease(requestID: Self.job, owner: owner, generation: try row.int64("lease_generation") ?? 0,
                             duration: duration, confirmedAt: sentAt)
    }

    /// Ends a pass: records its end and frees the lease.
    /// - Returns: whether the lease still held.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func finish(_ lease: CampaignLease) async throws -> Bool {
        try await pool.execute("""
            UPDATE job_leases SET last_finished_at = now(), \(FencedLeaseSQL.free), updated_at = now()
             WHERE \(FencedLeaseSQL.jobs.held)
            """, FencedLeaseSQL.parameters(lease)) > 0
    }

    /// Frees the lease without recording a finished pass (a pass stopped early): the next try may
    /// start one at once.
    /// - Returns: whether the lease still held.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func release(_ lease: CampaignLease) async throws -> Bool {
        try await pool.execute(
            "UPDATE job_leases SET \(FencedLeaseSQL.free), updated_at = now() WHERE \(FencedLeaseSQL.jobs.held)",
            FencedLeaseSQL.parameters(lease)) > 0
    }
}
