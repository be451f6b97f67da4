import APNs
import APNsKeyRegistry
import PushDomain
import PushMessages
import ServiceCore

/// Carries out `ChannelLifecycle`'s decisions (docs/live-activities.md): the `channels` row, Apple's
/// channel-management requests under the bundle's credential, and the `ChannelEvent` on the feedback
/// topic. Used by the engine for `ChannelCommand` records (in key order on their partition) and by
/// `ChannelHygieneRunner`.
///
/// Every method returns once the event it publishes was acknowledged by Kafka, so the record's offset
/// (or the hygiene pass) moves on only after it. It throws only what retrying may cure (`PostgresError`,
/// `KafkaError`) and `CancellationError`; Apple's refusals and failures are outcomes (FAILED events).
public final class ChannelCommandHandler: Sendable {
    let store: ChannelStore
    let apple: (any ChannelManagement)?
    let feedback: FeedbackPublisher
    let credentials: CredentialsStore?
    let limit: Int
    let clock: any WallClock
    let logger: Logger

    /// - Parameters:
    ///   - store: the `channels` table.
    ///   - apple: Apple's channel-management API (nil: every Apple step fails, naming the missing client).
    ///   - feedback: where `ChannelEvent`s go.
    ///   - credentials: the credentials registry choosing the key of each request (nil: the client's own key).
    ///   - limit: channels per app and environment (`PUSH_CHANNEL_LIMIT`).
    public init(store: ChannelStore, apple: (any ChannelManagement)?, feedback: FeedbackPublisher, credentials: CredentialsStore?,
                limit: Int, clock: any WallClock, logger: Logger) {
        self.store = store
        self.apple = apple
        self.feedback = feedback
        self.credentials = credentials
        self.limit = limit
        self.clock = clock
        self.logger = logger.with(["component": "channels"])
    }

    /// Applies a checked `ChannelCommand` (`ChannelCommandDecoder`).
    /// - Throws: `PostgresError`, `KafkaError`, `CancellationError`.
    public func apply(_ command: ChannelCommand) async throws {
        var row = try await store.row(bundleID: command.bundleID, environment: command.environment, name: command.name)
        // A reservation that finds another row (a command raced this one) decides once more with it.
        for _ in 0..<2 {
            let step = ChannelLifecycle.step(for: command, row: row)
            logger.debug("channel command", ["key": key(command), "action": "\(command.action)", "state": row?.state.rawValue ?? "none"])
            switch step {
            case .reserveAndCreate:
                switch try await store.reserve(command, limit: limit, nowMs: clock.nowMilliseconds()) {
                case .reserved(let reserved):
                    try await createAtApple(reserved, traceParent: command.traceParent)
                    return
                case .overLimit(let count):
                    let outcome = ChannelLifecycle.Outcome(
                        state: .failed, kind: .failed, outcomeReason: .channelLimit,
                        error: "the app has \(count) channels in \(ChannelStore.stored(command.environment)); at most \(limit) (PUSH_CHANNEL_LIMIT)")
                    logger.warning("channel refused: limit reached", ["key": key(command), "count": "\(count)", "limit": "\(limit)"])
                    try await publish(.failed, row: Self.row(of: command), outcome: outcome, traceParent: command.traceParent)
                    return
                case .existing(let existing):
                    row = existing
                    continue
                }
            case .republish(let kind):
                guard let row else { return }
                try await publish(kind, row: row, atMs: row.updatedAtMs, traceParent: command.traceParent)
                return
            case .deleteAtApple(let channelID):
                guard let row else { return }
                try await deleteAtApple(row, channelID: channelID, traceParent: command.traceParent)
                return
            case .markDeleted:
                guard let row, let deleted = try await store.transition(row, from: [.failed], to: .deleted, nowMs: clock.nowMilliseconds()) else { return }
                try await publish(.deleted, row: deleted, atMs: deleted.updatedAtMs, traceParent: command.traceParent)
                return
            case .deleteAfterRecovery:
                guard let row else { return }
                // updated_at_ms is kept: hygiene's one-minute wait counts from the unanswered create.
                try await store.transition(row, from: [.creating, .deleting], to: .deleting, nowMs: row.updatedAtMs)
                logger.info("channel delete waits for the recovery of its create", ["key": row.key])
                return
            case .awaitRecovery:
                logger.info("channel create seen again while its first create is unanswered: hygiene recovers it", ["key": key(command)])
                return
            case .refuse(let reason, let error):
                let outcome = ChannelLifecycle.Outcome(state: row?.state ?? .failed, kind: .failed, outcomeReason: reason, error: error)
                try await publish(.failed, row: row ?? Self.row(of: command), outcome: outcome, traceParent: command.traceParent)
                return
            }
        }
    }

