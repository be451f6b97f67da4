import Postgres
import ServiceCore

/// Deletes rows of the old `send_log` and of `send_log_v2`'s `DEFAULT` partition older than a
/// retention, in small batches so that no statement holds many row locks or runs long (see
/// `docs/send-log.md` "Retention"); `send_log_v2`'s day partitions are dropped whole by
/// `SendLogPartitions`.
///
/// A request redelivered after its rows were deleted would send again: keep the retention well
/// above the longest time a send request can wait in Kafka (its retention) plus the dispatcher's
/// retry horizon.
///
/// A `Service` of the dispatcher's sources: a pass every `interval`; graceful shutdown stops it between
/// statements (each commits on its own), cancellation between batches too.
public struct SendLogRetention: Service {
    /// The default retention: 8 days (the dispatcher reads `PUSH_SEND_LOG_RETENTION_H`, in hours).
    public static let defaultRetention: Duration = .seconds(8 * 24 * 3600)

    /// Rows whose `completed_at` is older than this are deleted.
    public let retention: Duration
    /// The most rows one `DELETE` removes.
    public let batchSize: Int
    /// The pause between the end of one pass and the start of the next (`run(shutdown:)`).
    public let interval: Duration

    private let pool: PostgresPool
    private let logger: Logger

    /// - Parameters:
    ///   - pool: the dispatcher's database (schema of `TokenStoreMigrations`).
    ///   - retention: the age, against the server's clock, past which rows go (default 8 days;
    ///     whole milliseconds count).
    ///   - batchSize: rows per `DELETE` (default 1,000; at least 1).
    ///   - interval: the pause between passes of `run(shutdown:)` (default 10 minutes).
    ///   - logger: reports each pass that deleted rows, and failures of `run(shutdown:)`.
    public init(pool: PostgresPool, retention: Duration = SendLogRetention.defaultRetention, batchSize: Int = 1_000,
                interval: Duration = .seconds(600), logger: Logger = Logger(label: "dispatcher.send-log-retention")) {
        precondition(batchSize >= 1, "batchSize must be at least 1")
        self.pool = pool
        self.retention = retention
        self.batchSize = batchSize
        self.interval = interval
        self.logger = logger
    }

    /// Deletes every row of `send_log`, `send_log_v2_default`, `request_completions`,
    /// `request_fingerprints` and `cancellations` older than the retention, `batchSize` rows per statement, until none is left.
    /// Each statement commits on its own, so an interrupted pass keeps what it deleted.
    /// - Parameter shutdown: when it has triggered, the pass stops before its next statement.
    /// - Returns: the number of rows deleted (all tables).
    /// - Throws: `PostgresError`; `CancellationError` when the task was cancelled between batches.
    @discardableResult
    public func deleteExpired(until shutdown: GracefulShutdown? = nil) async throws -> Int {
        let milliseconds = retention.wholeMilliseconds
        var deleted = 0
        // request_completions and request_fingerprints go with the send_log rows of the same
        // requests (same retention; a fingerprint's completed_at is when it was recorded), and so do
        // the cancels (the dispatchers keep them in memory as long: CancellationPoller).
        // send_log_v2_default has no completed_at index; it holds only the rows of days without a
        // partition (docs/send-log.md "Partitions").
        for (table, column) in [("send_log", "completed_at"), ("send_log_v2_default", "completed_at"), ("request_completions", "completed_at"),
                                ("request_fingerprints", "completed_at"), ("cancellations", "recorded_at")] {
            var fromTable = 0
            while shutdown?.isTriggered != true {
                try Task.checkCancellation()
                let count = try await pool.execute("""
                    DELETE FROM \(table) WHERE ctid IN (
                        SELECT ctid FROM \(table)
                         WHERE \(column) < now() - $1::bigint * interval '1 millisecond'
                         LIMIT $2)
                    """,
                    [.int64(milliseconds), .int(batchSize)], prepared: true)
                fromTable += count
                if count < batchSize { break }
            }
            if fromTable > 0 { logger.info("deleted expired rows", ["table": table, "rows": String(fromTable)]) }
            deleted += fromTable
        }
        return deleted
    }

    /// Deletes the rows of forgotten users (`USER_FORGOTTEN`, inactive reason `forgotten`) whose
    /// forget is older than the retention, with every send_log entry of their tokens, `batchSize`
    /// tokens per statement. A token registered again after the forget is active and stays.
    /// - Parameter shutdown: when it has triggered, the pass stops before its next statement.
    /// - Returns: the number of token rows deleted.
    /// - Throws: `PostgresError`; `CancellationError` when the task was cancelled between batches.
    @discardableResult
    public func deleteForgotten(until shutdown: GracefulShutdown? = nil) async throws -> Int {
        let milliseconds = retention.wholeMilliseconds
        var deleted = 0
        while shutdown?.isTriggered != true {
            try Task.checkCancellation()
            let rows = try await pool.withConnection { connection in
                try await connection.query("""
                    WITH gone AS (
                        DELETE FROM device_tokens WHERE device_token IN (
                            SELECT device_token FROM device_tokens
                             WHERE status = 'inactive' AND inactive_reason = 'forgotten'
                               AND inactive_at_ms < (extract(epoch FROM now()) * 1000)::bigint - $1::bigint
                             LIMIT $2)
                        RETURNING device_token),
                    logs AS (DELETE FROM send_log WHERE device_token IN (SELECT device_token FROM gone) RETURNING 1),
                    logs_v2 AS (DELETE FROM send_log_v2 WHERE device_token IN (SELECT device_token FROM gone) RETURNING 1)
                    SELECT (SELECT count(*) FROM gone)::bigint AS tokens,
                           (SELECT count(*) FROM logs)::bigint + (SELECT count(*) FROM logs_v2)::bigint AS logs
                    """,
                    [.int64(milliseconds), .int(batchSize)], prepared: true)
            }
            let count = Int(try rows.first?.int64("tokens") ?? 0)
            deleted += count
            if count < batchSize { break }
        }
        if deleted > 0 { logger.info("deleted forgotten users' token rows and their send_log entries", ["tokens": String(deleted)]) }
        return deleted
    }

    /// Runs `deleteExpired()` and `deleteForgotten()` now and then every `interval` until `shutdown`
    /// triggers or the task is cancelled; a failed pass is logged and tried again at the next interval.
    public func run(shutdown: GracefulShutdown) async {
        while !shutdown.isTriggered, !Task.isCancelled {
            do {
                try await deleteExpired(until: shutdown)
                try await deleteForgotten(until: shutdown)
            } catch {
                if Task.isCancelled { return }
                logger.warning("deleting expired send_log rows failed", ["error": "\(error)"])
            }
            do { try await shutdown.sleep(for: interval) } catch { return }
        }
    }
}
