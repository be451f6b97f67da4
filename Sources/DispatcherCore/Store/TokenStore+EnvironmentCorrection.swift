import Postgres
import PushDomain

extension TokenStore {
    /// Moves a token to the environment that accepted a notification after its stored one answered
    /// `BadDeviceToken` (docs/semantics.md "The other environment after BadDeviceToken"), unless the
    /// row changed since: it must still be active, still in `from`, and registered before
    /// `refusedSinceMs` (the notification's first send, the instant the 410 rule uses too: a
    /// registration at or after it is newer than Apple's answer and wins). `last_event_at_ms` is
    /// left alone, so every newer registration event still applies afterwards.
    /// - Parameters:
    ///   - token: lowercase hex.
    ///   - from: the environment that refused it.
    ///   - to: the environment that accepted it.
    ///   - refusedSinceMs: when the notification was first sent, ms since the UNIX epoch.
    /// - Returns: whether the row was corrected.
    /// - Throws: `PostgresError`.
    public func correctEnvironment(token: String, from: APNsEnvironment, to: APNsEnvironment, refusedSinceMs: Int64) async throws -> Bool {
        let rows = try await pool.withConnection { connection in
            try await connection.query("""
                UPDATE device_tokens SET environment = $3, updated_at = now()
                 WHERE device_token = $1 AND environment = $2 AND status = 'active'
                   AND COALESCE(registered_at_ms, 0) < $4
                RETURNING device_token
                """,
                [.string(token), .string(from.rawValue), .string(to.rawValue), .int64(refusedSinceMs)])
        }
        return !rows.isEmpty
    }
}
