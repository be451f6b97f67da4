import Postgres
import PushMessages

extension TokenStore {
    /// The transaction-level advisory lock that serializes token-event batches (an arbitrary constant
    /// of this project; migrations use their own key).
    static let tokenEventsLockKey: Int64 = 0x7075_7368_746F_6B65  // "pushtoke"

    /// Applies token events in one transaction, with the same result as applying them one by one
    /// with `apply(_:)` for one event, in the given order: an event changes its token only when it is
    /// newer than the token's last applied event; a registration newer than Apple's invalidation
    /// reactivates the token; an unregistration of an unknown token leaves an inactive row, and one
    /// naming another bundle id changes nothing; a registration with an installation id deactivates
    /// the older active tokens of the same bundle id, installation id, kind and user id (or none); a
    /// registration with a previous token deactivates that token when it has the same bundle id and
    /// user; a forgotten user's rows become inactive (`forgotten`).
    ///
    /// The events are split into layers in which no token and no (bundle id, installation id, kind)
    /// appears twice (`TokenEventBatch` explains why that is exact); each layer costs at most three
    /// statements over `unnest` arrays, whatever its size.
    ///
    /// - Parameter events: events in offset order; events without a device or with another action
    ///   are ignored. Hundreds per call are fine (the arrays travel as one parameter per column).
    /// - Returns: how many events changed the table (the number of `true`s one-by-one application
    ///   would have returned).
    /// - Throws: `PostgresError`; then nothing of the batch was applied (for example `.checkViolation`
    ///   when one token is not lowercase hex of 64 to 512 characters).
    @discardableResult
    public func apply(_ events: [TokenEvent]) async throws -> Int {
        try await applyBatch(events).changed
    }

    /// `apply(_:)` for a batch, with the rows that `USER_FORGOTTEN` events deactivated.
    /// - Throws: as `apply(_:)`.
    public func applyBatch(_ events: [TokenEvent]) async throws -> TokenEventsApplied {
        let batch = TokenEventBatch(events)
        guard batch.eventCount > 0 else { return TokenEventsApplied() }
        return try await pool.withTransaction { connection in
            // One token-event batch at a time across every replica: an installation replacement
            // updates rows of other tokens (other partitions), so two concurrent batches can lock the
            // same rows in opposite orders and deadlock (SQLSTATE 40P01). Serialized, one writer
            // applies batches of hundreds of events each, far faster than batches that deadlock.
            _ = try await connection.query("SELECT pg_advisory_xact_lock($1)", [.int64(Self.tokenEventsLockKey)], prepared: true)
            var applied = TokenEventsApplied()
            for var layer in batch.layers {
                // Apps own their tokens: registrations of a token another app holds are taken out.
                let refused = try await Self.refusedByOwner(layer.registrations, ownership: ownership, on: connection)
                if !refused.isEmpty {
                    applied.refused += refused
                    let out = Set(refused.map { RefusedKey(token: $0.deviceToken, bundleID: $0.bundleID, eventTimeMs: $0.eventTimeMs) })
                    layer.registrations.removeAll { out.contains(RefusedKey(token: $0.token, bundleID: $0.bundleID, eventTimeMs: $0.eventTimeMs)) }
                }
                applied.changed += try await Self.apply(layer, on: connection)
                for forget in layer.forgets {
                    let forgotten = try await Self.forget(forget, on: connection)
                    applied.changed += forgotten.isEmpty ? 0 : 1
                    applied.forgotten += forgotten
                }
            }
            return applied
        }
    }

    private struct RefusedKey: Hashable {
        var token: String
        var bundleID: String
        var eventTimeMs: Int64
    }

    /// The registrations whose token belongs to another app (`TokenOwnership`), judged against the
    /// rows as they are now (the caller holds the token-events lock). Tokens are distinct within a
    /// layer.
    static func refusedByOwner(
        _ registrations: [TokenEventBatch.Registration], ownership: TokenOwnership, on connection: PostgresConnection
    ) async throws -> [TokenEventsApplied.RefusedRegistration] {
        guard !registrations.isEmpty else { return [] }
        let rows = try await connection.query("""
            SELECT device_token, bundle_id, status = 'active' AS active, COALESCE(inactive_at_ms, last_event_at_ms) AS inactive_since
              FROM device_tokens WHERE device_token = ANY($1::text[])
            """,
            [.textArray(registrations.map(\.token))], prepared: true)
        var owners: [String: TokenOwnership.Row] = [:]
        for row in rows {
            guard let token = try row.string("device_token"), let bundle = try row.string("bundle_id") else { continue }
            owners[token] = TokenOwnership.Row(
                bundleID: bundle, isActive: try row.bool("active") ?? false, inactiveSinceMs: try row.int64("inactive_since") ?? 0)
        }
        return registrations.compactMap { registration in
            guard let owner = owners[registration.token],
                  !ownership.allows(owner, bundleID: registration.bundleID, eventTimeMs: registration.eventTimeMs)
            else { return nil }
            return TokenEventsApplied.RefusedRegistration(
                deviceToken: registration.token, bundleID: registration.bundleID, ownerBundleID: owner.bundleID,
                eventTimeMs: registration.eventTimeMs)
        }
    }

