import Postgres
import PushMessages
import ServiceCore
import Synchronization

/// Records final outcomes in `send_log` in batches: one `INSERT … SELECT * FROM unnest(…)` per
/// batch instead of one statement per notification.
///
/// A row waits at most `flushInterval` (default 5 ms) or until `maxBatch` rows (default 500) wait,
/// whichever comes first; then its batch is written with one statement, and every caller of the
/// batch gets its answer. Batches may be written concurrently, each on its own pooled connection.
/// No timer task runs while nothing waits: the first row of a batch starts a task that sleeps the
/// interval (`Task.sleep`, never blocking a thread) and then writes the batch, unless the batch
/// filled up first (the row that filled it cancels that task and writes it). The statements run on
/// the pool's own threads.
///
/// **Crash window.** A row is durable only when `record` returned. A crash loses the outcomes of the
/// batches not yet written, at most `flushInterval` plus one write's worth of rows (up to `maxBatch`
/// per batch in flight). Their notifications were sent but not recorded, so the send request is
/// redelivered after the restart and those notifications go out again: the duplicates a crash can
/// cause are bounded by the in-flight sends plus these rows (see `docs/send-log.md`).
///
/// Cancelling a caller does not withdraw its row: once queued, it is written with its batch and
/// `record` returns when that happened.
public final class SendLogWriter: Sendable {
    /// The longest a row waits before its batch is written.
    public let flushInterval: Duration
    /// The most rows written by one statement.
    public let maxBatch: Int

    private let pool: PostgresPool
    private let logger: Logger
    private let state: Mutex<State>

    private struct State {
        var queue: SendLogQueue
        /// Callers that suspended; a result for one that has not suspended yet waits in `early`.
        var waiters: [Int: CheckedContinuation<[UInt8], any Error>] = [:]
        var early: [Int: Result<[UInt8], any Error>] = [:]
        /// The task that writes the filling batch when its interval is up.
        var timer: Task<Void, Never>?
    }

