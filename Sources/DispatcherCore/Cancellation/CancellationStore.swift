import Postgres
import ServiceCore

/// The `cancellations` table (migration 10): every `CancelRequest` a dispatcher received, whatever
/// the partition or replica, so that every replica's `CancellationPoller` learns it
/// (docs/campaigns.md "Cancellation"). Rows go with send_log's retention (`SendLogRetention`).
public struct CancellationStore: Sendable {
    let pool: PostgresPool

    /// - Parameter pool: the dispatcher's database (schema of `TokenStoreMigrations`).
    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// Migration 10. Listed in `TokenStoreMigrations.all`.
    ///
    /// `recorded_by_xact` is the inserting transaction's id: a poller reads the rows from its cursor
    /// on and moves the cursor only to the oldest transaction still running (`pg_snapshot_xmin`),
    /// so a row whose transaction commits after a later one's is never skipped (`Cursor`).
    public static let migration = Migration(version: 10, name: "cancellations", sql: """
        -- One row per request id with a CancelRequest (the first one's reason and time stay), read by
        -- every dispatcher every PUSH_CANCEL_POLL_MS. Deleted with send_log's retention.
        CREATE TABLE cancellations (
            request_id        text PRIMARY KEY,
            reason            text NOT NULL DEFAULT '',
            requested_at_ms   bigint NOT NULL,
            recorded_at       timestamptz NOT NULL DEFAULT now(),
            recorded_by_xact  xid8 NOT NULL DEFAULT pg_current_xact_id()
        );
        CREATE INDEX cancellations_recorded_by_xact ON cancellations (recorded_by_xact, request_id);
        CREATE INDEX cancellations_recorded_at ON cancellations (recorded_at);
        """)

    /// Where a poller has read up to: every row inserted by a transaction whose id is below
    /// `transactionID` was read. Zero reads the whole table.
    public struct Cursor: Sendable, Equatable {
        /// A PostgreSQL `xid8` (a 64-bit transaction id with its epoch).
        public var transactionID: UInt64

        /// - Parameter transactionID: see `transactionID`; 0 for the start.
        public init(transactionID: UInt64 = 0) { self.transactionID = transactionID }

        /// The cursor after every page from `self` to the end was read.
        /// - Parameter horizon: the oldest transaction still running when the first of those pages
        ///   was read (`pg_snapshot_xmin`): every transaction below it had ended, so its rows were
        ///   visible to that page and to every later one, which read on in key order. A row of a
        ///   transaction at or above it may commit later, below a key already passed: it is read
        ///   again from this cursor next time.
        /// - Returns: never behind `self`.
        public func advanced(horizon: UInt64) -> Cursor {
            Cursor(transactionID: max(transactionID, horizon))
        }
    }

    /// A position within one poll's pages: the transaction id and request id of the last row read.
    public struct Key: Sendable, Equatable {
        /// The row's `recorded_by_xact`.
        public var transactionID: UInt64
        /// The row's request id; empty before the first row of `transactionID`.
        public var requestID: String

        /// The position before every row of `cursor`'s transaction and later ones.
        public init(_ cursor: Cursor) { self.init(transactionID: cursor.transactionID, requestID: "") }

        /// - Parameters: see the properties.
        public init(transactionID: UInt64, requestID: String) {
            self.transactionID = transactionID
            self.requestID = requestID
        }
    }

    /// One row read by `page(after:newerThan:limit:)`.
    public struct Row: Sendable, Equatable {
        /// The cancelled request's id.
        public var requestID: String
        /// When the row was inserted, by the database's clock, in ms since the epoch.
        public var recordedAtMs: Int64
    }

    /// What `page(after:newerThan:limit:)` read.
    public struct Page: Sendable {
        /// The rows, in key order.
        public var rows: [Row]
        /// The oldest transaction running when the page was read (`pg_snapshot_xmin`).
        public var horizon: UInt64
        /// The key of the last row; nil when no row was read.
        public var last: Key?
    }

    /// Records a cancel; a second one for the same request id changes nothing.
    /// - Parameters:
    ///   - requestID: the cancelled request's id.
    ///   - reason: the `CancelRequest`'s reason.
    ///   - requestedAtMs: the `CancelRequest`'s `requested_at_ms`, or when it was received.
    /// - Throws: `PostgresError`.
    public func record(requestID: String, reason: String, requestedAtMs: Int64) async throws {
        _ = try await pool.execute("""
            INSERT INTO cancellations (request_id, reason, requested_at_ms) VALUES ($1, $2, $3)
            ON CONFLICT (request_id) DO NOTHING
            """, [.string(requestID), .string(reason), .int64(requestedAtMs)], prepared: true)
    }

    /// The rows after `key` (in `recorded_by_xact`, `request_id` order) recorded within `lifetime`,
    /// at most `limit`.
    /// - Throws: `PostgresError`.
    public func page(after key: Key, newerThan lifetime: Duration, limit: Int = 5_000) async throws -> Page {
        let result = try await pool.query("""
            SELECT h.horizon::text AS horizon, c.request_id, c.recorded_at, c.xact::text AS xact
              FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon) h
              LEFT JOIN LATERAL (
                  SELECT request_id, recorded_at, recorded_by_xact AS xact FROM cancellations
                   WHERE (recorded_by_xact, request_id) > ($1::text::xid8, $2)
                     AND recorded_at > now() - $3::bigint * interval '1 millisecond'
                   ORDER BY recorded_by_xact, request_id LIMIT $4) c ON true
            """,
            [.string(String(key.transactionID)), .string(key.requestID), .int64(lifetime.wholeMilliseconds), .int(limit)],
            prepared: true)
        var page = Page(rows: [], horizon: key.transactionID, last: nil)
        for row in result {
            if let text = try row.string("horizon"), let value = UInt64(text) { page.horizon = value }
            guard let requestID = try row.string("request_id"), let recordedAtMs = try row.milliseconds("recorded_at"),
                  let xact = try row.string("xact").flatMap({ UInt64($0) })
            else { continue }
            page.rows.append(Row(requestID: requestID, recordedAtMs: recordedAtMs))
            page.last = Key(transactionID: xact, requestID: requestID)
        }
        return page
    }
}
