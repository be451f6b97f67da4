import DispatcherStatus
import Foundation
import PushMessages
import ServiceCore
import Synchronization

/// Runs campaigns and scheduled sends (docs/campaigns.md): takes the lease of a due `campaigns` row,
/// pages its audience, sends each page through `SendRequestProcessor` in the campaign lane, checkpoints
/// under the lease's generation, publishes `CampaignProgress` at a steady interval and
/// `RequestCompleted` at the end. At most `CampaignSettings.concurrency` campaigns at once. A `Service`
/// of the dispatcher's sources (docs/lifecycle.md "dispatcher").
public final class CampaignRunner: Service {
    let store: CampaignStore
    let processor: SendRequestProcessor
    let feedback: FeedbackPublisher
    let settings: CampaignSettings
    private let owner: String
    let clock: any WallClock
    private let logger: Logger
    private let cancellations: CampaignCancellations
    let lane: AsyncSemaphore
    let limiter: AppRateLimiter
    /// `push_campaigns_running`: campaigns this process holds the lease of.
    private let runningGauge: Gauge
    /// `push_campaign_leases_total{event}`: taken, released, lost, finished.
    private let leaseEvents: Counter
    private let running = Mutex<Set<String>>([])
    /// Where campaign pages run while transactional work flows: threads at `settings.niceness`, or
    /// nil (0) for the cooperative pool.
    let executor: BackgroundTaskExecutor?
    /// Whether transactional work flowed lately (`settings.niceHold`), asked before each page.
    let activity: TransactionalActivity
    /// How long a page waits on timers for a notification's retries before parking it
    /// (`PUSH_MAX_UNCOMMITTED_AGE_MS`, as a record's).
    let retryParkAge: Duration

    /// - Parameters:
    ///   - instanceID: this replica's name; the lease owner is it plus a random suffix.
    ///   - cancellations: cancels seen by this process's intake.
    ///   - retryParkAge: a notification whose retry wait would keep its page unfinished longer than
    ///     this since the page started is parked in `pending_retries` (default 60 s, the record cap).
    public init(store: CampaignStore, processor: SendRequestProcessor, feedback: FeedbackPublisher, settings: CampaignSettings,
                instanceID: String, cancellations: CampaignCancellations, clock: any WallClock, logger: Logger,
                retryParkAge: Duration = RetryParkingPolicy().maxUncommittedAge) {
        self.retryParkAge = retryParkAge
        self.store = store
        self.processor = processor
        self.feedback = feedback
        self.settings = settings
        self.owner = "\(instanceID)/\(UUID().uuidString.prefix(8).lowercased())"
        self.clock = clock
        self.logger = logger.with(["component": "campaigns"])
        self.cancellations = cancellations
        self.lane = AsyncSemaphore(permits: settings.maxInFlight)
        self.limiter = AppRateLimiter(defaultRate: settings.defaultRatePerApp, limits: settings.rateLimits)
        self.executor = settings.niceness > 0
            ? BackgroundTaskExecutor(name: "campaigns", threads: ProcessInfo.processInfo.activeProcessorCount, niceness: settings.niceness)
            : nil
        self.activity = TransactionalActivity(hold: settings.niceHold)
        self.runningGauge = MetricsRegistry.shared.gauge("push_campaigns_running", help: "Campaigns whose lease this dispatcher holds.")
        self.leaseEvents = MetricsRegistry.shared.counter(
            "push_campaign_leases_total", help: "Campaign lease events: taken, released, lost, finished.", labelNames: ["event"])
    }

    /// Whether a decoded request is held as a campaign row instead of being sent now: an audience
    /// target, or a `send_at_ms` after `nowMs`.
    public static func isCampaign(_ request: SendRequest, nowMs: Int64) -> Bool {
        if case .audience? = request.target { return true }
        return request.sendAtMs > nowMs
    }

