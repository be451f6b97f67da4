import APNs
import PushMessages

extension SendRequestProcessor {
    /// Publishes the `RequestCompleted` of a request whose notifications were parked, if it is
    /// complete now: its record finished and no parked notification remains
    /// (`ParkedRequestCompletion`), once however many callers ask at the same time
    /// (`PendingRetryStore.completeOnce`). Counts come from `send_log`; the event id is the request's
    /// usual one; it waits for Kafka's acknowledgement before the completion is recorded.
    /// - Throws: `PostgresError`, `KafkaError` (nothing was recorded: the caller retries).
    func completeParkedRequest(_ requestID: String) async throws {
        let eventID = FeedbackEventID.requestCompleted(requestID: requestID)
        let published = try await parking.completeOnce(requestID: requestID, eventID: eventID) { requestedAt, traceParent, outcomes in
            let counts = ParkedRequestCompletion.counts(outcomes)
            var completed = RequestCompleted()
            completed.requestID = requestID
            completed.requestedAtMs = requestedAt
            completed.status = .completed
            completed.total = UInt32(clamping: counts.total)
            completed.delivered = UInt32(clamping: counts.delivered)
            completed.rejected = UInt32(clamping: counts.rejected)
            completed.failed = UInt32(clamping: counts.failed)
            completed.skipped = UInt32(clamping: counts.skipped)
            completed.completedAtMs = clock.nowMilliseconds()
            try await feedback.publish(
                feedback.event(id: eventID, .requestCompleted(completed), traceParent: traceParent), key: requestID)
        }
        if published { logger.debug("request with parked notifications completed", ["request_id": requestID]) }
    }

    /// Sends a parked notification claimed by `owner` once more, with its stored deadline. A final
    /// answer is recorded in `send_log` and published like any other, then the row is deleted and
    /// the request completed if it was its last; a retryable answer puts the row back, due after the
    /// client's delay (`ParkedRetryWaiter`).
    /// - Throws: `CancellationError` (the claim is given up: the row is due again at once);
    ///   `PostgresError`, `KafkaError` (the row stays claimed until its lease passes, then is sent again).
    func redrive(_ retry: PendingRetry, owner: String) async throws {
        let permit = NotificationPermit(budget)
        try await permit.acquire()
        defer { permit.release() }
        var report = retry.report
        if case .at(let seconds) = retry.request.expiration, seconds * 1000 <= clock.nowMilliseconds() {
            report.outcome = .failed
            report.outcomeReason = .expired
            report.completedAtMs = clock.nowMilliseconds()
        } else {
            let waiter = ParkedRetryWaiter { [parking] delay, attempts, reason in
                try await parking.reschedule(retry, owner: owner, delay: delay, addingAttempts: attempts, reason: reason.metricLabel)
            }
            let settled: DeliveryReport?
            do {
                settled = try await sendAndSettle(
                    retry.request, environment: retry.environment, report: report, earlierAttempts: retry.attempts,
                    options: APNsSendOptions(waiter: waiter, retryDeadline: retry.retryDeadline), requestID: retry.requestID,
                    traceParent: retry.traceParent, scope: .unknown)
            } catch is CancellationError {
                try? await parking.release(retry, owner: owner)
                throw CancellationError()
            }
            guard let settled else { return }  // rescheduled
            report = settled
        }
        let acks = Acknowledgements()
        _ = try await publishOutcome(report, traceParent: retry.traceParent, acks: acks)
        try await acks.waitForAll()
        try await parking.remove(retry, owner: owner)
        try await completeParkedRequest(retry.requestID)
    }
}
