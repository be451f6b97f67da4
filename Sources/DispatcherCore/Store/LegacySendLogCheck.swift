import Postgres
import Synchronization

/// Whether a `send_log_v2` write must still probe the old `send_log` table for its keys
/// (docs/send-log.md "Rows of the old table still count"): the answer of the last
/// `EXISTS (SELECT 1 FROM send_log)`, trusted for `recheckInterval`. A value without I/O; the writer
/// keeps it in a `Mutex` and runs the query when `answer(at:)` returns nil.
struct LegacySendLogCheck: Sendable {
    /// How long an answer is trusted (default one minute): an old-version replica of a rolling
    /// upgrade may write to `send_log` after it was seen empty, and the table empties when its
    /// retention has passed.
    var recheckInterval: Duration
    private var known: (hasRows: Bool, at: ContinuousClock.Instant)?

    init(recheckInterval: Duration = .seconds(60)) {
        self.recheckInterval = recheckInterval
    }

    /// Whether the old table has rows, as last seen; nil when never seen or seen too long ago (ask
    /// the database, then `record(hasRows:at:)`).
    func answer(at now: ContinuousClock.Instant) -> Bool? {
        guard let known, now - known.at < recheckInterval else { return nil }
        return known.hasRows
    }

    /// Keeps what the database answered at `now`.
    mutating func record(hasRows: Bool, at now: ContinuousClock.Instant) {
        known = (hasRows, now)
    }
}

/// A `LegacySendLogCheck` shared by the batches of one `SendLogWriter` (or one `TokenStore`).
final class LegacySendLogProbe: Sendable {
    private let check: Mutex<LegacySendLogCheck>

    init(_ check: LegacySendLogCheck = LegacySendLogCheck()) {
        self.check = Mutex(check)
    }

    /// Whether a write must leave out keys of the old `send_log`: the check's answer, or the
    /// database's when the check has none (then kept for the next writes).
    /// - Throws: `PostgresError`.
    func checksOldTable(_ connection: PostgresConnection) async throws -> Bool {
        if let known = check.withLock({ $0.answer(at: .now) }) { return known }
        let hasRows = try await SendLogV2.oldTableHasRows(connection)
        check.withLock { $0.record(hasRows: hasRows, at: .now) }
        return hasRows
    }
}