    /// Takes and runs due campaigns until `shutdown` triggers (no new campaign is taken; running ones
    /// stop sending, finish what is in flight and release their lease, their unfinished page redone by
    /// the next holder) or the task is cancelled (sends in flight are abandoned). A page (its read,
    /// its sends, child tasks all) runs on the lowered threads when transactional work flowed within
    /// `niceHold` as it starts (`pageExecutor()`), else on the cooperative pool; the runner's own
    /// steps (leases and their renewals, checkpoints) stay on the cooperative pool, so that a busy
    /// machine never makes a holder lose its lease.
    public func run(shutdown: GracefulShutdown) async {
        await takeAndRun(shutdown)
    }

    private func takeAndRun(_ shutdown: GracefulShutdown) async {
        await withDiscardingTaskGroup { group in
            while !shutdown.isTriggered, !Task.isCancelled {
                var took = false
                if running.withLock({ $0.count }) < settings.concurrency {
                    do {
                        if let record = try await store.takeLease(owner: owner, duration: settings.lease), let lease = record.lease {
                            took = true
                            running.withLock { _ = $0.insert(record.requestID) }
                            group.addTask {
                                await self.runCampaign(record, lease: lease, shutdown: shutdown)
                                self.running.withLock { _ = $0.remove(record.requestID) }
                            }
                        }
                    } catch {
                        logger.warning("taking a campaign lease failed", ["error": "\(error)"])
                    }
                }
                if took { continue }
                var sleep = settings.pollInterval
                if let wait = try? await store.millisecondsUntilNextDue(), wait >= 0, .milliseconds(wait) < sleep {
                    sleep = .milliseconds(max(1, wait))
                }
                try? await shutdown.sleep(for: sleep)
            }
        }
    }

    // MARK: One campaign

    /// Lease state shared by the sending loop and the renewal task.
    private final class Holder: Sendable {
        let lease: Mutex<CampaignLease>
        let cancelled = Atomic<Bool>(false)
        /// Set when a page or a write failed: the other pages stop sending.
        let aborted = Atomic<Bool>(false)
        init(_ lease: CampaignLease, cancelled: Bool) {
            self.lease = Mutex(lease)
            self.cancelled.store(cancelled, ordering: .relaxed)
        }
        var current: CampaignLease { lease.withLock { $0 } }
        func isValid() -> Bool { lease.withLock { $0.isValid(at: .now) } }
        func markLost() { lease.withLock { $0.markLost() } }
        func abort() { aborted.store(true, ordering: .relaxed) }
    }

    private func runCampaign(_ record: CampaignRecord, lease: CampaignLease, shutdown: GracefulShutdown) async {
        let requestID = record.requestID
        let holder = Holder(lease, cancelled: record.cancelRequested || cancellations.contains(requestID))
        let fields = ["request_id": requestID, "generation": "\(lease.generation)"]
        logger.info("campaign lease taken", fields.merging([
            "cursor": record.cursor.map { Logger.shortened(token: $0) } ?? "", "processed": "\(record.counts.processed)",
        ]) { a, _ in a })
        runningGauge.increment()
        leaseEvents.increment(labels: ["taken"])
        defer { runningGauge.decrement() }
        // The renewal runs beside the sending as a child task, for as long as the campaign is held.
        let finished = await withTaskGroup(of: Void.self) { group -> Bool in
            group.addTask { await self.renewLoop(holder) }
            defer { group.cancelAll() }
            do {
                return try await send(record, holder: holder, shutdown: shutdown)
            } catch {
                logger.warning("campaign failed; it resumes from its checkpoint", fields.merging(["error": "\(error)"]) { a, _ in a })
                try? await Task.sleep(for: .seconds(1))
                return false
            }
        }
        if finished {
            leaseEvents.increment(labels: ["finished"])
            return
        }
        if holder.isValid() {
            _ = try? await store.release(holder.current)
            leaseEvents.increment(labels: ["released"])
            logger.info("campaign lease released", fields)
        } else {
            leaseEvents.increment(labels: ["lost"])
            logger.warning("campaign lease lost: stopped sending", fields)
        }
    }

