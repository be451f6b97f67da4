import DispatcherStatus
import PushMessages
import ServiceCore
import Synchronization

// MARK: - A campaign's pages: where they run, how they are read and sent (docs/campaigns.md)

extension CampaignRunner {
    /// Where the page starting now runs: the lowered threads while transactional work flows
    /// (`TransactionalActivity`), otherwise nil: no executor preference, so the cooperative pool, where
    /// a campaign alone on the replica competes at the same priority as the Apple connections,
    /// database and broker clients that serve it (docs/campaigns.md "The CPU"). Not the global
    /// concurrent executor as a preference: a task with any preference looks it up under a lock at
    /// every resumption (`swift_task_switch`), about 6 % of a campaign's dispatcher CPU in a profile.
    func pageExecutor() -> (any TaskExecutor)? {
        guard let executor else { return nil }
        return activity.isActive(lastAdmission: processor.classPriority.lastTransactionalAdmission, at: .now) ? executor : nil
    }

    /// Reads the audience page after `cursor` and what earlier holders recorded or parked for its
    /// tokens, on `executor` (nil: no preference). `earlier` reads on only while the page reaches past
    /// what it holds: once, finding nothing, for a campaign nobody sent before; a chunk at a time up
    /// to the last token an earlier holder sent for a resumed one (docs/campaigns.md "Pages in flight").
    /// - Throws: `PostgresError`.
    func readPage(
        _ query: AudienceQuery, after cursor: String?, of record: CampaignRecord, earlier: inout EarlierOutcomes,
        on executor: (any TaskExecutor)?
    ) async throws -> ([StoredToken], PendingRetryStore.RequestProgress) {
        let tokens = try await withTaskExecutorPreference(executor) {
            try await store.audiencePage(query, after: cursor, limit: settings.pageSize)
        }
        guard let last = tokens.last?.deviceToken else { return (tokens, PendingRetryStore.RequestProgress()) }
        let read = PendingRetryStore.ProgressRead(requestID: record.requestID, requestedAtMs: record.requestedAtMs)
        while let after = earlier.nextRead(forPageThrough: last) {
            try earlier.add(try await withTaskExecutorPreference(executor) { [processor, settings] in
                try await processor.parking.outcomes(of: read, after: after, limit: settings.pageSize)
            })
        }
        return (tokens, earlier.take(through: last))
    }

    /// A page's tokens, handed to its sending once: the runner's task keeps the box, not the tokens,
    /// so a page waiting only for answers holds none of them.
    final class PageTokens: Sendable {
        private let tokens: Mutex<[StoredToken]>
        init(_ tokens: [StoredToken]) { self.tokens = Mutex(tokens) }
        /// The tokens; later calls get none.
        func take() -> [StoredToken] { tokens.withLock { tokens in defer { tokens = [] }; return tokens } }
    }

    /// Sends one audience page through the processor (the campaign source of the pipeline).
    func sendPage(
        _ page: PageTokens, sequence: Int, record: CampaignRecord, earlier: PendingRetryStore.RequestProgress,
        turn: (after: OneShot?, started: OneShot), flags: PageFlags
    ) async -> PageEvent {
        do {
            return .finished(sequence: sequence, result: .success(try await processor.sendCampaignPage(
                SendRequestProcessor.campaignPage(page.take()), request: record.request, requestedAt: record.requestedAtMs,
                recorded: earlier.recorded, parked: earlier.parked, parkAfter: retryParkAge, lane: lane, limiter: limiter, turn: turn,
                cancelled: flags.cancelled, shouldStop: flags.shouldStop)))
        } catch {
            return .finished(sequence: sequence, result: .failure(error))
        }
    }

    /// Publishes the campaign's `CampaignProgress` (acknowledged before it returns).
    /// - Throws: `KafkaError`.
    func publishProgress(_ record: CampaignRecord, counts: CampaignCounts, done: Bool, startedAtMs: Int64) async throws {
        var progress = CampaignProgress()
        progress.campaignID = record.requestID
        progress.requestID = record.requestID
        progress.bundleID = record.request.notification?.bundleID ?? ""
        if case .audience(let audience)? = record.request.target { progress.environment = audience.environment }
        progress.processed = UInt64(counts.processed)
        progress.delivered = UInt64(counts.delivered)
        progress.rejected = UInt64(counts.rejected)
        progress.failed = UInt64(counts.failed)
        progress.skipped = UInt64(counts.skipped)
        progress.done = done
        progress.startedAtMs = startedAtMs
        progress.updatedAtMs = clock.nowMilliseconds()
        try await feedback.publish(feedback.event(.campaignProgress(progress), traceParent: record.request.traceParent), key: record.requestID)
    }
}