    // MARK: Apple steps (shared with hygiene)

    /// Asks Apple to create the channel of a `creating` row, then stores the outcome (`active` with
    /// Apple's id and `delete_at_ms`, or `failed`) and publishes CREATED or FAILED.
    /// - Throws: `PostgresError`, `KafkaError`, `CancellationError`.
    func createAtApple(_ row: ChannelRow, traceParent: String) async throws {
        let answer: ChannelLifecycle.AppleAnswer
        switch chooseCredentials(row) {
        case .failure(let refused):
            answer = refused.answer
        case .success(let options):
            let policy = APNsMessageStoragePolicy(rawValue: row.storagePolicy.appleValue) ?? .noMessageStored
            answer = try await call { try await $0.createChannel(
                bundleID: row.bundleID, environment: Self.apnsEnvironment(row), policy: policy, options: options) }
        }
        let outcome = ChannelLifecycle.afterCreate(answer)
        guard outcome.kind != .unspecified else {
            logger.warning("channel create got no answer from Apple: hygiene recovers it", ["key": row.key, "error": outcome.error])
            return
        }
        let nowMs = clock.nowMilliseconds()
        let deleteAt: Int64?? = outcome.state == .active ? .some(row.deleteAfterMs > 0 ? nowMs + row.deleteAfterMs : nil) : nil
        guard let written = try await store.transition(
            row, from: [.creating], to: outcome.state, channelID: outcome.channelID, deleteAtMs: deleteAt, nowMs: nowMs)
        else {
            logger.warning("channel row changed while Apple created it: outcome not stored", ["key": row.key])
            return
        }
        if outcome.kind == .created {
            logger.info("channel created", ["key": row.key, "channel_id": written.channelID ?? ""])
        } else {
            logger.warning("channel create failed", ["key": row.key, "apns_reason": outcome.apnsReason, "error": outcome.error])
        }
        try await publish(outcome.kind, row: written, outcome: outcome, atMs: nowMs, traceParent: traceParent)
    }

    /// Marks the row `deleting`, asks Apple to delete `channelID`, then stores `deleted` (Apple's
    /// success or `ChannelNotRegistered`) and publishes DELETED, or leaves it `deleting` (hygiene asks
    /// again) and publishes FAILED.
    /// - Throws: `PostgresError`, `KafkaError`, `CancellationError`.
    func deleteAtApple(_ row: ChannelRow, channelID: String, traceParent: String) async throws {
        guard let deleting = try await store.transition(row, from: [.active, .deleting], to: .deleting, nowMs: clock.nowMilliseconds()) else { return }
        let answer: ChannelLifecycle.AppleAnswer
        switch chooseCredentials(row) {
        case .failure(let refused):
            answer = refused.answer
        case .success(let options):
            answer = try await call { try await $0.deleteChannel(
                bundleID: row.bundleID, environment: Self.apnsEnvironment(row), channelID: channelID, options: options) }
        }
        let outcome = ChannelLifecycle.afterDelete(answer)
        let nowMs = clock.nowMilliseconds()
        var written = deleting
        if outcome.state == .deleted {
            guard let deleted = try await store.transition(deleting, from: [.deleting], to: .deleted, nowMs: nowMs) else { return }
            written = deleted
            logger.info("channel deleted", ["key": row.key, "channel_id": channelID])
        } else {
            logger.warning("channel delete failed", ["key": row.key, "apns_reason": outcome.apnsReason, "error": outcome.error])
        }
        try await publish(outcome.kind, row: written, outcome: outcome, atMs: nowMs, traceParent: traceParent)
    }