    /// Renews the lease every `cancelCheckInterval` (at most a third of the lease) and reads the
    /// cancel flag; a failed or empty renewal marks the lease lost.
    private func renewLoop(_ holder: Holder) async {
        let interval = min(settings.cancelCheckInterval, settings.lease / 3)
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            let sentAt = ContinuousClock.now
            do {
                if let renewal = try await store.renew(holder.current) {
                    holder.lease.withLock { $0.renewed(sentAt: sentAt) }
                    if renewal.cancelRequested { holder.cancelled.store(true, ordering: .relaxed) }
                } else {
                    holder.markLost()
                    return
                }
            } catch {
                if Task.isCancelled { return }
                holder.markLost()
                logger.warning("campaign lease renewal failed: stopping", ["request_id": holder.current.requestID, "error": "\(error)"])
                return
            }
        }
    }

    /// Sends the campaign from its checkpoint to the end.
    /// - Returns: true when it finished (RequestCompleted published, row closed); false when it stopped
    ///   (stopping, lease lost).
    private func send(_ record: CampaignRecord, holder: Holder, shutdown: GracefulShutdown) async throws -> Bool {
        let request = record.request
        let requestID = record.requestID
        let flags = PageFlags(
            cancelled: { [cancellations] in
                if holder.cancelled.load(ordering: .relaxed) { return true }
                if cancellations.contains(requestID) {
                    holder.cancelled.store(true, ordering: .relaxed)
                    return true
                }
                return false
            },
            shouldStop: { shutdown.isTriggered || holder.aborted.load(ordering: .relaxed) || !holder.isValid() })
        var counts = record.counts
        if case .audience? = request.target {
            guard let sent = try await sendAudience(record, holder: holder, flags: flags) else { return false }
            counts = sent
        } else if record.cursor == nil {
            // A scheduled device_tokens/user_ids request: one page, resolved as an immediate request's.
            let (sent, abandoned) = try await withTaskExecutorPreference(pageExecutor()) {
                let page = try await processor.campaignPage(resolving: request)
                let earlier = try await processor.parking.progress(requestID: requestID, tokens: page.tokens)
                return try await processor.sendCampaignPage(
                    page, request: request, requestedAt: record.requestedAtMs, recorded: earlier.recorded, parked: earlier.parked,
                    parkAfter: retryParkAge, lane: lane, limiter: limiter, cancelled: flags.cancelled, shouldStop: flags.shouldStop)
            }
            if abandoned { return false }
            counts = counts + sent
        }

        // Notifications parked on the way finish on the parked path; the campaign completes after them.
        guard !flags.shouldStop() else { return false }
        let parked = try await processor.waitForParkedNotifications(
            ofCampaign: requestID, interval: settings.pollInterval, shouldStop: flags.shouldStop)
        switch parked {
        case .neverParked: break
        case .stopped: return false
        case .settled(let recorded): counts = recorded
        }
        // The end: RequestCompleted (acknowledged) first, then the row closes; a holder that dies in
        // between leaves the row open and the next one publishes the same event (same id) again.
        guard !flags.shouldStop() else { return false }
        let state = CampaignState.final(cancelRequested: flags.cancelled())
        let completed = try await processor.completeCampaign(request, requestedAtMs: record.requestedAtMs, counts: counts, state: state)
        if case .audience? = request.target {
            try await publishProgress(record, counts: counts, done: true, startedAtMs: record.startedAtMs)
        }
        guard try await store.finish(holder.current, state: state, counts: counts, completedAtMs: completed.completedAtMs) else {
            holder.markLost()
            return false
        }
        if parked != .neverParked {
            do {
                try await processor.forgetParkedCampaign(requestID)
            } catch {
                logger.warning("forgetting a closed campaign's parked notifications failed", ["request_id": requestID, "error": "\(error)"])
            }
        }
        logger.info("campaign \(state.rawValue)", [
            "request_id": requestID, "processed": "\(counts.processed)", "delivered": "\(counts.delivered)",
            "rejected": "\(counts.rejected)", "failed": "\(counts.failed)", "skipped": "\(counts.skipped)",
        ])
        return true
    }

    /// What a campaign's pages ask before each send: whether it was cancelled, whether to stop.
    struct PageFlags: Sendable {
        let cancelled: @Sendable () -> Bool
        let shouldStop: @Sendable () -> Bool
    }

    /// What a page's child tasks tell the sending loop: the page started its last send (its answers
    /// may be outstanding), or the page finished, with how its sending ended.
    enum PageEvent: Sendable {
        case started(sequence: Int)
        case finished(sequence: Int, result: Result<(counts: CampaignCounts, abandoned: Bool), any Error>)
    }

    /// Sends an audience campaign's pages from its checkpoint, moving the checkpoint over the pages
    /// finished in order. The next page is read while fewer than `pagesInFlight` pages are still
    /// starting their sends and fewer than `maxUnfinishedPages` are unfinished: a page whose sends
    /// all started waits only for its answers, so a token Apple answers late holds its own page (and
    /// the checkpoint), not the pages after it (docs/campaigns.md "Pages in flight").
    /// - Returns: the counts at the end of the audience, or nil when it stopped (stopping, lease lost,
    ///   a page abandoned).
    /// - Throws: the first page's or write's error (the other pages stopped).
    private func sendAudience(_ record: CampaignRecord, holder: Holder, flags: PageFlags) async throws -> CampaignCounts? {
        let query = try AudienceQuery(record.request)
        var window = CampaignPageWindow(cursor: record.cursor, counts: record.counts)
        var readCursor = record.cursor
        var exhausted = false
        var stopped = false
        var failure: (any Error)?
        var previousStarted: OneShot?
        var lastProgress = ContinuousClock.now
        var earlierOutcomes = EarlierOutcomes(checkpoint: record.cursor)
        await withTaskGroup(of: PageEvent.self) { group in
            while true {
                // Read ahead: the next pages start sending while earlier ones are answered.
                while !exhausted, !stopped, window.sending < settings.pagesInFlight, window.unfinished < settings.maxUnfinishedPages {
                    if flags.shouldStop() { stopped = true; break }
                    do {
                        // The page is read and sent where the CPU priority of this moment puts it.
                        let executor = pageExecutor()
                        let (tokens, earlier) = try await readPage(query, after: readCursor, of: record, earlier: &earlierOutcomes, on: executor)
                        guard let last = tokens.last else { exhausted = true; break }
                        let sequence = window.issue(lastToken: last.deviceToken)
                        readCursor = last.deviceToken
                        // Pages send in order: this one's sends queue behind the last send of the one before.
                        let turn = (after: previousStarted, started: OneShot())
                        previousStarted = turn.started
                        // The page's tokens are let go once its sends started (`PageTokens`).
                        let page = PageTokens(tokens)
                        group.addTask(executorPreference: executor) { [self] in
                            await sendPage(page, sequence: sequence, record: record, earlier: earlier, turn: turn, flags: flags)
                        }
                        group.addTask {
                            await turn.started.wait()
                            return .started(sequence: sequence)
                        }
                    } catch {
                        failure = error
                        holder.abort()
                        stopped = true
                    }
                }
                guard let event = await group.next() else { break }
                guard case .finished(let sequence, let result) = event else {
                    if case .started(let sequence) = event { window.started(sequence) }
                    continue
                }
                switch result {
                case .failure(let error):
                    // The other pages stop sending (shouldStop) and finish what is in flight.
                    if failure == nil { failure = error }
                    holder.abort()
                    stopped = true
                case .success(let page) where page.abandoned:
                    stopped = true
                case .success(let page):
                    guard let checkpoint = window.finish(sequence, counts: page.counts), holder.isValid(), failure == nil else { continue }
                    do {
                        if try await !store.checkpoint(holder.current, cursor: checkpoint.cursor, counts: checkpoint.counts) {
                            holder.markLost()
                            stopped = true
                        } else if ContinuousClock.now - lastProgress >= settings.progressInterval {
                            lastProgress = .now
                            try await publishProgress(record, counts: checkpoint.counts, done: false, startedAtMs: record.startedAtMs)
                        }
                    } catch {
                        failure = error
                        holder.abort()
                        stopped = true
                    }
                }
            }
        }
        if let failure { throw failure }
        if stopped || window.pending > 0 { return nil }
        return window.checkpoint.counts
    }
}
