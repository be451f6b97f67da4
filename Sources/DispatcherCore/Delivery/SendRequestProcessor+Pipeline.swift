import DispatcherStatus
import PushMessages
import Synchronization

// MARK: - The pipeline over one batch (docs/dispatcher-engine.md "One delivery pipeline")

extension SendRequestProcessor {
    /// Runs one batch through the pipeline's stages: for each target, in order, skip what an earlier
    /// delivery left (parked, or recorded: republished), admit it (`DeliveryContext.admission`), then
    /// send, settle, record and publish it in a task of its own; the notifications of a batch go out
    /// concurrently (the APNs pool multiplexes them) within what admission allows.
    ///
    /// `shared`: the record's activity when the batch is one page of several (`deliverPages`, which
    /// says when starting is done); nil: the batch is the record's only one.
    ///
    /// Once `context.shouldStop()` answers true, no further notification starts; those in flight
    /// finish and are recorded, and the result says `abandoned`.
    /// - Returns: the batch's counts, parked notifications and whether it was abandoned. The reports
    ///   published are in `context.acks` (the caller waits for them).
    /// - Throws: infrastructure errors (`PostgresError`, `KafkaError`) and `CancellationError`; the
    ///   batch can be redone (idempotent through `send_log`).
    func deliver(_ batch: DeliveryBatch, _ context: DeliveryContext, activity shared: RecordActivity? = nil) async throws -> BatchResult {
        defer { context.turn?.started.fire() }
        let tally = BatchTally()
        let activity = shared ?? RecordActivity(context.retryContext)
        defer { if shared == nil { activity.startingDone() } }
        var abandoned = false
        try await withThrowingDiscardingTaskGroup { group in
            await context.turn?.after?.wait()
            defer {
                if shared == nil { activity.startingDone() }
                context.turn?.started.fire()
            }
            for target in batch.targets {
                // Stopping (shutdown, revocation, a lost lease): no new notification starts; those in
                // flight finish and are recorded; the batch stays unfinished and is read again.
                if context.shouldStop() { abandoned = true; break }
                if context.parked.contains(target.token) {
                    // Parked by an earlier delivery of this request: the parked path finishes it.
                    tally.countParked()
                    continue
                }
                if let earlier = context.recorded[target.token], let report = republish(earlier, token: target.token, context) {
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
                    abandoned = true
                    break
                }
                activity.notificationStarted()
                group.addTask {
                    defer {
                        permit.release()
                        activity.notificationEnded()
                    }
                    var chosen = admitted
                    // Asked once more when the task runs: with a thousand sends starting at once, a
                    // task can start well after it was admitted, and a cancel seen meanwhile stops it.
                    if case .settle(let outcome, let reason) = context.admission.recheck(context.candidate(admitted)) {
                        permit.release()
                        chosen = admitted.settled(outcome, reason)
                    }
                    switch try await self.send(chosen, context, permit: permit, activity: activity) {
                    case .parked:
                        tally.countParked()
                    case .settled(let report):
                        self.noteFinal(report)
                        tally.count(report.outcome)
                    }
                }
            }
        }
        return BatchResult(counts: tally.counts, parked: tally.parked, abandoned: abandoned)
    }
}

/// A batch's counts, updated by its concurrent notification tasks.
private final class BatchTally: Sendable {
    private let state = Mutex((counts: CampaignCounts(), parked: 0))

    func count(_ outcome: DeliveryOutcome) { state.withLock { $0.counts.count(outcome) } }
    /// A notification left to the parked path (no outcome here).
    func countParked() { state.withLock { $0.parked += 1 } }
    var counts: CampaignCounts { state.withLock { $0.counts } }
    var parked: Int { state.withLock { $0.parked } }
}
