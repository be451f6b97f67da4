import Postgres

/// `send_log_v2`, the day-partitioned outcome table beside the old `send_log`, and the view
/// `send_log_all` that readers use while both exist (docs/send-log.md "Two tables during the
/// transition").
public enum SendLogV2 {
    /// Migration 14: adds the partitioned table, its `DEFAULT` partition and the view. It only adds:
    /// `send_log` and its rows are not touched. The day partitions come from `SendLogPartitions`.
    public static let migration = Migration(version: 14, name: "send_log_v2", sql: """
        -- One row per (request, token) as in send_log, partitioned by request_day: the UTC day of the
        -- report's requested_at_ms, the same for every write of one (request, token), so the primary
        -- key (which must hold the partition key) still makes ON CONFLICT DO NOTHING the one-row rule.
        -- Narrower than send_log: event_id and apns_id are inside report; one index, the primary key
        -- (retention drops whole days instead of deleting by completed_at).
        CREATE TABLE send_log_v2 (
            request_id      text NOT NULL,
            device_token    text NOT NULL,
            request_day     date NOT NULL,
            http_status     integer NOT NULL DEFAULT 0,
            attempts        integer NOT NULL DEFAULT 0,
            completed_at    timestamptz NOT NULL DEFAULT now(),
            acknowledged    boolean NOT NULL DEFAULT false,
            outcome         text NOT NULL,
            apns_reason     text NOT NULL DEFAULT '',
            report          bytea NOT NULL,
            PRIMARY KEY (request_id, device_token, request_day)
        ) PARTITION BY RANGE (request_day);
        -- Rows whose day has no partition: a write never fails for a missing day.
        CREATE TABLE send_log_v2_default PARTITION OF send_log_v2 DEFAULT;
        -- What readers read until a later migration drops send_log and redefines this view.
        CREATE VIEW send_log_all AS
            SELECT request_id, device_token, outcome, http_status, apns_reason, attempts, acknowledged, report, completed_at
              FROM send_log_v2
            UNION ALL
            SELECT request_id, device_token, outcome, http_status, apns_reason, attempts, acknowledged, report, completed_at
              FROM send_log;
        """)

    /// The batch `INSERT` of `SendLogWriter` and `TokenStore.recordOutcome`: parameters $1 request
    /// ids, $2 device tokens, $3 `requested_at_ms` (0: today, UTC), $4 outcomes, $5 HTTP statuses,
    /// $6 Apple reasons, $7 attempts, $8 reports, as arrays; its affected row count is the number of
    /// keys inserted (a key that has a row already is left as it is).
    /// - Parameter probingOldTable: whether keys present in the old `send_log` are left out (while it
    ///   has rows, `LegacySendLogCheck`).
    static func insert(probingOldTable: Bool) -> String {
        """
        INSERT INTO send_log_v2 (request_id, device_token, request_day, outcome, http_status, apns_reason, attempts, report)
        SELECT i.request_id, i.device_token, \(day(of: "i.requested_at_ms")), i.outcome, i.http_status, i.apns_reason, i.attempts, i.report
          FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::integer[], $6::text[], $7::integer[], $8::bytea[])
               AS i(request_id, device_token, requested_at_ms, outcome, http_status, apns_reason, attempts, report)
        \(probingOldTable ? """
         WHERE NOT EXISTS (SELECT 1 FROM send_log AS s WHERE s.request_id = i.request_id AND s.device_token = i.device_token)
        """ : "")
        ON CONFLICT (request_id, device_token, request_day) DO NOTHING
        """
    }

    /// The latest `requested_at_ms` keyed by its own day: 9999-12-31T23:59:59.999Z. Later ones (a
    /// producer's `created_at_ms` of Int64.max) take that day, still the same for every write of the
    /// request; without the bound the day overflowed `integer` and failed the whole batch.
    static let latestKeyedMilliseconds: Int64 = 253_402_300_799_999

    /// The SQL expression of the `request_day` of a `requested_at_ms` (bigint, milliseconds since the
    /// Unix epoch): its UTC day (at most 9999-12-31, `latestKeyedMilliseconds`), or today's (UTC, the
    /// server's clock) when it is not positive. The same day as `SendLogDay(milliseconds:)` in range.
    static func day(of milliseconds: String) -> String {
        """
        CASE WHEN \(milliseconds) > 0 THEN date '1970-01-01' + (LEAST(\(milliseconds), \(latestKeyedMilliseconds)) / 86400000)::integer \
        ELSE (now() AT TIME ZONE 'UTC')::date END
        """
    }

    /// The parameters of `insert(probingOldTable:)` for `rows`.
    static func insertParameters(_ rows: [SendLogRow]) -> [PostgresValue?] {
        [.textArray(rows.map(\.key.requestID)),
         .textArray(rows.map(\.key.deviceToken)),
         .int64Array(rows.map(\.requestedAtMs)),
         .textArray(rows.map(\.outcome)),
         .int32Array(rows.map(\.httpStatus)),
         .textArray(rows.map(\.apnsReason)),
         .int32Array(rows.map(\.attempts)),
         .byteaArray(rows.map(\.report))]
    }

    /// Whether the old `send_log` table has any row.
    static func oldTableHasRows(_ connection: PostgresConnection) async throws -> Bool {
        try await connection.query("SELECT EXISTS (SELECT 1 FROM send_log) AS any", prepared: true).first?.bool("any") ?? true
    }
}
