import Foundation
import PushMessages
import ServiceCore
import Synchronization

/// Runs the token-hygiene job (docs/token-hygiene.md) in every dispatcher that has it configured;
/// the job's fenced lease (`TokenHygieneStore`, the same mechanism as campaigns) lets one replica at a
/// time do a pass:
///
/// 1. over `device_tokens` in pages of `batchSize` tokens: stale active tokens are announced with
///    `TokenInvalidated` (`OUTCOME_REASON_TOKEN_STALE`) and then deactivated; old inactive rows are
///    deleted;
/// 2. finished campaign rows past their retention are deleted, `batchSize` at a time;
/// 3. the pass is recorded finished; the next is due `interval` later.
///
/// Each pass logs one line (`token hygiene pass`) with what it did, and counts it in
/// `push_token_hygiene_rows_total{action}` and `push_token_hygiene_passes_total{outcome}`.
///
/// A `Service` of the dispatcher's sources: graceful shutdown ends a pass between pages (the page in
/// progress is announced and committed, the lease released); cancellation abandons the page.
public final class TokenHygieneRunner: Service {
    /// How a pass ended.
    public enum Outcome: String, Sendable {
        /// Every part ran to its end; the pass is recorded finished.
        case completed
        /// The process is stopping: the lease was released, the next holder resumes at the position.
        case stopped
        /// Another replica holds the lease now (this one paused or lost the database): nothing more
        /// was written.
        case leaseLost = "lease_lost"
        /// PostgreSQL or Kafka failed: the page in progress was rolled back; the lease runs out and the
        /// pass resumes at the position.
        case failed
    }

    /// What one pass did.
    public struct Pass: Sendable, Equatable {
        public var outcome: Outcome = .completed
        /// Active tokens deactivated as stale (each announced first).
        public var deactivatedStale = 0
        /// Inactive token rows deleted.
        public var deletedInactive = 0
        /// Finished campaign rows deleted.
        public var deletedCampaigns = 0
        /// Pages of `device_tokens` committed.
        public var pages = 0
    }

    private let store: TokenHygieneStore
    private let feedback: FeedbackPublisher
    private let settings: TokenHygieneSettings
    private let leaseDuration: Duration
    private let owner: String
    private let clock: any WallClock
    private let logger: Logger
    /// At most one warning a minute while the lease cannot even be asked for (PostgreSQL down).
    private let takeFailures = Mutex(LogRateLimiter(interval: .seconds(60)))
    /// `push_token_hygiene_rows_total{action}`.
    private let rows: Counter
    /// `push_token_hygiene_passes_total{outcome}`.
    private let passes: Counter

    /// - Parameters:
    ///   - store: the job's SQL.
    ///   - feedback: where `TokenInvalidated` events go.
    ///   - settings: what the job does and how often.
    ///   - leaseDuration: the lease's length (`PUSH_CAMPAIGN_LEASE_MS`, as campaigns').
    ///   - instanceID: this replica's name; the lease owner is it plus a random suffix.
    ///   - clock: the cutoffs' clock (ms since the epoch).
    ///   - metrics: where the counters are registered.
    public init(store: TokenHygieneStore, feedback: FeedbackPublisher, settings: TokenHygieneSettings, leaseDuration: Duration,
                instanceID: String, clock: any WallClock, logger: Logger, metrics: MetricsRegistry = .shared) {
        self.store = store
        self.feedback = feedback
        self.settings = settings
        self.leaseDuration = leaseDuration
        self.owner = "\(instanceID)/\(UUID().uuidString.prefix(8).lowercased())"
        self.clock = clock
        self.logger = logger.with(["component": "token-hygiene"])
        self.rows = metrics.counter(
            "push_token_hygiene_rows_total", help: "Rows changed by the token-hygiene job: stale_deactivated, inactive_deleted, campaigns_deleted.",
            labelNames: ["action"])
        self.passes = metrics.counter(
            "push_token_hygiene_passes_total", help: "Token-hygiene passes by how they ended: completed, stopped, lease_lost, failed.",
            labelNames: ["outcome"])
    }

    /// Tries a pass every `min(interval, 30 s)` until `shutdown` triggers (a pass in progress stops
    /// between pages) or the task is cancelled; a failed pass is logged and resumed at a later try.
    public func run(shutdown: GracefulShutdown) async {
        let poll = min(settings.interval, .seconds(30))
        while !shutdown.isTriggered, !Task.isCancelled {
            do {
                _ = try await runOnce(until: shutdown)
            } catch {
                if Task.isCancelled { return }
            }
            do { try await shutdown.sleep(for: poll) } catch { return }
        }
    }

