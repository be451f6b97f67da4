/// Whether transactional work flows, from when the class-priority gate last let a transactional
/// candidate through (`ClassPriorityGate.lastTransactionalAdmission`), without I/O: the campaign
/// runner asks it before each page to choose where the page runs (docs/campaigns.md "The CPU").
///
/// Active until `hold` has passed since that admission. A `hold` of zero means always active
/// (campaign pages always run lowered).
struct TransactionalActivity: Sendable, Equatable {
    /// How long activity lasts after the last transactional admission.
    let hold: Duration

    /// - Parameters:
    ///   - lastAdmission: when the last transactional candidate was let through; nil: never.
    ///   - now: the time asked about.
    /// - Returns: whether `lastAdmission` is less than `hold` before `now` (always, when `hold` is zero).
    func isActive(lastAdmission: ContinuousClock.Instant?, at now: ContinuousClock.Instant) -> Bool {
        if hold == .zero { return true }
        guard let lastAdmission else { return false }
        return now - lastAdmission < hold
    }
}
