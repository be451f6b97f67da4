/// A lease on one campaign as its holder sees it (docs/campaigns.md "Lease and fencing"): the
/// generation the database gave, and when the holder last renewed it on its own monotonic clock.
/// Pure decisions: the holder stops when the lease may have run out, even if the database does
/// not answer.
///
/// The same type holds the lease of a maintenance job (`job_leases`, docs/token-hygiene.md): one lease
/// mechanism, `FencedLeaseSQL`, for every leased row.
public struct CampaignLease: Sendable, Equatable {
    /// The leased row's key: the campaign's request id, or the maintenance job's name.
    public let requestID: String
    public let owner: String
    public let generation: Int64
    /// The lease's length (the database adds it to `now()` on take and renew).
    public let duration: Duration
    /// When the last take or renewal was sent (a renewal's answer arrives after it, so the lease
    /// counted from here never outlives the database's).
    public private(set) var confirmedAt: ContinuousClock.Instant
    /// Set once a write under this lease updated no row, or failed: the lease is gone for good.
    public private(set) var lost = false

    public init(requestID: String, owner: String, generation: Int64, duration: Duration, confirmedAt: ContinuousClock.Instant) {
        self.requestID = requestID
        self.owner = owner
        self.generation = generation
        self.duration = duration
        self.confirmedAt = confirmedAt
    }

    /// Whether the holder may still send at `now`: not lost, and the last confirmation is younger
    /// than the lease minus a safety margin of a tenth of it.
    public func isValid(at now: ContinuousClock.Instant) -> Bool {
        !lost && now - confirmedAt < duration - duration / 10
    }

    /// Whether a renewal is due: a third of the lease has passed since the last confirmation.
    public func renewalDue(at now: ContinuousClock.Instant) -> Bool {
        now - confirmedAt >= duration / 3
    }

    /// Records a renewal sent at `sentAt` that updated the row.
    public mutating func renewed(sentAt: ContinuousClock.Instant) {
        if sentAt > confirmedAt { confirmedAt = sentAt }
    }

    /// Records a write that updated no row or failed: the holder stops at once.
    public mutating func markLost() { lost = true }
}