    /// Deactivates the registration's previous token (reason `replaced`) when its row has the same
    /// bundle id and user id (or both none), is active and has an older last event.
    static func replacePrevious(_ registration: TokenEventBatch.Registration, on connection: PostgresConnection) async throws {
        try await connection.execute("""
            UPDATE device_tokens
               SET status = 'inactive', inactive_reason = 'replaced', inactive_at_ms = $4, updated_at = now()
             WHERE device_token = $1 AND bundle_id = $2 AND user_id IS NOT DISTINCT FROM NULLIF($3, '')
               AND status = 'active' AND last_event_at_ms < $4
            """,
            [.string(registration.previousToken), .string(registration.bundleID), .string(registration.userID),
             .int64(registration.eventTimeMs)],
            prepared: true)
    }

    /// Forgets a user of one app: every row of (bundle id, user id) whose last event is older than
    /// the forget becomes inactive with reason `forgotten` and the forget's time as its last event
    /// (so a delayed older registration cannot bring it back); `SendLogRetention` deletes these rows
    /// and their send_log entries after the retention. Returns the rows, for announcements.
    static func forget(_ forget: TokenEventBatch.Forget, on connection: PostgresConnection) async throws -> [TokenEventsApplied.ForgottenToken] {
        let rows = try await connection.query("""
            UPDATE device_tokens
               SET status = 'inactive', inactive_reason = 'forgotten', inactive_at_ms = $3,
                   last_event_at_ms = $3, updated_at = now()
             WHERE bundle_id = $1 AND user_id = $2 AND last_event_at_ms < $3
            RETURNING device_token, installation_id, environment
            """,
            [.string(forget.bundleID), .string(forget.userID), .int64(forget.eventTimeMs)],
            prepared: true)
        var forgotten: [TokenEventsApplied.ForgottenToken] = []
        for row in rows {
            forgotten.append(TokenEventsApplied.ForgottenToken(
                deviceToken: try row.string("device_token") ?? "", bundleID: forget.bundleID, userID: forget.userID,
                installationID: try row.string("installation_id") ?? "", environment: try row.string("environment") ?? "production",
                eventTimeMs: forget.eventTimeMs))
        }
        return forgotten
    }

    /// Writes one layer: the registrations' upsert, then the replacements of those that changed the
    /// table (a separate statement, so that it sees the rows the upsert wrote), then the
    /// unregistrations (which touch other tokens than the registrations).
    private static func apply(_ layer: TokenEventBatch.Layer, on connection: PostgresConnection) async throws -> Int {
        var changed = 0
        if !layer.registrations.isEmpty {
            let registrations = layer.registrations
            let rows = try await connection.query("""
                INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id,
                    installation_id, status, last_event_at_ms, registered_at_ms, attributes)
                SELECT e.token, e.bundle, e.environment, e.kind, NULLIF(e.user_id, ''), NULLIF(e.installation, ''),
                       'active', e.at_ms, e.at_ms, e.attributes::jsonb
                  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[])
                       AS e(token, bundle, environment, kind, user_id, installation, at_ms, attributes)
                \(Self.registrationUpsert)
                """,
                [.textArray(registrations.map(\.token)),
                 .textArray(registrations.map(\.bundleID)),
                 .textArray(registrations.map(\.environment)),
                 .textArray(registrations.map(\.kind)),
                 .textArray(registrations.map(\.userID)),
                 .textArray(registrations.map(\.installationID)),
                 .int64Array(registrations.map(\.eventTimeMs)),
                 .textArray(registrations.map(\.attributes))],
                prepared: true)
            changed += rows.count
            var changedTokens = Set<String>()
            for row in rows {
                if let token = try row.string("device_token") { changedTokens.insert(token) }
            }
            // Keys are distinct within a layer, so each replaced row joins one registration.
            let replacing = registrations.filter { $0.replacementKey != nil && changedTokens.contains($0.token) }
            if !replacing.isEmpty {
                try await connection.execute("""
                    UPDATE device_tokens AS d
                       SET status = 'inactive', inactive_reason = 'replaced', inactive_at_ms = r.at_ms, updated_at = now()
                      FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])
                           AS r(bundle, installation, kind, token, at_ms, user_id)
                     WHERE d.bundle_id = r.bundle AND d.installation_id = r.installation AND d.token_kind = r.kind
                       AND d.user_id IS NOT DISTINCT FROM NULLIF(r.user_id, '')
                       AND d.device_token <> r.token AND d.status = 'active' AND d.last_event_at_ms < r.at_ms
                    """,
                    [.textArray(replacing.map(\.bundleID)),
                     .textArray(replacing.map(\.installationID)),
                     .textArray(replacing.map(\.kind)),
                     .textArray(replacing.map(\.token)),
                     .int64Array(replacing.map(\.eventTimeMs)),
                     .textArray(replacing.map(\.userID))],
                    prepared: true)
            }
            // Only barrier layers hold a registration with a previous token (alone).
            for registration in registrations where !registration.previousToken.isEmpty && changedTokens.contains(registration.token) {
                try await replacePrevious(registration, on: connection)
            }
        }
        if !layer.unregistrations.isEmpty {
            let unregistrations = layer.unregistrations
            // An unknown token gets an inactive row, so that an older registration arriving later
            // cannot activate it.
            changed += try await connection.execute(
                Self.unregistrationSQL,
                [.textArray(unregistrations.map(\.token)),
                 .textArray(unregistrations.map(\.bundleID)),
                 .int64Array(unregistrations.map(\.eventTimeMs))],
                prepared: true)
        }
        return changed
    }
}
