import ServiceCore

/// Admission by an in-flight budget: a notification starts only with a permit of `budget` (the
/// process-wide `PUSH_MAX_IN_FLIGHT_NOTIFICATIONS` for requests and re-drives, the campaign lane for
/// campaign pages), waiting in arrival order. The permit stays with the notification
/// (`NotificationPermit`) until it settles; it is released while the notification waits for a retry.
struct InFlightBudgetPolicy: AdmissionPolicy {
    let budget: AsyncSemaphore
    /// Whether notifications settled without sending take a permit too (true for requests: it bounds
    /// how many run at once; false for campaign pages, whose size bounds them).
    var budgetsSettlements = true

    func admit(_ candidate: AdmissionCandidate, permit: NotificationPermit) async throws -> AdmissionVerdict {
        if candidate.sends || budgetsSettlements { try await permit.acquire(from: budget) }
        return .admit
    }
}
