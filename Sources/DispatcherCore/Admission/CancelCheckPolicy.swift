/// Admission by cancellation (docs/campaigns.md "Cancellation"): once the process-wide set of
/// cancels (`CampaignCancellations`, fed on receipt and by `CancellationPoller` from every replica)
/// holds the request id, or `alsoCancelled` answers true (a campaign row's cancel flag), a
/// notification that would go to Apple is settled SKIPPED with OUTCOME_REASON_CANCELLED instead.
/// Asked when the notification is admitted and once more just before its send.
struct CancelCheckPolicy: AdmissionPolicy {
    let cancellations: CampaignCancellations
    /// Another source of cancels for this request (none: always false).
    var alsoCancelled: @Sendable () -> Bool = { false }

    var rechecksBeforeSend: Bool { true }

    /// Whether `requestID` is cancelled now.
    func isCancelled(_ requestID: String) -> Bool { alsoCancelled() || cancellations.contains(requestID) }

    func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict {
        recheck(candidate)
    }

    func recheck(_ candidate: AdmissionCandidate) -> AdmissionVerdict {
        candidate.sends && isCancelled(candidate.requestID) ? .settle(.skipped, .cancelled) : .admit
    }
}
