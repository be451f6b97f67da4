import APNs
import PushMessages

// MARK: - The parked re-drive source

extension SendRequestProcessor {
    /// Sends a parked notification claimed by `owner` once more, with its stored deadline, through
    /// the same stages as any notification: admitted by the process-wide budget and the cancel check
    /// (a notification of a cancelled request is settled SKIPPED with OUTCOME_REASON_CANCELLED, never
    /// sent), sent and settled, recorded in `send_log` and published; then the row is deleted and the
    /// request completed if it was its last. A retryable answer puts the row back, due after the
    /// client's delay (`ParkedRetryWaiter`).
    /// - Throws: `CancellationError` (the claim is given up: the row is due again at once);
    ///   `PostgresError`, `KafkaError` (the row stays claimed until its lease passes, then is sent again).
    func redrive(_ retry: PendingRetry, owner: String) async throws {
        let admission = AdmissionChain([InFlightBudgetPolicy(budget: budget), CancelCheckPolicy(cancellations: cancellations)])
        let permit = NotificationPermit()
        defer { permit.release() }
        let candidate = AdmissionCandidate(requestID: retry.requestID, bundleID: retry.report.bundleID, sends: true)
        var verdict = try await admission.admit(candidate, permit: permit)
        if verdict == .admit { verdict = admission.recheck(candidate) }
        var report = retry.report
        if case .settle(let outcome, let reason) = verdict {
            report.outcome = outcome
            report.outcomeReason = reason
            report.completedAtMs = clock.nowMilliseconds()
        } else if case .at(let seconds) = retry.request.expiration, seconds * 1000 <= clock.nowMilliseconds() {
            report.outcome = .failed
            report.outcomeReason = .expired
            report.completedAtMs = clock.nowMilliseconds()
        } else {
            let waiter = ParkedRetryWaiter { [parking] delay, attempts, reason in
                try await parking.reschedule(retry, owner: owner, delay: delay, addingAttempts: attempts, reason: reason.metricLabel)
            }
            let attempt = SendAttempt(
                apnsRequest: retry.request, environment: retry.environment, report: report, earlierAttempts: retry.attempts,
                options: APNsSendOptions(waiter: waiter, retryDeadline: retry.retryDeadline), traceParent: retry.traceParent,
                scope: .unknown)
            let result: NotificationResult
            do {
                result = try await sendAndSettle(attempt)
            } catch is CancellationError {
                try? await parking.release(retry, owner: owner)
                throw CancellationError()
            }
            guard case .settled(let settled) = result else { return }  // rescheduled
            report = settled
        }
        let acks = Acknowledgements()
        let final = try await publishOutcome(report, traceParent: retry.traceParent, acks: acks)
        noteFinal(final)
        try await acks.waitForAll()
        try await parking.remove(retry, owner: owner)
        try await completeParkedRequest(retry.requestID)
    }
}
