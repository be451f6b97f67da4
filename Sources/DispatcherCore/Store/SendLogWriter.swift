import Postgres
import PushMessages
import ServiceCore
import Synchronization

/// Records final outcomes in `send_log_v2` in batches: one `INSERT … SELECT … FROM unnest(…)` per
/// batch instead of one statement per notification (docs/send-log.md; rows of the old `send_log`
/// still count, "Rows of the old table still count").
///
/// The batching is a `Batcher`'s: a row waits at most `flushInterval` (default 5 ms) for its batch to
/// fill while a write slot is free, never past `maxBatch` rows (default 500); while all
/// `maxConcurrentWrites` slots are busy, rows gather for the next batch. Every caller of a batch gets
/// its answer when the statement returned. The writer is a `Service`: its `run(shutdown:)` is the
/// flush loop, and the dispatcher stops it after everything that records outcomes stopped, so that a
/// graceful shutdown writes every outcome it was given.
///
/// **Crash window.** A row is durable only when `record` returned. A crash loses the outcomes of the
/// batches not yet written, at most `flushInterval` plus one write's worth of rows (up to `maxBatch`
/// per batch in flight). Their notifications were sent but not recorded, so the send request is
/// redelivered after the restart and those notifications go out again: the duplicates a crash can
/// cause are bounded by the in-flight sends plus these rows (see `docs/send-log.md`).
///
/// Cancelling a caller does not withdraw its row: once queued, it is written with its batch and
/// `record` returns when that happened.
///
/// **Acknowledgement marks** (`markAcknowledged`, on unless `marksAcknowledgements` is false). Once
/// Kafka acknowledged a report, its row's `acknowledged` column is set, batched likewise (one
/// `UPDATE … FROM unnest(…)` per batch of up to `maxMarkBatch`, a mark waiting at most
/// `markInterval`). A redelivered request publishes again only the reports not marked, so after a
/// SIGKILL the reports published twice are the ones whose rows were recorded and not marked yet.
/// Those are bounded: a report takes a place in the unmarked window (`reserveUnmarked()`, at most
/// `unflushedMarks` places) before its row is recorded, and gives it back once its mark was written
/// (or its publication failed); while the window is full, outcomes wait to be recorded, and the
/// notifications behind them wait for their in-flight permits (docs/send-log.md).
public final class SendLogWriter: Service, Sendable {
    /// The longest a row waits before its batch is written.
    public let flushInterval: Duration
    /// The most rows written by one statement.
    public let maxBatch: Int
    /// Whether acknowledged reports are marked in `send_log` as Kafka acknowledges them.
    public let marksAcknowledgements: Bool
    /// The longest an acknowledgement mark waits before its batch is written (default 20 ms).
    public let markInterval: Duration
    /// The most marks written by one statement (default 250).
    public let maxMarkBatch: Int
    /// The most reports recorded in `send_log` and not yet marked acknowledged (the unmarked
    /// window: published and waiting for Kafka, or acknowledged and waiting for their mark), so the
    /// most a SIGKILL can make a redelivery publish again; 0 when marks are off (unbounded then).
    public var unflushedMarks: Int { marksAcknowledgements ? 2 * maxMarkBatch : 0 }
    /// The places of the unmarked window; nil when marks are off.
    private let unmarked: AsyncSemaphore?

    private let pool: PostgresPool
    private let logger: Logger
    private let batcher: Batcher<SendLogRow, [UInt8]?>
    private let marks: Batcher<SendLogRow.Key, Void>
    /// Whether the old `send_log` still has rows, as last seen (shared by the batches).
    private let legacy: LegacySendLogProbe

