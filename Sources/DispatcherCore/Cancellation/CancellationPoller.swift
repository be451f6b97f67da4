import Postgres
import ServiceCore
import Synchronization

/// Reads the `cancellations` table every `interval` into the process-wide `CampaignCancellations`,
/// so that a cancel received by any replica, on any partition, stops sends here too
/// (docs/campaigns.md "Cancellation"); drops the cancels older than `lifetime`.
///
/// A failed poll is logged and tried again at the next interval; the cursor does not move, so
/// nothing is missed.
public final class CancellationPoller: Service {
    private let store: CancellationStore
    private let cancellations: CampaignCancellations
    private let interval: Duration
    private let lifetime: Duration
    private let clock: any WallClock
    private let logger: Logger
    private let cursor = Mutex(CancellationStore.Cursor())

    /// - Parameters:
    ///   - store: the `cancellations` table.
    ///   - cancellations: the process-wide set the send path checks.
    ///   - interval: the pause between two polls (`PUSH_CANCEL_POLL_MS`).
    ///   - lifetime: how long a cancel is kept: the send-log retention (`PUSH_SEND_LOG_RETENTION_H`),
    ///     or `DispatcherConfiguration.defaultCancellationLifetime` when that keeps rows forever.
    ///   - clock: for the expiry of old cancels.
    ///   - logger: failed polls.
    public init(store: CancellationStore, cancellations: CampaignCancellations, interval: Duration, lifetime: Duration,
                clock: any WallClock = SystemWallClock(), logger: Logger) {
        self.store = store
        self.cancellations = cancellations
        self.interval = interval
        self.lifetime = lifetime
        self.clock = clock
        self.logger = logger
    }

    /// Reads every row recorded since the last poll (the whole table within `lifetime` the first
    /// time), page by page, then drops the expired cancels.
    /// - Returns: the number of rows read.
    /// - Throws: `PostgresError`.
    @discardableResult
    public func poll() async throws -> Int {
        let base = cursor.withLock { $0 }
        var key = CancellationStore.Key(base)
        var horizon: UInt64?
        var read = 0
        while true {
            let limit = 5_000
            let page = try await store.page(after: key, newerThan: lifetime, limit: limit)
            for row in page.rows { cancellations.insert(row.requestID, atMs: row.recordedAtMs) }
            horizon = horizon ?? page.horizon
            read += page.rows.count
            guard page.rows.count >= limit, let last = page.last else { break }
            key = last
        }
        if let horizon { cursor.withLock { $0 = base.advanced(horizon: horizon) } }
        let expired = cancellations.expire(before: clock.nowMilliseconds() - lifetime.wholeMilliseconds)
        if expired > 0 { logger.debug("expired cancels dropped", ["cancels": "\(expired)"]) }
        return read
    }

    /// Polls every `interval` until `shutdown` triggers or the task is cancelled.
    public func run(shutdown: GracefulShutdown) async throws {
        var failing = false
        while !shutdown.isTriggered, !Task.isCancelled {
            do {
                try await poll()
                if failing { logger.info("reading cancellations works again") }
                failing = false
            } catch {
                if Task.isCancelled { return }
                if !failing { logger.warning("reading cancellations failed; retrying every interval", ["error": "\(error)"]) }
                failing = true
            }
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
        }
    }
}
