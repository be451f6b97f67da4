import Foundation
import Postgres
import ProtobufCodec
import PushDomain
import PushMessages

/// The device-token table and the send log in PostgreSQL. Every statement is parameterized.
public final class TokenStore: Sendable {
    let pool: PostgresPool
    /// Which registrations may move a token to another app (`PUSH_TOKEN_REBIND_AFTER_DAYS`).
    let ownership: TokenOwnership

    /// - Parameter tokenRebindAfterDays: days an inactive row stays with its app before a
    ///   registration for another bundle id may take it (`TokenOwnership`). Default 30.
    public init(pool: PostgresPool, tokenRebindAfterDays: Int = 30) {
        self.pool = pool
        self.ownership = TokenOwnership(rebindAfterDays: tokenRebindAfterDays)
    }

    /// Applies migrations (under an advisory lock, so replicas may start together).
    /// - Throws: `PostgresError`.
    public func migrate() async throws {
        _ = try await PostgresMigrator(migrations: TokenStoreMigrations.all).migrate(using: pool)
        // send_log_v2's day partitions ahead (docs/send-log.md "Partitions"); none is dropped here.
        try await SendLogPartitions(pool: pool, retention: nil).ensure()
    }

    // MARK: Token events

    /// Applies a token event when it is newer than the last event applied to its token.
    /// - Returns: whether the table changed.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func apply(_ event: TokenEvent) async throws -> Bool {
        try await applyOne(event).changed > 0
    }

    /// `apply(_:)` for one event, with the rows a `USER_FORGOTTEN` event deactivated (to announce).
    /// - Throws: `PostgresError`.
    public func applyOne(_ event: TokenEvent) async throws -> TokenEventsApplied {
        guard let device = event.device else { return TokenEventsApplied() }
        switch event.action {
        case .registered:
            return try await register(device, at: event.eventTimeMs, previousToken: event.previousToken)
        case .unregistered:
            return TokenEventsApplied(changed: try await unregister(token: device.deviceToken, bundleID: device.bundleID, at: event.eventTimeMs) ? 1 : 0)
        case .userForgotten:
            let forgotten = try await pool.withTransaction { connection in
                try await Self.forget(TokenEventBatch.Forget(bundleID: device.bundleID, userID: device.userID, eventTimeMs: event.eventTimeMs), on: connection)
            }
            return TokenEventsApplied(changed: forgotten.isEmpty ? 0 : 1, forgotten: forgotten)
        default:
            return TokenEventsApplied()
        }
    }

    private func register(_ device: Device, at eventTime: Int64, previousToken: String) async throws -> TokenEventsApplied {
        let environment = device.environment == .sandbox ? "sandbox" : "production"
        let kind = device.kind.storedName ?? APNsTokenKind.standard.rawValue
        let attributes = Self.jsonObject(device.attributes)
        return try await pool.withTransaction { connection in
            // Serialized with token-event batches, which take the same lock, so that the owner read
            // here is the owner the upsert meets.
            _ = try await connection.query("SELECT pg_advisory_xact_lock($1)", [.int64(Self.tokenEventsLockKey)], prepared: true)
            let registration = TokenEventBatch.Registration(device, at: eventTime, previousToken: previousToken)
            let refused = try await Self.refusedByOwner([registration], ownership: ownership, on: connection)
            if !refused.isEmpty { return TokenEventsApplied(refused: refused) }
            // A registration newer than Apple's last invalidation reactivates the token; an older
            // one only refreshes the fields.
            let changed = try await connection.query("""
                INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id,
                    installation_id, status, last_event_at_ms, registered_at_ms, attributes)
                VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6, ''), 'active', $7, $7, $8)
                \(Self.registrationUpsert)
                """,
                [.string(device.deviceToken), .string(device.bundleID), .string(environment), .string(kind),
                 .string(device.userID), .string(device.installationID), .int64(eventTime), .jsonb(attributes)])
            guard !changed.isEmpty else { return TokenEventsApplied() }
            if !device.installationID.isEmpty {
                // A new token of the same installation, app and kind replaces the older ones of the
                // same user (or of no user when it has none): a stranger reusing someone's
                // installation id cannot deactivate their token.
                try await connection.execute("""
                    UPDATE device_tokens
                       SET status = 'inactive', inactive_reason = 'replaced', inactive_at_ms = $5, updated_at = now()
                     WHERE bundle_id = $1 AND installation_id = $2 AND token_kind = $3 AND device_token <> $4
                       AND user_id IS NOT DISTINCT FROM NULLIF($6, '')
                       AND status = 'active' AND last_event_at_ms < $5
                    """,
                    [.string(device.bundleID), .string(device.installationID), .string(kind),
                     .string(device.deviceToken), .int64(eventTime), .string(device.userID)])
            }
            if !previousToken.isEmpty {
                try await Self.replacePrevious(registration, on: connection)
            }
            return TokenEventsApplied(changed: 1)
        }
    }

    private func unregister(token: String, bundleID: String, at eventTime: Int64) async throws -> Bool {
        let changed = try await pool.withConnection { connection in
            try await connection.execute(
                Self.unregistrationSQL,
                [.textArray([token]), .textArray([bundleID]),
                 .int64Array([eventTime])],
                prepared: true)
        }
        return changed > 0
    }

    /// Unregistrations applied in one statement: `$1` the tokens, `$2` their bundle ids, `$3` the event
    /// times (ms since the epoch), as array literals. A token turns inactive (`unregistered`) when the
    /// event is newer than its last one and the bundle matches; an unknown token gets an inactive row, so
    /// that an older registration arriving later cannot activate it. Each row changed counts one.
    static let unregistrationSQL = """
        INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, status,
            inactive_reason, inactive_at_ms, last_event_at_ms)
        SELECT e.token, e.bundle, 'production', 'standard', 'inactive', 'unregistered', e.at_ms, e.at_ms
          FROM unnest($1::text[], $2::text[], $3::bigint[]) AS e(token, bundle, at_ms)
        ON CONFLICT (device_token) DO UPDATE SET
            status = 'inactive', inactive_reason = 'unregistered',
            inactive_at_ms = EXCLUDED.inactive_at_ms,
            last_event_at_ms = EXCLUDED.last_event_at_ms, updated_at = now()
        WHERE device_tokens.last_event_at_ms < EXCLUDED.last_event_at_ms
          AND device_tokens.bundle_id = EXCLUDED.bundle_id
        """

    // MARK: Look-ups for sending

    /// The rows of `tokens` (lowercase hex) that exist, active or not.
    /// - Throws: `PostgresError`.
    public func tokens(_ tokens: [String]) async throws -> [String: StoredToken] {
        guard !tokens.isEmpty else { return [:] }
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT \(Self.columns) FROM device_tokens WHERE device_token = ANY($1::text[])",
                [.textArray(tokens)])
        }
        var result: [String: StoredToken] = [:]
        for row in rows {
            let token = try Self.storedToken(row)
            result[token.deviceToken] = token
        }
        return result
    }

    /// The active tokens of `userIDs` for `bundleID` whose kind is one of `kinds`, in one
    /// environment or both, ordered by token.
    /// - Throws: `PostgresError`.
    public func activeTokens(userIDs: [String], bundleID: String, kinds: [String], environment: APNsEnvironment?) async throws -> [StoredToken] {
        guard !userIDs.isEmpty else { return [] }
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                SELECT \(Self.columns) FROM device_tokens
                 WHERE user_id = ANY($1::text[]) AND bundle_id = $2 AND status = 'active'
                   AND token_kind = ANY($3::text[]) AND ($4 = '' OR environment = $4)
                 ORDER BY device_token
                """,
                [.textArray(userIDs), .string(bundleID), .textArray(kinds),
                 .string(environment?.rawValue ?? "")])
        }
        return try rows.map(Self.storedToken)
    }

    /// Deactivates a token after Apple declared it invalid, unless it was registered again after
    /// `invalidatedAtMs` (Apple's 410 timestamp, or the send time when Apple gave none).
    /// - Returns: the row as it was, when it was deactivated now.
    /// - Throws: `PostgresError`.
    public func deactivate(token: String, reason: String, invalidatedAtMs: Int64, nowMs: Int64) async throws -> StoredToken? {
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                UPDATE device_tokens
                   SET status = 'inactive', inactive_reason = $2, inactive_at_ms = $4,
                       apns_invalidated_at_ms = GREATEST(COALESCE(apns_invalidated_at_ms, 0), $3),
                       updated_at = now()
                 WHERE device_token = $1 AND status = 'active' AND COALESCE(registered_at_ms, 0) < $3
                RETURNING \(Self.columns)
                """,
                [.string(token), .string(reason), .int64(invalidatedAtMs), .int64(nowMs)])
        }
        return try rows.first.map(Self.storedToken)
    }

    // MARK: Send log

    /// The serialized `FeedbackEvent`s already recorded for `requestID`, by token.
    /// - Throws: `PostgresError`.
    public func recordedOutcomes(requestID: String) async throws -> [String: [UInt8]] {
        let rows = try await pool.withConnection { connection in
            try await connection.query(
                "SELECT device_token, report FROM send_log_all WHERE request_id = $1", [.string(requestID)])
        }
        var result: [String: [UInt8]] = [:]
        for row in rows {
            if let token = try row.string("device_token"), let report = try row.bytes("report") { result[token] = report }
        }
        return result
    }

    /// One recorded outcome of a request: its serialized `FeedbackEvent` and whether its publication
    /// is known to have been acknowledged by Kafka.
    public struct RecordedOutcome: Sendable, Equatable {
        public var event: [UInt8]
        public var acknowledged: Bool
    }

    /// The outcomes already recorded for `requestID`, by token, with their acknowledgement state.
    /// - Throws: `PostgresError`.
    public func recordedOutcomeStates(requestID: String) async throws -> [String: RecordedOutcome] {
        try await recordedOutcomeStates(requestIDs: [requestID])[requestID] ?? [:]
    }

    /// Marks every recorded outcome of `requestID` as acknowledged: called when the request was
    /// abandoned gracefully after all its reports in flight were acknowledged by Kafka.
    /// - Throws: `PostgresError`.
    public func markAcknowledged(requestID: String) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.execute("""
                WITH old AS (UPDATE send_log SET acknowledged = true WHERE request_id = $1 AND NOT acknowledged)
                UPDATE send_log_v2 SET acknowledged = true WHERE request_id = $1 AND NOT acknowledged
                """, [.string(requestID)])
        }
    }

    /// Records a final outcome in `send_log_v2`; a second record for the same (request, token) is
    /// ignored, also when the old `send_log` holds one (docs/send-log.md).
    /// - Returns: whether this call recorded it.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func recordOutcome(_ report: DeliveryReport, event: [UInt8]) async throws -> Bool {
        let inserted = try await pool.withConnection { connection in
            try await connection.execute(
                SendLogV2.insert(probingOldTable: true), SendLogV2.insertParameters([SendLogRow(report, event: event)]), prepared: true)
        }
        return inserted == 1
    }

    /// A batched writer of `send_log` outcomes over this store's pool (see `SendLogWriter`).
    public func makeSendLogWriter(flushInterval: Duration = .milliseconds(5), maxBatch: Int = 500,
                                  marksAcknowledgements: Bool = true) -> SendLogWriter {
        SendLogWriter(pool: pool, flushInterval: flushInterval, maxBatch: maxBatch, marksAcknowledgements: marksAcknowledgements)
    }

    /// The `send_log` retention job over this store's pool (see `SendLogRetention`), a pass every `interval`.
    public func makeSendLogRetention(retention: Duration, interval: Duration = .seconds(600)) -> SendLogRetention {
        SendLogRetention(pool: pool, retention: retention, interval: interval)
    }

    // MARK: Helpers

    /// The conflict clause of every `INSERT INTO device_tokens` of a registration (one event or a
    /// batch): a newer registration replaces the fields, and reactivates the token only when it is
    /// newer than Apple's last invalidation (docs/token-events.md); an older one changes nothing.
    static let registrationUpsert = """
        ON CONFLICT (device_token) DO UPDATE SET
            bundle_id = EXCLUDED.bundle_id,
            environment = EXCLUDED.environment,
            token_kind = EXCLUDED.token_kind,
            user_id = EXCLUDED.user_id,
            installation_id = EXCLUDED.installation_id,
            status = CASE WHEN EXCLUDED.last_event_at_ms > COALESCE(device_tokens.apns_invalidated_at_ms, -1)
                          THEN 'active' ELSE device_tokens.status END,
            inactive_reason = CASE WHEN EXCLUDED.last_event_at_ms > COALESCE(device_tokens.apns_invalidated_at_ms, -1)
                          THEN NULL ELSE device_tokens.inactive_reason END,
            inactive_at_ms = CASE WHEN EXCLUDED.last_event_at_ms > COALESCE(device_tokens.apns_invalidated_at_ms, -1)
                          THEN NULL ELSE device_tokens.inactive_at_ms END,
            last_event_at_ms = EXCLUDED.last_event_at_ms,
            registered_at_ms = EXCLUDED.registered_at_ms,
            attributes = EXCLUDED.attributes,
            updated_at = now()
        WHERE device_tokens.last_event_at_ms < EXCLUDED.last_event_at_ms
        RETURNING device_token
        """

    static let columns = "device_token, bundle_id, environment, token_kind, user_id, installation_id, status"

    static func storedToken(_ row: PostgresRow) throws -> StoredToken {
        StoredToken(
            deviceToken: try row.string("device_token") ?? "",
            bundleID: try row.string("bundle_id") ?? "",
            environment: try row.string("environment") == "sandbox" ? .sandbox : .production,
            tokenKind: try row.string("token_kind") ?? APNsTokenKind.standard.rawValue,
            userID: try row.string("user_id") ?? "",
            installationID: try row.string("installation_id") ?? "",
            isActive: try row.string("status") == "active")
    }

    /// `attributes` as a JSON object (keys sorted), for a `jsonb` parameter; written by the project's one JSON writer.
    static func jsonObject(_ attributes: [String: String]) -> String {
        var writer = JSONWriter()
        writer.beginObject()
        for key in attributes.keys.sorted() {
            writer.writeKey(key)
            writer.writeString(attributes[key]!)
        }
        writer.endObject()
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