    /// Creates a writer; rows are written once `run(shutdown:)` runs.
    /// - Parameters:
    ///   - pool: the dispatcher's database (schema of `TokenStoreMigrations`).
    ///   - flushInterval: the longest a row waits for its batch (default 5 ms).
    ///   - maxBatch: the most rows per statement (default 500, at least 1).
    ///   - maxConcurrentWrites: statements running at once, each on its own pooled connection (default 4).
    ///   - marksAcknowledgements: whether `markAcknowledged` writes its marks (default true).
    ///   - markInterval: the longest a mark waits for its batch (default 20 ms).
    ///   - maxMarkBatch: the most marks per statement (default 250, at least 1).
    ///   - logger: reports failed writes.
    public init(pool: PostgresPool, flushInterval: Duration = .milliseconds(5), maxBatch: Int = 500, maxConcurrentWrites: Int = 4,
                marksAcknowledgements: Bool = true, markInterval: Duration = .milliseconds(20), maxMarkBatch: Int = 250,
                logger: Logger = Logger(label: "dispatcher.send-log")) {
        self.pool = pool
        self.flushInterval = flushInterval
        self.maxBatch = max(1, maxBatch)
        self.marksAcknowledgements = marksAcknowledgements
        self.markInterval = markInterval
        self.maxMarkBatch = max(1, maxMarkBatch)
        self.unmarked = marksAcknowledgements ? AsyncSemaphore(permits: 2 * max(1, maxMarkBatch)) : nil
        self.logger = logger
        let legacy = LegacySendLogProbe()
        self.legacy = legacy
        self.marks = Batcher(
            name: "send_log acknowledgement marks", metricLabel: "send_log_marks",
            settings: .init(maxBatch: max(1, maxMarkBatch), maxConcurrentBatches: 1, maxWait: markInterval)
        ) { [logger] keys in
            do {
                try await Self.markAcknowledged(pool, keys)
            } catch {
                // A mark lost is a report published again on a redelivery: a repeat, never a loss.
                logger.warning("writing acknowledgement marks failed", ["rows": String(keys.count), "error": "\(error)"])
                throw error
            }
            return keys.map { _ in () }
        }
        self.batcher = Batcher(
            name: "send_log", metricLabel: "send_log", settings: .init(maxBatch: maxBatch, maxConcurrentBatches: maxConcurrentWrites, maxWait: flushInterval)
        ) { [logger] rows in
            do {
                let bytes = try await SendLogWriter.write(pool, rows, legacy: legacy)
                DispatcherMetrics.shared.sendLogWrites.increment(by: Double(rows.count))
                return bytes
            } catch {
                logger.warning("writing a send_log batch failed", ["rows": String(rows.count), "error": "\(error)"])
                throw error
            }
        }
    }