    /// Recovers the crashed commands among the app's `rows` (docs/live-activities.md "A create that
    /// crashed"): lists the app's channels at Apple, deletes those no row knows (orphans of crashed
    /// creates), then creates each stale `creating` row again and marks each stale `deleting` row
    /// without Apple's id `deleted`.
    /// - Returns: how many orphans were deleted at Apple; nil when the recovery waits (a young
    ///   `creating` row, or Apple's list failed).
    /// - Throws: `PostgresError`, `KafkaError`, `CancellationError`.
    func recover(bundleID: String, environment: Environment) async throws -> Int? {
        let rows = try await store.rows(bundleID: bundleID, environment: environment)
        let nowMs = clock.nowMilliseconds()
        let stale = rows.filter { ChannelLifecycle.hygiene($0, nowMs: nowMs) == .recover }
        guard let first = stale.first else { return 0 }
        guard case .success(let options) = chooseCredentials(first), let apple else { return nil }
        let listed: APNsChannelAnswer
        do {
            listed = try await apple.listChannels(bundleID: bundleID, environment: Self.apnsEnvironment(first), options: options)
        } catch let error as CancellationError {
            throw error
        } catch {
            logger.warning("listing the app's channels at Apple failed: recovery waits", ["bundle_id": bundleID, "error": "\(error)"])
            return nil
        }
        guard listed.isSuccess, let orphans = ChannelLifecycle.orphans(atApple: listed.channelIDs, rows: rows, nowMs: nowMs) else {
            logger.info("channel recovery waits", ["bundle_id": bundleID, "status": "\(listed.status)", "reason": listed.reason?.rawValue ?? ""])
            return nil
        }
        for orphan in orphans {
            let answer = try await call { try await $0.deleteChannel(
                bundleID: bundleID, environment: Self.apnsEnvironment(first), channelID: orphan, options: options) }
            logger.info("orphan channel deleted at Apple", ["bundle_id": bundleID, "channel_id": orphan, "answer": "\(answer)"])
        }
        for row in stale {
            switch row.state {
            case .creating:
                // The row stays `creating` (counted against the limit) while Apple is asked again.
                try await createAtApple(row, traceParent: "")
            case .deleting:
                guard let deleted = try await store.transition(row, from: [.deleting], to: .deleted, nowMs: clock.nowMilliseconds()) else { continue }
                try await publish(.deleted, row: deleted, atMs: deleted.updatedAtMs, traceParent: "")
            default:
                continue
            }
        }
        return orphans.count
    }

    // MARK: Helpers

    /// The request options with the credential for the row's app and environment (and the key before
    /// it as the fallback), or the refusal as an answer (`OUTCOME_REASON_NO_CREDENTIAL`, no Apple request).
    private func chooseCredentials(_ row: ChannelRow) -> Result<APNsSendOptions, RefusedAnswer> {
        var options = APNsSendOptions()
        guard let credentials else { return .success(options) }
        switch credentials.choose(bundleID: row.bundleID, environment: Self.apnsEnvironment(row)) {
        case .refused(let reason):
            return .failure(RefusedAnswer(answer: .failed(.noCredential, error: "no APNs credential for \(row.bundleID): \(reason)")))
        case .send(let chosen, let fallback):
            options.credentials = chosen
            options.fallbackCredentials = fallback
            return .success(options)
        }
    }

    private struct RefusedAnswer: Error {
        var answer: ChannelLifecycle.AppleAnswer
    }

    /// One Apple request; a thrown error becomes the dispatcher's reason (as for notifications).
    /// - Throws: `CancellationError` only (stopped while asking: not an outcome).
    private func call(_ request: (any ChannelManagement) async throws -> APNsChannelAnswer) async throws -> ChannelLifecycle.AppleAnswer {
        guard let apple else { return .failed(.connectionError, error: "no channel-management client is configured") }
        do {
            return try await request(apple).lifecycleAnswer
        } catch let error as CancellationError {
            throw error
        } catch where Task.isCancelled {
            throw CancellationError()
        } catch {
            return .failed(SendRequestProcessor.outcomeReason(for: error), error: "\(error)")
        }
    }

    /// Publishes the `ChannelEvent` of `kind` for `row`, keyed by the row's key, and returns once Kafka
    /// acknowledged it.
    func publish(_ kind: ChannelEvent.Kind, row: ChannelRow, outcome: ChannelLifecycle.Outcome? = nil, atMs: Int64 = 0,
                 traceParent: String) async throws {
        let body = ChannelLifecycle.event(kind, row: row, outcome: outcome, atMs: atMs)
        try await feedback.publish(feedback.event(id: body.eventID, .channelEvent(body), traceParent: traceParent), key: row.key)
    }

    /// A row for a command that has none (the events of a refusal).
    static func row(of command: ChannelCommand) -> ChannelRow {
        ChannelRow(bundleID: command.bundleID, environment: command.environment, name: command.name, state: .failed,
                   storagePolicy: MessageStoragePolicy(appleValue: command.messageStoragePolicy.appleValue),
                   deleteAfterMs: command.deleteAfterMs)
    }

    static func apnsEnvironment(_ row: ChannelRow) -> APNsEnvironment { row.environment == .sandbox ? .sandbox : .production }

    private func key(_ command: ChannelCommand) -> String {
        ChannelCommand.recordKey(bundleID: command.bundleID, environment: command.environment, name: command.name)
    }
}
