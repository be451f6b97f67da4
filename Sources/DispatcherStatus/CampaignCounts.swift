import Postgres
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

    /// The counts of a row with the columns `processed`, `delivered`, `rejected`, `failed` and
    /// `skipped` (a `campaigns` row, or the same names counted over `send_log`); NULL reads as 0.
    /// - Throws: `PostgresError` when a column is missing or not an integer.
    public init(row: PostgresRow) throws {
        processed = try row.int64("processed") ?? 0
        delivered = try row.int64("delivered") ?? 0
        rejected = try row.int64("rejected") ?? 0
        failed = try row.int64("failed") ?? 0
        skipped = try row.int64("skipped") ?? 0
    }

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