    /// The flush loop (see `Batcher.run(shutdown:)`): after a graceful shutdown, rows already given
    /// are written before it returns.
    public func run(shutdown: GracefulShutdown) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { [marks] in try await marks.run(shutdown: shutdown) }
            try await batcher.run(shutdown: shutdown)
        }
    }

    /// Waits for a place in the unmarked window, to take before a report's row is recorded (or an
    /// unmarked row's report is published again) and to give back through `markAcknowledged(…,
    /// releasing:)` or, when the report is not published after all, `release()`.
    /// - Returns: the place, held; nil when marks are off (no window).
    /// - Throws: `CancellationError` when the caller is cancelled while waiting (no place is held).
    func reserveUnmarked() async throws -> NotificationPermit? {
        guard let unmarked else { return nil }
        let place = NotificationPermit(unmarked)
        try await place.acquire()
        return place
    }

    /// Marks the row of (`requestID`, `deviceToken`) acknowledged: Kafka acknowledged its report.
    /// Queued without waiting (callable from Kafka's delivery callback); a no-op when marks are off
    /// or the writer stopped (the report is then published again if the request is redelivered).
    /// - Parameter place: the report's place in the unmarked window, given back once the mark's
    ///   statement ran (written, or failed: a mark lost is a repeat on redelivery, never a loss).
    func markAcknowledged(requestID: String, deviceToken: String, releasing place: NotificationPermit? = nil) {
        var done: (@Sendable () -> Void)?
        if let place { done = { place.release() } }
        guard marksAcknowledgements, marks.enqueue(SendLogRow.Key(requestID: requestID, deviceToken: deviceToken), whenRun: done) else {
            place?.release()
            return
        }
    }

    /// Sets `acknowledged` on the rows of `keys`, in `send_log_v2` or in the old `send_log` (a request
    /// begun before the upgrade). A report is published only after its row was written, so every key
    /// has its row (unless retention deleted it: then nothing is set).
    static func markAcknowledged(_ pool: PostgresPool, _ keys: [SendLogRow.Key]) async throws {
        _ = try await pool.withConnection { connection in
            try await connection.query("""
                WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k(request_id, device_token)),
                     old AS (UPDATE send_log AS s SET acknowledged = true FROM k
                              WHERE s.request_id = k.request_id AND s.device_token = k.device_token AND NOT s.acknowledged)
                UPDATE send_log_v2 AS s SET acknowledged = true FROM k
                 WHERE s.request_id = k.request_id AND s.device_token = k.device_token AND NOT s.acknowledged
                """,
                [.textArray(keys.map(\.requestID)),
                 .textArray(keys.map(\.deviceToken))],
                prepared: true)
        }
    }

    /// Records the final outcome of one notification, once per (request id, device token).
    ///
    /// - Parameters:
    ///   - report: the outcome; its request id and device token are the key.
    ///   - event: the serialized `FeedbackEvent` to publish for it.
    /// - Returns: the bytes to publish: `event` when this call recorded the outcome; the bytes stored
    ///   by the earlier record when the (request id, device token) already had one (a redelivered
    ///   request never publishes a second, different outcome). Two calls for the same key in one
    ///   batch both get the first call's bytes.
    /// - Throws: `PostgresError` when the batch could not be written (every caller of that batch gets
    ///   the error and should retry: nothing of it was recorded), or at once with SQLSTATE 22021
    ///   when a text field holds U+0000, which PostgreSQL cannot store; `Batcher.Stopped` after the
    ///   writer stopped.
    public func record(_ report: DeliveryReport, event: [UInt8]) async throws -> [UInt8] {
        let row = SendLogRow(report, event: event)
        if row.texts.contains(where: { $0.utf8.contains(0) }) {
            throw PostgresError(code: .init(sqlState: "22021"), message: "a send_log text field contains U+0000")
        }
        guard let bytes = try await batcher.submit(row) else {
            throw PostgresError(code: .unsupportedResult, message: "send_log row missing after the write")
        }
        return bytes
    }

    /// Inserts the rows (the first of each key) into `send_log_v2`, leaving out keys the old
    /// `send_log` holds while it has rows (`LegacySendLogCheck`) (docs/send-log.md).
    ///
    /// When the statement inserted every key, each row's own report is what to publish, and nothing
    /// is read back: the usual batch. Otherwise some keys had a row already (a redelivered request,
    /// a concurrent writer, the old table), and the stored reports of the batch's keys are read from
    /// `send_log_all`: for a key this statement inserted, that is its own report.
    /// - Returns: the bytes to publish, one per row of `rows`, in order (a row whose key came earlier
    ///   in the batch gets the bytes of that first row).
    static func write(_ pool: PostgresPool, _ rows: [SendLogRow], legacy: LegacySendLogProbe) async throws -> [[UInt8]?] {
        var unique: [SendLogRow] = []
        var uniqueIndex: [Int] = []
        uniqueIndex.reserveCapacity(rows.count)
        var firstOfKey: [SendLogRow.Key: Int] = [:]
        for row in rows {
            if let first = firstOfKey[row.key] {
                uniqueIndex.append(first)
            } else {
                firstOfKey[row.key] = unique.count
                uniqueIndex.append(unique.count)
                unique.append(row)
            }
        }
        return try await pool.withConnection { connection in
            let probing = try await legacy.checksOldTable(connection)
            let insert = SendLogV2.insert(probingOldTable: probing)
            let inserted = try await connection.execute(insert, SendLogV2.insertParameters(unique), prepared: true)
            if inserted == unique.count { return uniqueIndex.map { unique[$0].report } }
            var stored = try await storedReports(connection, of: unique)
            // A stored row can vanish between the INSERT and the SELECT only when retention deletes
            // it; then the next round inserts this one. Three rounds are plenty.
            for _ in 1..<3 where stored.count < unique.count {
                let missing = unique.filter { stored[$0.key] == nil }
                try await connection.execute(insert, SendLogV2.insertParameters(missing), prepared: true)
                stored.merge(try await storedReports(connection, of: missing)) { first, _ in first }
            }
            return uniqueIndex.map { stored[unique[$0].key] }
        }
    }

    /// The stored reports of the keys of `rows`, from `send_log_all`. A new statement, so it sees the
    /// rows of concurrent writers that an INSERT before it waited for.
    private static func storedReports(_ connection: PostgresConnection, of rows: [SendLogRow]) async throws -> [SendLogRow.Key: [UInt8]] {
        let stored = try await connection.query("""
            SELECT s.request_id, s.device_token, s.report
              FROM send_log_all AS s
              JOIN unnest($1::text[], $2::text[]) AS k(request_id, device_token)
                ON s.request_id = k.request_id AND s.device_token = k.device_token
            """,
            [.textArray(rows.map(\.key.requestID)), .textArray(rows.map(\.key.deviceToken))],
            prepared: true)
        var result: [SendLogRow.Key: [UInt8]] = [:]
        for row in stored {
            let key = SendLogRow.Key(requestID: try row.string("request_id") ?? "", deviceToken: try row.string("device_token") ?? "")
            result[key] = try row.bytes("report") ?? []
        }
        return result
    }
}