    /// Takes the job's lease if a pass is due and does the pass.
    /// - Parameter shutdown: when it has triggered, the pass stops before its next page (outcome
    ///   `stopped`, lease released). `nil`: the pass runs to its end.
    /// - Returns: the pass; nil when another replica holds the lease or no pass is due.
    /// - Throws: `PostgresError` or `KafkaError` when the pass failed (it was logged and counted;
    ///   the lease is left to expire, and the pass resumes at the last committed page).
    @discardableResult
    public func runOnce(until shutdown: GracefulShutdown? = nil) async throws -> Pass? {
        let attempt: (lease: CampaignLease, cursor: String?)?
        do {
            attempt = try await store.takeLease(owner: owner, duration: leaseDuration, interval: settings.interval)
        } catch {
            if let suppressed = takeFailures.withLock({ $0.admit("take", now: .now) }) {
                logger.warning("taking the token-hygiene lease failed", ["error": "\(error)", "suppressed": "\(suppressed)"])
            }
            throw error
        }
        guard let (taken, cursor) = attempt else { return nil }
        var lease = taken
        let startedAt = ContinuousClock.now
        let nowMs = clock.nowMilliseconds()
        let cutoffs = settings.cutoffs(nowMs: nowMs)
        var pass = Pass()
        var fields = ["generation": "\(lease.generation)", "resumed_at": cursor.map { Logger.shortened(token: $0) } ?? ""]
        defer {
            passes.increment(labels: [pass.outcome.rawValue])
            fields.merge([
                "outcome": pass.outcome.rawValue, "stale_deactivated": "\(pass.deactivatedStale)",
                "inactive_deleted": "\(pass.deletedInactive)", "campaigns_deleted": "\(pass.deletedCampaigns)",
                "pages": "\(pass.pages)", "took_ms": "\((ContinuousClock.now - startedAt).wholeMilliseconds)",
            ]) { _, new in new }
            if pass.outcome == .completed || pass.outcome == .stopped {
                logger.info("token hygiene pass", fields)
            } else {
                logger.warning("token hygiene pass", fields)
            }
        }
        do {
            if cutoffs.touchesTokens {
                var position = cursor
                repeat {
                    if shutdown?.isTriggered == true {
                        try await store.release(lease)
                        pass.outcome = .stopped
                        return pass
                    }
                    guard lease.isValid(at: .now) else { throw TokenHygieneStore.LeaseLost() }
                    let sentAt = ContinuousClock.now
                    let page = try await store.sweepPage(
                        lease, after: position, limit: settings.batchSize, cutoffs: cutoffs, nowMs: nowMs,
                        announce: { try await self.announce($0) })
                    lease.renewed(sentAt: sentAt)
                    pass.pages += 1
                    pass.deactivatedStale += page.deactivated
                    pass.deletedInactive += page.deleted
                    rows.increment(by: Double(page.deactivated), labels: ["stale_deactivated"])
                    rows.increment(by: Double(page.deleted), labels: ["inactive_deleted"])
                    position = page.next
                } while position != nil
            }
            if let before = cutoffs.deleteCampaignsBeforeMs {
                while true {
                    guard lease.isValid(at: .now) else { throw TokenHygieneStore.LeaseLost() }
                    let sentAt = ContinuousClock.now
                    let deleted = try await store.deleteFinishedCampaigns(lease, before: before, limit: settings.batchSize)
                    lease.renewed(sentAt: sentAt)
                    pass.deletedCampaigns += deleted
                    rows.increment(by: Double(deleted), labels: ["campaigns_deleted"])
                    if deleted < settings.batchSize { break }
                }
            }
            guard try await store.finish(lease) else { throw TokenHygieneStore.LeaseLost() }
            return pass
        } catch is TokenHygieneStore.LeaseLost {
            pass.outcome = .leaseLost
            return pass
        } catch {
            pass.outcome = .failed
            fields["error"] = "\(error)"
            throw error
        }
    }

    /// Publishes a `TokenInvalidated` (`OUTCOME_REASON_TOKEN_STALE`) per token, keyed by the token,
    /// and returns once Kafka acknowledged all of them. Event id: `FeedbackEventID.tokenInvalidated`
    /// of the token, its last registration time and `token-stale`, so a page announced again (after
    /// a crash or a failed commit) repeats the same ids.
    /// - Throws: `KafkaError` when a publication failed (the page then rolls back).
    private func announce(_ tokens: [TokenHygieneStore.StaleToken]) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            for token in tokens {
                var invalidated = TokenInvalidated(
                    deviceToken: token.deviceToken, bundleID: token.bundleID, environment: Environment(storedName: token.environment),
                    userID: token.userID, installationID: token.installationID)
                invalidated.outcomeReason = .tokenStale
                let id = FeedbackEventID.tokenInvalidated(deviceToken: token.deviceToken, apnsTimestampMs: token.registeredAtMs, requestID: "token-stale")
                let event = feedback.event(id: id, .tokenInvalidated(invalidated))
                group.addTask { [feedback] in try await feedback.publish(event, key: token.deviceToken) }
            }
        }
    }
}
