import DispatcherStatus
import PushMessages
import Synchronization

// MARK: - The pipeline over one batch (docs/dispatcher-engine.md "One delivery pipeline")

extension SendRequestProcessor {
    /// Runs one batch through the pipeline's stages (`startSends`) and waits for every send of it:
    /// the notifications of a batch go out concurrently (the APNs pool multiplexes them) within what
    /// admission allows. A request's user pages go through `deliverPages` instead, which does not
    /// wait page by page.
    ///
    /// Once `context.shouldStop()` answers true, no further notification starts; those in flight
    /// finish and are recorded, and the result says `abandoned`. The batch is let go once its last
    /// send started: while answers are outstanding, each send holds only its own target.
    /// - Returns: the batch's counts, parked notifications and whether it was abandoned. The reports
    ///   published are in `context.acks` (the caller waits for them).
    /// - Throws: infrastructure errors (`PostgresError`, `KafkaError`) and `CancellationError`; the
    ///   batch can be redone (idempotent through `send_log`).
    func deliver(_ batch: consuming DeliveryBatch, _ context: DeliveryContext) async throws -> BatchResult {
        defer { context.turn?.started.fire() }
        let tally = BatchTally()
        let activity = RecordActivity(context.retryContext)
        defer { activity.startingDone() }
        var abandoned = false
        var unstarted: DeliveryBatch? = consume batch
        try await withThrowingDiscardingTaskGroup { group in
            await context.turn?.after?.wait()
            defer {
                activity.startingDone()
                context.turn?.started.fire()
            }
            guard let batch = unstarted.take() else { return }
            let workers = SendWorkers<AdmittedSend>()
            defer { workers.close() }
            let started = try await startSends(
                batch, context, tally: tally, activity: activity, workers: workers, keepingLast: true, in: &group)
            abandoned = started.abandoned
            guard let last = started.kept else { return }
            // The batch's last send runs in this task (a single-token request makes no task for its
            // send), once the batch counts as started: idle workers end, the next page may start.
            workers.close()
            activity.startingDone()
            context.turn?.started.fire()
            try await runSend(last, tally: tally, activity: activity)
        }
        return BatchResult(counts: tally.counts, parked: tally.parked, abandoned: abandoned)
    }

    /// Stages 1 and 2 for one batch, stages 3 and 4 started: for each target, in order, skips what an
    /// earlier delivery left (parked, or recorded: republished), admits it, and hands its send, settle,
    /// record and publish to `workers` (`runSend`), starting a worker in `group` when none is idle.
    /// Returns once every target started (or `context.shouldStop()` answered true); the sends go on in
    /// `group`. With `keepingLast`, the batch's last target, once admitted, is returned instead of
    /// handed to a worker, for the caller to run in its own task (`deliver`). Only the last: a kept
    /// send holds its permit, and a loop that went on admitting after keeping one could wait for that
    /// very permit. The caller closes `workers` once its last batch started.
    ///
    /// A send keeps the request's context without the batch's earlier outcomes (`recorded`, `parked`:
    /// only this loop reads them), so a notification Apple is slow to answer holds its own target and
    /// nothing of its batch.
    /// - Returns: whether it stopped before every target started (the batch is abandoned), and the
    ///   kept last send (`keepingLast`; nil when the last target was skipped, or none was started).
    /// - Throws: what admission throws (`CancellationError`).
    func startSends(
        _ batch: consuming DeliveryBatch, _ context: DeliveryContext, tally: BatchTally, activity: RecordActivity,
        workers: SendWorkers<AdmittedSend>, keepingLast: Bool = false, in group: inout ThrowingDiscardingTaskGroup<any Error>
    ) async throws -> (abandoned: Bool, kept: AdmittedSend?) {
        var sending = context
        sending.recorded = [:]
        sending.parked = []
        let shared = SendingContext(sending)
        let last = batch.targets.count - 1
        for (index, target) in batch.targets.enumerated() {
            // Stopping (shutdown, revocation, a lost lease): no new notification starts; those in
            // flight finish and are recorded; the batch stays unfinished and is read again.
            if context.shouldStop() { return (true, nil) }
            if context.parked.contains(target.token) {
                // Parked by an earlier delivery of this request: the parked path finishes it.
                tally.countParked()
                continue
            }
            if let earlier = context.recorded[target.token], let report = try await republish(earlier, token: target.token, context) {
                tally.count(report.outcome)
                continue
            }
            let permit = NotificationPermit()
            var admitted = target
            if case .settle(let outcome, let reason) = try await context.admission.admit(context.candidate(target), permit: permit) {
                admitted = target.settled(outcome, reason)
            }
            if context.shouldStop() {
                permit.release()
                return (true, nil)
            }
            activity.notificationStarted()
            let send = AdmittedSend(target: admitted, permit: permit, context: shared)
            if keepingLast, index == last { return (false, send) }
            if workers.submit(send) {
                group.addTask {
                    try await workers.run { item in try await self.runSend(item, tally: tally, activity: activity) }
                }
            }
        }
        return (false, nil)
    }

    /// Stages 3 and 4 for one admitted target, in a send worker (`SendWorkers`), or for a batch's last
    /// target in the task that read the batch (`deliver`): its send, settle, record and publish; its
    /// permit released and its activity ended however it ends.
    /// - Throws: what `send(_:_:permit:activity:)` throws.
    func runSend(_ item: AdmittedSend, tally: BatchTally, activity: RecordActivity) async throws {
        let permit = item.permit
        defer {
            permit.release()
            activity.notificationEnded()
        }
        let sending = item.context.context
        var chosen = item.target
        // Asked once more when the worker takes it: with a thousand sends starting at once, a send
        // can start well after it was admitted, and a cancel seen meanwhile stops it.
        if case .settle(let outcome, let reason) = sending.admission.recheck(sending.candidate(item.target)) {
            permit.release()
            chosen = item.target.settled(outcome, reason)
        }
        switch try await send(chosen, sending, permit: permit, activity: activity) {
        case .parked:
            tally.countParked()
        case .settled(let report):
            noteFinal(report)
            tally.count(report.outcome)
        }
    }
}

/// A batch's counts, updated by its concurrent sends (send workers).
final class BatchTally: Sendable {
    private let state = Mutex((counts: CampaignCounts(), parked: 0))

    func count(_ outcome: DeliveryOutcome) { state.withLock { $0.counts.count(outcome) } }
    /// A notification left to the parked path (no outcome here).
    func countParked() { state.withLock { $0.parked += 1 } }
    var counts: CampaignCounts { state.withLock { $0.counts } }
    var parked: Int { state.withLock { $0.parked } }
}