    /// Creates a writer; nothing runs before the first `record`.
    /// - Parameters:
    ///   - pool: the dispatcher's database (schema of `TokenStoreMigrations`).
    ///   - flushInterval: the longest a row waits for its batch (default 5 ms).
    ///   - maxBatch: the most rows per statement (default 500, at least 1).
    ///   - logger: reports failed writes.
    public init(pool: PostgresPool, flushInterval: Duration = .milliseconds(5), maxBatch: Int = 500,
                logger: Logger = Logger(label: "dispatcher.send-log")) {
        self.pool = pool
        self.flushInterval = flushInterval
        self.maxBatch = maxBatch
        self.logger = logger
        self.state = Mutex(State(queue: SendLogQueue(maxBatch: maxBatch)))
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
    ///   when a text field holds U+0000, which PostgreSQL cannot store.
    public func record(_ report: DeliveryReport, event: [UInt8]) async throws -> [UInt8] {
        let row = SendLogRow(report, event: event)
        if row.texts.contains(where: { $0.unicodeScalars.contains("\0") }) {
            throw PostgresError(code: .init(sqlState: "22021"), message: "a send_log text field contains U+0000")
        }
        let (id, action, staleTimer) = state.withLock { state in
            let (id, action) = state.queue.enqueue(row)
            switch action {
            case .flush: return (id, action, state.timer.take())
            case .startTimer(let batch):
                // Started and registered under the lock that started the batch: a timer that fires at
                // once waits for this lock, so it is never found later, mid-write, and cancelled as stale.
                state.timer = startTimer(for: batch)
                return (id, action, nil)
            case .wait: return (id, action, nil)
            }
        }
        switch action {
        case .startTimer, .wait:
            break
        case .flush(let entries):
            staleTimer?.cancel()
            // A task of its own, so that cancelling this caller does not cancel the statements the
            // whole batch waits on.
            Task { [self] in await writeAndDeliver(entries) }
        }
        return try await result(id)
    }

    /// The task that writes batch `batch` after `flushInterval`, unless the batch fills up first
    /// (then the filling caller cancels its sleep and writes the batch). Called with the state locked;
    /// the task takes the lock itself only after its sleep. Once it took the batch's rows it is no
    /// longer in `state.timer`, so nothing cancels its write.
    private func startTimer(for batch: Int) -> Task<Void, Never> {
        Task { [self, flushInterval] in
            try? await Task.sleep(for: flushInterval)
            let entries = state.withLock { state in
                let entries = state.queue.timerFired(batch: batch)
                if entries != nil { state.timer = nil }
                return entries
            }
            if let entries { await writeAndDeliver(entries) }
        }
    }

    private func writeAndDeliver(_ entries: [SendLogQueue.Entry]) async {
        let results: [Int: Result<[UInt8], any Error>]
        do {
            let bytes = try await write(entries.map(\.row))
            DispatcherMetrics.shared.sendLogWrites.increment(by: Double(entries.count))
            results = Dictionary(uniqueKeysWithValues: entries.map { entry in
                (entry.id, bytes[entry.row.key].map { .success($0) }
                    ?? .failure(PostgresError(code: .unsupportedResult, message: "send_log row missing after the write")))
            })
        } catch {
            logger.warning("writing a send_log batch failed", ["rows": String(entries.count), "error": "\(error)"])
            results = Dictionary(uniqueKeysWithValues: entries.map { ($0.id, .failure(error)) })
        }
        deliver(results)
    }

    /// Inserts the rows (the first of each key), then reads the stored bytes of the keys that
    /// existed already.
    /// - Returns: the bytes to publish, by key.
    func write(_ rows: [SendLogRow]) async throws -> [SendLogRow.Key: [UInt8]] {
        var unique: [SendLogRow] = []
        var seen = Set<SendLogRow.Key>()
        for row in rows where seen.insert(row.key).inserted { unique.append(row) }
        return try await pool.withConnection { connection in
            var result: [SendLogRow.Key: [UInt8]] = [:]
            var remaining = unique
            // A stored row can vanish between the INSERT and the SELECT only when retention deletes
            // it; then the next round inserts this one. Three rounds are plenty.
            for _ in 0..<3 where !remaining.isEmpty {
                let inserted = try await connection.query("""
                    INSERT INTO send_log (request_id, device_token, event_id, outcome, http_status, apns_reason,
                        apns_id, attempts, report)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::integer[], $6::text[],
                        $7::text[], $8::integer[], $9::bytea[])
                    ON CONFLICT (request_id, device_token) DO NOTHING
                    RETURNING request_id, device_token
                    """,
                    [.string(PostgresArrayLiteral.text(remaining.map(\.key.requestID))),
                     .string(PostgresArrayLiteral.text(remaining.map(\.key.deviceToken))),
                     .string(PostgresArrayLiteral.text(remaining.map(\.eventID))),
                     .string(PostgresArrayLiteral.text(remaining.map(\.outcome))),
                     .string(PostgresArrayLiteral.int64(remaining.map(\.httpStatus))),
                     .string(PostgresArrayLiteral.text(remaining.map(\.apnsReason))),
                     .string(PostgresArrayLiteral.text(remaining.map(\.apnsID))),
                     .string(PostgresArrayLiteral.int64(remaining.map(\.attempts))),
                     .string(PostgresArrayLiteral.bytea(remaining.map(\.report)))],
                    prepared: true)
                var insertedKeys = Set<SendLogRow.Key>()
                for row in inserted {
                    insertedKeys.insert(SendLogRow.Key(
                        requestID: try row.string("request_id") ?? "", deviceToken: try row.string("device_token") ?? ""))
                }
                for row in remaining where insertedKeys.contains(row.key) { result[row.key] = row.report }
                let existing = remaining.filter { !insertedKeys.contains($0.key) }
                guard !existing.isEmpty else { break }
                // A new statement, so it sees the rows of concurrent writers that the INSERT waited for.
                let stored = try await connection.query("""
                    SELECT s.request_id, s.device_token, s.report
                      FROM send_log AS s
                      JOIN unnest($1::text[], $2::text[]) AS k(request_id, device_token)
                        ON s.request_id = k.request_id AND s.device_token = k.device_token
                    """,
                    [.string(PostgresArrayLiteral.text(existing.map(\.key.requestID))),
                     .string(PostgresArrayLiteral.text(existing.map(\.key.deviceToken)))],
                    prepared: true)
                for row in stored {
                    let key = SendLogRow.Key(
                        requestID: try row.string("request_id") ?? "", deviceToken: try row.string("device_token") ?? "")
                    result[key] = try row.bytes("report") ?? []
                }
                remaining = existing.filter { result[$0.key] == nil }
            }
            return result
        }
    }

    private func result(_ id: Int) async throws -> [UInt8] {
        try await withCheckedThrowingContinuation { continuation in
            let early = state.withLock { state -> Result<[UInt8], any Error>? in
                if let result = state.early.removeValue(forKey: id) { return result }
                state.waiters[id] = continuation
                return nil
            }
            if let early { continuation.resume(with: early) }
        }
    }

    private func deliver(_ results: [Int: Result<[UInt8], any Error>]) {
        let resumes = state.withLock { state in
            results.compactMap { id, result -> (() -> Void)? in
                if let continuation = state.waiters.removeValue(forKey: id) {
                    return { continuation.resume(with: result) }
                }
                state.early[id] = result
                return nil
            }
        }
        for resume in resumes { resume() }
    }
}
