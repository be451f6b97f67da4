import Foundation
import ServiceCore
import Synchronization

/// Per-app send-rate limits for campaigns: one `TokenBucket` per bundle id, its rate from
/// `limits[bundleID]` or else `defaultRate` (nil or 0: unlimited); burst = one second of rate.
public final class AppRateLimiter: Sendable {
    private let defaultRate: Double?
    private let limits: [String: Double]
    private let buckets = Mutex<[String: TokenBucket]>([:])
    private let start = ContinuousClock.now

    /// - Parameters:
    ///   - defaultRate: sends per second for apps without their own limit; nil or ≤ 0: unlimited.
    ///   - limits: sends per second by bundle id (a value ≤ 0: unlimited for that app).
    public init(defaultRate: Double?, limits: [String: Double] = [:]) {
        self.defaultRate = defaultRate
        self.limits = limits
    }

    /// The rate that applies to `bundleID`, nil when unlimited.
    public func rate(for bundleID: String) -> Double? {
        guard let rate = limits[bundleID] ?? defaultRate, rate > 0 else { return nil }
        return rate
    }

    /// Waits until `bundleID` may send one more notification.
    /// - Throws: `CancellationError` when the task is cancelled while waiting.
    public func acquire(_ bundleID: String) async throws {
        guard let rate = rate(for: bundleID) else { return }
        let elapsed = ContinuousClock.now - start
        let now = elapsed.inSeconds
        let wait = buckets.withLock { buckets in
            var bucket = buckets[bundleID] ?? TokenBucket(ratePerSecond: rate, burst: max(1, rate), now: now)
            defer { buckets[bundleID] = bucket }
            return bucket.reserve(at: now)
        }
        if wait > 0 { try await Task.sleep(for: .nanoseconds(Int64(wait * 1e9))) }
    }

    /// Parses `PUSH_CAMPAIGN_RATE_LIMITS`: `bundle.id=rate` pairs separated by commas.
    /// - Throws: `CampaignConfigurationError` naming the bad pair.
    public static func parseLimits(_ text: String) throws(CampaignConfigurationError) -> [String: Double] {
        var result: [String: Double] = [:]
        for pair in text.split(separator: ",") {
            let trimmed = pair.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, !parts[0].isEmpty, let rate = Double(parts[1]), rate >= 0, rate.isFinite else {
                throw CampaignConfigurationError("PUSH_CAMPAIGN_RATE_LIMITS: \"\(trimmed)\" is not bundle.id=sends_per_second")
            }
            result[String(parts[0])] = rate
        }
        return result
    }
}
