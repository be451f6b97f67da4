import Foundation
import PushDomain
import PushMessages
import ServiceCore
import Synchronization

/// The channel-hygiene job (docs/live-activities.md): in every dispatcher, under a fenced lease in
/// `job_leases` (the token-hygiene job's mechanism) so that one replica at a time does a pass:
///
/// 1. `active` channels past their `delete_at_ms` (`ChannelCommand.delete_after_ms`), and `deleting`
///    rows whose delete did not get through for a minute, are deleted at Apple, marked `deleted` and
///    announced with a `ChannelEvent` DELETED;
/// 2. crashed commands (a `creating` row, or a `deleting` row without Apple's id, unanswered for a
///    minute) are recovered per app and environment: Apple's `all-channels` list, the ids no row knows
///    deleted at Apple, then the create asked again (CREATED or FAILED published) or the row marked
///    deleted.
///
/// A `Service` of the dispatcher's sources: graceful shutdown ends a pass between rows (the row in
/// progress finishes); cancellation abandons it.
public final class ChannelHygieneRunner: Service {
    /// What one pass did.
    public struct Pass: Sendable, Equatable {
        /// Channels deleted at Apple (or found already gone there) and marked deleted.
        public var deleted = 0
        /// Apps whose crashed commands were recovered.
        public var recoveredApps = 0
        /// Orphan channels deleted at Apple by recoveries.
        public var orphansDeleted = 0
        /// Whether the pass stopped early (shutdown or an expired lease).
        public var stopped = false
    }

    private let store: ChannelStore
    private let handler: ChannelCommandHandler
    private let settings: ChannelSettings
    private let leaseDuration: Duration
    private let owner: String
    private let clock: any WallClock
    private let logger: Logger
    private let failures = Mutex(LogRateLimiter(interval: .seconds(60)))

    /// - Parameters:
    ///   - store: the `channels` table and the job's lease.
    ///   - handler: carries out the Apple steps and publishes the events.
    ///   - settings: the pass interval and size.
    ///   - leaseDuration: the lease's length (`PUSH_CAMPAIGN_LEASE_MS`, as token hygiene's).
    ///   - instanceID: this replica's name; the lease owner is it plus a random suffix.
    public init(store: ChannelStore, handler: ChannelCommandHandler, settings: ChannelSettings, leaseDuration: Duration,
                instanceID: String, clock: any WallClock, logger: Logger) {
        self.store = store
        self.handler = handler
        self.settings = settings
        self.leaseDuration = leaseDuration
        self.owner = "\(instanceID)/\(UUID().uuidString.prefix(8).lowercased())"
        self.clock = clock
        self.logger = logger.with(["component": "channel-hygiene"])
    }

    /// Tries a pass every `min(hygieneInterval, 30 s)` until `shutdown` triggers or the task is
    /// cancelled; a failed pass is logged (at most once a minute) and tried again later.
    public func run(shutdown: GracefulShutdown) async {
        let poll = min(settings.hygieneInterval, .seconds(30))
        while !shutdown.isTriggered, !Task.isCancelled {
            do {
                _ = try await runOnce(until: shutdown)
            } catch {
                if Task.isCancelled { return }
                if let suppressed = failures.withLock({ $0.admit("pass", now: .now) }) {
                    logger.warning("channel hygiene pass failed", ["error": "\(error)", "suppressed": "\(suppressed)"])
                }
            }
            do { try await shutdown.sleep(for: poll) } catch { return }
        }
    }

    /// Takes the job's lease if a pass is due and does the pass.
    /// - Parameter shutdown: when it has triggered, the pass stops before its next row.
    /// - Returns: the pass; nil when another replica holds the lease or no pass is due.
    /// - Throws: `PostgresError`, `KafkaError` (the lease is left to expire; the next pass finds the
    ///   same rows).
    @discardableResult
    public func runOnce(until shutdown: GracefulShutdown? = nil) async throws -> Pass? {
        guard let lease = try await store.takeLease(owner: owner, duration: leaseDuration, interval: settings.hygieneInterval) else { return nil }
        var pass = Pass()
        let nowMs = clock.nowMilliseconds()
        var recoveries: [String: (bundleID: String, environment: Environment)] = [:]
        for row in try await store.hygieneCandidates(nowMs: nowMs, limit: settings.hygieneBatchSize) {
            if shutdown?.isTriggered == true || !lease.isValid(at: .now) {
                pass.stopped = true
                break
            }
            switch ChannelLifecycle.hygiene(row, nowMs: nowMs) {
            case .none:
                continue
            case .deleteAtApple(let channelID):
                try await handler.deleteAtApple(row, channelID: channelID, traceParent: "")
                if try await store.row(bundleID: row.bundleID, environment: row.environment, name: row.name)?.state == .deleted {
                    pass.deleted += 1
                }
            case .recover:
                recoveries[ChannelCommand.recordKey(bundleID: row.bundleID, environment: row.environment, name: "")] = (row.bundleID, row.environment)
            }
        }
        for (_, app) in recoveries.sorted(by: { $0.key < $1.key }) where !pass.stopped {
            if shutdown?.isTriggered == true || !lease.isValid(at: .now) {
                pass.stopped = true
                break
            }
            if let orphans = try await handler.recover(bundleID: app.bundleID, environment: app.environment) {
                pass.recoveredApps += 1
                pass.orphansDeleted += orphans
            }
        }
        if pass.stopped {
            try await store.release(lease)
        } else {
            try await store.finish(lease)
        }
        if pass.deleted > 0 || pass.recoveredApps > 0 || pass.stopped {
            logger.info("channel hygiene pass", [
                "deleted": "\(pass.deleted)", "recovered_apps": "\(pass.recoveredApps)", "orphans_deleted": "\(pass.orphansDeleted)",
                "stopped": "\(pass.stopped)",
            ])
        }
        return pass
    }
}
