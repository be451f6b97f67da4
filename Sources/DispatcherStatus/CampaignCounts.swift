import PushMessages

/// Counts of a campaign's final outcomes (the `campaigns` row's counters, `CampaignProgress`,
/// `RequestCompleted`).
public struct CampaignCounts: Sendable, Equatable {
    /// Tokens that reached a final outcome.
    public var processed: Int64 = 0
    public var delivered: Int64 = 0
    public var rejected: Int64 = 0
    public var failed: Int64 = 0
    public var skipped: Int64 = 0

    public init() {}

    /// Counts one final outcome (anything but DELIVERED, REJECTED, FAILED counts as skipped).
    public mutating func count(_ outcome: DeliveryOutcome) {
        processed += 1
        switch outcome {
        case .delivered: delivered += 1
        case .rejected: rejected += 1
        case .failed: failed += 1
        default: skipped += 1
        }
    }

    public static func + (lhs: CampaignCounts, rhs: CampaignCounts) -> CampaignCounts {
        var sum = lhs
        sum.processed += rhs.processed
        sum.delivered += rhs.delivered
        sum.rejected += rhs.rejected
        sum.failed += rhs.failed
        sum.skipped += rhs.skipped
        return sum
    }
}
